//! [`DataPlane`]: the data plane's one handle, with private fields. The composition root
//! builds it from [`DataPlaneInputs`]; the listener and the request path hold it; the
//! control plane reaches what it needs of it through its methods.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};

use std::sync::mpsc::Receiver;

use airlock_ledger::{Change, IssuedPlaceholder, RunId, RunTokens, Store};
use airlock_net::ca::CertificateAuthority;
use airlock_net::dial::Dialer;
use airlock_net::limits::Connections;
use airlock_net::upstream::UpstreamClient;

use crate::enforce::Enforcer;
use crate::lineage::LineageWorker;
use crate::metrics::Metrics;
use crate::policy_store::PolicyStore;

/// Limits applied to proxied requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest stageable body, in bytes.
    pub stage_body_bytes: u64,
    /// Timeout of one release request.
    pub release_timeout: std::time::Duration,
    /// How long a client may take to send a request head.
    pub header_read_timeout: std::time::Duration,
    /// Spliced and upgraded connections idle (no byte either way) this long are closed.
    pub idle_timeout: std::time::Duration,
    /// HTTP client connections with no request in flight and no byte either way this long
    /// are closed gracefully ([`airlock_net::limits::keepalive`]).
    pub keep_alive_timeout: std::time::Duration,
    /// Proxy-listener connections not authenticated this long after accept are closed.
    pub auth_timeout: std::time::Duration,
    /// How long, in all, a client may take to send a body airlock reads whole (besides
    /// the 30 s pause limit, [`crate::request::BODY_IDLE_TIMEOUT`]); past it 408
    /// `body_timeout` with `limit_name: "body_read_timeout"`
    /// [default: [`crate::request::DEFAULT_BODY_READ_TIMEOUT`]].
    pub body_read_timeout: std::time::Duration,
    /// DNS queries one run may make a second, over the fence socket and `--dns` (a token
    /// bucket holding two seconds' worth; 0: no limit); past it a query is not answered
    /// ([`crate::fence::Fence::admit_dns`]) [default: [`DEFAULT_DNS_QUERIES_PER_SECOND`]].
    pub dns_queries_per_second: u32,
}

/// Default of `--dns-queries-per-second`: 500 a second per run, in bursts of up to 1,000.
/// A resolver asks two queries (A and AAAA) per name a client connects to, so this is far
/// above what a build or an agent needs, and far below what a flood that would crowd out
/// other runs sends.
pub const DEFAULT_DNS_QUERIES_PER_SECOND: u32 = 500;

/// What the composition root hands the data plane: the shared store and policy, the CA,
/// the upstream clients and the dialer built on one TLS configuration, the limits, and the
/// runs already closed when the server started.
pub struct DataPlaneInputs {
    /// The durable ledger.
    pub ledger: Arc<dyn Store>,
    /// The key run tokens are derived from and checked with (`DATA/run-token.key`).
    pub run_tokens: RunTokens,
    /// The policy in force (hot-reloadable).
    pub policy: Arc<PolicyStore>,
    /// The CA and leaf cache.
    pub ca: Arc<CertificateAuthority>,
    /// The pooled upstream client (h2 or HTTP/1.1 by ALPN).
    pub upstream: UpstreamClient,
    /// An upstream client that offers only HTTP/1.1, for protocol upgrades (WebSocket).
    pub upstream_http1: UpstreamClient,
    /// The SSRF-checked dialer, for `tunnel` rules.
    pub dialer: Dialer,
    /// Limits.
    pub limits: Limits,
    /// Where the proxy listener listens.
    pub proxy_addr: SocketAddr,
    /// Open client connections of the proxy listener, globally and per run.
    pub connections: Connections,
    /// Runs that accept no more requests at start (committing, committed or aborted).
    pub closed_runs: HashSet<RunId>,
    /// The ledger's changes (`Store::subscribe`), subscribed before `closed_runs` was
    /// read, so that a run closed by another instance in between is not missed.
    pub changes: Receiver<Change>,
    /// Where runs with reads in flight are marked on disk ([`crate::inflight`]); `None`
    /// marks nothing (a crash then hides a cut-off read).
    pub reads_in_flight: Option<Arc<crate::inflight::InFlightReads>>,
}

/// The data plane: the proxy listener's state and the request path's services.
pub struct DataPlane {
    pub(crate) ledger: Arc<dyn Store>,
    pub(crate) run_tokens: RunTokens,
    pub(crate) policy: Arc<PolicyStore>,
    pub(crate) ca: Arc<CertificateAuthority>,
    pub(crate) upstream: UpstreamClient,
    pub(crate) upstream_http1: UpstreamClient,
    pub(crate) limits: Limits,
    pub(crate) proxy_addr: SocketAddr,
    pub(crate) lineage: LineageWorker,
    /// Proxied requests being handled now (until their response has been sent).
    pub(crate) in_flight: AtomicUsize,
    pub(crate) metrics: Metrics,
    /// Placeholders issued per run, cached for the per-request search. On a store with
    /// one writer, loads and invalidations both happen under this lock, so a load can
    /// never put back a list older than an invalidation; on a shared store each request
    /// checks its run's list against the store's count instead
    /// (`handle/inspect.rs`, `issued_placeholders`).
    pub(crate) placeholders: Mutex<HashMap<RunId, Arc<Vec<IssuedPlaceholder>>>>,
    /// Runs that accept no more requests, reads included: a commit was decided or the run
    /// was aborted. (A sealed run still passes reads; it only refuses new effects.)
    closed_runs: RwLock<HashSet<RunId>>,
    pub(crate) dialer: Dialer,
    /// Per-run state of rule obligations: request windows, upload totals, run profiles.
    pub(crate) enforce: Enforcer,
    pub(crate) connections: Connections,
    /// The control plane's answer to `review = "auto"`, installed once after both planes
    /// are built.
    auto_review: std::sync::OnceLock<Arc<dyn crate::enforce::AutoApprove>>,
    /// Labelled reads whose responses are still streaming, per run (flow rules).
    pub(crate) streaming: crate::flows::Streaming,
    /// What passed traffic told adapters about sessions with origins (MCP `initialize`).
    pub(crate) sessions: Arc<crate::sessions::Sessions>,
    /// The analysed reads flows guard, per run, for the pass-path check.
    pub(crate) pass_index: Arc<crate::flows::pass::PassIndex>,
    /// Runs with reads in flight, marked on disk.
    pub(crate) reads_in_flight: Option<Arc<crate::inflight::InFlightReads>>,
}

impl DataPlane {
    /// Builds the data plane and starts its lineage worker (a Tokio runtime must be
    /// running).
    pub fn new(inputs: DataPlaneInputs) -> Arc<Self> {
        let changes = inputs.changes;
        let plane = Arc::new(Self {
            lineage: LineageWorker::start(inputs.ledger.clone()),
            ledger: inputs.ledger,
            run_tokens: inputs.run_tokens,
            policy: inputs.policy,
            ca: inputs.ca,
            upstream: inputs.upstream,
            upstream_http1: inputs.upstream_http1,
            limits: inputs.limits,
            proxy_addr: inputs.proxy_addr,
            in_flight: AtomicUsize::new(0),
            metrics: Metrics::default(),
            placeholders: Mutex::default(),
            closed_runs: RwLock::new(inputs.closed_runs),
            dialer: inputs.dialer,
            enforce: Enforcer::default(),
            connections: inputs.connections,
            auto_review: std::sync::OnceLock::new(),
            streaming: crate::flows::Streaming::default(),
            sessions: Arc::default(),
            pass_index: Arc::default(),
            reads_in_flight: inputs.reads_in_flight,
        });
        follow_changes(Arc::downgrade(&plane), changes);
        plane
    }

    /// How many reads of `run` passed by a rule with `labels` are still streaming their
    /// responses: their data reached the agent but is not analysed yet.
    pub fn streaming_labelled_reads(&self, run: &RunId) -> usize {
        self.streaming.count(run)
    }

    /// Resolves once the lineage worker has handled every read and effect queued before
    /// this call, so their analyses are stored; at most `timeout`. Returns whether it did.
    pub async fn lineage_settled(&self, timeout: std::time::Duration) -> bool {
        let marker = airlock_ledger::EffectId::generate();
        let done = self.lineage.analysed(&marker);
        self.lineage
            .submit(crate::lineage::Job::Effect { effect: marker });
        tokio::time::timeout(timeout, done).await.is_ok()
    }

    /// Queues for analysis every undecided effect (staged or approved) of a run that is not
    /// final and has no stored lineage: its analysis was lost when the process stopped
    /// before the ledger wrote it (an effect's lineage is not synced by itself), and
    /// without this the review would show it "not analysed yet" until the commit's final
    /// pass. Run once at start, off the request path. Returns how many were queued.
    ///
    /// Errors: storage faults.
    pub fn analyse_unanalysed(&self) -> Result<usize, airlock_ledger::LedgerError> {
        let mut queued = 0;
        for run in self.ledger.runs()? {
            if run.state.is_final() {
                continue;
            }
            for effect in self.ledger.effects(&run.id)? {
                let undecided = matches!(
                    effect.state,
                    airlock_ledger::EffectState::Staged | airlock_ledger::EffectState::Approved
                );
                if undecided && self.ledger.effect_lineage(&effect.id)?.is_none() {
                    self.lineage
                        .submit(crate::lineage::Job::Effect { effect: effect.id });
                    queued += 1;
                }
            }
        }
        Ok(queued)
    }

    /// Forgets the cached placeholders of `run` (the next request reloads them).
    pub(crate) fn forget_placeholders(&self, run: &RunId) {
        self.placeholders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run);
    }

    /// Whether `run` was closed by a commit decision or an abort.
    pub fn is_closed(&self, run: &RunId) -> bool {
        self.closed_runs
            .read()
            .map(|set| set.contains(run))
            .unwrap_or(true)
    }

    /// Closes `run` to all further requests.
    pub fn close_run(&self, run: &RunId) {
        if let Ok(mut set) = self.closed_runs.write() {
            set.insert(run.clone());
        }
        self.sessions.forget(run);
        self.pass_index.forget(run);
    }

    /// The durable ledger.
    pub fn ledger(&self) -> &Arc<dyn Store> {
        &self.ledger
    }

    /// The key run tokens are derived from: [`RunTokens::token_for`] gives a run's
    /// token back to its creator.
    pub fn run_tokens(&self) -> &RunTokens {
        &self.run_tokens
    }

    /// The policy in force (take one snapshot per decision).
    pub fn policy(&self) -> &Arc<PolicyStore> {
        &self.policy
    }

    /// The CA and its leaf cache.
    pub fn ca(&self) -> &Arc<CertificateAuthority> {
        &self.ca
    }

    /// The pooled upstream client, which the commit authority also releases through.
    pub fn upstream(&self) -> &UpstreamClient {
        &self.upstream
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Where the proxy listener listens.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy_addr
    }

    /// Proxied requests being handled now (graceful shutdown waits for zero).
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Prometheus text of the lineage worker: its queue depth and lag.
    pub fn lineage_metrics(&self) -> String {
        self.lineage.stats().render()
    }

    /// The request counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Open client connections of the proxy listener.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Installs the control plane's answer to `review = "auto"` (once; a second call is
    /// ignored).
    pub fn set_auto_review(&self, review: Arc<dyn crate::enforce::AutoApprove>) {
        let _ = self.auto_review.set(review);
    }

    /// The control plane's answer to `review = "auto"`, once installed.
    pub(crate) fn auto_review(&self) -> Option<Arc<dyn crate::enforce::AutoApprove>> {
        self.auto_review.get().cloned()
    }
}

/// Keeps the caches that assume one writer in step with the store's change notifications
/// ([`airlock_ledger::Change`]): a run closed by any writer (this process, or another one
/// on a shared store) refuses requests here too, and a run's issued placeholders are
/// reloaded after any writer issued more. Runs on a thread of its own until the plane is
/// gone or the store stops sending.
fn follow_changes(plane: std::sync::Weak<DataPlane>, changes: Receiver<Change>) {
    let spawned = std::thread::Builder::new()
        .name("airlock-changes".into())
        .spawn(move || {
            for change in changes {
                let Some(plane) = plane.upgrade() else { break };
                match change {
                    Change::RunClosed(run) => plane.close_run(&run),
                    Change::PlaceholdersIssued(run) => plane.forget_placeholders(&run),
                    _ => {}
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(error = %error, "cannot follow the ledger's change notifications");
    }
}
