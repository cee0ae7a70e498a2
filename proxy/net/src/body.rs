//! Body types that flow through the proxy, and the wrapper that journals a passed
//! response as a read once it has been relayed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt as _, Full};

/// Errors carried by bodies inside the proxy.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The one body type of proxied requests and responses.
pub type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// What a [`MeteredBody`] saw, handed to its completion callback.
#[derive(Debug)]
pub struct Metered {
    /// Data bytes relayed.
    pub bytes: u64,
    /// BLAKE3 (256-bit) of the bytes, when the body reached its end.
    pub blake3: Option<[u8; 32]>,
    /// Why the body stopped early, when it did.
    pub error: Option<String>,
    /// The first bytes of the body, up to the capture limit (shared, not copied).
    pub captured: Vec<Bytes>,
    /// The body was longer than the capture limit.
    pub capture_truncated: bool,
    /// Hashing was asked for and deferred: the body fit in the capture, so `blake3` is
    /// `None` and the digest is to be taken from `captured` (the whole body), off the
    /// request path.
    pub hash_deferred: bool,
}

/// A body that relays frames unchanged (streaming, no buffering), counting and hashing the
/// data, and calls `on_done` exactly once: at its end, on an error, or when dropped early.
pub struct MeteredBody<B: Body> {
    inner: B,
    bytes: u64,
    hasher: Option<Box<crate::digest::BodyHasher>>,
    captured: Vec<Bytes>,
    capture_room: usize,
    capture_truncated: bool,
    on_done: Option<Box<dyn FnOnce(Metered) + Send + Sync>>,
    /// While the body fits in the capture, hashing waits (see [`Metered::hash_deferred`]).
    defer_hash: bool,
    /// The captured bytes were fed to the hasher (the body outgrew the capture).
    hashed_captured: bool,
}

impl<B: Body> MeteredBody<B> {
    /// Wraps `inner`; `hash` turns on the BLAKE3 digest of the data.
    pub fn new(inner: B, hash: bool, on_done: Box<dyn FnOnce(Metered) + Send + Sync>) -> Self {
        Self {
            inner,
            bytes: 0,
            hasher: hash.then(|| Box::new(crate::digest::BodyHasher::new())),
            captured: Vec::new(),
            capture_room: 0,
            capture_truncated: false,
            on_done: Some(on_done),
            defer_hash: false,
            hashed_captured: false,
        }
    }

    /// Also keeps the first `limit` bytes of the body for analysis (frames are
    /// reference-counted, so this shares them rather than copying).
    pub fn capture(mut self, limit: usize) -> Self {
        self.capture_room = limit;
        self
    }

    /// With [`MeteredBody::capture`] and hashing on: while the whole body fits in the
    /// capture it is not hashed here but left for the caller to hash from the captured
    /// frames ([`Metered::hash_deferred`]); a longer body is hashed as it streams.
    pub fn defer_hash(mut self) -> Self {
        self.defer_hash = true;
        self
    }

    fn finish(&mut self, error: Option<String>) {
        if let Some(done) = self.on_done.take() {
            let deferred = self.defer_hash && !self.hashed_captured;
            let (blake3, hash_deferred) = match (&error, self.hasher.take()) {
                (None, Some(_)) if deferred => (None, true),
                (None, Some(hasher)) => (Some(hasher.finalize()), false),
                _ => (None, false),
            };
            done(Metered {
                bytes: self.bytes,
                blake3,
                error,
                captured: std::mem::take(&mut self.captured),
                capture_truncated: self.capture_truncated,
                hash_deferred,
            });
        }
    }
}

impl<B: Body> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        if self.on_done.is_some() {
            let error = if self.inner.is_end_stream() {
                None
            } else {
                Some("the body was not read to its end".to_owned())
            };
            self.finish(error);
        }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.len() as u64;
                    if let Some(hasher) = this.hasher.as_mut() {
                        let fits = this.defer_hash
                            && !this.hashed_captured
                            && !this.capture_truncated
                            && this.capture_room >= data.len();
                        if !fits {
                            if this.defer_hash && !this.hashed_captured {
                                // Outgrew the capture: catch up, then hash as it streams.
                                for earlier in &this.captured {
                                    hasher.update(earlier);
                                }
                                this.hashed_captured = true;
                            }
                            hasher.update(data);
                        }
                    }
                    if this.capture_room > 0 {
                        let take = data.len().min(this.capture_room);
                        this.captured.push(data.slice(..take));
                        this.capture_room -= take;
                        this.capture_truncated |= take < data.len();
                    } else if !data.is_empty() && !this.captured.is_empty() {
                        this.capture_truncated = true;
                    }
                }
                if this.inner.is_end_stream() {
                    this.finish(None);
                }
            }
            Poll::Ready(Some(Err(error))) => this.finish(Some(error.to_string())),
            Poll::Ready(None) => this.finish(None),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body that keeps `guard` alive until the body is dropped (after its last frame is
/// sent, or the connection ends): used to count a request as in flight until its response
/// has left.
pub struct Guarded<B> {
    inner: B,
    _guard: Box<dyn Send + Sync>,
}

impl<B> Guarded<B> {
    /// Wraps `inner`, holding `guard`.
    pub fn new(inner: B, guard: Box<dyn Send + Sync>) -> Self {
        Self {
            inner,
            _guard: guard,
        }
    }
}

impl<B> Body for Guarded<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body that relays frames unchanged, adding the length of each data frame to a shared
/// counter (bytes, relaxed atomics: one add per frame): the request line's `bytes_in` and
/// `bytes_out`.
pub struct Counted<B> {
    inner: B,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<B> Counted<B> {
    /// Wraps `inner`, counting its data bytes into `count`.
    pub fn new(inner: B, count: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Self {
        Self { inner, count }
    }
}

impl<B> Body for Counted<B>
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
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.count
                    .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A buffered body as a [`ProxyBody`].
pub fn full_body(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| -> BoxError { match never {} })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// A body of fixed frames.
    struct Frames(VecDeque<Bytes>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(|b| Ok(Frame::data(b))))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn metered(frames: &[&'static [u8]], capture: usize) -> Metered {
        let seen = Arc::new(Mutex::new(None));
        let slot = seen.clone();
        let body = MeteredBody::new(
            Frames(frames.iter().map(|f| Bytes::from_static(f)).collect()),
            true,
            Box::new(move |m| *slot.lock().expect("lock") = Some(m)),
        )
        .capture(capture)
        .defer_hash();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async { body.collect().await.expect("body") });
        let done = seen.lock().expect("lock").take();
        done.expect("finished")
    }

    #[test]
    fn a_body_within_the_capture_leaves_its_digest_to_the_caller() {
        let m = metered(&[b"hello ", b"world"], 64);
        assert!(m.hash_deferred);
        assert!(m.blake3.is_none());
        let whole: Vec<u8> = m.captured.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(whole, b"hello world");
    }

    #[test]
    fn a_body_past_the_capture_is_hashed_whole_as_it_streams() {
        let m = metered(&[b"hello ", b"wor", b"ld"], 8);
        assert!(!m.hash_deferred);
        assert!(m.capture_truncated);
        let expected: [u8; 32] = *blake3::hash(b"hello world").as_bytes();
        assert_eq!(m.blake3, Some(expected));
    }
}
