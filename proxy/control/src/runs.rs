//! The runs service: every action on a run or an effect — seal, abort, commit, approve,
//! reject, savepoint and rollback-to — exists once here, and records who took it.
//!
//! The admin API, the review UI, `airlock run`'s workspace decision, recovery after a
//! restart and the data plane's `review = "auto"` all call these functions, so each
//! action has one behaviour and one actor record whoever asks. Each function returns the
//! ledger's typed refusals ([`airlock_ledger::Refused`]) unchanged.

use std::sync::Arc;

use airlock_ledger::{Effect, EffectId, LedgerError, Run, RunId, Verdict};

use crate::release::{blocking, CommitError, CommitReport};
use crate::Control;
use expect::{Expectation, Scope};
use workspace::{DecisionReport, WorkspaceError};

pub mod expect;
pub mod workspace;

/// Who took an action; its [`Actor::recorded`] text is what the ledger keeps as `by`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Actor {
    /// Someone with a named token ([`crate::access::Principal`]) on the admin API or the
    /// review UI, by the token's name (the admin token is `admin`).
    Person(String),
    /// A stage rule with `review = "auto"` approved the effect it staged.
    AutoReview {
        /// The rule's id.
        rule: String,
    },
    /// `airlock run`'s workspace decision.
    Orchestrator,
    /// A commit decided before a restart, finished by recovery.
    Recovery,
}

impl Actor {
    /// The text recorded as `by` on the decision: the reviewer's name, `policy: rule "ID"
    /// has review = "auto"`, `airlock run` or `recovery`.
    pub fn recorded(&self) -> String {
        match self {
            Self::Person(name) => name.clone(),
            Self::AutoReview { rule } => format!("policy: rule \"{rule}\" has review = \"auto\""),
            Self::Orchestrator => "airlock run".to_owned(),
            Self::Recovery => "recovery".to_owned(),
        }
    }
}

/// Seals `run` (it stages nothing more; reads still pass) and tells the notification
/// webhook when effects wait for a reviewer. Returns the run and its effects. Sealing a
/// sealed run changes nothing.
///
/// Errors: the ledger's refusal when the run is committed or aborted; storage faults.
pub async fn seal(
    control: &Arc<Control>,
    run: &RunId,
    actor: &Actor,
) -> Result<(Run, Vec<Effect>), CommitError> {
    let (ledger, run_id, by) = (control.ledger().clone(), run.clone(), actor.recorded());
    let sealed = blocking(move || {
        let run = ledger.seal(&run_id, &by)?;
        let effects = ledger.effects(&run.id)?;
        Ok((run, effects))
    })
    .await?;
    crate::notify::run_sealed(control, run);
    Ok(sealed)
}

/// Aborts `run`: every pending effect becomes `discarded`, nothing is sent, and the run
/// refuses all further requests. Returns the run and its effects.
///
/// Errors: the ledger's refusal when the run is already committed; storage faults.
pub async fn abort(
    control: &Arc<Control>,
    run: &RunId,
    actor: &Actor,
) -> Result<(Run, Vec<Effect>), CommitError> {
    let (closing, run_id, by) = (control.clone(), run.clone(), actor.recorded());
    blocking(move || {
        let run = closing.ledger().abort(&run_id, &by)?;
        closing.close_run(&run.id);
        let effects = closing.ledger().effects(&run.id)?;
        Ok((run, effects))
    })
    .await
}

/// Commits `run` ([`crate::release::commit`]: seal, decision, release in lineage order),
/// in the caller's task, bound to no expectation: `airlock run`'s workspace decision
/// (whose `--approve-all` approves whatever the finished agent left) holds its run lock
/// across the commit and writes its own outcome after it.
///
/// Errors: [`CommitError`]: the ledger's refusals (undecided effects without
/// `approve_pending`, a run already aborted), storage faults, a failed task.
pub async fn commit(
    control: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    actor: &Actor,
) -> Result<CommitReport, CommitError> {
    crate::release::commit(control, run, approve_pending, None, &actor.recorded()).await
}

/// A commit in a task of its own, awaited: once asked by a client (the admin API, the
/// review UI), a commit finishes even if the asker goes away half way. With `expect`,
/// the commit goes ahead only while the run's `staged` and `approved` effects are the
/// ones it names ([`expect`]).
///
/// Errors: as [`commit`], [`CommitError::Changed`] when the effects are not the expected
/// ones, and [`CommitError::Task`] when the task itself failed.
pub async fn commit_detached(
    control: &Arc<Control>,
    run: &RunId,
    approve_pending: bool,
    expect: Option<Expectation>,
    actor: &Actor,
) -> Result<CommitReport, CommitError> {
    let (control, run, by) = (control.clone(), run.clone(), actor.recorded());
    tokio::spawn(async move {
        crate::release::commit(&control, &run, approve_pending, expect.as_ref(), &by).await
    })
    .await
    .map_err(|e| CommitError::Task(e.to_string()))?
}

/// Approves or rejects one effect (`staged` -> `approved` | `rejected`). A reviewer's
/// approval is explicit and records the `review` flows the effect violates now (the ones
/// the reviewer was shown); any approval of an effect a `block` flow forbids is refused
/// ([`crate::flows`]).
///
/// Errors: [`airlock_ledger::Refused::FlowBlocked`]; the ledger's refusal of the
/// transition; `NotFound`; storage faults.
pub async fn decide_effect(
    control: &Arc<Control>,
    effect: &EffectId,
    verdict: Verdict,
    actor: &Actor,
) -> Result<Effect, CommitError> {
    let (control, effect, actor) = (control.clone(), effect.clone(), actor.clone());
    blocking(move || decide_effect_blocking(&control, &effect, verdict, &actor)).await
}

/// [`decide_effect`] on the calling thread (call it from the blocking pool).
///
/// Errors: as [`decide_effect`].
pub fn decide_effect_blocking(
    control: &Control,
    effect: &EffectId,
    verdict: Verdict,
    actor: &Actor,
) -> Result<Effect, LedgerError> {
    let ledger = control.ledger();
    if verdict == Verdict::Approve {
        let record = ledger
            .effect(effect)?
            .ok_or_else(|| LedgerError::NotFound {
                kind: "effect",
                id: effect.to_string(),
            })?;
        let check = crate::flows::check_blocking(control, &record)?;
        if let Some(refused) = crate::flows::blocked(&record, &check) {
            return Err(refused.into());
        }
        if let Actor::Person(name) = actor {
            return ledger.approve_explicitly(effect, name, &check.review_flows());
        }
    }
    ledger.decide_effect(effect, verdict, &actor.recorded())
}

/// What approving a run's effects staged by one rule did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovedByRule {
    /// How many were approved.
    pub approved: usize,
    /// Effects left staged because flow rules hold or block them, each with its flows.
    pub skipped: Vec<(EffectId, Vec<String>)>,
}

/// Approves every still-`staged` effect of `run` staged by `rule` (`None`: by no rule),
/// except those flow rules hold or block, which it skips and reports. With `expect`, it
/// approves nothing unless those staged effects are the ones it names
/// ([`Scope::Rule`]); the effects checked are the ones it approves (one read of the run).
///
/// Errors: [`CommitError::Changed`]; the ledger's refusal of a transition; storage faults.
pub async fn approve_staged_by_rule(
    control: &Arc<Control>,
    run: &RunId,
    rule: Option<String>,
    expect: Option<Expectation>,
    actor: &Actor,
) -> Result<ApprovedByRule, CommitError> {
    let (control, run, by) = (control.clone(), run.clone(), actor.recorded());
    let done = blocking(move || {
        let ledger = control.ledger();
        let mut out = ApprovedByRule::default();
        let effects = ledger.effects(&run)?;
        if let Some(expect) = &expect {
            if let Err(changed) =
                expect::check(&run, &effects, Scope::Rule(rule.as_deref()), expect)
            {
                return Ok(Err(changed));
            }
        }
        // The run's flow decisions in one load (none when the policy has no flows).
        let checks = crate::flows::check_run_blocking(&control, &run)?;
        for effect in effects {
            if effect.state == airlock_ledger::EffectState::Staged && effect.rule == rule {
                if let Some(check) = checks.get(&effect.id).filter(|c| !c.violations.is_empty()) {
                    let flows = check.violations.iter().map(|v| v.flow.clone()).collect();
                    out.skipped.push((effect.id.clone(), flows));
                    continue;
                }
                ledger.decide_effect(&effect.id, Verdict::Approve, &by)?;
                out.approved += 1;
            }
        }
        Ok(Ok(out))
    })
    .await?;
    done.map_err(CommitError::Changed)
}

/// Records a savepoint of `run`'s workspace, named `name` or numbered when `None`
/// ([`workspace::savepoint`]). Returns it and its snapshot's notes (`PATH: why`).
///
/// Errors: [`WorkspaceError`].
pub async fn savepoint(
    control: &Arc<Control>,
    run: &RunId,
    name: Option<String>,
) -> Result<(airlock_ledger::Savepoint, Vec<String>), WorkspaceError> {
    workspace::savepoint(control, run, name).await
}

/// Rolls `run`'s workspace and effects back to the savepoint `name`
/// ([`workspace::rollback_to`]), recorded as `actor`'s decision.
///
/// Errors: [`WorkspaceError`].
pub async fn rollback_to(
    control: &Arc<Control>,
    run: &RunId,
    name: &str,
    actor: &Actor,
) -> Result<DecisionReport, WorkspaceError> {
    workspace::rollback_to(control, run, name, &actor.recorded()).await
}

/// Finishes commits that were decided before a restart (docs/design.md: decisions already
/// written are finished), and from then on those of other control instances that died
/// mid-release: starts the takeover sweeper ([`crate::release::takeover`]), whose first
/// pass runs now. The effects a dead holder left `releasing` become `unknown` when its
/// lease is taken over; they are never re-sent. Returns the sweeper's task (it ends when
/// the control plane is dropped).
pub fn resume_commits(shared: &Arc<Control>) -> tokio::task::JoinHandle<()> {
    crate::release::takeover::spawn(shared)
}

/// The control plane's answer to the data plane's `review = "auto"`: approves the effect
/// a rule staged through [`decide_effect_blocking`], recorded as [`Actor::AutoReview`].
/// Holds the control plane weakly (the data plane must not keep it alive).
pub struct AutoReview(std::sync::Weak<Control>);

impl AutoReview {
    /// The answer of `control`, for [`airlock_dataplane::DataPlane::set_auto_review`].
    pub fn new(control: &Arc<Control>) -> Self {
        Self(Arc::downgrade(control))
    }
}

impl airlock_dataplane::enforce::AutoApprove for AutoReview {
    fn approve(&self, effect: &EffectId, rule: &str) -> Result<Effect, LedgerError> {
        let control = self.0.upgrade().ok_or_else(|| LedgerError::NotFound {
            kind: "control plane",
            id: effect.to_string(),
        })?;
        let actor = Actor::AutoReview {
            rule: rule.to_owned(),
        };
        let approved = decide_effect_blocking(&control, effect, Verdict::Approve, &actor)?;
        crate::access::audit::record_blocking(
            &control,
            airlock_ledger::NewAuditEntry::new(
                actor.recorded(),
                crate::access::audit::SERVER_ROLE,
                "approve",
            )
            .run(&approved.run_id)
            .effect(effect),
        );
        Ok(approved)
    }
}
