//! The commit authority: writes the commit decision, then releases a run's approved effects
//! in dependency order, each marked `releasing` durably before it is sent, at most once.
//!
//! Order: an effect waits for every effect whose placeholder it carries (lineage), and for
//! every earlier effect to the same origin (each origin sees its effects in staging
//! order). Effects to different origins with no dependency between them are released
//! concurrently, at most [`MAX_CONCURRENT_RELEASES`] at a time. Before an effect is sent,
//! each placeholder it carries is replaced with the real value read from its parent's
//! response.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use airlock_ledger::{
    readiness, Effect, EffectId, EffectState, IssuedPlaceholder, LedgerError, Readiness,
    ReleaseOutcome, RunId, RunState,
};
use serde::Serialize;
use tokio::task::JoinSet;
use tracing::info;

use crate::Control;

mod placeholders;
mod send;

use placeholders::{resolve, substituted, value_missing};
use send::{send, Prepared};

/// Most effects in flight at once during a commit.
pub const MAX_CONCURRENT_RELEASES: usize = 8;

/// One effect's line in a commit report.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EffectOutcome {
    /// The effect.
    pub id: String,
    /// Staging order.
    pub seq: u64,
    /// Request method.
    pub method: String,
    /// Request URL as staged (placeholders included).
    pub url: String,
    /// Final state.
    #[schema(value_type = String)]
    pub state: EffectState,
    /// The origin's status, when released or failed with a response.
    pub status: Option<u16>,
    /// Why it is in its state, when that needs saying.
    pub reason: Option<String>,
    /// One line for reviewers (the adapter's summary, else `METHOD host/path`).
    pub summary: String,
    /// What a reviewer can do next about a failed or unknown effect (`airlock retry`,
    /// `airlock settle`), when anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// How it reads with the real values known so far (`crate::released::released_json`,
    /// without the origin's answer: the report does not load bodies); null before any.
    pub released: serde_json::Value,
}

/// What a commit did, reported honestly: released, failed, unknown, rejected, skipped.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CommitReport {
    /// The run.
    #[schema(value_type = String)]
    pub run: RunId,
    /// The run's state after the commit.
    #[schema(value_type = String)]
    pub state: RunState,
    /// Effects per state.
    pub counts: BTreeMap<&'static str, usize>,
    /// Every effect of the run in staging order.
    pub effects: Vec<EffectOutcome>,
}

impl CommitReport {
    fn new(run: RunId, state: RunState, effects: &[Effect]) -> Self {
        let mut counts = BTreeMap::new();
        for effect in effects {
            *counts.entry(effect.state.as_str()).or_insert(0) += 1;
        }
        Self {
            run,
            state,
            counts,
            effects: effects
                .iter()
                .map(|e| EffectOutcome {
                    id: e.id.to_string(),
                    seq: e.seq,
                    method: e.method.clone(),
                    url: e.url.clone(),
                    state: e.state,
                    status: e.release.as_ref().and_then(|r| r.status),
                    reason: e.state_reason.clone(),
                    summary: airlock_adapters::summary_of(e),
                    next: crate::outcomes::next_step(e),
                    released: crate::released::released_json(e, effects, None),
                })
                .collect(),
        }
    }
}

/// Why a commit could not proceed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A ledger task panicked or was cancelled.
    #[error("a ledger task failed: {0}")]
    Task(String),
    /// The effects the commit (or approval) covers are not the ones its expectation
    /// names ([`crate::runs::expect`]); nothing was approved or released.
    #[error(transparent)]
    Changed(Box<crate::runs::expect::SetChanged>),
}

/// Runs a ledger call on the blocking pool; a failed task is [`CommitError::Task`].
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, CommitError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CommitError::Task(e.to_string()))??)
}

/// The origin of a URL (`scheme://authority`), for per-origin ordering.
fn origin_of(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .map(|uri| {
            format!(
                "{}://{}",
                uri.scheme_str().unwrap_or(""),
                uri.authority().map(|a| a.as_str()).unwrap_or("")
            )
        })
        .unwrap_or_default()
}

/// Commits `run`: seals it, decides flow rules on the final lineage
/// ([`crate::flows`]: refuses while a `review` flow holds an effect no reviewer approved
/// by itself, rejects what a `block` flow forbids), refuses while effects are undecided unless `approve_pending`,
/// writes the decision, releases approved effects (see the module docs for the order) and
/// reports. A second commit of a finished run does nothing and reports the same outcome.
/// With `expect`, the run's `staged` and `approved` effects must be the ones it names
/// ([`crate::runs::expect`]), checked before the final pass and again, for effects staged
/// meanwhile, once the run is sealed.
///
/// Errors: the ledger's refusals ([`airlock_ledger::Refused`]), [`CommitError::Changed`]
/// and storage faults.
pub async fn commit(
    shared: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    expect: Option<&crate::runs::expect::Expectation>,
    by: &str,
) -> Result<CommitReport, CommitError> {
    let lock = shared.commit_lock(run);
    let _serial = lock.lock().await;
    let seen = match expect {
        Some(expect) => crate::runs::expect::commit_check(shared, run, expect).await?,
        None => None,
    };
    crate::flows::final_pass(shared, run, approve_pending, by).await?;
    if let Some(seen) = seen {
        crate::runs::expect::commit_recheck(shared, run, seen, by).await?;
    }
    let ledger = shared.ledger().clone();
    let (run_id, by_owned) = (run.clone(), by.to_owned());
    let (_, release) =
        blocking(move || ledger.begin_commit(&run_id, approve_pending, &by_owned)).await?;
    shared.close_run(run);
    if release {
        release_and_finish(shared, run).await?;
    }
    report(shared, run).await
}

/// Releases every approved effect of `run` and ends its commit (`committed` or
/// `partially_committed`). The caller holds the run's commit lock.
///
/// Errors: storage faults and failed ledger tasks.
pub(crate) async fn release_and_finish(
    shared: &Arc<Control>,
    run: &RunId,
) -> Result<(), CommitError> {
    release_all(shared, run).await?;
    let ledger = shared.ledger().clone();
    let run_id = run.clone();
    let finished = blocking(move || ledger.finish_commit(&run_id)).await?;
    // Logged where a commit ends, not where a report is read (a retry of nothing, a
    // repeated commit of a committed run).
    info!(run.id = %run, run.state = %finished.state, "commit finished");
    Ok(())
}

/// The report of `run` as the ledger holds it now.
///
/// Errors: storage faults and failed ledger tasks.
pub(crate) async fn report(
    shared: &Arc<Control>,
    run: &RunId,
) -> Result<CommitReport, CommitError> {
    let ledger = shared.ledger().clone();
    let run_id = run.clone();
    let (state, effects) = blocking(move || {
        let state = ledger
            .run(&run_id)?
            .map(|r| r.state)
            .unwrap_or(RunState::Committed);
        Ok((state, ledger.effects(&run_id)?))
    })
    .await?;
    Ok(CommitReport::new(run.clone(), state, &effects))
}

/// Releases every approved effect of `run`, respecting dependencies and per-origin order.
async fn release_all(shared: &Arc<Control>, run: &RunId) -> Result<(), CommitError> {
    let ledger = shared.ledger().clone();
    let run_id = run.clone();
    let (issued, mut effects) =
        blocking(move || Ok((ledger.placeholders(&run_id)?, ledger.effects(&run_id)?))).await?;
    let issued: Arc<Vec<IssuedPlaceholder>> = Arc::new(issued);
    // The run's effects are read once and kept current from what each step returns.
    let index: HashMap<EffectId, usize> = effects
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.clone(), i))
        .collect();
    let origins: Vec<String> = effects.iter().map(|e| origin_of(&e.url)).collect();
    let mut in_flight: HashSet<EffectId> = HashSet::new();
    let mut tasks: JoinSet<Result<Effect, CommitError>> = JoinSet::new();
    loop {
        let states: HashMap<EffectId, EffectState> =
            effects.iter().map(|e| (e.id.clone(), e.state)).collect();
        let mut busy_origins: HashSet<&str> = HashSet::new();
        let mut changed = false;
        for position in 0..effects.len() {
            let origin = origins[position].as_str();
            let effect = &effects[position];
            if in_flight.contains(&effect.id) {
                busy_origins.insert(origin);
                continue;
            }
            if effect.state != EffectState::Approved {
                continue;
            }
            match readiness(effect, &states) {
                Readiness::Skip(reason) => {
                    let ledger = shared.ledger().clone();
                    let id = effect.id.clone();
                    info!(effect.id = %id, reason = %reason, "effect skipped");
                    effects[position] =
                        blocking(move || ledger.settle_unsent(&id, EffectState::Skipped, &reason))
                            .await?;
                    changed = true;
                }
                Readiness::Ready
                    if !busy_origins.contains(origin)
                        && in_flight.len() < MAX_CONCURRENT_RELEASES =>
                {
                    let parents: Vec<Effect> = effects
                        .iter()
                        .filter(|e| effect.depends_on.iter().any(|d| d.effect == e.id))
                        .cloned()
                        .collect();
                    // A parent settled delivered without its real value: never released
                    // with the placeholder; an operator supplies the value.
                    if let Some(reason) = value_missing(effect, &parents) {
                        let ledger = shared.ledger().clone();
                        let id = effect.id.clone();
                        info!(effect.id = %id, reason = %reason, "effect held for a real value");
                        effects[position] = blocking(move || {
                            ledger.settle_unsent(&id, EffectState::Skipped, &reason)
                        })
                        .await?;
                        changed = true;
                        continue;
                    }
                    busy_origins.insert(origin);
                    in_flight.insert(effect.id.clone());
                    let shared = shared.clone();
                    let effect = effect.clone();
                    let issued = issued.clone();
                    tasks.spawn(async move {
                        let started = std::time::Instant::now();
                        let settled = release_one(&shared, effect.clone(), &parents, &issued).await;
                        crate::metrics::released(
                            &shared,
                            &effect.run_id,
                            &effect,
                            &settled,
                            started.elapsed(),
                        );
                        settled
                    });
                }
                Readiness::Ready | Readiness::Wait => {
                    // Each origin sees its effects in staging order.
                    busy_origins.insert(origin);
                }
            }
        }
        if changed {
            continue;
        }
        match tasks.join_next().await {
            Some(done) => {
                let settled = done.map_err(|e| CommitError::Task(e.to_string()))??;
                in_flight.remove(&settled.id);
                if let Some(&position) = index.get(&settled.id) {
                    effects[position] = settled;
                }
            }
            None => return Ok(()),
        }
    }
}

/// Releases one approved effect: substitute placeholders, `releasing` (flushed), send,
/// record the outcome and the real values of its own placeholders (flushed).
async fn release_one(
    shared: &Arc<Control>,
    effect: Effect,
    parents: &[Effect],
    issued: &[IssuedPlaceholder],
) -> Result<Effect, CommitError> {
    let ledger = shared.ledger().clone();
    let digest = effect.body_digest.clone();
    let body = blocking(move || ledger.body(&digest)).await?;
    let Some(body) = body else {
        let ledger = shared.ledger().clone();
        let id = effect.id.clone();
        let reason = format!(
            "the staged body {} is missing from the ledger",
            effect.body_digest
        );
        return blocking(move || ledger.settle_unsent(&id, EffectState::Failed, &reason)).await;
    };
    // The approval is bound to the exact request the reviewer saw.
    if let Err(mismatch) = effect.check_approval(&body) {
        let reason = mismatch.to_string();
        let ledger = shared.ledger().clone();
        let id = effect.id.clone();
        return blocking(move || ledger.settle_unsent(&id, EffectState::Failed, &reason)).await;
    }
    let prepared = substituted(shared, &effect, parents, issued, body).and_then(
        |(mut url, mut headers, body)| {
            // The same key on every attempt: the origin deduplicates by it.
            if let Some(key) = &effect.idempotency {
                if !headers
                    .iter()
                    .any(|(name, _)| name.eq_ignore_ascii_case(&key.header))
                {
                    headers.push((key.header.clone(), key.key.clone().into_bytes()));
                }
            }
            // The credential is added only now: the ledger holds its name, never its value.
            let scrubber = airlock_dataplane::credentials::apply_release(
                shared.data(),
                &effect,
                &mut url,
                &mut headers,
                !body.is_empty(),
            )?;
            Ok(((url, headers, body), scrubber))
        },
    );
    let (prepared, scrubber) = match prepared {
        Ok(prepared) => prepared,
        Err(reason) => {
            let ledger = shared.ledger().clone();
            let id = effect.id.clone();
            return blocking(move || ledger.settle_unsent(&id, EffectState::Failed, &reason)).await;
        }
    };
    let ledger = shared.ledger().clone();
    let id = effect.id.clone();
    blocking(move || ledger.mark_releasing(&id)).await?;
    let sent_body = prepared.2.clone();
    let outcome = send(shared, &effect.method, prepared).await.map(
        |(status, mut headers, mut captured, total)| {
            // An echoed secret is masked before the ledger stores the origin's answer.
            if !scrubber.is_empty() {
                if (captured.len() as u64) < total {
                    scrubber.scrub_cut(&mut captured);
                } else {
                    scrubber.scrub(&mut captured);
                }
                for header in &mut headers {
                    let mut value = header.value.as_bytes().to_vec();
                    if scrubber.scrub(&mut value) {
                        header.value = airlock_ledger::HeaderText::from_bytes(&value);
                    }
                }
            }
            (status, headers, captured, total)
        },
    );
    let ledger = shared.ledger().clone();
    let id = effect.id.clone();
    let settled = match outcome {
        Ok((status, headers, captured, total)) => {
            let error = (status >= 400)
                .then(|| format!("the origin answered {status}"))
                .or_else(|| adapter_failure(&effect, &sent_body, status, &captured));
            let resolved = if error.is_none() {
                resolve(&effect, &captured)
            } else {
                Vec::new()
            };
            blocking(move || {
                ledger.record_release(
                    &id,
                    ReleaseOutcome {
                        status: Some(status),
                        headers,
                        body: &captured,
                        body_len: total,
                        error,
                        resolved,
                        // The origin answered: a refusal is `failed`, not retriable.
                        delivery: airlock_ledger::Delivery::Answered,
                    },
                )
            })
            .await?
        }
        Err(failure) => {
            blocking(move || {
                ledger.record_release(
                    &id,
                    ReleaseOutcome {
                        status: failure.status,
                        error: Some(failure.reason),
                        delivery: failure.delivery,
                        ..ReleaseOutcome::default()
                    },
                )
            })
            .await?
        }
    };
    Ok(settled)
}

/// The effect's adapter judges the origin's answer: a `200` can still say the update was
/// refused (git's `ng`, Slack's `ok: false`).
fn adapter_failure(effect: &Effect, body: &[u8], status: u16, response: &[u8]) -> Option<String> {
    let call = airlock_adapters::Call::of_effect(effect, body);
    airlock_adapters::of_effect(effect).release_failure(&call, status, response)
}
