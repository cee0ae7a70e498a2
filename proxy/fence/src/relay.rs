//! The relay inside the fence: every captured connection, proxy-variable connection and
//! DNS query is carried to airlock's fence socket with a hello naming the run. When the
//! socket cannot be reached the client's connection is closed: the relay fails closed.
//!
//! The relay has limits of its own: at most [`MAX_CARRIED`] connections and queries in
//! flight at once, and the descriptors its process may open. Past either, the client's
//! connection (or query) is dropped, counted in `relay_limited` and reported on stderr
//! (the first time, then every [`REPORT_EVERY`]th), and a listener whose accept failed
//! waits [`ACCEPT_BACKOFF`] before it accepts again instead of spinning on the error.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_net::fence::{read_frame, write_frame, write_hello, Hello, Kind};
use tokio::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;

/// Most connections and DNS queries the relay carries at once (each holds two
/// descriptors). airlock's own `--max-connections-per-run` (256 by default) refuses a
/// run's connections well before this.
pub(crate) const MAX_CARRIED: usize = 4096;

/// How long a listener waits after a failed accept (out of descriptors) before the next.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// After the first, every this many refusals by the relay's own limits are reported.
pub(crate) const REPORT_EVERY: u64 = 1000;

/// What the relay carried and dropped.
#[derive(Debug)]
pub(crate) struct Counts {
    pub(crate) connections: AtomicU64,
    pub(crate) dns_queries: AtomicU64,
    pub(crate) failures: AtomicU64,
    /// Connections and queries dropped by the relay's own limits.
    pub(crate) limited: AtomicU64,
    carried: Arc<Semaphore>,
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            connections: AtomicU64::new(0),
            dns_queries: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            limited: AtomicU64::new(0),
            carried: Arc::new(Semaphore::new(MAX_CARRIED)),
        }
    }
}

impl Counts {
    /// A slot of [`MAX_CARRIED`], or `None` (counted and reported) when all are taken.
    fn carry_slot(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.carried.clone().try_acquire_owned().ok();
        if slot.is_none() {
            self.limit(&format!(
                "{MAX_CARRIED} connections and queries are already being carried (the relay's cap)"
            ));
        }
        slot
    }

    /// Counts one connection or query dropped by a limit of the relay's and reports it.
    fn limit(&self, why: &str) {
        let n = self.limited.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n % REPORT_EVERY == 0 {
            eprintln!(
                "airlock fence: the relay dropped a connection or DNS query: {why} ({n} so far)"
            );
        }
    }
}

/// Accepts one connection, or after a failure (out of descriptors among them: EMFILE,
/// ENFILE) counts it, reports it and waits [`ACCEPT_BACKOFF`], then `None`.
async fn accept(listener: &TcpListener, counts: &Counts) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((client, _)) => Some(client),
        Err(error) => {
            counts.limit(&format!("accept failed: {error}"));
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            None
        }
    }
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
        // Out of descriptors (EMFILE, ENFILE): the relay's own limit, not airlock's absence.
        if matches!(error.raw_os_error(), Some(23 | 24)) {
            return self
                .counts
                .limit(&format!("cannot open a connection for {what}: {error}"));
        }
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
        let Some(client) = accept(&listener, &upstream.counts).await else {
            continue;
        };
        let Some(slot) = upstream.counts.carry_slot() else {
            continue;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let _slot = slot;
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
        let Some(client) = accept(&listener, &upstream.counts).await else {
            continue;
        };
        let Some(slot) = upstream.counts.carry_slot() else {
            continue;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            carry(client, Kind::Proxy, &upstream).await;
            drop(slot);
        });
    }
}

/// DNS over TCP: framed the same way as the fence socket's DNS, so bytes are copied.
pub(crate) async fn dns_tcp(listener: TcpListener, upstream: Upstream) {
    loop {
        let Some(client) = accept(&listener, &upstream.counts).await else {
            continue;
        };
        let Some(slot) = upstream.counts.carry_slot() else {
            continue;
        };
        let upstream = upstream.clone();
        upstream.counts.dns_queries.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            carry(client, Kind::Dns, &upstream).await;
            drop(slot);
        });
    }
}

/// DNS over UDP: each datagram is one query, carried on its own fence connection.
pub(crate) async fn dns_udp(socket: UdpSocket, upstream: Upstream) {
    let socket = Arc::new(socket);
    let mut buffer = vec![0u8; 4096];
    loop {
        let (n, from) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(error) => {
                debug!(error = %error, "DNS over UDP: receive failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(slot) = upstream.counts.carry_slot() else {
            continue;
        };
        let query = buffer[..n].to_vec();
        let (socket, upstream) = (socket.clone(), upstream.clone());
        upstream.counts.dns_queries.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _slot = slot;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_cap_the_relay_refuses_and_counts_instead_of_carrying() {
        let counts = Counts::default();
        let slots: Vec<_> = (0..MAX_CARRIED)
            .map(|_| counts.carry_slot().expect("a slot"))
            .collect();
        assert!(counts.carry_slot().is_none(), "past the cap");
        assert!(counts.carry_slot().is_none());
        assert_eq!(counts.limited.load(Ordering::Relaxed), 2);
        drop(slots);
        assert!(counts.carry_slot().is_some(), "slots come back");
        assert_eq!(counts.failures.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn running_out_of_descriptors_is_the_relays_limit_not_a_failure_to_reach_airlock() {
        let upstream = Upstream {
            socket: PathBuf::from("/nonexistent/fence.sock"),
            run: "run_x".into(),
            token: "t".into(),
            counts: Arc::default(),
        };
        upstream.failed("a connection", &std::io::Error::from_raw_os_error(24));
        assert_eq!(upstream.counts.limited.load(Ordering::Relaxed), 1);
        assert_eq!(upstream.counts.failures.load(Ordering::Relaxed), 0);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        upstream.failed("a connection", &refused);
        assert_eq!(upstream.counts.failures.load(Ordering::Relaxed), 1);
    }
}
