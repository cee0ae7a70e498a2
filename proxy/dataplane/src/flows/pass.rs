//! Flows on the pass path (docs/lineage.md, "Flows on the pass path"): while a run holds
//! analysed reads some `[[flow]]` guards, a request about to pass is compared with them
//! before it is forwarded (its URL with path, query and userinfo, its non-routine header
//! values, and a passed write's body) and refused when a flow matches: `block` with 403
//! `flow_blocked`, `review` with 403 `flow_review_required` (a pass cannot wait for a
//! person).
//!
//! The index is built from the ledger on the first check after a guarded read ended: the
//! check waits (at most [`PASS_WAIT`]) for the lineage worker to analyse every read that
//! ended before it, and past the bound refuses the request with 403 `flow_unchecked`
//! rather than pass it unchecked. A run with no guarded read that ended pays one map
//! lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::{EdgeKind, EdgeSource, EffectId, Notable, ReadContent, RunId};
use airlock_net::respond::ProxyError;
use airlock_policy::{EdgeClass, FlowAction, FlowEdge, FlowSource, FlowTarget, Policy};
use tracing::warn;

use super::host_port;
use crate::lineage::prepared::PreparedReads;
use crate::DataPlane;

/// How long a request about to pass waits for the lineage worker to analyse the guarded
/// reads of its run that ended before it; past it the request is refused
/// (`flow_unchecked`), never passed unchecked.
pub const PASS_WAIT: Duration = Duration::from_secs(2);

/// Reason code of a pass refused by a `block` flow.
pub const FLOW_BLOCKED: &str = "flow_blocked";
/// Reason code of a pass refused by a `review` flow: a pass cannot wait for a person.
pub const FLOW_REVIEW_REQUIRED: &str = "flow_review_required";
/// Reason code of a pass refused because the run's reads could not be analysed within
/// [`PASS_WAIT`] (or the ledger could not be read), so the request could not be checked.
pub const FLOW_UNCHECKED: &str = "flow_unchecked";

/// Request headers never compared on the pass path: the proxy's own credentials (they are
/// stripped before forwarding), on top of the routine headers the comparison skips.
const NOT_FORWARDED: [&str; 2] = ["proxy-authorization", "proxy-connection"];

/// The analysed reads of each run whose guarded reads ended, as the pass-path check uses
/// them.
#[derive(Debug, Default)]
pub struct PassIndex(Mutex<HashMap<RunId, RunReads>>);

/// One run's entry.
#[derive(Debug, Default)]
struct RunReads {
    /// Guarded reads of the run handed to the lineage worker so far.
    ended: u64,
    /// The index built once `built.0` reads had ended.
    built: Option<(u64, Arc<Index>)>,
}

/// One run's analysed reads, loaded from the ledger, with the guarded ones prepared for
/// comparison ([`PreparedReads`]) under the last policy revision that asked.
#[derive(Debug, Default)]
pub struct Index {
    /// Each analysed read with its fingerprints.
    reads: Vec<(ReadContent, Vec<u64>)>,
    /// What flows need of each read, by seq.
    sources: HashMap<u64, Source>,
    /// The guarded reads prepared, and the policy revision that decided which are.
    prepared: Mutex<Option<(String, Arc<PreparedReads>)>>,
}

/// What a flow needs of a read: where it came from, its rule and labels.
#[derive(Debug)]
struct Source {
    host: String,
    port: u16,
    rule: Option<String>,
    labels: Vec<String>,
    /// `read SEQ: METHOD URL`.
    describe: String,
}

impl Index {
    /// The index of `reads` (the journal) and `contents` (their analyses).
    pub fn new(reads: Vec<airlock_ledger::Read>, contents: Vec<(ReadContent, Vec<u64>)>) -> Self {
        let sources = reads
            .into_iter()
            .filter_map(|read| {
                let (host, port) = host_port(&read.url)?;
                Some((
                    read.seq,
                    Source {
                        host,
                        port,
                        describe: format!("read {}: {} {}", read.seq, read.method, read.url),
                        rule: read.rule,
                        labels: read.labels,
                    },
                ))
            })
            .collect();
        Self {
            reads: contents,
            sources,
            prepared: Mutex::new(None),
        }
    }

    /// How many analysed reads it holds.
    pub fn len(&self) -> usize {
        self.reads.len()
    }

    /// Whether it holds no analysed read.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Whether some flow of `policy` may guard the read `content`: a flow with no `from`,
    /// one naming a label of the read or of its rule, or `credential` for a read that
    /// carried a credential-looking value. (`rules`, `hosts` and `to` are decided exactly
    /// by [`Policy::evaluate_flows`] on the edges found.)
    fn guards(&self, policy: &Policy, content: &ReadContent) -> bool {
        let Some(source) = self.sources.get(&content.seq) else {
            return false;
        };
        let credential = content
            .notable
            .iter()
            .any(|n: &Notable| n.kind == EdgeKind::Credential);
        let rule_labels = source
            .rule
            .as_deref()
            .map(|r| policy.labels_of(r))
            .unwrap_or(&[]);
        policy.flows().iter().any(|flow| {
            flow.from().is_empty()
                || flow.from().iter().any(|l| {
                    (l == airlock_policy::CREDENTIAL && credential)
                        || source.labels.contains(l)
                        || rule_labels.contains(l)
                })
        })
    }

    /// The guarded reads under `policy` prepared for comparison, when they were prepared
    /// under its revision.
    fn prepared_for(&self, policy: &Policy) -> Option<Arc<PreparedReads>> {
        let prepared = self.prepared.lock().ok()?;
        prepared
            .as_ref()
            .filter(|(revision, _)| revision == policy.revision())
            .map(|(_, prepared)| prepared.clone())
    }

    /// The guarded reads under `policy` prepared for comparison (built once per index and
    /// policy revision: its cost grows with the reads, a comparison's with the request).
    pub fn prepare(&self, policy: &Policy) -> Arc<PreparedReads> {
        if let Some(prepared) = self.prepared_for(policy) {
            return prepared;
        }
        let prepared = Arc::new(PreparedReads::new(&self.reads, |at| {
            self.guards(policy, &self.reads[at].0)
        }));
        if let Ok(mut slot) = self.prepared.lock() {
            *slot = Some((policy.revision().to_owned(), prepared.clone()));
        }
        prepared
    }
}

impl PassIndex {
    /// A read of `run` passed while the policy had flows ended and was handed to the
    /// lineage worker (called after the hand-over, so a check that sees the count waits
    /// for a worker turn that includes it).
    pub fn read_ended(&self, run: &RunId) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= 100_000 && !map.contains_key(run) {
                // Bounded memory: entries of finished runs go; a run dropped here is
                // re-indexed from the ledger at its next guarded read.
                map.retain(|_, r| r.built.is_none());
            }
            map.entry(run.clone()).or_default().ended += 1;
        }
    }

    /// Whether a guarded read of `run` ended (then requests of the run are checked).
    pub fn watches(&self, run: &RunId) -> bool {
        self.0.lock().is_ok_and(|map| map.contains_key(run))
    }

    /// Forgets `run` (closed: it passes nothing more).
    pub fn forget(&self, run: &RunId) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(run);
        }
    }

    /// `None` when no guarded read of `run` ended; else the count and the index built,
    /// when it is current.
    fn state(&self, run: &RunId) -> Option<(u64, Option<Arc<Index>>)> {
        let map = self.0.lock().ok()?;
        let entry = map.get(run)?;
        let current = entry
            .built
            .as_ref()
            .filter(|(at, _)| *at == entry.ended)
            .map(|(_, index)| index.clone());
        Some((entry.ended, current))
    }

    /// Stores the index built once `at` reads had ended (unless a newer one is stored).
    fn store(&self, run: &RunId, at: u64, index: &Arc<Index>) {
        if let Ok(mut map) = self.0.lock() {
            let entry = map.entry(run.clone()).or_default();
            if entry.built.as_ref().is_none_or(|(old, _)| *old < at) {
                entry.built = Some((at, index.clone()));
            }
        }
    }
}

/// One request about to pass, as the check compares it.
pub struct PassRequest<'a> {
    /// The absolute URL.
    pub url: &'a str,
    /// The request target as the client sent it (it may carry userinfo).
    pub target: &'a str,
    /// The destination's host and port.
    pub host: &'a str,
    /// The destination's port.
    pub port: u16,
    /// The header fields as the client sent them.
    pub headers: &'a http::HeaderMap,
    /// A passed write's body (read whole), when it has one.
    pub body: Option<&'a [u8]>,
}

/// The run's current index, built when guarded reads ended since the last one; `None`
/// when no guarded read of `run` ended.
///
/// Errors: why the index could not be built (the reads were not analysed within
/// [`PASS_WAIT`], or the ledger could not be read); the caller refuses `flow_unchecked`.
pub async fn current_index(
    plane: &Arc<DataPlane>,
    run: &RunId,
) -> Result<Option<Arc<Index>>, String> {
    let Some((ended, current)) = plane.pass_index.state(run) else {
        return Ok(None);
    };
    if let Some(index) = current {
        return Ok(Some(index));
    }
    if !plane.lineage_settled(PASS_WAIT).await {
        return Err(format!(
            "the run's reads were not analysed within {} s",
            PASS_WAIT.as_secs()
        ));
    }
    let (ledger, id) = (plane.ledger.clone(), run.clone());
    let loaded = tokio::task::spawn_blocking(move || {
        Ok::<_, airlock_ledger::LedgerError>(Index::new(
            ledger.reads(&id)?,
            ledger.read_contents(&id)?,
        ))
    })
    .await
    .map_err(|e| format!("the check failed: {e}"))?
    .map_err(|e| format!("the run's reads could not be read: {e}"))?;
    let index = Arc::new(loaded);
    plane.pass_index.store(run, ended, &index);
    Ok(Some(index))
}

/// Checks a request about to pass against the analysed reads of its run under `policy`
/// (the request's own snapshot): `Ok` when no flow matches, when the policy has no flows,
/// or when no guarded read of the run ended (one map lookup).
///
/// Errors: 403 `flow_blocked` (a `block` flow matched), 403 `flow_review_required` (a
/// `review` flow matched), 403 `flow_unchecked` ([`current_index`]).
pub async fn check_pass(
    plane: &Arc<DataPlane>,
    policy: &Policy,
    revision: &str,
    run: &RunId,
    rule: Option<&str>,
    request: &PassRequest<'_>,
) -> Result<(), ProxyError> {
    if policy.flows().is_empty() {
        return Ok(());
    }
    let Some(index) = current_index(plane, run)
        .await
        .map_err(|why| unchecked(&why, rule, revision))?
    else {
        return Ok(());
    };
    if index.prepared_for(policy).is_none() {
        // Preparing grows with the run's reads: off the async workers.
        let (index, policy) = (index.clone(), policy.clone());
        let _ = tokio::task::spawn_blocking(move || index.prepare(&policy)).await;
    }
    match decide(policy, &index, request).into_iter().next() {
        None => Ok(()),
        Some(refusal) => {
            warn!(run.id = %run, url = %request.url, flow = %refusal.flow,
                  reason_code = refusal.code, source = %refusal.source, excerpt = %refusal.excerpt,
                  "a request about to pass carries data a flow guards: refused unsent");
            Err(refusal.into_error(rule, revision))
        }
    }
}

/// Checks a WebSocket message (text or binary, reassembled and inflated) or control
/// payload a client sends after a passed handshake to `url` (`host`:`port`, passed by
/// `rule`) against its run's guarded reads, as a passed write's body is
/// ([`check_pass`]); the message is not a request, so it is judged under the policy in
/// force when it is sent. `Ok` at the cost of one map lookup when no guarded read of the
/// run ended or the policy has no flows.
///
/// Errors: those of [`check_pass`] (403-shaped `flow_blocked`, `flow_review_required`,
/// `flow_unchecked`); the relay closes the connection with 1008 and journals the denial.
pub async fn check_message(
    plane: &Arc<DataPlane>,
    run: &RunId,
    url: &str,
    host: &str,
    port: u16,
    rule: Option<&str>,
    message: &[u8],
) -> Result<(), ProxyError> {
    #[allow(clippy::disallowed_methods)]
    let policy = plane.policy.current();
    if policy.flows().is_empty() || !plane.pass_index.watches(run) {
        return Ok(());
    }
    let headers = http::HeaderMap::new();
    let request = PassRequest {
        url,
        target: url,
        host,
        port,
        headers: &headers,
        body: Some(message),
    };
    check_pass(plane, &policy, policy.revision(), run, rule, &request).await
}

/// One flow a request about to pass violates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassRefusal {
    /// `flow_blocked` or `flow_review_required`.
    pub code: &'static str,
    /// The flow's id.
    pub flow: String,
    /// `block` or `review`.
    pub action: FlowAction,
    /// The labels that matched.
    pub labels: Vec<String>,
    /// The source read (`read SEQ: METHOD URL`), or `unanalysed` for a body that could
    /// not be analysed.
    pub source: String,
    /// The flow's reason.
    pub reason: String,
    /// The carried excerpt, masked (empty when none).
    pub excerpt: String,
}

impl PassRefusal {
    /// The 403 the client gets.
    fn into_error(self, rule: Option<&str>, revision: &str) -> ProxyError {
        let hint = match self.action {
            FlowAction::Block => "this request carries data a block flow forbids sending to this host; send it without that data, or ask the operator".to_owned(),
            FlowAction::Review => "a review flow guards this data: a request that passes unstaged cannot wait for a person, so it is refused; ask the operator for a stage rule for this request so a reviewer can approve it".to_owned(),
        };
        ProxyError::Denied {
            rule: rule.map(str::to_owned),
            reason: format!(
                "flow \"{}\" ({}) refuses this request unsent: it carries data labelled {} from {}{}: {}",
                self.flow,
                self.action.as_str(),
                self.labels.join(", "),
                self.source,
                if self.excerpt.is_empty() {
                    String::new()
                } else {
                    format!(" (\"{}\")", self.excerpt)
                },
                self.reason
            ),
            reason_code: self.code.to_owned(),
            policy_revision: revision.to_owned(),
            hint: Some(hint),
        }
    }
}

/// The flows `request` violates against `index` under `policy`, blocks first (pure: the
/// benchmark and the corpus call it directly).
pub fn decide(policy: &Policy, index: &Index, request: &PassRequest<'_>) -> Vec<PassRefusal> {
    let prepared = index.prepare(policy);
    if prepared.is_empty() {
        return Vec::new();
    }
    let headers: Vec<(&str, &[u8])> = request
        .headers
        .iter()
        .filter(|(name, _)| !NOT_FORWARDED.contains(&name.as_str()))
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .chain(
            (request.target != request.url)
                .then_some(("request-target", request.target.as_bytes())),
        )
        .collect();
    let encoding = request
        .headers
        .get(http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let side = crate::lineage::request_side(
        request.url,
        &headers,
        request.body.unwrap_or_default(),
        encoding,
    );
    let compared = prepared.compare(&EffectId::generate(), &index.reads, side);
    let mut inputs: Vec<FlowEdge<'_>> = Vec::with_capacity(compared.edges.len());
    let mut kept = Vec::with_capacity(compared.edges.len());
    for edge in &compared.edges {
        let EdgeSource::Read { seq } = &edge.from else {
            continue;
        };
        let Some(source) = index.sources.get(seq) else {
            continue;
        };
        inputs.push(FlowEdge {
            source: FlowSource {
                host: &source.host,
                port: source.port,
                rule: source.rule.as_deref(),
                labels: &source.labels,
            },
            class: match edge.kind {
                EdgeKind::Content => EdgeClass::Content,
                EdgeKind::Header => EdgeClass::Header,
                EdgeKind::Credential => EdgeClass::Credential,
                EdgeKind::Placeholder => EdgeClass::Placeholder,
            },
            overlap_bytes: edge.overlap_bytes,
        });
        kept.push((edge, source));
    }
    // Only a passed write's body can be unanalysable: a URL and headers are text.
    let unanalysed = request.body.filter(|b| !b.is_empty()).and_then(|_| {
        match (&compared.analysis.skipped, compared.analysis.truncated) {
            (Some(why), _) => Some(why.clone()),
            (None, true) => Some("the body was longer than the analysis bounds".to_owned()),
            (None, false) => None,
        }
    });
    let target = FlowTarget {
        host: request.host,
        port: request.port,
        unanalysed: unanalysed.as_deref(),
    };
    policy
        .evaluate_flows(&target, &inputs)
        .into_iter()
        .map(|verdict| {
            let found = verdict.edge.map(|i| kept[i]);
            PassRefusal {
                code: match verdict.action {
                    FlowAction::Block => FLOW_BLOCKED,
                    FlowAction::Review => FLOW_REVIEW_REQUIRED,
                },
                flow: verdict.flow,
                action: verdict.action,
                labels: verdict.labels,
                source: found.map_or_else(
                    || format!("unanalysed body: {}", unanalysed.as_deref().unwrap_or("")),
                    |(_, source)| source.describe.clone(),
                ),
                reason: verdict.reason,
                excerpt: found
                    .and_then(|(edge, _)| edge.excerpt.clone())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The refusal of a request that could not be checked: 403 `flow_unchecked`.
fn unchecked(why: &str, rule: Option<&str>, revision: &str) -> ProxyError {
    ProxyError::Denied {
        rule: rule.map(str::to_owned),
        reason: format!(
            "the request was not sent: this run holds reads flows guard, and {why}, so it could not be checked against them; a request is never passed unchecked"
        ),
        reason_code: FLOW_UNCHECKED.to_owned(),
        policy_revision: revision.to_owned(),
        hint: Some("retry in a moment; if it persists, the lineage worker is overloaded: ask the operator".into()),
    }
}
