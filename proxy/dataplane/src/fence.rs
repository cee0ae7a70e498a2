//! The fence socket: where the relay inside a fenced run (`airlock run --network
//! isolated`) brings the run's connections and DNS queries (docs/containment.md).
//!
//! A connection opens with a [`airlock_net::fence::Hello`] naming the run and its
//! token, so a fenced client needs no proxy credentials: its run is the fence's. Then:
//! - `proxy` connections are served exactly as the proxy listener serves a client
//!   connection, already bound to the run;
//! - `transparent` connections go through [`transparent`]: the original destination is
//!   mapped back to the name airlock's DNS gave it, and from there the same policy,
//!   interception, staging, lineage and journal apply as for a `CONNECT`;
//! - `dns` connections are answered by [`dns`] from the run's pool of names.
//!
//! One run cannot starve the others (issue 35, item 4; docs/containment.md, "Limits"):
//! every fence connection holds a `--max-connections` slot from accept (none free: closed
//! at once) and an unauthenticated slot until its hello (`--max-unauthenticated-connections`:
//! the oldest without a hello is closed to make room), must send its hello within
//! [`hello_timeout`], and counts against its run's `--max-connections-per-run` from the
//! hello until it ends (past it: closed, with a 429 for a proxy or captured connection). A
//! DNS connection with no query for [`dns_idle_timeout`] is closed, and a run's DNS
//! queries past `--dns-queries-per-second` are not answered ([`Fence::admit_dns`]).
//! Refusals are counted per run ([`FenceCounts`]) and for `/metrics` ([`Fence::metrics`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::RunId;
use airlock_net::fence::{read_hello, Hello, Kind};
use airlock_net::limits::ConnectionGuard;
use serde::Serialize;
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, info_span, warn, Instrument};

use crate::DataPlane;

pub mod dns;
mod names;
pub mod operator;
mod sources;
pub mod transparent;

pub use names::MAX_NAMES_PER_RUN;
pub use sources::parse_source;

/// The longest a fence connection may take to send its hello: 5 s (shorter when
/// `--auth-timeout` is).
pub const MAX_HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a DNS connection (over the fence socket or `--dns` TCP) may go without a
/// query: 10 s (shorter when `--keep-alive-timeout` is). Resolvers open a TCP connection
/// for a truncated answer and close it at once (RFC 7766 §6.2.3 suggests seconds).
pub const MAX_DNS_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a fence connection may take to send its hello: `--auth-timeout` (the hello is
/// its authentication), at most [`MAX_HELLO_TIMEOUT`].
pub fn hello_timeout(limits: &crate::Limits) -> Duration {
    limits.auth_timeout.min(MAX_HELLO_TIMEOUT)
}

/// How long a DNS connection may go without a query: `--keep-alive-timeout`, at most
/// [`MAX_DNS_IDLE_TIMEOUT`].
pub fn dns_idle_timeout(limits: &crate::Limits) -> Duration {
    limits.keep_alive_timeout.min(MAX_DNS_IDLE_TIMEOUT)
}

/// What the fence of one run captured and refused, as counted by airlock (not by the
/// relay, which the fenced command could tamper with).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FenceCounts {
    /// Connections of the proxy variable carried over the fence.
    pub proxy_connections: u64,
    /// Captured connections airlock took onto the transparent path (intercepted or
    /// tunneled), refusals not included.
    pub connections_captured: u64,
    /// Captured connections refused: an address airlock's DNS never gave, or a host the
    /// policy denies outright.
    pub connections_refused: u64,
    /// DNS queries answered with a pool address (or no data, for AAAA).
    pub dns_answered: u64,
    /// DNS queries refused: NXDOMAIN for a name no rule could allow and REFUSED for a
    /// type, class or name shape airlock does not answer (each journaled as a denial);
    /// NOTIMP for a message that is not one standard query (counted, not journaled).
    pub dns_refused: u64,
    /// Connections of the run (proxy, captured, DNS) closed because the run already held
    /// `--max-connections-per-run` connections.
    pub connections_limited: u64,
    /// DNS connections of the run closed after [`dns_idle_timeout`] without a query.
    pub dns_idle_closed: u64,
    /// DNS queries of the run not answered: past `--dns-queries-per-second`.
    pub dns_rate_limited: u64,
}

#[derive(Debug, Default)]
struct RunFence {
    names: names::Names,
    counts: FenceCounts,
    dns_bucket: Option<Bucket>,
}

/// A token bucket: `tokens` left at `at`, refilled at the rate, up to twice the rate.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
}

/// What the fence refused and closed in all runs together, for `/metrics`.
#[derive(Debug, Default)]
struct Refusals {
    max_connections: AtomicU64,
    max_connections_per_run: AtomicU64,
    hello_timeout: AtomicU64,
    hello_evicted: AtomicU64,
    dns_idle: AtomicU64,
    dns_rate: AtomicU64,
}

/// The fence's state: per run, the names its DNS gave and the counts. Built by the
/// composition root beside the [`DataPlane`] and handed to [`serve`].
#[derive(Debug, Default)]
pub struct Fence {
    runs: Mutex<HashMap<RunId, RunFence>>,
    sources: Mutex<sources::Sources>,
    refusals: Refusals,
}

impl Fence {
    /// An empty fence.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// What the fence of `run` captured and refused so far (all zero for a run that
    /// never connected through a fence).
    pub fn counts(&self, run: &RunId) -> FenceCounts {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.get(run).map(|fence| fence.counts).unwrap_or_default()
    }

    /// Forgets the names and counts of runs that are closed (`closed` says which).
    fn prune(&self, closed: impl Fn(&RunId) -> bool) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.retain(|run, _| !closed(run));
    }

    /// Binds `source` to `run`, so connections and DNS queries from it (on `airlock
    /// serve --transparent` and `--dns`) belong to the run. `open` tells whether a run is
    /// still open; sources of closed runs are free again.
    ///
    /// # Errors
    /// The open run whose source overlaps `source`.
    pub fn bind_source(
        &self,
        source: ipnet::IpNet,
        run: RunId,
        open: impl Fn(&RunId) -> bool,
    ) -> Result<(), RunId> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bind(source, run, open)
    }

    /// The open run whose source overlaps `source`, if any (`open` as for
    /// [`Fence::bind_source`]).
    pub fn source_holder(
        &self,
        source: ipnet::IpNet,
        open: impl Fn(&RunId) -> bool,
    ) -> Option<RunId> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .holder(source, open)
    }

    /// The run bound to the source holding `ip`, if any.
    pub fn run_for_source(&self, ip: std::net::IpAddr) -> Option<RunId> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .run_for(ip)
    }

    fn with_run<T>(&self, run: &RunId, f: impl FnOnce(&mut RunFence) -> T) -> T {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        f(runs.entry(run.clone()).or_default())
    }

    fn count(&self, run: &RunId, f: impl FnOnce(&mut FenceCounts)) {
        self.with_run(run, |fence| f(&mut fence.counts));
    }

    /// Whether one more DNS query of `run` may be answered under a rate of
    /// `per_second` queries a second (a token bucket holding up to two seconds' worth, full
    /// at the run's first query; 0: no limit). A query refused is counted
    /// (`dns_rate_limited`, and for `/metrics`).
    pub fn admit_dns(&self, run: &RunId, per_second: u32) -> bool {
        if per_second == 0 {
            return true;
        }
        let rate = f64::from(per_second);
        let now = std::time::Instant::now();
        let admitted = self.with_run(run, |fence| {
            let bucket = fence.dns_bucket.get_or_insert(Bucket {
                tokens: 2.0 * rate,
                at: now,
            });
            let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * rate;
            bucket.tokens = (bucket.tokens + refill).min(2.0 * rate);
            bucket.at = now;
            if bucket.tokens >= 1.0 {
                bucket.tokens -= 1.0;
                true
            } else {
                fence.counts.dns_rate_limited += 1;
                false
            }
        });
        if !admitted {
            self.refusals.dns_rate.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Counts a connection of `run` refused by `--max-connections-per-run`.
    pub(crate) fn limited(&self, run: &RunId) {
        self.count(run, |c| c.connections_limited += 1);
        self.refusals
            .max_connections_per_run
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a fence connection refused at accept by `--max-connections`.
    pub(crate) fn refused_global(&self) {
        self.refusals
            .max_connections
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a DNS connection of `run` closed for sitting idle.
    pub(crate) fn dns_idle(&self, run: &RunId) {
        self.count(run, |c| c.dns_idle_closed += 1);
        self.refusals.dns_idle.fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text: `airlock_fence_connections_refused_total{limit}` (counter;
    /// `limit` is `max_connections` or `max_connections_per_run`: connections on the
    /// fence socket, `--transparent` and `--dns` TCP closed by a cap, also counted in
    /// `airlock_client_connections_refused_total`),
    /// `airlock_fence_connections_closed_total{reason}` (counter; `hello_timeout`: no
    /// hello in time, `hello_evicted`: closed without a hello to make room for a newer
    /// connection, `dns_idle`: a DNS connection without a query for its idle timeout) and
    /// `airlock_fence_dns_rate_limited_total` (counter: queries past
    /// `--dns-queries-per-second`, not answered).
    pub fn metrics(&self) -> String {
        let r = &self.refusals;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "# HELP airlock_fence_connections_refused_total Fence, --transparent and --dns TCP connections closed by a connection cap.\n\
             # TYPE airlock_fence_connections_refused_total counter\n\
             airlock_fence_connections_refused_total{{limit=\"max_connections\"}} {}\n\
             airlock_fence_connections_refused_total{{limit=\"max_connections_per_run\"}} {}\n\
             # HELP airlock_fence_connections_closed_total Fence connections closed by a deadline: no hello in time, no hello before a newer connection needed the slot, or a DNS connection idle.\n\
             # TYPE airlock_fence_connections_closed_total counter\n\
             airlock_fence_connections_closed_total{{reason=\"hello_timeout\"}} {}\n\
             airlock_fence_connections_closed_total{{reason=\"hello_evicted\"}} {}\n\
             airlock_fence_connections_closed_total{{reason=\"dns_idle\"}} {}\n\
             # HELP airlock_fence_dns_rate_limited_total DNS queries not answered: the run was past --dns-queries-per-second.\n\
             # TYPE airlock_fence_dns_rate_limited_total counter\n\
             airlock_fence_dns_rate_limited_total {}\n",
            get(&r.max_connections),
            get(&r.max_connections_per_run),
            get(&r.hello_timeout),
            get(&r.hello_evicted),
            get(&r.dns_idle),
            get(&r.dns_rate),
        )
    }
}

/// How often the names and counts of closed runs are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Runs the fence socket's accept loop until the task is dropped. Once a minute it
/// forgets the names and counts of runs that closed (`airlock run` reads a run's counts
/// before it decides the run).
pub async fn serve(shared: Arc<DataPlane>, fence: Arc<Fence>, listener: UnixListener) {
    let pruning = {
        let (shared, fence) = (shared.clone(), fence.clone());
        async move {
            let mut every = tokio::time::interval(PRUNE_EVERY);
            loop {
                every.tick().await;
                fence.prune(|run| shared.is_closed(run));
            }
        }
    };
    let _pruning = AbortOnDrop(tokio::spawn(pruning));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors (EMFILE) among them: wait rather than spin.
                warn!(error = %error, "fence socket: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A slot of --max-connections from accept, before anything is read: none free,
        // the connection is closed at once (its run is not known yet).
        let guard = match shared.connections.open() {
            Ok(guard) => guard,
            Err(_) => {
                fence.refused_global();
                debug!("fence socket: connection closed at --max-connections");
                continue;
            }
        };
        let (shared, fence) = (shared.clone(), fence.clone());
        tokio::spawn(serve_one(shared, fence, stream, guard).instrument(info_span!("fence")));
    }
}

/// Resolves when a newer connection took `guard`'s unauthenticated slot.
async fn evicted(guard: &ConnectionGuard) {
    std::future::poll_fn(|cx| {
        guard.eviction().register(cx.waker());
        match guard.eviction().is_evicted() {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await;
}

/// Reads the hello within [`hello_timeout`], unless a newer connection evicts this one
/// from its unauthenticated slot first (each counted).
async fn hello_of(
    shared: &DataPlane,
    fence: &Fence,
    stream: &mut UnixStream,
    guard: &ConnectionGuard,
) -> Option<Hello> {
    let timeout = hello_timeout(&shared.limits);
    tokio::select! {
        read = tokio::time::timeout(timeout, read_hello(stream)) => match read {
            Ok(Ok(hello)) => Some(hello),
            Ok(Err(error)) => {
                debug!(error = %error, "fence socket: no valid hello");
                None
            }
            Err(_) => {
                debug!(timeout_ms = timeout.as_millis() as u64, "fence socket: no hello in time; closed");
                shared.connections.closed(airlock_net::limits::Closed::Auth);
                fence.refusals.hello_timeout.fetch_add(1, Ordering::Relaxed);
                None
            }
        },
        () = evicted(guard) => {
            debug!("fence socket: a newer connection took this one's slot before its hello; closed");
            fence.refusals.hello_evicted.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve_one(
    shared: Arc<DataPlane>,
    fence: Arc<Fence>,
    mut stream: UnixStream,
    guard: Arc<ConnectionGuard>,
) {
    let Some(hello) = hello_of(&shared, &fence, &mut stream, &guard).await else {
        return;
    };
    let Some(run) = authenticate(&shared, &hello).await else {
        warn!(run.id = %hello.run, "fence socket: the hello names no open run, or the token is wrong");
        return;
    };
    // From the hello on, the connection counts against its run's cap, whatever it carries.
    if let Err(cap) = guard.bind(&run) {
        fence.limited(&run);
        debug!(run.id = %run, "fence connection refused: the run is at --max-connections-per-run");
        return match hello.kind {
            Kind::Dns => {}
            Kind::Proxy | Kind::Transparent { .. } => {
                crate::listener::refuse_connection(stream, cap).await
            }
        };
    }
    match hello.kind {
        Kind::Proxy => {
            fence.count(&run, |c| c.proxy_connections += 1);
            crate::listener::serve_connection(shared, stream, guard, Some(run)).await;
        }
        Kind::Dns => dns::serve(&shared, &fence, &run, stream).await,
        Kind::Transparent { dst } => {
            transparent::serve(shared, fence, run, dst, stream, guard).await;
        }
    }
}

async fn authenticate(shared: &Arc<DataPlane>, hello: &Hello) -> Option<RunId> {
    let (ledger, tokens) = (shared.ledger.clone(), shared.run_tokens.clone());
    let (id, token) = (hello.run.clone(), hello.token.clone());
    let run = tokio::task::spawn_blocking(move || ledger.authenticate(&tokens, &id, &token))
        .await
        .ok()?
        .ok()??;
    (!shared.is_closed(&run.id)).then_some(run.id)
}
