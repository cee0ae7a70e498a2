//! The workspace side of a run's state machine (`airlock run`): savepoints, the one final
//! decision (`keep` or `rollback`, any number of `rollback_to` before it) and the effects
//! a rollback to a savepoint discards. Pure, like the rest of [`crate::rules`].

use std::collections::HashSet;

use crate::error::Refused;
use crate::model::{DecisionRecord, Effect, EffectId, EffectState, Run, RunState};
use crate::workspace::{DecisionKind, Savepoint, WorkspaceDecision, WorkspaceRecord};

/// Adds a savepoint named `name` with `snapshot` at ledger position `effect_seq` (the
/// run's last effect sequence number) to `record`, taken at `at_ms`. Returns it.
///
/// Errors: [`Refused::RunTransition`] unless the run (in `state`) is open or sealed, or
/// when the name is taken or a final decision was written.
pub fn add_savepoint(
    run: &Run,
    record: &mut WorkspaceRecord,
    name: &str,
    snapshot: &str,
    effect_seq: u64,
    at_ms: u64,
) -> Result<Savepoint, Refused> {
    if !matches!(run.state, RunState::Open | RunState::Sealed)
        || record.final_decision().is_some()
        || record.savepoints.iter().any(|s| s.name == name)
    {
        return Err(Refused::RunTransition {
            run: run.id.clone(),
            state: run.state,
            action: "given this savepoint (the name is taken, or the run is decided)",
        });
    }
    let savepoint = Savepoint {
        name: name.to_owned(),
        snapshot: snapshot.to_owned(),
        effect_seq,
        at_ms,
    };
    record.savepoints.push(savepoint.clone());
    Ok(savepoint)
}

/// Writes `decision` into `record` and a `workspace_KIND` decision into `run`.
///
/// Returns `(decision, true)` when made now (write both records). When a decision is still
/// unfinished, or a final decision exists and `decision` is final too, returns that one
/// and `false` (write nothing): a decision is never re-made differently.
///
/// Errors: [`Refused::RunTransition`] for a `rollback_to` after the final decision or
/// when the run is not open or sealed, and for a `rollback` after a commit decision.
pub fn decide_workspace(
    run: &mut Run,
    record: &mut WorkspaceRecord,
    decision: WorkspaceDecision,
) -> Result<(WorkspaceDecision, bool), Refused> {
    if let Some(pending) = record.unfinished() {
        return Ok((pending.clone(), false));
    }
    if let Some(existing) = record.final_decision() {
        if decision.kind != DecisionKind::RollbackTo {
            return Ok((existing.clone(), false));
        }
    }
    let open = matches!(run.state, RunState::Open | RunState::Sealed);
    if decision.kind == DecisionKind::RollbackTo && (!open || record.final_decision().is_some()) {
        return Err(Refused::RunTransition {
            run: run.id.clone(),
            state: run.state,
            action: "rolled back to a savepoint",
        });
    }
    if decision.kind == DecisionKind::Rollback
        && !matches!(
            run.state,
            RunState::Open | RunState::Sealed | RunState::Aborted
        )
    {
        return Err(Refused::RunTransition {
            run: run.id.clone(),
            state: run.state,
            action: "rolled back (a commit decision was written)",
        });
    }
    record.decisions.push(decision.clone());
    run.decisions.push(DecisionRecord {
        kind: format!("workspace_{}", decision.kind.as_str()),
        by: decision.by.clone(),
        at_ms: decision.at_ms,
        note: None,
    });
    Ok((decision, true))
}

/// Marks the unfinished decision of `record` finished at `at_ms`, with the `residue` found
/// after a rollback (`unverified` marks the record `rollback_unverified`) and `outcome`
/// in words. Returns whether the record changed (write it); with no unfinished decision
/// it is left alone.
pub fn finish_workspace_decision(
    record: &mut WorkspaceRecord,
    residue: Vec<String>,
    unverified: bool,
    outcome: &str,
    at_ms: u64,
) -> bool {
    let Some(decision) = record
        .decisions
        .iter_mut()
        .find(|d| d.finished_at_ms.is_none())
    else {
        return false;
    };
    decision.finished_at_ms = Some(at_ms);
    decision.residue = residue;
    decision.outcome = Some(outcome.to_owned());
    if unverified {
        record.rollback_unverified = true;
    }
    true
}

/// The effects of `effects` (a run's, in staging order) that a rollback to the position
/// `after_seq` discards: every pending (`staged` or `approved`) effect staged after it,
/// and every one that depends on a discarded one whatever its seq, changed to `discarded`
/// for `reason` at `at_ms`. Write them.
///
/// Errors: [`Refused::RunTransition`] unless the run is open or sealed.
pub fn discard_effects_after(
    run: &Run,
    effects: &[Effect],
    after_seq: u64,
    reason: &str,
    at_ms: u64,
) -> Result<Vec<Effect>, Refused> {
    if !matches!(run.state, RunState::Open | RunState::Sealed) {
        return Err(Refused::RunTransition {
            run: run.id.clone(),
            state: run.state,
            action: "rolled back to a savepoint",
        });
    }
    let mut gone: HashSet<EffectId> = effects
        .iter()
        .filter(|e| e.seq > after_seq)
        .map(|e| e.id.clone())
        .collect();
    // Dependents of anything gone are gone too (closure over effect -> effect lineage).
    loop {
        let before = gone.len();
        for effect in effects {
            if effect.depends_on.iter().any(|d| gone.contains(&d.effect)) {
                gone.insert(effect.id.clone());
            }
        }
        if gone.len() == before {
            break;
        }
    }
    let mut discarded = Vec::new();
    for effect in effects {
        if gone.contains(&effect.id) && effect.state.can_become(EffectState::Discarded) {
            let mut effect = effect.clone();
            effect.state = EffectState::Discarded;
            effect.state_reason = Some(reason.to_owned());
            effect.decisions.push(DecisionRecord {
                kind: "discard".into(),
                by: "rollback_to".into(),
                at_ms,
                note: None,
            });
            discarded.push(effect);
        }
    }
    Ok(discarded)
}
