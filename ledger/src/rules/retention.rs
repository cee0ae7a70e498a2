//! Retention: which runs are *finished*, so that [`crate::RunStore::prune_run`] may remove
//! every record of them (docs/architecture.md, "Retention"), and when they finished.
//!
//! A run is finished when nothing about it can still change by itself or by a decision
//! still owed, so removing it loses no pending work (its NDJSON export keeps the record):
//!
//! | state | finished? | why |
//! | --- | --- | --- |
//! | `open` | no | the agent may still stage effects and make reads |
//! | `sealed` | no | a commit or abort decision is still owed |
//! | `committing` | no | approved effects are being released |
//! | `committed` | yes | every approved effect was released; nothing is left to send |
//! | `partially_committed` | only with nothing left in flight | an effect `releasing` or `approved` (a retry requeued it) may still be sent, and an `unknown` one awaits a reviewer's settlement, which needs its record; `failed`, `skipped` and `rejected` ones are final |
//! | `aborted` | yes | nothing was sent and nothing will be |
//!
//! A run whose workspace decision (`airlock run`) is written but not finished is not
//! finished either: finishing it (a rollback's residue, a commit) needs the record.

use crate::error::Refused;
use crate::model::{Effect, EffectState, Run, RunState};
use crate::workspace::WorkspaceRecord;

/// Whether `run` (with its `effects` and its `workspace`, if any) is finished, by the
/// table in this module's documentation.
///
/// Errors: [`Refused::NotFinished`] naming the state and, for a partially committed run
/// or a workspace decision, what is left.
pub fn check_finished(
    run: &Run,
    effects: &[Effect],
    workspace: Option<&WorkspaceRecord>,
) -> Result<(), Refused> {
    let refuse = |reason: String| Refused::NotFinished {
        run: run.id.clone(),
        state: run.state,
        reason,
    };
    match run.state {
        RunState::Open => return Err(refuse("the agent may still stage effects".into())),
        RunState::Sealed => return Err(refuse("a commit or abort decision is owed".into())),
        RunState::Committing => return Err(refuse("its effects are being released".into())),
        RunState::Committed | RunState::Aborted => {}
        RunState::PartiallyCommitted => {
            let left: Vec<String> = effects
                .iter()
                .filter(|e| {
                    matches!(
                        e.state,
                        EffectState::Releasing | EffectState::Approved | EffectState::Unknown
                    )
                })
                .map(|e| format!("{} is {}", e.id, e.state))
                .collect();
            if !left.is_empty() {
                return Err(refuse(format!(
                    "effects are left in flight or await settlement: {}",
                    left.join(", ")
                )));
            }
        }
    }
    if let Some(decision) = workspace
        .and_then(|w| w.decisions.last())
        .filter(|d| d.finished_at_ms.is_none())
    {
        return Err(refuse(format!(
            "its workspace decision ({}) is not finished",
            decision.kind.as_str()
        )));
    }
    Ok(())
}

/// When `run` finished, in ms since the Unix epoch: the latest time recorded on it or its
/// effects (a run decision, an effect decision, a release's end). `airlock runs prune
/// --finished-before` compares it with now.
pub fn finished_at_ms(run: &Run, effects: &[Effect]) -> u64 {
    let run_latest = run.decisions.iter().map(|d| d.at_ms).max();
    let effect_latest = effects.iter().flat_map(|e| {
        e.decisions.iter().map(|d| d.at_ms).chain(
            e.release
                .iter()
                .chain(&e.earlier_releases)
                .map(|r| r.finished_at_ms.unwrap_or(r.started_at_ms)),
        )
    });
    run_latest
        .into_iter()
        .chain(effect_latest)
        .max()
        .unwrap_or(run.created_at_ms)
        .max(run.created_at_ms)
}

/// Every body digest `effect` references: its request body, and its releases' response
/// bodies (the current one and earlier attempts). A body stays while any effect of a
/// kept run references it.
pub fn body_digests(effect: &Effect) -> impl Iterator<Item = &crate::model::Digest> {
    std::iter::once(&effect.body_digest).chain(
        effect
            .release
            .iter()
            .chain(&effect.earlier_releases)
            .filter_map(|r| r.body_digest.as_ref()),
    )
}
