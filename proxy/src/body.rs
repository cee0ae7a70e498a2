//! Body types that flow through the proxy, and the wrapper that journals a passed
//! response as a read once it has been relayed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use sha2::Digest as _;

/// Errors carried by bodies inside the proxy.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The one body type of proxied requests and responses.
pub type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// What a [`MeteredBody`] saw, handed to its completion callback.
#[derive(Debug)]
pub struct Metered {
    /// Data bytes relayed.
    pub bytes: u64,
    /// SHA-256 of the bytes, when the body reached its end.
    pub sha256: Option<[u8; 32]>,
    /// Why the body stopped early, when it did.
    pub error: Option<String>,
    /// The first bytes of the body, up to the capture limit (shared, not copied).
    pub captured: Vec<Bytes>,
    /// The body was longer than the capture limit.
    pub capture_truncated: bool,
}

/// A body that relays frames unchanged (streaming, no buffering), counting and hashing the
/// data, and calls `on_done` exactly once: at its end, on an error, or when dropped early.
pub struct MeteredBody<B: Body> {
    inner: B,
    bytes: u64,
    hasher: Option<sha2::Sha256>,
    captured: Vec<Bytes>,
    capture_room: usize,
    capture_truncated: bool,
    on_done: Option<Box<dyn FnOnce(Metered) + Send + Sync>>,
}

impl<B: Body> MeteredBody<B> {
    /// Wraps `inner`; `hash` turns on the SHA-256 of the data.
    pub fn new(inner: B, hash: bool, on_done: Box<dyn FnOnce(Metered) + Send + Sync>) -> Self {
        Self {
            inner,
            bytes: 0,
            hasher: hash.then(sha2::Sha256::new),
            captured: Vec::new(),
            capture_room: 0,
            capture_truncated: false,
            on_done: Some(on_done),
        }
    }

    /// Also keeps the first `limit` bytes of the body for analysis (frames are
    /// reference-counted, so this shares them rather than copying).
    pub fn capture(mut self, limit: usize) -> Self {
        self.capture_room = limit;
        self
    }

    fn finish(&mut self, error: Option<String>) {
        if let Some(done) = self.on_done.take() {
            let sha256 = match (&error, self.hasher.take()) {
                (None, Some(hasher)) => Some(hasher.finalize().into()),
                _ => None,
            };
            done(Metered {
                bytes: self.bytes,
                sha256,
                error,
                captured: std::mem::take(&mut self.captured),
                capture_truncated: self.capture_truncated,
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
                        hasher.update(data);
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
