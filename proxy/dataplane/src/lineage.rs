//! The lineage worker: analyses read responses and staged effect bodies off the request
//! path (fingerprints never block or fail a request) and records read -> effect edges.
//! Placeholder detection, which release depends on, happens at staging in `handle`.

use std::sync::mpsc;
use std::sync::Arc;

use airlock_ledger::fingerprint::{analyze, credential_like};
use airlock_ledger::{EdgeKind, EffectId, Notable, Read, RunId, Store};
use bytes::Bytes;
use tracing::{debug, warn};

mod effect;
mod placeholders;
pub mod prepared;

pub(crate) use effect::request_side;
use effect::run_job;
pub use placeholders::{
    encoded_forms, find_placeholders, substitute, substitute_whole, MIN_SHA_PREFIX,
};

/// How much of a read's response body is kept for analysis.
pub const READ_CAPTURE_BYTES: usize = 4 * 1024 * 1024;

/// Response headers whose values are routine (protocol, caching, security policy) and
/// never lineage.
const ROUTINE_HEADERS: [&str; 36] = [
    "referrer-policy",
    "x-robots-tag",
    "content-security-policy",
    "content-security-policy-report-only",
    "x-frame-options",
    "x-content-type-options",
    "x-xss-protection",
    "permissions-policy",
    "cross-origin-opener-policy",
    "cross-origin-embedder-policy",
    "cross-origin-resource-policy",
    "report-to",
    "nel",
    "server-timing",
    "date",
    "content-type",
    "content-length",
    "server",
    "connection",
    "cache-control",
    "vary",
    "expires",
    "last-modified",
    "accept-ranges",
    "keep-alive",
    "transfer-encoding",
    "content-encoding",
    "age",
    "via",
    "strict-transport-security",
    "alt-svc",
    "pragma",
    "content-language",
    "access-control-allow-origin",
    "access-control-allow-headers",
    "access-control-allow-methods",
];

/// Work for the lineage worker.
pub enum Job {
    /// A read's response finished relaying.
    Read {
        /// The read, not yet journaled (the worker journals it, off the request path).
        read: Box<Read>,
        /// The first bytes of the response body.
        body: Vec<Bytes>,
        /// The response headers as relayed (the worker reads `Content-Encoding`,
        /// `Content-Type` and the values that may be lineage from them, off the request
        /// path).
        headers: http::HeaderMap,
        /// The read's `response_digest` is still to be taken from `body`, which holds the
        /// whole response body (the request path deferred the SHA-256).
        digest_pending: bool,
    },
    /// An effect was staged.
    Effect {
        /// The effect.
        effect: EffectId,
    },
}

/// Most read analyses waiting at once; past it new reads are journaled as not analysed
/// (lineage says so) rather than letting memory grow under load.
pub const READ_QUEUE: usize = 256;
/// Most captured body bytes waiting for analysis at once.
pub const READ_QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// How long the worker naps after a busy turn before draining its queues again: under
/// load reads accumulate meanwhile (at most [`READ_QUEUE`]) and are handled in one turn.
const BUSY_NAP: std::time::Duration = std::time::Duration::from_millis(2);
/// Bodies shorter than this can make no content edge: only their headers are analysed.
const MIN_ANALYSED_BODY: usize = 24;

/// Handle to the worker thread. Reads wait in a bounded queue; effects are never dropped,
/// and before an effect is analysed every read queued before it is analysed, so an effect
/// is always compared with the reads that finished before it was staged.
#[derive(Clone)]
pub struct LineageWorker {
    /// Queue depth and lag, for `/metrics`.
    stats: Arc<LineageStats>,
    /// Who waits for an effect's analysis ([`LineageWorker::analysed`]).
    waiters: Arc<std::sync::Mutex<Waiters>>,
    queued_bytes: Arc<std::sync::atomic::AtomicUsize>,
    reads: mpsc::SyncSender<Queued>,
    effects: mpsc::Sender<Queued>,
    ledger: Arc<dyn Store>,
}

/// A job and when it was queued.
type Queued = (std::time::Instant, Job);

/// The lineage worker's figures: how many jobs wait, and how long each waited and took.
#[derive(Debug, Default)]
pub struct LineageStats {
    /// Jobs (reads and effects) queued and not yet handled.
    depth: std::sync::atomic::AtomicUsize,
    /// Seconds from a job being queued to its analysis being stored.
    lag: crate::metrics::Histogram,
}

impl LineageStats {
    /// Prometheus text: `airlock_lineage_queue_depth` (gauge) and
    /// `airlock_lineage_lag_seconds` (histogram).
    pub fn render(&self) -> String {
        let mut out = format!(
            "# HELP airlock_lineage_queue_depth Reads and effects waiting for lineage analysis.\n\
             # TYPE airlock_lineage_queue_depth gauge\n\
             airlock_lineage_queue_depth {}\n",
            self.depth.load(std::sync::atomic::Ordering::Relaxed)
        );
        crate::metrics::histogram::render_family(
            &mut out,
            "airlock_lineage_lag_seconds",
            "Seconds from a read or effect being queued for lineage analysis to its analysis being stored.",
            &[("", &self.lag)],
        );
        out
    }

    /// A batch of jobs queued at `queued` was handled now.
    fn handled(&self, queued: &[std::time::Instant]) {
        let now = std::time::Instant::now();
        for at in queued {
            self.lag.observe(now.saturating_duration_since(*at));
        }
        self.depth
            .fetch_sub(queued.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

impl LineageWorker {
    /// Starts the worker thread over `ledger`.
    pub fn start(ledger: Arc<dyn Store>) -> Self {
        let (reads, read_rx) = mpsc::sync_channel::<Queued>(READ_QUEUE);
        let (effects, effect_rx) = mpsc::channel::<Queued>();
        let stats: Arc<LineageStats> = Arc::default();
        let worker_stats = stats.clone();
        let worker_ledger = ledger.clone();
        let queued_bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let worker_queued = queued_bytes.clone();
        let waiters: Arc<std::sync::Mutex<Waiters>> = Arc::default();
        let worker_waiters = waiters.clone();
        let spawned = std::thread::Builder::new().name("airlock-lineage".into()).spawn(move || {
            let mut seen = Seen::default();
            // Handles jobs in order; consecutive reads are journaled as one batch.
            let mut run = |jobs: Vec<Queued>| {
                let (queued, jobs): (Vec<std::time::Instant>, Vec<Job>) = jobs.into_iter().unzip();
                let mut reads = Vec::new();
                let mut done = 0;
                for job in jobs {
                    match job {
                        Job::Read { ref body, .. } => {
                            let bytes = body.iter().map(Bytes::len).sum::<usize>();
                            worker_queued.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
                            reads.push(job);
                        }
                        Job::Effect { ref effect } => {
                            let id = effect.clone();
                            let batch = std::mem::take(&mut reads);
                            let handled = batch.len() + 1;
                            run_reads(&*worker_ledger, &mut seen, batch);
                            if let Err(error) = run_job(&*worker_ledger, &mut seen, job) {
                                warn!(error = %error, "lineage analysis failed; the request itself was not affected");
                            }
                            worker_stats.handled(&queued[done..done + handled]);
                            done += handled;
                            let waiting = worker_waiters
                                .lock()
                                .map(|mut w| w.remove(&id))
                                .unwrap_or_default();
                            for waiter in waiting.into_iter().flatten() {
                                let _ = waiter.send(());
                            }
                        }
                    }
                }
                run_reads(&*worker_ledger, &mut seen, reads);
                worker_stats.handled(&queued[done..]);
            };
            // After a busy turn the worker naps briefly and then drains what arrived
            // instead of blocking on the channel: a sender then never has to wake a
            // parked thread (a futex call and a context switch per read under load), and
            // the reads of a turn are journaled together. Idle, it blocks as usual.
            let mut busy = false;
            loop {
                match effect_rx.try_recv() {
                    Ok(effect) => {
                        // Every read queued before the effect first.
                        let mut jobs: Vec<Queued> = read_rx.try_iter().take(READ_QUEUE).collect();
                        jobs.push(effect);
                        run(jobs);
                        busy = true;
                        continue;
                    }
                    Err(mpsc::TryRecvError::Disconnected) => return,
                    Err(mpsc::TryRecvError::Empty) => {}
                }
                if busy {
                    std::thread::sleep(BUSY_NAP);
                    let jobs: Vec<Queued> = read_rx.try_iter().take(READ_QUEUE).collect();
                    busy = !jobs.is_empty();
                    run(jobs);
                    continue;
                }
                match read_rx.recv_timeout(std::time::Duration::from_millis(20)) {
                    Ok(read) => {
                        let mut jobs = vec![read];
                        jobs.extend(read_rx.try_iter().take(READ_QUEUE));
                        run(jobs);
                        busy = true;
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        run(effect_rx.iter().collect());
                        return;
                    }
                }
            }
        });
        if let Err(error) = spawned {
            warn!(error = %error, "cannot start the lineage worker; lineage will be missing");
        }
        Self {
            stats,
            waiters,
            queued_bytes,
            reads,
            effects,
            ledger,
        }
    }

    /// Resolves once the worker has analysed `effect` (or failed to), if it does so after
    /// this call: register first, then look for the stored lineage, then await. Dropped
    /// unresolved when the worker is gone.
    pub fn analysed(&self, effect: &EffectId) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut waiters) = self.waiters.lock() {
            if waiters.len() >= 1024 {
                // Waiters that gave up (or registered after the analysis) are dropped.
                waiters.retain(|_, senders| {
                    senders.retain(|s| !s.is_closed());
                    !senders.is_empty()
                });
            }
            waiters.entry(effect.clone()).or_default().push(tx);
        }
        rx
    }

    /// The worker's queue depth and lag.
    pub fn stats(&self) -> &LineageStats {
        &self.stats
    }

    /// Queues a job; never blocks. A read that finds the queue full is recorded as not
    /// analysed.
    pub fn submit(&self, job: Job) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = std::time::Instant::now();
        match job {
            Job::Effect { .. } => {
                self.stats.depth.fetch_add(1, Relaxed);
                if self.effects.send((now, job)).is_err() {
                    self.stats.depth.fetch_sub(1, Relaxed);
                    debug!("lineage worker is gone; effect analysis dropped");
                }
            }
            Job::Read { ref body, .. } => {
                let bytes = body.iter().map(Bytes::len).sum::<usize>();
                let queued = self
                    .queued_bytes
                    .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
                let over = queued + bytes > READ_QUEUE_BYTES;
                // Counted before it is sent, so the worker never takes it below zero.
                self.stats.depth.fetch_add(1, Relaxed);
                let refused = if over {
                    Err(mpsc::TrySendError::Full((now, job)))
                } else {
                    self.reads.try_send((now, job))
                };
                if refused.is_err() {
                    self.stats.depth.fetch_sub(1, Relaxed);
                }
                match refused {
                    Ok(()) => {}
                    Err(mpsc::TrySendError::Full((
                        _,
                        Job::Read {
                            mut read,
                            body,
                            digest_pending,
                            ..
                        },
                    ))) => {
                        self.queued_bytes
                            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
                        if digest_pending {
                            read.response_digest = Some(digest_of(&body));
                        }
                        // Journal it here; say it was not analysed.
                        let (run, url) = (read.run_id.clone(), read.url.clone());
                        let read = match self.ledger.journal_read(*read) {
                            Ok(read) => read,
                            Err(error) => {
                                crate::gaps::read_dropped(&*self.ledger, &run, &url, &error, false);
                                return;
                            }
                        };
                        let content = airlock_ledger::ReadContent::not_analysed(read.seq, format!(
                            "not analysed: the analysis queue was full ({READ_QUEUE} reads or {} MiB waiting)",
                            READ_QUEUE_BYTES / (1024 * 1024)
                        ));
                        if let Err(error) =
                            self.ledger.store_read_content(&read.run_id, &content, &[])
                        {
                            crate::gaps::read_dropped(
                                &*self.ledger,
                                &read.run_id,
                                &read.url,
                                &error,
                                true,
                            );
                        }
                    }
                    Err(_) => {
                        self.queued_bytes
                            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
                        debug!("lineage worker is gone; read analysis dropped")
                    }
                }
            }
        }
    }
}

/// Senders waiting for an effect's analysis.
type Waiters = std::collections::HashMap<EffectId, Vec<tokio::sync::oneshot::Sender<()>>>;

/// Analyses `effects` (of one run, `run`) again, now, on the calling thread, against
/// every analysed read of the run (loaded once), and stores each result: the commit's
/// final pass, which sees reads that finished after an effect was first analysed.
///
/// Errors: storage faults.
pub fn reanalyse_effects(
    ledger: &dyn Store,
    run: &RunId,
    effects: &[EffectId],
) -> Result<(), airlock_ledger::LedgerError> {
    let reads = ledger.read_contents(run)?;
    for id in effects {
        if let Some(record) = ledger.effect(id)? {
            effect::analyse_effect(ledger, &record, &reads)?;
        }
    }
    Ok(())
}

/// Response bodies and notable values already recorded, per run: a read whose body is
/// byte for byte an earlier one's (polling, retries) adds no fingerprints and is not
/// analysed again, and a header or credential value an earlier read of the run already
/// showed (a server's ETag, a session cookie on every response) is recorded once, at the
/// first read that carried it, so an effect that carries it gets one edge to that read
/// rather than one per read.
#[derive(Default)]
struct Seen {
    digests: std::collections::HashSet<(RunId, airlock_ledger::Digest)>,
    /// Hashes of (run, header name, value).
    notables: std::collections::HashSet<u64>,
}

/// Most entries each of [`Seen`]'s sets keeps before it starts again (bounded memory; a
/// value seen again after a reset is recorded once more).
const SEEN_CAP: usize = 100_000;

impl Seen {
    /// Whether this run has not recorded `notable` before (and now has).
    fn first_notable(&mut self, run: &RunId, notable: &Notable) -> bool {
        use std::hash::{Hash as _, Hasher as _};
        let mut hasher = std::hash::DefaultHasher::new();
        run.hash(&mut hasher);
        notable.name.hash(&mut hasher);
        notable.value.hash(&mut hasher);
        if self.notables.len() > SEEN_CAP {
            self.notables.clear();
        }
        self.notables.insert(hasher.finish())
    }
}

/// Content types whose bodies are not text in any useful sense: not fingerprinted.
fn is_opaque(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return false;
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    ["image/", "video/", "audio/", "font/"]
        .iter()
        .any(|p| essence.starts_with(p))
        || matches!(
            essence.as_str(),
            "application/zip"
                | "application/pdf"
                | "application/wasm"
                | "application/x-tar"
                | "application/x-7z-compressed"
        )
}

/// Journals a batch of reads (one ledger record per run) and analyses each.
fn run_reads(ledger: &dyn Store, seen: &mut Seen, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let mut reads = Vec::with_capacity(jobs.len());
    let mut captured = Vec::with_capacity(jobs.len());
    for job in jobs {
        if let Job::Read {
            mut read,
            body,
            headers,
            digest_pending,
        } = job
        {
            if digest_pending {
                read.response_digest = Some(digest_of(&body));
            }
            reads.push(*read);
            captured.push((body, headers));
        }
    }
    let identities: Vec<(RunId, String)> = reads
        .iter()
        .map(|r| (r.run_id.clone(), r.url.clone()))
        .collect();
    let journaled = match ledger.journal_reads(reads) {
        Ok(journaled) => journaled,
        Err(error) => {
            // A read with no journal entry is a lineage hole: its run is flagged.
            for (run, url) in &identities {
                crate::gaps::read_dropped(ledger, run, url, &error, false);
            }
            return;
        }
    };
    for (read, (body, headers)) in journaled.into_iter().zip(captured) {
        let (run, url) = (read.run_id.clone(), read.url.clone());
        if let Err(error) = analyse_read(ledger, seen, read, body, headers) {
            crate::gaps::read_dropped(ledger, &run, &url, &error, true);
        }
    }
}

/// The BLAKE3 digest of a body held as frames (a read's `response_digest`).
fn digest_of(body: &[Bytes]) -> airlock_ledger::Digest {
    airlock_ledger::Digest::from_blake3(&airlock_net::digest::of_frames(body))
}

/// Analyses one journaled read's captured body and headers.
fn analyse_read(
    ledger: &dyn Store,
    seen: &mut Seen,
    read: Read,
    body: Vec<Bytes>,
    headers: http::HeaderMap,
) -> Result<(), airlock_ledger::LedgerError> {
    let content_encoding = headers
        .get(http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Only the headers that can be lineage are copied out.
    let headers: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| !ROUTINE_HEADERS.contains(&n.as_str()))
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let (run, seq) = (read.run_id.clone(), read.seq);
    let body_len = body.iter().map(Bytes::len).sum::<usize>();
    let repeated = match &read.response_digest {
        Some(digest) => {
            if seen.digests.len() > SEEN_CAP {
                seen.digests.clear();
            }
            !seen.digests.insert((run.clone(), digest.clone()))
        }
        None => false,
    };
    let body = if repeated || body_len < MIN_ANALYSED_BODY {
        Vec::new()
    } else {
        body
    };
    let content_type = content_type.as_deref();
    if is_opaque(content_type) {
        let content = airlock_ledger::ReadContent::not_analysed(
            seq,
            format!("not analysed: {} is not text", content_type.unwrap_or("")),
        );
        return ledger.store_read_content(&run, &content, &[]);
    }
    let bytes: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
    let analysis = analyze(&bytes, content_encoding.as_deref());
    let fingerprints = analysis.winnowed();
    let mut notable: Vec<Notable> = Vec::new();
    for view in &analysis.views {
        for value in credential_like(&view.text) {
            if !notable.iter().any(|n| n.value == value) {
                notable.push(Notable {
                    kind: EdgeKind::Credential,
                    name: None,
                    value,
                });
            }
        }
    }
    for (name, value) in headers {
        let credentials = credential_like(&value);
        if !credentials.is_empty() || airlock_net::headers::is_credential(&name) {
            // A secret in a header (a token, a session cookie): a credential edge.
            let values = if credentials.is_empty() {
                value
                    .split(';')
                    .filter_map(|part| {
                        part.split_once('=')
                            .map(|(_, v)| v.trim().to_owned())
                            .or_else(|| Some(part.trim().to_owned()))
                    })
                    .filter(|v| v.len() >= 12)
                    .collect()
            } else {
                credentials
            };
            for value in values {
                notable.push(Notable {
                    kind: EdgeKind::Credential,
                    name: Some(name.clone()),
                    value,
                });
            }
        } else if value.len() >= 12 {
            notable.push(Notable {
                kind: EdgeKind::Header,
                name: Some(name),
                value,
            });
        }
    }
    notable.truncate(128);
    notable.retain(|n| seen.first_notable(&run, n));
    if fingerprints.is_empty()
        && notable.is_empty()
        && analysis.skipped.is_none()
        && !analysis.truncated
    {
        // Nothing to find again (a repeated or tiny body): no record needed.
        return Ok(());
    }
    let content = airlock_ledger::lineage_read_content(seq, notable, fingerprints.len(), &analysis);
    ledger.store_read_content(&run, &content, &fingerprints)
}
