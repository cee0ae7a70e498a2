//! Scrubbing: an origin that echoes an injected secret back (in a response header or body)
//! has every occurrence masked before the sandbox, the ledger or the lineage worker sees
//! it.
//!
//! Each occurrence is replaced by the same number of `*` bytes. A marker of identical
//! length means a body never changes length, so `Content-Length` stays true and a body
//! can be scrubbed while it streams, frame by frame, never buffered whole. Across frame
//! boundaries [`ScrubBody`] holds back the last `longest needle - 1` bytes of each frame
//! until the next one arrives (or the body ends), so a secret split between two frames is
//! still found.
//!
//! Only what the origin sends in the clear is searched: when airlock injects a secret it
//! also asks the origin for an unencoded response (`Accept-Encoding: identity`).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};

/// The byte each byte of a scrubbed secret becomes.
pub const MASK: u8 = b'*';

/// The byte strings to mask (the secrets as sent, in each encoding they were sent in).
#[derive(Clone, Default)]
pub struct Scrubber {
    needles: Vec<Vec<u8>>,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scrubber(<{} redacted>)", self.needles.len())
    }
}

impl Scrubber {
    /// A scrubber for these byte strings (empty ones are ignored, duplicates dropped).
    pub fn new(needles: impl IntoIterator<Item = Vec<u8>>) -> Self {
        let mut out: Vec<Vec<u8>> = Vec::new();
        for needle in needles {
            if !needle.is_empty() && !out.contains(&needle) {
                out.push(needle);
            }
        }
        Self { needles: out }
    }

    /// True when there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The length of the longest needle, in bytes.
    fn longest(&self) -> usize {
        self.needles.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Masks every occurrence in `bytes`; true when something was masked.
    pub fn scrub(&self, bytes: &mut [u8]) -> bool {
        let mut masked = false;
        for needle in &self.needles {
            let mut at = 0;
            while let Some(found) = find(&bytes[at..], needle) {
                let start = at + found;
                bytes[start..start + needle.len()].fill(MASK);
                masked = true;
                at = start + needle.len();
            }
        }
        masked
    }

    /// Masks every occurrence in `bytes`, the first part of a longer text that was cut
    /// off, and also a trailing start of a needle that the cut may have split.
    pub fn scrub_cut(&self, bytes: &mut [u8]) {
        self.scrub(bytes);
        let longest_start = self
            .needles
            .iter()
            .flat_map(|needle| {
                (1..needle.len().min(bytes.len() + 1))
                    .filter(|&len| bytes.ends_with(&needle[..len]))
                    .max()
            })
            .max();
        if let Some(len) = longest_start {
            let total = bytes.len();
            bytes[total - len..].fill(MASK);
        }
    }

    /// Masks every occurrence in the values of `headers`.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) {
        for value in headers.values_mut() {
            let mut bytes = value.as_bytes().to_vec();
            if self.scrub(&mut bytes) {
                // `*` is a valid header byte, so the masked value is valid too.
                if let Ok(masked) = HeaderValue::from_bytes(&bytes) {
                    *value = masked;
                }
            }
        }
    }
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    let mut at = 0;
    while at + needle.len() <= haystack.len() {
        let next = haystack[at..=haystack.len() - needle.len()]
            .iter()
            .position(|&b| b == first)?;
        let start = at + next;
        if &haystack[start..start + needle.len()] == needle {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

/// A response body with every occurrence of the scrubber's needles masked, streamed: at
/// most `longest needle - 1` bytes are held back between frames. Length-preserving;
/// trailers pass through after the held-back bytes.
pub struct ScrubBody<B> {
    inner: B,
    scrubber: Scrubber,
    keep: usize,
    tail: Vec<u8>,
    inner_done: bool,
    trailers: Option<HeaderMap>,
}

impl<B> ScrubBody<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, scrubber: Scrubber) -> Self {
        let keep = scrubber.longest().saturating_sub(1);
        Self {
            inner,
            scrubber,
            keep,
            tail: Vec::new(),
            inner_done: false,
            trailers: None,
        }
    }
}

impl<B> Body for ScrubBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if this.inner_done {
                if !this.tail.is_empty() {
                    let rest = std::mem::take(&mut this.tail);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.inner_done = true,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let mut buffer = std::mem::take(&mut this.tail);
                        buffer.extend_from_slice(&data);
                        this.scrubber.scrub(&mut buffer);
                        // A match starting before the split lies wholly in `buffer` and is
                        // masked already; one starting after it may continue in the next
                        // frame, so those bytes wait.
                        let split = buffer.len().saturating_sub(this.keep);
                        this.tail = buffer.split_off(split);
                        if !buffer.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(buffer)))));
                        }
                    }
                    Err(frame) => {
                        // A frame that is neither data nor trailers is dropped.
                        if let Ok(mut trailers) = frame.into_trailers() {
                            this.scrubber.scrub_headers(&mut trailers);
                            this.trailers = Some(trailers);
                            this.inner_done = true;
                        }
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner_done && self.tail.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Scrubbing never changes the length.
        let mut hint = self.inner.size_hint();
        let held = self.tail.len() as u64;
        hint.set_lower(hint.lower() + held);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn scrubber() -> Scrubber {
        Scrubber::new([b"s3cr3t-token".to_vec(), b"czNjcjN0".to_vec()])
    }

    #[test]
    fn every_occurrence_is_masked_at_the_same_length() {
        let mut text = b"a s3cr3t-token b s3cr3t-tokens3cr3t-token czNjcjN0".to_vec();
        assert!(scrubber().scrub(&mut text));
        assert_eq!(
            String::from_utf8(text).expect("utf-8"),
            "a ************ b ************************ ********"
        );
        let mut clean = b"nothing here s3cr3t-toke".to_vec();
        assert!(!scrubber().scrub(&mut clean));
    }

    async fn scrub_chunks(chunks: &[&[u8]]) -> (Vec<Bytes>, Option<HeaderMap>) {
        let mut frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-echo", HeaderValue::from_static("s3cr3t-token"));
        frames.push(Ok(Frame::trailers(trailers)));
        let inner = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
        let mut body = ScrubBody::new(inner, scrubber());
        let mut data = Vec::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("frame");
            match frame.into_data() {
                Ok(bytes) => data.push(bytes),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        (data, trailers)
    }

    #[tokio::test]
    async fn a_secret_split_across_frames_is_masked_and_the_length_kept() {
        let chunks: &[&[u8]] = &[
            b"{\"echo\": \"s3c",
            b"r3t",
            b"-",
            b"token\", \"n\": 1}",
            b"s3cr3t-tok",
            b"en",
        ];
        let whole: Vec<u8> = chunks.concat();
        let (data, trailers) = scrub_chunks(chunks).await;
        let out: Vec<u8> = data.concat();
        assert_eq!(out.len(), whole.len());
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "{\"echo\": \"************\", \"n\": 1}************"
        );
        assert_eq!(
            trailers.expect("trailers")["x-echo"],
            HeaderValue::from_static("************")
        );
    }

    #[tokio::test]
    async fn bytes_are_held_back_only_as_long_as_a_match_could_span() {
        let (data, _) = scrub_chunks(&[b"0123456789abcdefghij", b"klm"]).await;
        // keep = 11: the first frame releases all but its last 11 bytes at once.
        assert_eq!(data[0], Bytes::from_static(b"012345678"));
        assert_eq!(data.concat(), b"0123456789abcdefghijklm".to_vec());
    }

    #[test]
    fn a_needle_cut_off_at_the_end_is_masked_too() {
        let mut cut = b"seen: s3cr3t-to".to_vec();
        scrubber().scrub_cut(&mut cut);
        assert_eq!(cut, b"seen: *********".to_vec());
        let mut clean = b"seen: nothing".to_vec();
        scrubber().scrub_cut(&mut clean);
        assert_eq!(clean, b"seen: nothing".to_vec());
    }

    #[test]
    fn headers_are_masked() {
        let mut headers = HeaderMap::new();
        headers.insert("x-seen", HeaderValue::from_static("Bearer s3cr3t-token"));
        headers.insert("x-other", HeaderValue::from_static("fine"));
        scrubber().scrub_headers(&mut headers);
        assert_eq!(headers["x-seen"], "Bearer ************");
        assert_eq!(headers["x-other"], "fine");
    }
}
