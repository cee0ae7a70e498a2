//! Starting a server connection only once its client has sent something (issue #22,
//! "5,000 idle intercepted tunnels ≤ 20 KiB each").
//!
//! hyper's HTTP/1.1 server connection allocates its buffers when it is built and first
//! polled: an 8 KiB read buffer, an 8 KiB write buffer for heads, and a box sized for the
//! service's future (about 5 KiB for airlock's request handler), about 23 KiB in all
//! (measured with valgrind's massif over 400 idle tunnels; docs/performance.md "Idle
//! intercepted tunnels"). A client that opened a CONNECT tunnel and finished the TLS
//! handshake but has not sent a request yet (a connection pool warming up, a browser's
//! preconnect) needs none of that. [`on_first_bytes`] waits for the first plaintext bytes
//! with a small stack buffer, puts them back in front of the stream
//! ([`crate::prefixed::Prefixed`]), and only then builds the connection.
//!
//! The wait has its own deadline, the `--header-read-timeout` the connection would have
//! had: a client that sends nothing for that long is closed, as hyper's header-read timer
//! closes it when the connection is built at once. Once bytes arrived, hyper's own timer
//! covers the rest of the head.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, ReadBuf};

use crate::prefixed::Prefixed;

/// The most bytes read while waiting; the rest stays in the stream (and in rustls's
/// buffer for a TLS stream) for the connection to read.
const FIRST_READ: usize = 512;

/// Waits for the first bytes on `io` for at most `timeout`, then serves the connection
/// `make` builds over them (put back in front of `io`). Resolves to `None` when the
/// client closed, failed or sent nothing before `timeout`, or when
/// [`OnFirstBytes::graceful_shutdown`] came first; otherwise to the connection's output.
pub fn on_first_bytes<T, M, C>(io: T, timeout: Duration, make: M) -> OnFirstBytes<T, M, C>
where
    T: AsyncRead + Unpin,
    M: FnOnce(Prefixed<T>) -> C + Unpin,
    C: Future,
{
    OnFirstBytes {
        state: State::Waiting { io, make },
        deadline: Box::pin(tokio::time::sleep(timeout)),
    }
}

/// The future [`on_first_bytes`] returns.
pub struct OnFirstBytes<T, M, C> {
    state: State<T, M, C>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

enum State<T, M, C> {
    /// No byte yet: only the stream and the recipe are held.
    Waiting { io: T, make: M },
    /// The connection, built.
    Serving(Pin<Box<C>>),
    /// Closed before a connection was built.
    Ended,
}

impl<T: Unpin, M: Unpin, C> OnFirstBytes<T, M, C> {
    /// Starts a graceful shutdown: before the first bytes the stream is just closed;
    /// afterwards `shutdown` is called on the connection (e.g.
    /// `|conn| conn.graceful_shutdown()` for hyper's).
    pub fn graceful_shutdown(self: Pin<&mut Self>, shutdown: impl FnOnce(Pin<&mut C>)) {
        let this = self.get_mut();
        match &mut this.state {
            State::Waiting { .. } => this.state = State::Ended,
            State::Serving(conn) => shutdown(conn.as_mut()),
            State::Ended => {}
        }
    }

    /// Whether the connection was built (the client sent its first bytes).
    pub fn started(&self) -> bool {
        matches!(self.state, State::Serving(_))
    }
}

impl<T, M, C> Future for OnFirstBytes<T, M, C>
where
    T: AsyncRead + Unpin,
    M: FnOnce(Prefixed<T>) -> C + Unpin,
    C: Future,
{
    type Output = Option<C::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Serving(conn) => return conn.as_mut().poll(cx).map(Some),
                State::Ended => return Poll::Ready(None),
                State::Waiting { io, .. } => {
                    let mut first = [0u8; FIRST_READ];
                    let mut buf = ReadBuf::new(&mut first);
                    match Pin::new(io).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                            let prefix = Bytes::copy_from_slice(buf.filled());
                            let State::Waiting { io, make } =
                                std::mem::replace(&mut this.state, State::Ended)
                            else {
                                unreachable!("matched Waiting above")
                            };
                            this.state = State::Serving(Box::pin(make(Prefixed::new(prefix, io))));
                        }
                        // End of stream or an error before any request: nothing to serve.
                        Poll::Ready(_) => this.state = State::Ended,
                        Poll::Pending => {
                            if this.deadline.as_mut().poll(cx).is_ready() {
                                this.state = State::Ended;
                            }
                            if !matches!(this.state, State::Ended) {
                                return Poll::Pending;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The connection is built only once bytes arrive, and reads them first.
    #[tokio::test]
    async fn the_connection_is_built_on_the_first_bytes_and_reads_them() {
        let (mut client, server) = tokio::io::duplex(64);
        let built = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = built.clone();
        let serving = tokio::spawn(on_first_bytes(
            server,
            Duration::from_secs(5),
            move |mut io| {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                async move {
                    let mut got = vec![0u8; 5];
                    io.read_exact(&mut got).await.map(|_| got)
                }
            },
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!built.load(std::sync::atomic::Ordering::SeqCst));
        client.write_all(b"hello").await.expect("write");
        let got = serving.await.expect("task").expect("served").expect("read");
        assert_eq!(got, b"hello");
    }

    /// Nothing sent before the deadline: closed without building anything.
    #[tokio::test]
    async fn a_client_that_sends_nothing_is_closed_at_the_deadline() {
        let (_client, server) = tokio::io::duplex(64);
        let out = on_first_bytes(server, Duration::from_millis(30), |_io| async {
            panic!("built")
        })
        .await;
        assert!(out.is_none());
    }

    /// A graceful shutdown before the first bytes ends the wait.
    #[tokio::test]
    async fn a_shutdown_before_the_first_bytes_ends_the_wait() {
        let (_client, server) = tokio::io::duplex(64);
        let mut waiting = Box::pin(on_first_bytes(
            server,
            Duration::from_secs(5),
            |_io| async { 1 },
        ));
        assert!(futures_poll_once(waiting.as_mut()).is_pending());
        waiting.as_mut().graceful_shutdown(|_| panic!("not built"));
        assert_eq!(waiting.await, None);
    }

    fn futures_poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        f.poll(&mut cx)
    }
}
