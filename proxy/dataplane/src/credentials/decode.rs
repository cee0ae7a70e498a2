//! Decoding an encoded answer so an injected secret can be scrubbed from it.
//!
//! airlock asks the origin for `Accept-Encoding: identity` whenever it places a secret,
//! but an origin (or a CDN in front of it) may compress anyway, and a compressed echo
//! cannot be searched. `gzip`/`x-gzip` and `deflate` (zlib, RFC 9110 §8.4.1) answers are
//! decoded as they stream and relayed decoded (`Content-Encoding` and `Content-Length`
//! removed, so the client reads plain bytes); any other coding cannot be decoded here and
//! the answer is withheld ([`Coding::Unsupported`]): a secret must never reach the sandbox
//! inside bytes airlock could not read.

use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use flate2::write::{GzDecoder, ZlibDecoder};
use http::HeaderMap;
use http_body::{Body, Frame};

use airlock_net::body::BoxError;

/// What an answer's `Content-Encoding` means for scrubbing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coding {
    /// No coding (or `identity`): scrub the bytes as they are.
    Identity,
    /// gzip: decode, then scrub.
    Gzip,
    /// deflate (zlib): decode, then scrub.
    Deflate,
    /// Anything else (br, zstd, compress, several codings): cannot be scrubbed.
    Unsupported(String),
}

impl Coding {
    /// The coding of a response with `headers`.
    pub fn of(headers: &HeaderMap) -> Coding {
        let codings: Vec<String> = headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("?").split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity")
            .collect();
        match codings.as_slice() {
            [] => Coding::Identity,
            [one] if one == "gzip" || one == "x-gzip" => Coding::Gzip,
            [one] if one == "deflate" => Coding::Deflate,
            _ => Coding::Unsupported(codings.join(", ")),
        }
    }
}

enum Decoder {
    Gzip(GzDecoder<Vec<u8>>),
    Deflate(ZlibDecoder<Vec<u8>>),
}

impl Decoder {
    fn write(&mut self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Gzip(d) => {
                d.write_all(data)?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Deflate(d) => {
                d.write_all(data)?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }

    fn finish(&mut self) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Gzip(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Deflate(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

/// A gzip or deflate body decoded as it streams; trailers pass through.
pub struct DecodedBody<B> {
    inner: B,
    decoder: Decoder,
    done: bool,
    trailers: Option<HeaderMap>,
}

impl<B> DecodedBody<B> {
    /// Decodes `inner` per `coding` (`Gzip` or `Deflate`; `None` for any other).
    pub fn new(inner: B, coding: &Coding) -> Option<Self> {
        let decoder = match coding {
            Coding::Gzip => Decoder::Gzip(GzDecoder::new(Vec::new())),
            Coding::Deflate => Decoder::Deflate(ZlibDecoder::new(Vec::new())),
            _ => return None,
        };
        Some(Self {
            inner,
            decoder,
            done: false,
            trailers: None,
        })
    }
}

impl<B> Body for DecodedBody<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => {
                    this.done = true;
                    match this.decoder.finish() {
                        Ok(rest) if !rest.is_empty() => {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))))
                        }
                        Ok(_) => {}
                        Err(error) => return Poll::Ready(Some(Err(Box::new(error)))),
                    }
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => match this.decoder.write(&data) {
                        Ok(decoded) if !decoded.is_empty() => {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(decoded)))))
                        }
                        Ok(_) => {}
                        Err(error) => return Poll::Ready(Some(Err(Box::new(error)))),
                    },
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            this.trailers = Some(trailers);
                        }
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn gzip_and_deflate_decode_across_frames_and_others_are_unsupported() {
        let plain = b"{\"authorization\": \"Bearer s3cret-value\"}".repeat(50);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&plain).expect("gzip");
        let gz = gz.finish().expect("gzip");
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zl.write_all(&plain).expect("zlib");
        let zl = zl.finish().expect("zlib");
        for (encoded, coding) in [(gz, Coding::Gzip), (zl, Coding::Deflate)] {
            // Split into 7-byte frames.
            let frames: Vec<Result<Frame<Bytes>, BoxError>> = encoded
                .chunks(7)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            let inner = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
            let body = DecodedBody::new(inner, &coding).expect("decodable");
            let out = body.collect().await.expect("decoded").to_bytes();
            assert_eq!(out.as_ref(), plain.as_slice(), "{coding:?}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_ENCODING, "br".parse().expect("value"));
        assert_eq!(Coding::of(&headers), Coding::Unsupported("br".into()));
        headers.insert(
            http::header::CONTENT_ENCODING,
            "gzip, br".parse().expect("value"),
        );
        assert!(matches!(Coding::of(&headers), Coding::Unsupported(_)));
        headers.insert(
            http::header::CONTENT_ENCODING,
            "X-Gzip".parse().expect("value"),
        );
        assert_eq!(Coding::of(&headers), Coding::Gzip);
        headers.remove(http::header::CONTENT_ENCODING);
        assert_eq!(Coding::of(&headers), Coding::Identity);
    }
}
