//! The admin listener's accept loop (and the ops listener's, `--role proxy`): each
//! connection served over HTTP/1.1 by hyper with the admin router (issue 35, item 4).
//!
//! - `--admin-max-connections`: at most that many connections are open at once; past it a
//!   new connection gets one `429 too_many_connections` (JSON naming the flag and the
//!   limit) and is closed, so a client that holds connections open cannot keep
//!   `/healthz`, `/metrics` or the API from others for long, nor exhaust the process's
//!   descriptors.
//! - `--header-read-timeout`: a connection that has not sent a whole request head that
//!   long after it was accepted, or after its last answer (hyper runs the timer while it
//!   waits for the next head), is closed: a slowloris client holds a slot for that long
//!   at most.
//!
//! Both are counted for `/metrics` ([`Stats::metrics`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt as _;
use tracing::{debug, warn};

/// Default of `--admin-max-connections`: 256 open connections. A reviewer's browser holds
/// about six, the CLI and each `airlock run` one or two at a time, a scraper one.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long the one 429 of a refused connection may take to write before it is dropped.
const REFUSAL_WRITE: Duration = Duration::from_secs(2);

/// The admin listener's connection counts.
#[derive(Debug, Default)]
pub struct Stats {
    open: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

impl Stats {
    /// Prometheus text: `airlock_admin_connections_open` (gauge),
    /// `airlock_admin_connections_refused_total` (counter: closed with a 429 at
    /// `--admin-max-connections`) and `airlock_admin_connections_timed_out_total`
    /// (counter: closed by `--header-read-timeout`).
    pub fn metrics(&self) -> String {
        format!(
            "# HELP airlock_admin_connections_open Open connections of the admin (or ops) listener.\n\
             # TYPE airlock_admin_connections_open gauge\n\
             airlock_admin_connections_open {}\n\
             # HELP airlock_admin_connections_refused_total Admin listener connections refused at --admin-max-connections.\n\
             # TYPE airlock_admin_connections_refused_total counter\n\
             airlock_admin_connections_refused_total {}\n\
             # HELP airlock_admin_connections_timed_out_total Admin listener connections closed by --header-read-timeout.\n\
             # TYPE airlock_admin_connections_timed_out_total counter\n\
             airlock_admin_connections_timed_out_total {}\n",
            self.open.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.timed_out.load(Ordering::Relaxed),
        )
    }
}

/// How the admin listener is limited.
#[derive(Debug, Clone, Copy)]
pub struct AdminLimits {
    /// `--admin-max-connections` (at least 1).
    pub max_connections: usize,
    /// `--header-read-timeout`.
    pub header_read_timeout: Duration,
}

/// Serves `router` on `listener` until the task is dropped, within `limits`, counting in
/// `stats`.
pub async fn serve(
    router: axum::Router,
    listener: TcpListener,
    limits: AdminLimits,
    stats: Arc<Stats>,
) {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(max));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors (EMFILE) among them: wait rather than spin.
                warn!(error = %error, "admin listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(refuse(stream, max));
            continue;
        };
        let (router, stats) = (router.clone(), stats.clone());
        tokio::spawn(async move {
            stats.open.fetch_add(1, Ordering::Relaxed);
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
            if let Err(error) = served {
                if error.is_timeout() {
                    stats.timed_out.fetch_add(1, Ordering::Relaxed);
                    debug!("admin connection closed by --header-read-timeout");
                } else {
                    debug!(error = %error, "admin connection ended with an error");
                }
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// One `429 too_many_connections` naming `--admin-max-connections`, then the close.
async fn refuse(stream: TcpStream, limit: usize) {
    let error = airlock_net::respond::ProxyError::TooManyConnections {
        limit_name: "--admin-max-connections",
        limit,
    };
    warn!(limit, "admin connection refused at --admin-max-connections");
    airlock_net::respond::refuse_connection(stream, &error, REFUSAL_WRITE).await;
}
