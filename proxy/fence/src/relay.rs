//! The relay inside the fence: every captured connection, proxy-variable connection and
//! DNS query is carried to airlock's fence socket with a hello naming the run. When the
//! socket cannot be reached the client's connection is closed: the relay fails closed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use airlock_net::fence::{read_frame, write_frame, write_hello, Hello, Kind};
use tokio::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use tracing::debug;

/// What the relay carried and dropped.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) connections: AtomicU64,
    pub(crate) dns_queries: AtomicU64,
    pub(crate) failures: AtomicU64,
}

/// Where the relay sends, and as which run.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub(crate) socket: PathBuf,
    pub(crate) run: String,
    pub(crate) token: String,
    pub(crate) counts: Arc<Counts>,
}

impl Upstream {
    async fn open(&self, kind: Kind) -> std::io::Result<UnixStream> {
        let mut stream = UnixStream::connect(&self.socket).await?;
        let hello = Hello {
            run: self.run.clone(),
            token: self.token.clone(),
            kind,
        };
        write_hello(&mut stream, &hello).await?;
        Ok(stream)
    }

    fn failed(&self, what: &str, error: &std::io::Error) {
        self.counts.failures.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "airlock fence: cannot reach airlock at {} for {what}: {error}; the connection is closed",
            self.socket.display()
        );
    }
}

/// Captured connections: the nftables redirect brings them here; `SO_ORIGINAL_DST`
/// names where each was going.
pub(crate) async fn transparent(listener: TcpListener, upstream: Upstream) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let dst = match original_dst(&client) {
                Ok(dst) => dst,
                Err(error) => {
                    debug!(error = %error, "no original destination");
                    return;
                }
            };
            carry(client, Kind::Transparent { dst }, &upstream).await;
        });
    }
}

/// Clients of the proxy variables (`127.0.0.1:PORT` inside the fence).
pub(crate) async fn proxy(listener: TcpListener, upstream: Upstream) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move { carry(client, Kind::Proxy, &upstream).await });
    }
}

/// DNS over TCP: framed the same way as the fence socket's DNS, so bytes are copied.
pub(crate) async fn dns_tcp(listener: TcpListener, upstream: Upstream) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let upstream = upstream.clone();
        upstream.counts.dns_queries.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move { carry(client, Kind::Dns, &upstream).await });
    }
}

/// DNS over UDP: each datagram is one query, carried on its own fence connection.
pub(crate) async fn dns_udp(socket: UdpSocket, upstream: Upstream) {
    let socket = Arc::new(socket);
    let mut buffer = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let query = buffer[..n].to_vec();
        let (socket, upstream) = (socket.clone(), upstream.clone());
        upstream.counts.dns_queries.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let answer = async {
                let mut stream = upstream.open(Kind::Dns).await?;
                write_frame(&mut stream, &query).await?;
                read_frame(&mut stream).await
            };
            match answer.await {
                Ok(Some(answer)) => {
                    let _ = socket.send_to(&answer, from).await;
                }
                Ok(None) => {}
                Err(error) => upstream.failed("a DNS query", &error),
            }
        });
    }
}

async fn carry(mut client: TcpStream, kind: Kind, upstream: &Upstream) {
    let _ = client.set_nodelay(true);
    let mut server = match upstream.open(kind).await {
        Ok(server) => server,
        Err(error) => return upstream.failed("a connection", &error),
    };
    upstream.counts.connections.fetch_add(1, Ordering::Relaxed);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// The destination a redirected connection was going to (`SO_ORIGINAL_DST`).
fn original_dst(stream: &TcpStream) -> std::io::Result<SocketAddr> {
    let addr = socket2::SockRef::from(stream).original_dst_v4()?;
    addr.as_socket()
        .ok_or_else(|| std::io::Error::other("the original destination is not an IP address"))
}
