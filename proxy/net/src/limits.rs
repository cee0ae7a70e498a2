//! Connection limits and idle timeouts of the proxy listener (docs/cases.md C09, issue #7):
//!
//! - a global cap on open client connections (`--max-connections`): past it a new
//!   connection gets one `429 too_many_connections` answer and is closed;
//! - a cap on connections that have not authenticated yet
//!   (`--max-unauthenticated-connections`): a connection holds one of these slots from
//!   accept until its first request authenticates (and is within its run's cap); a new
//!   connection past the cap evicts the oldest unauthenticated one (closed as if its
//!   `--auth-timeout` had passed), so clients that never authenticate can neither fill
//!   `--max-connections` nor keep new clients out by holding these slots (a legitimate
//!   client is unauthenticated for one round trip);
//! - a per-run cap on concurrent client connections (`--max-connections-per-run`): a
//!   connection is counted against its run from the first request that authenticates on
//!   it until it ends, including the CONNECT tunnel or upgraded (WebSocket) connection it
//!   turns into; past the cap the request is answered `429 too_many_connections`;
//! - an idle timeout on byte splices (`tunnel` rules, upgraded connections;
//!   `--idle-timeout`): when no byte moved either way for that long, both sides are closed.
//! - the open-file limit raised to its hard limit at start ([`raise_fd_limit`]).
//!
//! The keep-alive and authentication deadlines of HTTP connections are in
//! [`keepalive`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::RunId;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub mod first_bytes;
pub mod keepalive;

/// Default idle timeout of spliced and upgraded connections: 10 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Default cap on one run's concurrent client connections.
pub const DEFAULT_MAX_CONNECTIONS_PER_RUN: usize = 256;
/// Default cap on all open client connections of the proxy listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default cap on open client connections that have not authenticated yet: 256, a sixteenth
/// of [`DEFAULT_MAX_CONNECTIONS`] (a well-behaved client authenticates with its first
/// request, so only a burst of simultaneous new connections ever holds many of these).
pub const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS: usize = 256;

/// The open client connections, globally and per run.
#[derive(Debug)]
pub struct Connections {
    global: Arc<Semaphore>,
    global_limit: usize,
    per_run_limit: usize,
    per_run: Arc<Mutex<HashMap<RunId, usize>>>,
    refused_global: AtomicU64,
    refused_per_run: Arc<AtomicU64>,
    unauthenticated: Arc<Pending>,
    unauthenticated_limit: usize,
    evicted_unauthenticated: AtomicU64,
    /// The id of the next connection's unauthenticated slot (never reused).
    next_pending: AtomicU64,
    /// Connections closed by `--keep-alive-timeout`.
    closed_keep_alive: AtomicU64,
    /// Connections closed by `--auth-timeout`.
    closed_auth: AtomicU64,
}

/// Which cap a connection ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `--max-connections`: all clients together.
    Global(usize),
    /// `--max-connections-per-run`: the connections of one run.
    PerRun(usize),
}

/// The connections not yet authenticated, oldest first: id → its eviction flag.
type Pending = Mutex<std::collections::BTreeMap<u64, Arc<Eviction>>>;

/// Set when a connection is evicted from the unauthenticated slots by a newer one; the
/// connection's watchdog ([`keepalive::watch`]) then closes it.
#[derive(Debug, Default)]
pub struct Eviction {
    evicted: std::sync::atomic::AtomicBool,
    waker: futures_util::task::AtomicWaker,
}

impl Eviction {
    /// Whether a newer connection took this one's unauthenticated slot.
    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::SeqCst)
    }

    /// Wakes `waker` when this connection is evicted.
    pub fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        self.waker.wake();
    }
}

/// Why a client connection was closed by one of its deadlines (`--keep-alive-timeout`,
/// `--auth-timeout`), for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// No request in flight and no byte either way for `--keep-alive-timeout`.
    KeepAlive,
    /// Not authenticated within `--auth-timeout` of being accepted.
    Auth,
}

impl Connections {
    /// Caps of `global` open connections, `per_run` connections a run and
    /// `unauthenticated` connections not yet authenticated (all at least 1).
    pub fn new(global: usize, per_run: usize, unauthenticated: usize) -> Self {
        let global = global.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            unauthenticated: Arc::default(),
            unauthenticated_limit: unauthenticated.max(1),
            evicted_unauthenticated: AtomicU64::new(0),
            next_pending: AtomicU64::new(0),
            closed_keep_alive: AtomicU64::new(0),
            closed_auth: AtomicU64::new(0),
            global: Arc::new(Semaphore::new(global)),
            global_limit: global,
            per_run_limit: per_run.max(1),
            per_run: Arc::default(),
            refused_global: AtomicU64::new(0),
            refused_per_run: Arc::default(),
        }
    }

    /// A new client connection: its guard, or the global cap it ran into. The connection
    /// holds an unauthenticated slot until [`ConnectionGuard::bind`] succeeds; when all
    /// are taken, the oldest holder is evicted (its [`Eviction`] is set) and loses its
    /// slot to this one.
    pub fn open(&self) -> Result<Arc<ConnectionGuard>, Cap> {
        let permit = self.global.clone().try_acquire_owned().map_err(|_| {
            self.refused_global.fetch_add(1, Ordering::Relaxed);
            Cap::Global(self.global_limit)
        })?;
        let eviction = Arc::new(Eviction::default());
        let id = self.next_pending.fetch_add(1, Ordering::Relaxed);
        {
            let mut pending = self
                .unauthenticated
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            while pending.len() >= self.unauthenticated_limit {
                let Some((_, oldest)) = pending.pop_first() else {
                    break;
                };
                oldest.evict();
                self.evicted_unauthenticated.fetch_add(1, Ordering::Relaxed);
            }
            pending.insert(id, eviction.clone());
        }
        Ok(Arc::new(ConnectionGuard {
            _global: Some(permit),
            unauthenticated: Mutex::new(Some(id)),
            pending: self.unauthenticated.clone(),
            eviction,
            run: Mutex::new(None),
            counts: self.per_run.clone(),
            per_run_limit: self.per_run_limit,
            refused: self.refused_per_run.clone(),
        }))
    }

    /// Counts a connection closed by one of its deadlines.
    pub fn closed(&self, why: Closed) {
        let counter = match why {
            Closed::KeepAlive => &self.closed_keep_alive,
            Closed::Auth => &self.closed_auth,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text: `airlock_client_connections_open` and
    /// `airlock_client_connections_unauthenticated` (gauges),
    /// `airlock_client_connections_refused_total{limit}` (counter; `limit` is
    /// `max_connections` or `max_connections_per_run`),
    /// `airlock_client_connections_evicted_total` (counter: unauthenticated connections
    /// closed to make room under `--max-unauthenticated-connections`) and
    /// `airlock_client_connections_timed_out_total{timeout}` (counter; `timeout` is
    /// `keep_alive_timeout` or `auth_timeout`).
    pub fn metrics(&self) -> String {
        let open = self.global_limit - self.global.available_permits();
        let unauthenticated = self
            .unauthenticated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        format!(
            "# HELP airlock_client_connections_open Open client connections of the proxy listener.\n\
             # TYPE airlock_client_connections_open gauge\n\
             airlock_client_connections_open {open}\n\
             # HELP airlock_client_connections_refused_total Connections (or their requests) refused by a connection cap.\n\
             # TYPE airlock_client_connections_refused_total counter\n\
             airlock_client_connections_refused_total{{limit=\"max_connections\"}} {}\n\
             airlock_client_connections_refused_total{{limit=\"max_connections_per_run\"}} {}\n\
             # HELP airlock_client_connections_evicted_total Unauthenticated client connections closed to make room for a newer one (--max-unauthenticated-connections).\n\
             # TYPE airlock_client_connections_evicted_total counter\n\
             airlock_client_connections_evicted_total {}\n\
             # HELP airlock_client_connections_unauthenticated Open client connections that have not authenticated yet.\n\
             # TYPE airlock_client_connections_unauthenticated gauge\n\
             airlock_client_connections_unauthenticated {unauthenticated}\n\
             # HELP airlock_client_connections_timed_out_total Client connections closed by a connection deadline.\n\
             # TYPE airlock_client_connections_timed_out_total counter\n\
             airlock_client_connections_timed_out_total{{timeout=\"keep_alive_timeout\"}} {}\n\
             airlock_client_connections_timed_out_total{{timeout=\"auth_timeout\"}} {}\n",
            self.refused_global.load(Ordering::Relaxed),
            self.refused_per_run.load(Ordering::Relaxed),
            self.evicted_unauthenticated.load(Ordering::Relaxed),
            self.closed_keep_alive.load(Ordering::Relaxed),
            self.closed_auth.load(Ordering::Relaxed),
        )
    }

    /// Open connections bound to `run`.
    pub fn of_run(&self, run: &RunId) -> usize {
        self.per_run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(run)
            .copied()
            .unwrap_or(0)
    }
}

/// Held while a client connection (or the tunnel or upgraded connection it became) is
/// open; dropping the last clone releases its global slot and its run's count.
#[derive(Debug)]
pub struct ConnectionGuard {
    _global: Option<OwnedSemaphorePermit>,
    /// The id of the `--max-unauthenticated-connections` slot, held until the first
    /// `bind` (its entry in `pending` may be gone already: evicted).
    unauthenticated: Mutex<Option<u64>>,
    pending: Arc<Pending>,
    eviction: Arc<Eviction>,
    run: Mutex<Option<RunId>>,
    counts: Arc<Mutex<HashMap<RunId, usize>>>,
    per_run_limit: usize,
    refused: Arc<AtomicU64>,
}

impl ConnectionGuard {
    /// Whether a request authenticated on this connection and was within its run's cap
    /// (the connection no longer holds a `--max-unauthenticated-connections` slot).
    pub fn is_authenticated(&self) -> bool {
        self.unauthenticated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Counts this connection against `run` (once; later calls for the same run are
    /// free) and releases its `--max-unauthenticated-connections` slot. Errors with the
    /// per-run cap when the run already has that many (the connection then stays
    /// unauthenticated).
    pub fn bind(&self, run: &RunId) -> Result<(), Cap> {
        let mut bound = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if bound.as_ref() == Some(run) {
            return Ok(());
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(run.clone()).or_insert(0);
        if *count >= self.per_run_limit {
            if *count == 0 {
                counts.remove(run);
            }
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Cap::PerRun(self.per_run_limit));
        }
        *count += 1;
        if let Some(previous) = bound.replace(run.clone()) {
            release(&mut counts, &previous);
        }
        drop(counts);
        self.leave_pending();
        Ok(())
    }

    /// Whether (and when, by registering a waker) a newer connection evicted this one
    /// before it authenticated.
    pub fn eviction(&self) -> &Eviction {
        &self.eviction
    }

    fn leave_pending(&self) {
        let id = self
            .unauthenticated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(id) = id {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
    }
}

fn release(counts: &mut HashMap<RunId, usize>, run: &RunId) {
    if let Some(count) = counts.get_mut(run) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(run);
        }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.leave_pending();
        let bound = self.run.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(run) = bound {
            release(
                &mut self.counts.lock().unwrap_or_else(|e| e.into_inner()),
                &run,
            );
        }
    }
}

/// What a splice moved, and how it ended.
#[derive(Debug, Default)]
pub struct Spliced {
    /// Bytes from the client to the origin.
    pub up: u64,
    /// Bytes from the origin to the client.
    pub down: u64,
    /// Closed because no byte moved for the idle timeout.
    pub idle: bool,
    /// The I/O error that ended it, if any.
    pub error: Option<std::io::Error>,
}

/// Copies bytes both ways between `client` and `origin` until either side closes, an I/O
/// error, or `idle` passes with no byte read or written on either side; the streams are
/// then dropped by the caller, which closes both.
pub async fn splice<A, B>(client: A, origin: B, idle: Duration) -> Spliced
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = keepalive::Activity::new();
    let up = Arc::new(AtomicU64::new(0));
    let down = Arc::new(AtomicU64::new(0));
    let mut client = activity.io_counting(client, up.clone());
    let mut origin = activity.io_counting(origin, down.clone());
    let copy = tokio::io::copy_bidirectional(&mut client, &mut origin);
    let watchdog = async {
        loop {
            let deadline = activity.last() + idle;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    let (idle_hit, error) = tokio::select! {
        copied = copy => (false, copied.err()),
        () = watchdog => (true, None),
    };
    Spliced {
        up: up.load(Ordering::Relaxed),
        down: down.load(Ordering::Relaxed),
        idle: idle_hit,
        error,
    }
}

impl From<Cap> for crate::respond::ProxyError {
    fn from(cap: Cap) -> Self {
        match cap {
            Cap::Global(limit) => Self::TooManyConnections {
                limit_name: "--max-connections",
                limit,
            },
            Cap::PerRun(limit) => Self::TooManyConnections {
                limit_name: "--max-connections-per-run",
                limit,
            },
        }
    }
}

/// File descriptors one client connection may hold: its own socket and one to the origin.
pub const FDS_PER_CONNECTION: u64 = 2;

/// File descriptors kept for everything else: listeners, the ledger's files (sled's, and
/// the read log's: at most 32 open runs' files for reads and 32 for their analyses,
/// `ledger/src/sled_store/read_log.rs`), the admin API, logs.
pub const FDS_RESERVED: u64 = 128;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (as Go's runtime does at start, since
/// the default soft limit of 1024 is far below what a proxy needs) and warns when
/// `--max-connections` could still run past it: each client connection can hold
/// [`FDS_PER_CONNECTION`] descriptors, plus [`FDS_RESERVED`]. Returns the soft limit in
/// force afterwards, or `None` where it cannot be read.
pub fn raise_fd_limit(max_connections: usize) -> Option<u64> {
    #[cfg(unix)]
    {
        let limit = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(limit) => limit,
            Err(error) => {
                tracing::warn!(error = %error, "cannot raise the open-file limit (RLIMIT_NOFILE)");
                rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?.0
            }
        };
        let needed = fds_needed(max_connections);
        if needed > limit {
            tracing::warn!(
                open_file_limit = limit,
                max_connections,
                needed,
                per_connection = FDS_PER_CONNECTION,
                reserved = FDS_RESERVED,
                "--max-connections could need more file descriptors than the open-file limit \
                 allows (per_connection a connection plus reserved for listeners and the ledger): past it accepts and origin dials fail; \
                 raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower \
                 --max-connections"
            );
        } else {
            tracing::debug!(open_file_limit = limit, "open-file limit");
        }
        Some(limit)
    }
    #[cfg(not(unix))]
    {
        let _ = max_connections;
        None
    }
}

/// Descriptors `max_connections` client connections could need at most.
pub fn fds_needed(max_connections: usize) -> u64 {
    (max_connections as u64)
        .saturating_mul(FDS_PER_CONNECTION)
        .saturating_add(FDS_RESERVED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fd_limit_is_raised_to_the_hard_limit() {
        let raised = raise_fd_limit(1).expect("RLIMIT_NOFILE is readable");
        let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
        assert_eq!(raised, soft);
        assert!(soft == hard || soft >= 1 << 20, "soft {soft}, hard {hard}");
        assert_eq!(fds_needed(4096), 8320);
    }

    #[test]
    fn the_oldest_unauthenticated_connection_is_evicted_and_bind_frees_its_slot() {
        let connections = Connections::new(10, 10, 2);
        let first = connections.open().expect("a slot");
        let second = connections.open().expect("a slot");
        assert!(!first.is_authenticated());
        let third = connections
            .open()
            .expect("past the cap: the oldest gives way");
        assert!(first.eviction().is_evicted(), "the oldest was evicted");
        assert!(!second.eviction().is_evicted() && !third.eviction().is_evicted());
        assert!(connections
            .metrics()
            .contains("airlock_client_connections_evicted_total 1\n"));
        let run = RunId("run_a".to_owned());
        second.bind(&run).expect("within the run's cap");
        assert!(second.is_authenticated());
        let fourth = connections.open().expect("bind freed a slot");
        assert!(!third.eviction().is_evicted(), "room without evicting");
        assert!(connections
            .metrics()
            .contains("airlock_client_connections_unauthenticated 2\n"));
        drop((first, fourth));
        assert!(connections
            .metrics()
            .contains("airlock_client_connections_unauthenticated 1\n"));
        drop((second, third));
        assert_eq!(connections.of_run(&run), 0);
        assert!(connections
            .metrics()
            .contains("airlock_client_connections_unauthenticated 0\n"));
    }
}
