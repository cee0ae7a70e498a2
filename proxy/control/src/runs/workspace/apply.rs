//! Applying a written workspace decision: effects first, then files, then the report.

use std::sync::Arc;

use airlock_ledger::{DecisionKind, Effect, LedgerError, Refused, RunId, WorkspaceDecision};
use serde_json::{json, Value};

use super::steps::{discard_snapshot, keep_files, keep_timed_out, restore_and_check};
use super::{blocking, must_workspace, DecisionReport, Result};
use crate::release::{CommitError, CommitReport};
use crate::runs::Actor;
use crate::Control;

fn effect_json(effect: &Effect) -> Value {
    json!({
        "id": effect.id,
        "seq": effect.seq,
        "method": effect.method,
        "url": effect.url,
        "state": effect.state,
        "state_reason": effect.state_reason,
        "depends_on": effect.depends_on.iter().map(|d| d.effect.clone()).collect::<Vec<_>>(),
    })
}

/// Applies a written decision to both sides, effects first, then files; marks it finished.
pub(super) async fn apply(
    shared: &Arc<Control>,
    run: &RunId,
    decision: WorkspaceDecision,
    already_decided: bool,
) -> Result<DecisionReport> {
    if decision.finished_at_ms.is_some() {
        return report(shared, run, decision, true, None).await;
    }
    let mut commit = None;
    let outcome;
    let mut residue = Vec::new();
    let mut unverified = false;
    // A keep's files come first: the overlay driver merges what the steps wrote (the
    // effects' side may then wait on a reviewer or time out).
    let kept = match decision.kind {
        DecisionKind::Keep => keep_files(shared, &decision.snapshot).await,
        _ => None,
    };
    match decision.kind {
        DecisionKind::Keep if decision.commit => {
            let committing = crate::runs::commit_detached(
                shared,
                run,
                decision.approve_all,
                None,
                &Actor::Orchestrator,
            );
            let limit = shared.workspace_step_timeout;
            let Ok(committed) = tokio::time::timeout(limit, committing).await else {
                return finish(
                    shared,
                    run,
                    decision,
                    already_decided,
                    Vec::new(),
                    false,
                    keep_timed_out(limit, run, "committing"),
                )
                .await;
            };
            match committed {
                Ok(done) => {
                    outcome = format!("files kept; run {}", done.state);
                    commit = Some(done);
                }
                Err(CommitError::Ledger(LedgerError::Refused(Refused::Undecided {
                    effects,
                    ..
                }))) => {
                    outcome = format!(
                        "files kept; {} effect(s) await a reviewer, so nothing was committed \
                         (--approve-all approves them)",
                        effects.len()
                    );
                }
                Err(CommitError::Ledger(LedgerError::Refused(Refused::FlowHeld {
                    effects,
                    detail,
                    ..
                }))) => {
                    outcome = format!(
                        "files kept; {} effect(s) are held by flow rules ({detail}) and need a \
                         reviewer's own approval, so nothing was committed (--approve-all skips them)",
                        effects.len()
                    );
                }
                Err(other) => return Err(other.into()),
            }
        }
        DecisionKind::Keep => {
            // A kept run stages nothing more; sealing a sealed run changes nothing.
            let limit = shared.workspace_step_timeout;
            let sealing = crate::runs::seal(shared, run, &Actor::Orchestrator);
            let Ok(sealed) = tokio::time::timeout(limit, sealing).await else {
                return finish(
                    shared,
                    run,
                    decision,
                    already_decided,
                    Vec::new(),
                    false,
                    keep_timed_out(limit, run, "sealing"),
                )
                .await;
            };
            let (_, effects) = sealed?;
            if effects.is_empty() {
                // Nothing to review: an empty run is committed (it releases nothing) rather
                // than left sealed, waiting for a review that has nothing to look at.
                let committing =
                    crate::runs::commit_detached(shared, run, false, None, &Actor::Orchestrator);
                let Ok(committed) = tokio::time::timeout(limit, committing).await else {
                    return finish(
                        shared,
                        run,
                        decision,
                        already_decided,
                        Vec::new(),
                        false,
                        keep_timed_out(limit, run, "committing"),
                    )
                    .await;
                };
                let done = committed?;
                outcome = format!(
                    "files kept; the run staged no effects, so it is {} with nothing to release",
                    done.state
                );
                commit = Some(done);
            } else {
                outcome = format!("files kept; {} effect(s) held for review", effects.len());
            }
        }
        DecisionKind::Rollback | DecisionKind::RollbackTo => {
            let discarded = match decision.kind {
                DecisionKind::RollbackTo => {
                    let (shared2, run2, decision2) =
                        (shared.clone(), run.clone(), decision.clone());
                    blocking(move || {
                        Ok(shared2.ledger().discard_effects_after(
                            &run2,
                            decision2.after_seq.unwrap_or(0),
                            &format!(
                                "rolled back to savepoint {}",
                                decision2.savepoint.as_deref().unwrap_or("?")
                            ),
                        )?)
                    })
                    .await?
                }
                _ => {
                    crate::runs::abort(shared, run, &Actor::Orchestrator).await?;
                    Vec::new()
                }
            };
            residue = restore_and_check(shared, &decision.snapshot).await;
            unverified = !residue.is_empty();
            if decision.kind == DecisionKind::Rollback && !unverified {
                discard_snapshot(shared, &decision.snapshot).await;
            }
            outcome = match decision.kind {
                DecisionKind::RollbackTo => format!(
                    "files restored to savepoint {}; {} effect(s) discarded",
                    decision.savepoint.as_deref().unwrap_or("?"),
                    discarded.len()
                ),
                _ => "files rolled back; run aborted, pending effects discarded".to_owned(),
            } + if unverified {
                "; the rollback could NOT be verified"
            } else {
                "; rollback verified against the snapshot manifest"
            };
        }
    }
    let outcome = match kept {
        Some((kept, outside)) => {
            let merged = match kept.is_empty() {
                true => "; the overlay's changes were merged into the workspace and checked",
                false => "; the overlay's changes could NOT all be merged into the workspace",
            };
            // `--scope root`: what the steps wrote elsewhere is dropped with the overlay.
            let dropped = match outside.is_empty() {
                true => String::new(),
                false => "; what the steps wrote outside the workspace was NOT applied (residue)"
                    .to_owned(),
            };
            residue = kept;
            residue.extend(outside);
            outcome + merged + &dropped
        }
        None => outcome,
    };
    finish(
        shared,
        run,
        decision,
        already_decided,
        residue,
        unverified,
        outcome,
    )
    .await
    .map(|mut report| {
        report.commit = commit;
        report
    })
}

/// Marks `decision` finished with `residue` and `outcome`, and reports it.
async fn finish(
    shared: &Arc<Control>,
    run: &RunId,
    decision: WorkspaceDecision,
    already_decided: bool,
    residue: Vec<String>,
    unverified: bool,
    outcome: String,
) -> Result<DecisionReport> {
    let (shared2, run2, outcome2) = (shared.clone(), run.clone(), outcome.clone());
    let record = blocking(move || {
        Ok(shared2
            .ledger()
            .finish_workspace_decision(&run2, residue, unverified, &outcome2)?)
    })
    .await?;
    let finished = record
        .decisions
        .iter()
        .rev()
        .find(|d| d.at_ms == decision.at_ms && d.kind == decision.kind)
        .cloned()
        .unwrap_or(decision);
    report(shared, run, finished, already_decided, None).await
}

pub(super) async fn report(
    shared: &Arc<Control>,
    run: &RunId,
    decision: WorkspaceDecision,
    already_decided: bool,
    commit: Option<CommitReport>,
) -> Result<DecisionReport> {
    let (shared, run2) = (shared.clone(), run.clone());
    let (state, effects, workspace) = blocking(move || {
        let state = shared
            .ledger()
            .run(&run2)?
            .map(|r| r.state.as_str().to_owned())
            .unwrap_or_default();
        let effects = shared.ledger().effects(&run2)?;
        Ok((state, effects, must_workspace(&shared, &run2)?))
    })
    .await?;
    Ok(DecisionReport {
        run: run.clone(),
        state,
        decision,
        already_decided,
        rollback_unverified: workspace.rollback_unverified,
        commit,
        effects: effects.iter().map(effect_json).collect(),
        workspace,
    })
}
