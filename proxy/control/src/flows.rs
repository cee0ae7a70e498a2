//! Flow rules on the control plane: the flow decision shown with an effect, the gate on
//! approvals, and the commit's final pass over the final lineage
//! (docs/policy.md#flow-rules).
//!
//! - An effect a `block` flow forbids cannot be approved, and the final pass rejects it
//!   (its dependents are then skipped at release).
//! - An effect a `review` flow holds is released only on a reviewer's own approval of it
//!   ([`airlock_ledger::Approval::explicit`]) that was made while that flow was shown
//!   ([`airlock_ledger::Approval::flows`]). Bulk approvals (`approve_pending`, approve
//!   staged by rule), `review = "auto"` and `airlock run` never release it: the commit is
//!   refused with [`Refused::FlowHeld`] and nothing is approved or released.
//! - The final pass analyses every undecided or approved effect again against all of its
//!   run's reads, so analysis that finished after an approval, and reads that finished
//!   after the effect was staged, are decided on.

use std::collections::HashMap;
use std::sync::Arc;

use airlock_dataplane::flows::{check_effect, FlowCheck, RunSources};
use airlock_dataplane::lineage::reanalyse_effects;
use airlock_ledger::{
    Effect, EffectId, EffectLineage, EffectState, LedgerError, Refused, RunId, RunState, Store,
};
use airlock_policy::Policy;
use serde::Serialize;
use tracing::info;

use crate::release::{blocking, CommitError};
use crate::Control;

/// The flow decision on `effect` now, from its stored lineage, under the policy in force.
///
/// Errors: storage faults.
pub async fn check(control: &Arc<Control>, effect: &Effect) -> Result<FlowCheck, CommitError> {
    let (ledger, policy, effect) = (
        control.ledger().clone(),
        control.policy().current(),
        effect.clone(),
    );
    blocking(move || check_effect(&*ledger, &policy, &effect)).await
}

/// [`check`] on the calling thread.
///
/// Errors: storage faults.
pub fn check_blocking(control: &Control, effect: &Effect) -> Result<FlowCheck, LedgerError> {
    check_effect(&**control.ledger(), &control.policy().current(), effect)
}

/// The flow decisions on every effect of `run`, under the policy in force: its reads and
/// effects loaded once, then each effect's stored lineage. Empty when the policy has no
/// flows (nothing to show).
///
/// Errors: storage faults.
pub fn check_run_blocking(
    control: &Control,
    run: &RunId,
) -> Result<HashMap<EffectId, FlowCheck>, LedgerError> {
    let policy = control.policy().current();
    if policy.flows().is_empty() {
        return Ok(HashMap::new());
    }
    let ledger = control.ledger();
    let sources = RunSources::load(&**ledger, run)?;
    let mut out = HashMap::new();
    for effect in ledger.effects(run)? {
        let lineage = ledger.effect_lineage(&effect.id)?;
        out.insert(
            effect.id.clone(),
            sources.check(&policy, &effect, lineage.as_ref()),
        );
    }
    Ok(out)
}

/// Whether flow rules hold `effect` now, as lists and pages mark it: `"blocked"` (a
/// `block` flow forbids it, so it cannot be approved and commit rejects it) or `"held"`
/// (a `review` flow holds it until a reviewer approves it by themselves). `None` once
/// the effect is decided for good (released, rejected, failed…) or nothing holds it.
pub fn hold(effect: &Effect, check: &FlowCheck) -> Option<&'static str> {
    if !matches!(effect.state, EffectState::Staged | EffectState::Approved) {
        return None;
    }
    if check.blocks().next().is_some() {
        Some("blocked")
    } else if !check.approval_suffices(effect) {
        Some("held")
    } else {
        None
    }
}

/// The `block` refusal of approving an effect `check` forbids, if any.
pub fn blocked(effect: &Effect, check: &FlowCheck) -> Option<Refused> {
    let blocks: Vec<_> = check.blocks().collect();
    if blocks.is_empty() {
        return None;
    }
    Some(Refused::FlowBlocked {
        effect: effect.id.clone(),
        flows: blocks.iter().map(|v| v.flow.clone()).collect(),
        detail: blocks
            .iter()
            .map(|v| format!("flow \"{}\": {}", v.flow, v.reason))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// What the commit's final pass does with one undecided or approved effect, given its
/// flow decision: the one rule the commit's final pass applies and `policy replay`
/// (`POST /v1/runs/{id}/flows/replay`) reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AtCommit {
    /// A `block` flow forbids it: the commit rejects it with `detail` (each flow and its
    /// reason) and skips its dependents.
    Rejected {
        /// `flow "ID": reason`, `; `-separated.
        detail: String,
    },
    /// The commit is refused (`flow_review_required`) while it is held: `why` names each
    /// `review` flow no reviewer acknowledged by approving this effect by itself, or the
    /// run's labelled reads still streaming (not analysed yet).
    Held {
        /// One line per cause.
        why: Vec<String>,
    },
    /// Flows do not stop it: it is released if approved (or by `approve_pending`).
    Clear,
}

/// The final pass's rule for `effect` under `check`, with `streaming` labelled reads of
/// its run still streaming: a block rejects it; an unacknowledged review flow holds it;
/// streaming reads hold any effect a reviewer did not approve by itself; else clear.
pub fn at_commit(effect: &Effect, check: &FlowCheck, streaming: usize) -> AtCommit {
    if let Some(Refused::FlowBlocked { detail, .. }) = blocked(effect, check) {
        AtCommit::Rejected { detail }
    } else if !check.approval_suffices(effect) {
        AtCommit::Held {
            why: check
                .review_flows()
                .iter()
                .map(|f| format!("flow \"{f}\""))
                .collect(),
        }
    } else if streaming > 0 && !effect.approval.as_ref().is_some_and(|a| a.explicit) {
        AtCommit::Held {
            why: vec![format!(
                "{streaming} labelled read(s) of the run still streaming, not analysed yet"
            )],
        }
    } else {
        AtCommit::Clear
    }
}

/// One effect's flow decision under one policy, as the live path makes it: the
/// violations from its stored lineage ([`RunSources::check`]) and, while it is undecided
/// or approved, what the commit's final pass would do ([`at_commit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decided {
    /// The flow decision.
    #[serde(flatten)]
    pub check: FlowCheck,
    /// What the commit would do (`None` once the effect is decided for good).
    pub at_commit: Option<AtCommit>,
}

/// One effect of a run decided under the policy in force (`was`) and a candidate (`now`).
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The effect.
    pub effect: Effect,
    /// Under the policy in force.
    pub was: Decided,
    /// Under the candidate.
    pub now: Decided,
}

/// Every effect of `run` decided under the policy in force and under `candidate`, with
/// the same inputs the live decision builds ([`RunSources`]: stored lineage, placeholder
/// edges, lineage carried through placeholders, the reads' recorded labels) and the same
/// commit rule ([`at_commit`], with the run's labelled reads streaming now). Nothing is
/// written: no reanalysis, no verdict. Effects in staging order.
///
/// Errors: storage faults.
pub fn replay_blocking(
    control: &Control,
    run: &RunId,
    candidate: &Policy,
) -> Result<Vec<Replayed>, LedgerError> {
    let in_force = control.policy().current();
    let streaming = control.data().streaming_labelled_reads(run);
    let ledger = control.ledger();
    let sources = RunSources::load(&**ledger, run)?;
    let decide = |policy: &Policy, effect: &Effect, lineage: Option<&EffectLineage>| {
        let check = sources.check(policy, effect, lineage);
        let at_commit = undecided(effect).then(|| {
            // The final pass runs only under a policy with flows.
            if policy.flows().is_empty() {
                AtCommit::Clear
            } else {
                at_commit(effect, &check, streaming)
            }
        });
        Decided { check, at_commit }
    };
    let mut effects = ledger.effects(run)?;
    effects.sort_by_key(|e| e.seq);
    let mut out = Vec::with_capacity(effects.len());
    for effect in effects {
        let lineage = ledger.effect_lineage(&effect.id)?;
        let was = decide(&in_force, &effect, lineage.as_ref());
        let now = decide(candidate, &effect, lineage.as_ref());
        out.push(Replayed { effect, was, now });
    }
    Ok(out)
}

/// The commit's final pass over `run`, before the commit decision is written. It
/// analyses each undecided or approved effect again against every analysed read of the
/// run and decides flows on that final lineage, then refuses the commit when a `review`
/// flow holds an effect no reviewer approved by itself, or when effects are undecided
/// and `approve_pending` is not set (as the ledger would). Only when the commit will go
/// ahead does it seal the run, decide again any effect staged meanwhile, and reject each
/// effect a `block` flow forbids, with the flow's reason. A refused commit changes
/// nothing. Does nothing when the policy has no flows or the run is past its decision.
///
/// Errors: [`Refused::FlowHeld`], [`Refused::Undecided`]; storage faults.
pub(crate) async fn final_pass(
    control: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    by: &str,
) -> Result<(), CommitError> {
    let policy = control.policy().current();
    if policy.flows().is_empty() {
        return Ok(());
    }
    // A labelled read still streaming carries data not analysed yet: wait a little for
    // it to end, then for the lineage worker to store what is queued.
    let data = control.data();
    let deadline = tokio::time::Instant::now() + STREAMING_WAIT;
    while data.streaming_labelled_reads(run) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let streaming = data.streaming_labelled_reads(run);
    if !data.lineage_settled(SETTLE_WAIT).await {
        tracing::warn!(run.id = %run, "the lineage worker did not settle before the commit's final pass");
    }
    let (ledger, run, by) = (control.ledger().clone(), run.clone(), by.to_owned());
    blocking(move || final_pass_blocking(&*ledger, &policy, &run, approve_pending, streaming, &by))
        .await
}

/// How long the final pass waits for a run's labelled reads that are still streaming.
const STREAMING_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// How long it waits for the lineage worker to store what is queued.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The effects still to be decided or released.
fn undecided(effect: &Effect) -> bool {
    matches!(effect.state, EffectState::Staged | EffectState::Approved)
}

/// One decision over the run's undecided effects, reanalysing those not in `analysed`.
/// Returns the effects to reject with their reasons, or the refusal.
fn decide(
    ledger: &dyn Store,
    policy: &Policy,
    run: &RunId,
    approve_pending: bool,
    streaming: usize,
    analysed: &mut std::collections::HashSet<airlock_ledger::EffectId>,
) -> Result<Vec<(airlock_ledger::EffectId, String)>, LedgerError> {
    let effects: Vec<Effect> = ledger.effects(run)?.into_iter().filter(undecided).collect();
    let fresh: Vec<_> = effects
        .iter()
        .filter(|e| !analysed.contains(&e.id))
        .map(|e| e.id.clone())
        .collect();
    reanalyse_effects(ledger, run, &fresh)?;
    analysed.extend(fresh);
    let sources = RunSources::load(ledger, run)?;
    let mut held = Vec::new();
    let mut rejects = Vec::new();
    let mut staged = Vec::new();
    for effect in &effects {
        let lineage = ledger.effect_lineage(&effect.id)?;
        let check = sources.check(policy, effect, lineage.as_ref());
        match at_commit(effect, &check, streaming) {
            AtCommit::Rejected { detail } => rejects.push((effect.id.clone(), detail)),
            AtCommit::Held { why } => held.push((effect.id.clone(), why)),
            AtCommit::Clear if effect.state == EffectState::Staged => {
                staged.push(effect.id.clone());
            }
            AtCommit::Clear => {}
        }
    }
    if !held.is_empty() {
        let detail = held
            .iter()
            .map(|(id, why)| format!("{id}: {}", why.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Refused::FlowHeld {
            run: run.clone(),
            effects: held.into_iter().map(|(id, _)| id).collect(),
            detail,
        }
        .into());
    }
    if !staged.is_empty() && !approve_pending {
        return Err(Refused::Undecided {
            run: run.clone(),
            effects: staged,
        }
        .into());
    }
    Ok(rejects)
}

fn final_pass_blocking(
    ledger: &dyn Store,
    policy: &Policy,
    run: &RunId,
    approve_pending: bool,
    streaming: usize,
    by: &str,
) -> Result<(), LedgerError> {
    let Some(record) = ledger.run(run)? else {
        return Ok(());
    };
    if !matches!(record.state, RunState::Open | RunState::Sealed) {
        return Ok(());
    }
    let mut analysed = std::collections::HashSet::new();
    let mut rejects = decide(
        ledger,
        policy,
        run,
        approve_pending,
        streaming,
        &mut analysed,
    )?;
    if record.state == RunState::Open {
        // Nothing may be staged behind the decision, and the commit's own approval of
        // pending effects must cover only effects decided here: seal, then decide once
        // more with any effect staged meanwhile (only those are analysed again).
        ledger.seal(run, by)?;
        rejects = decide(
            ledger,
            policy,
            run,
            approve_pending,
            streaming,
            &mut analysed,
        )?;
    }
    for (id, detail) in rejects {
        info!(run.id = %run, effect.id = %id, reason = %detail, "a block flow rejected the effect at commit");
        ledger.settle_unsent(
            &id,
            EffectState::Rejected,
            &format!("rejected at commit: {detail}"),
        )?;
    }
    Ok(())
}
