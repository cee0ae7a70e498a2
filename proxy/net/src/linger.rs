//! Lingering close for client connections (docs/cases.md C01; what nginx calls
//! `lingering_close`): when airlock is done with a connection while the client may still be
//! sending — an early final answer (403, 413, an origin's early 413 relayed) to a request
//! whose body was not read — closing at once would make the kernel answer the unread bytes
//! with a reset, and a reset can destroy the answer before the client reads it. So the
//! write side is shut down (FIN after the answer) and what the client still sends is read
//! and discarded for a bounded time and amount, then the socket closes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Longest a closed connection keeps draining the client.
pub const LINGER_TIME: Duration = Duration::from_secs(5);

/// Most bytes drained from a client after airlock is done with its connection.
pub const LINGER_BYTES: u64 = 64 * 1024 * 1024;

/// A client `TcpStream` that lingers when dropped (see the module docs). Reads and writes
/// go straight to the stream.
#[derive(Debug)]
pub struct Lingering {
    stream: Option<TcpStream>,
}

impl Lingering {
    /// Wraps an accepted client connection.
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream: Some(stream),
        }
    }

    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        self.stream
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection closed"))
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => stream.poll_read(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => stream.poll_write(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => stream.poll_write_vectored(cx, bufs),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => stream.poll_flush(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => stream.poll_shutdown(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        // Outside a runtime (shutting down) the socket just closes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(linger(stream));
        }
    }
}

async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = vec![0u8; 16 * 1024];
    let mut drained = 0u64;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while drained < LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n as u64,
            }
        }
    })
    .await;
}
