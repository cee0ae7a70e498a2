//! Request heads whose lines end in a bare line feed are refused (RFC 9112 §2.2): a
//! client I/O wrapper under hyper's HTTP/1.1 server, which accepts them (httparse takes LF
//! alone as a line end, and has no option to refuse it).
//!
//! RFC 9112 §2.2 lets a recipient take a bare LF as a line terminator, and lets a server
//! refuse one instead. airlock refuses: an intermediary that reads a head differently from
//! the origin behind it is how requests are smuggled (RFC 9112 §11.2), and airlock decides
//! on what it parsed. [`StrictHead`] follows the framing of the requests it carries just
//! far enough to know which bytes are heads (`scan`), holds a head back until its end is
//! seen and checked, and hands hyper everything else unscanned: bodies of a known length
//! are skipped, not read byte by byte. On a head with a bare LF it hands on the requests
//! before it and nothing more; the connection's watchdog sees [`HeadWatch::refused`] and
//! starts hyper's graceful shutdown, and when hyper, done with those requests, shuts the
//! connection down, the client gets one `400` with airlock's JSON error
//! (`bare_lf_in_head`) and the connection closes.
//!
//! After a `CONNECT` or a request asking to upgrade, the bytes that follow may belong to a
//! tunnel, so scanning stops; the service calls [`HeadWatch::not_upgraded`] when it
//! answered without switching protocols, and scanning goes on with the next head.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::respond::{ProxyError, ERROR_HEADER};

mod scan;

use scan::{Scan, State};

/// The stable code of the refusal.
pub const BARE_LF_CODE: &str = "bare_lf_in_head";

/// The service's side of a [`StrictHead`]: tells it a `CONNECT` or upgrade request was
/// answered without switching protocols.
#[derive(Debug, Clone, Default)]
pub struct HeadWatch {
    resume: Arc<AtomicBool>,
    refused: Arc<AtomicBool>,
}

impl HeadWatch {
    /// Whether a head was refused: the connection's watchdog
    /// ([`crate::limits::keepalive::watch`]) then starts hyper's graceful shutdown, so hyper
    /// finishes the requests before it and shuts down, and the refusal is written.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// The `CONNECT` or upgrade request just answered did not switch protocols: what
    /// follows is HTTP again.
    pub fn not_upgraded(&self) {
        self.resume.store(true, Ordering::Release);
    }

    /// Calls [`HeadWatch::not_upgraded`] when `status` answers a request (a `CONNECT`
    /// when `connect`, else one with `Upgrade` when `upgrade`) without switching protocols
    /// (`101`, or `2xx` to a `CONNECT`, RFC 9110 §9.3.6 and §15.2.2).
    pub fn answered(&self, connect: bool, upgrade: bool, status: http::StatusCode) {
        let switched =
            status == http::StatusCode::SWITCHING_PROTOCOLS || (connect && status.is_success());
        if (connect || upgrade) && !switched {
            self.not_upgraded();
        }
    }
}

/// `inner` (a client connection, plain or after TLS) with request heads checked before
/// hyper reads them.
pub struct StrictHead<T> {
    inner: T,
    state: State,
    /// Bytes read from `inner` and not handed on: an unfinished head, and after a scan the
    /// accepted bytes before it (the first `ready`).
    pending: Vec<u8>,
    ready: usize,
    /// The refusal to write before shutting down, and how much of it is written.
    refusal: Option<(Vec<u8>, usize)>,
    resume: Arc<AtomicBool>,
    refused: Arc<AtomicBool>,
}

impl<T> StrictHead<T> {
    /// Wraps `inner`; the [`HeadWatch`] goes to the service.
    pub fn new(inner: T) -> (Self, HeadWatch) {
        let watch = HeadWatch::default();
        (Self::watched(inner, &watch), watch)
    }

    /// Wraps `inner`, told by `watch` (made before the stream it watches).
    pub fn watched(inner: T, watch: &HeadWatch) -> Self {
        Self {
            inner,
            state: State::new(),
            pending: Vec::new(),
            ready: 0,
            refusal: None,
            resume: watch.resume.clone(),
            refused: watch.refused.clone(),
        }
    }

    /// Takes in the outcome of a scan of `pending`.
    fn take(&mut self, scan: Scan) {
        match scan {
            Scan::Accept(n) => self.ready = n,
            Scan::Refuse(n) => {
                self.ready = n;
                self.pending.truncate(n);
                self.refusal = Some((refusal(), 0));
                self.refused.store(true, Ordering::Release);
                tracing::info!(
                    "request head with a bare LF refused (RFC 9112 §2.2); closing the connection"
                );
            }
        }
    }

    /// Hands `buf` up to `ready` pending bytes.
    fn hand_on(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.ready.min(buf.remaining());
        buf.put_slice(&self.pending[..n]);
        self.pending.drain(..n);
        self.ready -= n;
        self.state.rebase(n);
    }
}

/// The answer to a refused head: `400` with airlock's JSON error, then close.
fn refusal() -> Vec<u8> {
    let error = ProxyError::BadRequest {
        code: BARE_LF_CODE,
        reason: "a line of the request head ends in a bare LF; airlock takes only CRLF \
                 (RFC 9112 §2.2), so that it reads the head as the origin would"
            .into(),
    };
    let body = serde_json::to_vec_pretty(&error.body()).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n{ERROR_HEADER}: {BARE_LF_CODE}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len() + 1
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out.push(b'\n');
    out
}

impl<T: AsyncRead + Unpin> AsyncRead for StrictHead<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready > 0 {
                this.hand_on(buf);
                return Poll::Ready(Ok(()));
            }
            if this.state == State::Suspended && this.resume.swap(false, Ordering::Acquire) {
                this.state = State::new();
                if !this.pending.is_empty() {
                    let scan = this.state.scan(&this.pending, 0);
                    this.take(scan);
                    continue;
                }
            }
            match this.state {
                // Nothing more is read: an end of input here would make hyper drop a
                // request still in flight (it does not take half-closed connections), so
                // the watchdog shuts the connection down gracefully instead
                // (`HeadWatch::refused`), which is also what wakes this task again.
                State::Refused => return Poll::Pending,
                State::Passthrough | State::Suspended if this.pending.is_empty() => {
                    return Pin::new(&mut this.inner).poll_read(cx, buf);
                }
                _ => {}
            }
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            let read = buf.filled().len() - before;
            if read == 0 {
                // The end of the input: what is held back goes on as it is (hyper refuses
                // an unfinished head itself), then the end.
                this.state = State::Passthrough;
                this.ready = this.pending.len();
                if this.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if this.pending.is_empty() {
                // The common case: scanned where it lies; only an unfinished head (or
                // what follows a refused one) is taken out of `buf`.
                let scan = this.state.scan(&buf.filled()[before..], 0);
                let (Scan::Accept(n) | Scan::Refuse(n)) = scan;
                this.pending.extend_from_slice(&buf.filled()[before + n..]);
                buf.set_filled(before + n);
                this.state.rebase(n);
                if let Scan::Refuse(_) = scan {
                    this.take(Scan::Refuse(0));
                }
                if n > 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let from = this.pending.len();
            this.pending.extend_from_slice(&buf.filled()[before..]);
            buf.set_filled(before);
            let scan = this.state.scan(&this.pending, from);
            this.take(scan);
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StrictHead<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    /// Writes the refusal, when a head was refused, before shutting the stream down:
    /// hyper shuts down once it has written every answer to the requests before it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some((bytes, written)) = &mut this.refusal {
            while *written < bytes.len() {
                let n = std::task::ready!(
                    Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..])
                )?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *written += n;
            }
            std::task::ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
            this.refusal = None;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
