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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::RunId;
use airlock_net::fence::{read_hello, Hello, Kind};
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

/// How long a fence connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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
}

#[derive(Debug, Default)]
struct RunFence {
    names: names::Names,
    counts: FenceCounts,
}

/// The fence's state: per run, the names its DNS gave and the counts. Built by the
/// composition root beside the [`DataPlane`] and handed to [`serve`].
#[derive(Debug, Default)]
pub struct Fence {
    runs: Mutex<HashMap<RunId, RunFence>>,
    sources: Mutex<sources::Sources>,
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
                warn!(error = %error, "fence socket: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (shared, fence) = (shared.clone(), fence.clone());
        tokio::spawn(serve_one(shared, fence, stream).instrument(info_span!("fence")));
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve_one(shared: Arc<DataPlane>, fence: Arc<Fence>, mut stream: UnixStream) {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut stream)).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(error)) => {
            debug!(error = %error, "fence socket: no valid hello");
            return;
        }
        Err(_) => {
            debug!("fence socket: no hello in time");
            return;
        }
    };
    let Some(run) = authenticate(&shared, &hello).await else {
        warn!(run.id = %hello.run, "fence socket: the hello names no open run, or the token is wrong");
        return;
    };
    match hello.kind {
        Kind::Proxy => {
            fence.count(&run, |c| c.proxy_connections += 1);
            let guard = match shared.connections.open() {
                Ok(guard) => guard,
                Err(cap) => return crate::listener::refuse_connection(stream, cap).await,
            };
            crate::listener::serve_connection(shared, stream, guard, Some(run)).await;
        }
        Kind::Dns => dns::serve(&shared, &fence, &run, stream).await,
        Kind::Transparent { dst } => {
            transparent::serve(shared, fence, run, dst, stream).await;
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
