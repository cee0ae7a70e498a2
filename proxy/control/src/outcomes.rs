//! The ways out of a doubtful or failed release, after a commit (docs/design.md,
//! "Outcomes of a release"): `retry` re-sends an effect of which provably nothing reached
//! its origin (or an `unknown` one whose origin honours its idempotency key), and
//! `settle` records a reviewer's finding about an `unknown` effect. Both write their
//! decision in the ledger first (who, when, the note), then release whatever they put
//! back, under the run's commit lock and its release lease (taken before the decision is
//! written, waiting for another instance's live lease as a commit does), in a task of
//! their own so that a client that goes away does not cut a release half way.

use std::sync::Arc;

use airlock_ledger::rules::outcome::is_retriable;
use airlock_ledger::{EffectId, LedgerError, RunId, Settlement};
use serde::Serialize;
use tracing::info;

use crate::release::lease::{claim_or_wait, Held};
use crate::release::{blocking, release_leased, report, CommitError, CommitReport};
use crate::runs::Actor;
use crate::Control;

/// What a retry re-sent, and the run as it stands after.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RetryReport {
    /// The effects retried now (each once), in staging order.
    #[schema(value_type = Vec<String>)]
    pub retried: Vec<EffectId>,
    /// The run after the retried effects' release.
    #[serde(flatten)]
    pub report: CommitReport,
}

/// Retries effect `effect` and releases it again (with the skipped dependents it put
/// back), then reports the run. Recorded as a `retry` decision by `actor`.
///
/// Errors: the ledger's refusals: [`airlock_ledger::Refused::NotRetriable`] for an effect
/// that may have reached its origin or that its origin refused, an effect in any other
/// state, a run with no commit decision; `NotFound`; storage faults.
pub async fn retry_effect(
    control: &Arc<Control>,
    effect: &EffectId,
    actor: &Actor,
) -> Result<RetryReport, CommitError> {
    let run = run_of(control, effect).await?;
    retry_detached(control, run, Some(effect.clone()), actor.recorded()).await
}

/// Retries every effect of `run` that may be retried now (see [`retry_effect`]) and
/// releases them; `retried` is empty when there was none.
///
/// Errors: `NotFound`; storage faults.
pub async fn retry_run(
    control: &Arc<Control>,
    run: &RunId,
    actor: &Actor,
) -> Result<RetryReport, CommitError> {
    retry_detached(control, run.clone(), None, actor.recorded()).await
}

/// Retries `effect` (or, for `None`, every effect of `run` that may be retried now) in a
/// task of its own under the run's commit lock, then releases and reports.
async fn retry_detached(
    control: &Arc<Control>,
    run: RunId,
    effect: Option<EffectId>,
    by: String,
) -> Result<RetryReport, CommitError> {
    let control = control.clone();
    tokio::spawn(async move {
        let lock = control.commit_lock(&run);
        let _serial = lock.lock().await;
        let held = leased(&control, &run).await?;
        let ids = match effect {
            Some(effect) => vec![effect],
            None => {
                let (ledger, run_id) = (control.ledger().clone(), run.clone());
                blocking(move || {
                    Ok(ledger
                        .effects(&run_id)?
                        .into_iter()
                        .filter(is_retriable)
                        .map(|e| e.id)
                        .collect())
                })
                .await?
            }
        };
        let (retried, report) = retry_locked(&control, &run, &ids, &by, held).await?;
        Ok(RetryReport { retried, report })
    })
    .await
    .map_err(|e| CommitError::Task(e.to_string()))?
}

/// Records a reviewer's settlement of `effect` (`unknown` -> `released` or `failed`),
/// then releases the dependents it put back (settled delivered, with the real values
/// given) and ends the commit again. Returns the run's report.
///
/// Errors: the ledger's refusals ([`airlock_ledger::Refused::EffectTransition`] for an
/// effect that is not `unknown`, [`airlock_ledger::Refused::BadSettlement`]); `NotFound`;
/// storage faults.
pub async fn settle(
    control: &Arc<Control>,
    effect: &EffectId,
    settlement: Settlement,
    actor: &Actor,
) -> Result<CommitReport, CommitError> {
    let run = run_of(control, effect).await?;
    let effect = effect.clone();
    let by = actor.recorded();
    let (control, run) = (control.clone(), run.clone());
    tokio::spawn(async move {
        let lock = control.commit_lock(&run);
        let _serial = lock.lock().await;
        let held = leased(&control, &run).await?;
        let ledger = control.ledger().clone();
        let (id, who) = (effect.clone(), by.clone());
        let changed = match blocking(move || ledger.settle(&id, &settlement, &who)).await {
            Ok(changed) => changed,
            Err(error) => {
                held.give_up(&control).await;
                return Err(error);
            }
        };
        info!(effect.id = %effect, by = %by, state = ?changed.first().map(|e| e.state),
              requeued = changed.len().saturating_sub(1), "effect settled");
        if changed.len() > 1 || committing(&control, &run).await? {
            release_leased(&control, &run, Some(held)).await?;
        } else {
            held.give_up(&control).await;
        }
        report(&control, &run).await
    })
    .await
    .map_err(|e| CommitError::Task(e.to_string()))?
}

/// What a reviewer can do next about an effect whose release failed or is unknown, as
/// the commands to run; `None` for any other effect.
pub fn next_step(effect: &airlock_ledger::Effect) -> Option<String> {
    use airlock_ledger::EffectState;
    let retriable = airlock_ledger::rules::outcome::is_retriable(effect);
    match effect.state {
        EffectState::Unknown if retriable => Some(format!(
            "the origin honours its idempotency key: `airlock retry {}` re-sends it safely; or check the origin and `airlock settle {} --delivered | --not-delivered`",
            effect.id, effect.id
        )),
        EffectState::Unknown => Some(format!(
            "it may or may not have reached the origin: check there, then `airlock settle {} --delivered` (add `--value POINTER=VALUE` for each value its dependents need) or `airlock settle {} --not-delivered`",
            effect.id, effect.id
        )),
        EffectState::Failed if retriable => Some(format!(
            "nothing of it reached the origin: `airlock retry {}` sends it again",
            effect.id
        )),
        _ => None,
    }
}

/// The run of `effect`.
async fn run_of(control: &Arc<Control>, effect: &EffectId) -> Result<RunId, CommitError> {
    let (ledger, id) = (control.ledger().clone(), effect.clone());
    blocking(move || {
        ledger
            .effect(&id)?
            .map(|e| e.run_id)
            .ok_or_else(|| LedgerError::NotFound {
                kind: "effect",
                id: id.to_string(),
            })
    })
    .await
}

/// Whether `run` is `committing` (a settlement or retry put it back).
async fn committing(control: &Arc<Control>, run: &RunId) -> Result<bool, CommitError> {
    let (ledger, id) = (control.ledger().clone(), run.clone());
    blocking(move || {
        Ok(ledger
            .run(&id)?
            .is_some_and(|r| r.state == airlock_ledger::RunState::Committing))
    })
    .await
}

/// The release lease of `run` for a retry or settlement: claimed now, or once another
/// instance's live lease ends ([`claim_or_wait`]).
///
/// Errors: [`airlock_ledger::Refused::LeaseHeld`] after the wait; storage faults.
async fn leased(control: &Arc<Control>, run: &RunId) -> Result<Held, CommitError> {
    claim_or_wait(control, run, false)
        .await?
        .ok_or_else(|| CommitError::LeaseLost(run.clone()))
}

/// Retries `ids` of `run` (the caller holds the commit lock and `held`, the run's
/// release lease), then releases and reports.
async fn retry_locked(
    control: &Arc<Control>,
    run: &RunId,
    ids: &[EffectId],
    by: &str,
    held: Held,
) -> Result<(Vec<EffectId>, CommitReport), CommitError> {
    let mut retried = Vec::new();
    for id in ids {
        let (ledger, effect, who) = (control.ledger().clone(), id.clone(), by.to_owned());
        let changed = match blocking(move || ledger.retry(&effect, &who)).await {
            Ok(changed) => changed,
            Err(error) => {
                held.give_up(control).await;
                return Err(error);
            }
        };
        info!(effect.id = %id, by = %by, requeued = changed.len().saturating_sub(1), "effect retried");
        retried.push(id.clone());
    }
    if retried.is_empty() {
        held.give_up(control).await;
    } else {
        release_leased(control, run, Some(held)).await?;
    }
    Ok((retried, report(control, run).await?))
}
