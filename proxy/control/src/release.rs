//! The commit authority: writes the commit decision, then releases a run's approved effects
//! in dependency order, each marked `releasing` durably before it is sent, at most once.
//!
//! Order: an effect waits for every effect whose placeholder it carries (lineage), and for
//! every earlier effect to the same origin (each origin sees its effects in staging
//! order). Effects to different origins with no dependency between them are released
//! concurrently, at most [`MAX_CONCURRENT_RELEASES`] at a time. Before an effect is sent,
//! each placeholder it carries is replaced with the real value read from its parent's
//! response.
//!
//! Across control instances on one store, a run is released only under its release lease
//! ([`lease`]): every write of the release is fenced by it, a second commit elsewhere
//! waits for the holder and reports the same outcome, and [`takeover`] finishes the runs
//! of an instance that died mid-release once its lease expired.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use airlock_ledger::{
    readiness, Effect, EffectId, EffectState, IssuedPlaceholder, LedgerError, Readiness,
    ReleaseOutcome, RunId, RunState,
};
use serde::Serialize;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::Control;

pub mod lease;
mod placeholders;
mod send;
mod session;
pub mod takeover;

use lease::{Fence, Held};
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
    /// This instance lost the run's release lease mid-release (renewal failed or another
    /// instance took over): it stopped releasing and left the rest to the next holder.
    #[error("the release lease of run {0} was lost; the next holder finishes the release")]
    LeaseLost(RunId),
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
/// All of it happens under the run's release lease ([`lease`]), taken first (waiting
/// while another instance holds it), so that no instance's takeover sweeper ever sees
/// this run `committing` without a live lease; a commit of a run another instance is
/// releasing thus waits for it and reports the outcome it wrote.
///
/// Errors: the ledger's refusals ([`airlock_ledger::Refused`]; `lease_held` after
/// [`lease::WAIT_FOR_HOLDER`]), [`CommitError::Changed`] and storage faults.
pub async fn commit(
    shared: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    expect: Option<&crate::runs::expect::Expectation>,
    by: &str,
) -> Result<CommitReport, CommitError> {
    let lock = shared.commit_lock(run);
    let _serial = lock.lock().await;
    let held = lease::claim_or_wait(shared, run, false)
        .await?
        .ok_or_else(|| CommitError::LeaseLost(run.clone()))?;
    match decide(shared, run, approve_pending, expect, by).await {
        Ok(true) => release_leased(shared, run, Some(held)).await?,
        Ok(false) => held.give_up(shared).await,
        Err(error) => {
            held.give_up(shared).await;
            return Err(error);
        }
    }
    report(shared, run).await
}

/// The checks and the commit decision of [`commit`]; whether release must (still)
/// proceed.
///
/// Errors: as [`commit`].
async fn decide(
    shared: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    expect: Option<&crate::runs::expect::Expectation>,
    by: &str,
) -> Result<bool, CommitError> {
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
    Ok(release)
}

/// Releases every approved effect of `run` and ends its commit (`committed` or
/// `partially_committed`) under the run's release lease: `held` when the caller claimed
/// it already, else claimed now. While another instance holds it, waits for that holder
/// ([`lease::claim_or_wait`]); returns once the run is no longer `committing`, whoever
/// finished it. When this instance loses the lease mid-release it stops and waits in the
/// same way. The caller holds the run's commit lock.
///
/// Errors: [`airlock_ledger::Refused::LeaseHeld`] when another holder kept the run past
/// [`lease::WAIT_FOR_HOLDER`]; storage faults and failed ledger tasks.
pub(crate) async fn release_leased(
    shared: &Arc<Control>,
    run: &RunId,
    mut held: Option<Held>,
) -> Result<(), CommitError> {
    loop {
        let claimed = match held.take() {
            Some(held) => held,
            None => match lease::claim_or_wait(shared, run, true).await? {
                Some(held) => held,
                None => return Ok(()),
            },
        };
        match release_and_finish(shared, run, claimed.fence()).await {
            Ok(()) => {
                claimed.give_up(shared).await;
                return Ok(());
            }
            Err(CommitError::LeaseLost(_)) => {
                warn!(run.id = %run, "release lease lost mid-release; waiting for the next holder");
                drop(claimed);
            }
            Err(error) => {
                claimed.give_up(shared).await;
                return Err(error);
            }
        }
    }
}

/// Releases every approved effect of `run` and ends its commit under `fence`.
///
/// Errors: [`CommitError::LeaseLost`]; storage faults and failed ledger tasks.
async fn release_and_finish(
    shared: &Arc<Control>,
    run: &RunId,
    fence: &Fence,
) -> Result<(), CommitError> {
    release_all(shared, run, fence).await?;
    let (ledger, run_id, lease) = (shared.ledger().clone(), run.clone(), fence.clone());
    let finished = blocking(move || ledger.finish_commit_fenced(&run_id, lease.lease())).await;
    match finished {
        Err(error) if fence.note(&error) => Err(CommitError::LeaseLost(run.clone())),
        Ok(finished) => {
            // Logged where a commit ends, not where a report is read (a retry of nothing,
            // a repeated commit of a committed run).
            info!(run.id = %run, run.state = %finished.state, "commit finished");
            Ok(())
        }
        Err(error) => Err(error),
    }
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

/// Releases every approved effect of `run`, respecting dependencies and per-origin order,
/// each write fenced by `fence`. Once the lease is lost nothing new starts; the releases
/// in flight are awaited (their outcomes recorded while the store still accepts the
/// token).
///
/// Errors: [`CommitError::LeaseLost`]; storage faults and failed ledger tasks.
async fn release_all(shared: &Arc<Control>, run: &RunId, fence: &Fence) -> Result<(), CommitError> {
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
        let scheduling = if fence.lost() { 0 } else { effects.len() };
        for position in 0..scheduling {
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
                    info!(effect.id = %effect.id, reason = %reason, "effect skipped");
                    match settle_unsent(shared, fence, &effect.id, EffectState::Skipped, reason)
                        .await
                    {
                        Ok(settled) => effects[position] = settled,
                        Err(error) if fence.note(&error) => break,
                        Err(error) => return Err(error),
                    }
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
                        info!(effect.id = %effect.id, reason = %reason, "effect held for a real value");
                        match settle_unsent(shared, fence, &effect.id, EffectState::Skipped, reason)
                            .await
                        {
                            Ok(settled) => effects[position] = settled,
                            Err(error) if fence.note(&error) => break,
                            Err(error) => return Err(error),
                        }
                        changed = true;
                        continue;
                    }
                    busy_origins.insert(origin);
                    in_flight.insert(effect.id.clone());
                    let shared = shared.clone();
                    let effect = effect.clone();
                    let issued = issued.clone();
                    let fence = fence.clone();
                    tasks.spawn(async move {
                        let started = std::time::Instant::now();
                        let settled =
                            release_one(&shared, &fence, effect.clone(), &parents, &issued).await;
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
        if changed && !fence.lost() {
            continue;
        }
        match tasks.join_next().await {
            Some(done) => match done.map_err(|e| CommitError::Task(e.to_string()))? {
                Ok(settled) => {
                    in_flight.remove(&settled.id);
                    if let Some(&position) = index.get(&settled.id) {
                        effects[position] = settled;
                    }
                }
                // Fenced: the other releases in flight are still awaited.
                Err(error) if fence.note(&error) => {}
                Err(error) => return Err(error),
            },
            None if fence.lost() => return Err(CommitError::LeaseLost(run.clone())),
            None => return Ok(()),
        }
    }
}

/// Ends effect `id` without sending it (`to`, with `reason`), fenced.
///
/// Errors: the store's refusals (stale lease included) and faults.
async fn settle_unsent(
    shared: &Arc<Control>,
    fence: &Fence,
    id: &EffectId,
    to: EffectState,
    reason: String,
) -> Result<Effect, CommitError> {
    let (ledger, id, fence) = (shared.ledger().clone(), id.clone(), fence.clone());
    blocking(move || ledger.settle_unsent_fenced(&id, to, &reason, fence.lease())).await
}

/// Releases one approved effect: substitute placeholders, `releasing` (flushed), send,
/// record the outcome and the real values of its own placeholders (flushed).
async fn release_one(
    shared: &Arc<Control>,
    fence: &Fence,
    effect: Effect,
    parents: &[Effect],
    issued: &[IssuedPlaceholder],
) -> Result<Effect, CommitError> {
    let ledger = shared.ledger().clone();
    let digest = effect.body_digest.clone();
    let body = blocking(move || ledger.body(&digest)).await?;
    let Some(body) = body else {
        let reason = format!(
            "the staged body {} is missing from the ledger",
            effect.body_digest
        );
        return settle_unsent(shared, fence, &effect.id, EffectState::Failed, reason).await;
    };
    // The approval is bound to the exact request the reviewer saw.
    if let Err(mismatch) = effect.check_approval(&body) {
        let reason = mismatch.to_string();
        return settle_unsent(shared, fence, &effect.id, EffectState::Failed, reason).await;
    }
    // A session of its own with the origin, when the adapter needs one (MCP).
    let session = airlock_adapters::of_effect(&effect)
        .release_session(&airlock_adapters::Call::of_effect(&effect, &body));
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
            return settle_unsent(shared, fence, &effect.id, EffectState::Failed, reason).await;
        }
    };
    // Marked under a live lease only: a fenced or expired holder starts no send.
    let (ledger, id, lease) = (shared.ledger().clone(), effect.id.clone(), fence.clone());
    blocking(move || ledger.mark_releasing_fenced(&id, lease.lease())).await?;
    let sent_body = prepared.2.clone();
    let sent = match session {
        Some(session) => session::send_in_session(shared, session, &effect.method, prepared).await,
        None => send(shared, &effect.method, prepared).await,
    };
    let outcome = sent.map(|(status, mut headers, mut captured, total)| {
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
    });
    let ledger = shared.ledger().clone();
    let id = effect.id.clone();
    let lease = fence.clone();
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
                ledger.record_release_fenced(
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
                    lease.lease(),
                )
            })
            .await?
        }
        Err(failure) => {
            blocking(move || {
                ledger.record_release_fenced(
                    &id,
                    ReleaseOutcome {
                        status: failure.status,
                        error: Some(failure.reason),
                        delivery: failure.delivery,
                        ..ReleaseOutcome::default()
                    },
                    lease.lease(),
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
