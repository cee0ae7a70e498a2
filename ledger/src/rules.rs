//! The state machines of runs and effects as pure functions: every store (sled, the
//! in-memory model, a later PostgreSQL backend) reads the records, calls these to decide
//! and change them, then writes the changed records in one atomic step. Nothing here
//! touches storage, so every backend refuses and changes exactly the same things.
//!
//! Each function either returns [`Refused`] and leaves its arguments as they were, or
//! changes them in place and says which records the caller must write.

use rand::Rng as _;

use crate::approval::Approval;
use crate::error::Refused;
use crate::model::{
    DecisionRecord, Digest, Effect, EffectId, EffectNotes, EffectState, NewEffect, Placeholder,
    ReleaseRecord, Run, RunFlag, RunId, RunState, ValueKind, MAX_RUN_FLAGS,
};
use crate::outcome::Delivery;
use crate::{ReleaseOutcome, Verdict};

pub mod outcome;
pub mod retention;
mod shapes;
pub mod workspace;
pub use shapes::may_hold_placeholder;

/// Why an effect is `discarded` when its run is aborted.
pub const ABORT_REASON: &str = "run aborted";

/// Why an effect left `releasing` by a restart is `unknown`.
pub const RECOVERY_REASON: &str =
    "airlock stopped while releasing this effect; it may or may not have reached the origin";

/// Compares two secrets in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new open run with identifier `id`, bound to `source` when given, created at `at_ms`
/// (ms since the Unix epoch). Its token is derived from `id` ([`crate::tokens`]): nothing
/// of it is stored.
pub fn new_run(id: RunId, profile: Option<String>, source: Option<String>, at_ms: u64) -> Run {
    Run {
        id,
        token_hash: None,
        plaintext_token: None,
        state: RunState::Open,
        profile,
        source,
        created_at_ms: at_ms,
        decisions: Vec::new(),
        flags: Vec::new(),
    }
}

/// Adds `flag` to `run` unless it already holds [`MAX_RUN_FLAGS`]. Returns whether it was
/// added (and the run must be written).
pub fn flag_run(run: &mut Run, flag: RunFlag) -> bool {
    if run.flags.len() >= MAX_RUN_FLAGS {
        return false;
    }
    run.flags.push(flag);
    true
}

/// Seals an open run, recording the decision by `by` at `at_ms`. Returns `true` when the
/// run changed (write it), `false` when it was already sealed.
///
/// Errors: [`Refused::RunTransition`] when the run is committing, committed or aborted.
pub fn seal(run: &mut Run, by: &str, at_ms: u64) -> Result<bool, Refused> {
    match run.state {
        RunState::Sealed => return Ok(false),
        RunState::Open => {}
        state => {
            return Err(Refused::RunTransition {
                run: run.id.clone(),
                state,
                action: "sealed",
            })
        }
    }
    run.state = RunState::Sealed;
    run.decisions.push(DecisionRecord {
        kind: "seal".into(),
        by: by.into(),
        at_ms,
        note: None,
    });
    Ok(true)
}

/// What [`begin_commit`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitStart {
    /// The run already finished committing: nothing to write, release must not proceed.
    Finished,
    /// A commit decision was written earlier: nothing to write, release must proceed.
    Resumed,
    /// The decision is made now: write the run and these effects (approved under
    /// `approve_pending`), then release.
    Begun(Vec<Effect>),
}

impl CommitStart {
    /// Whether release must (still) proceed: the `bool` of `begin_commit`'s answer.
    pub fn proceeds(&self) -> bool {
        !matches!(self, Self::Finished)
    }
}

/// The commit decision over `run` and its `effects` (staging order): seals the run if
/// open, approves every `staged` effect when `approve_pending` (as `BY (approve_pending)`),
/// and moves the run to `committing`.
///
/// Errors: [`Refused::Undecided`] when effects are `staged` and `approve_pending` is
/// false; [`Refused::RunTransition`] for an aborted run.
pub fn begin_commit(
    run: &mut Run,
    effects: &[Effect],
    approve_pending: bool,
    by: &str,
    at_ms: u64,
) -> Result<CommitStart, Refused> {
    match run.state {
        RunState::Committed | RunState::PartiallyCommitted => return Ok(CommitStart::Finished),
        RunState::Committing => return Ok(CommitStart::Resumed),
        RunState::Aborted => {
            return Err(Refused::RunTransition {
                run: run.id.clone(),
                state: run.state,
                action: "committed",
            })
        }
        RunState::Open | RunState::Sealed => {}
    }
    let undecided: Vec<&Effect> = effects
        .iter()
        .filter(|e| e.state == EffectState::Staged)
        .collect();
    if !undecided.is_empty() && !approve_pending {
        return Err(Refused::Undecided {
            run: run.id.clone(),
            effects: undecided.iter().map(|e| e.id.clone()).collect(),
        });
    }
    let approver = format!("{by} (approve_pending)");
    let mut approved = Vec::with_capacity(undecided.len());
    for effect in undecided {
        let mut effect = effect.clone();
        effect.state = EffectState::Approved;
        effect.approval = Some(Approval::new(&approver, effect.body_digest.clone(), at_ms));
        effect.decisions.push(DecisionRecord {
            kind: "approve".into(),
            by: approver.clone(),
            at_ms,
            note: None,
        });
        approved.push(effect);
    }
    if run.state == RunState::Open {
        run.decisions.push(DecisionRecord {
            kind: "seal".into(),
            by: by.into(),
            at_ms,
            note: None,
        });
    }
    run.state = RunState::Committing;
    run.decisions.push(DecisionRecord {
        kind: "commit".into(),
        by: by.into(),
        at_ms,
        note: None,
    });
    Ok(CommitStart::Begun(approved))
}

/// Ends a commit: `committed` when every approved effect of `effects` was released,
/// `partially_committed` when any failed, was skipped, is unknown or was never sent.
/// Returns `true` when the run changed (write it); a run not `committing` is left alone.
pub fn finish_commit(run: &mut Run, effects: &[Effect]) -> bool {
    if run.state != RunState::Committing {
        return false;
    }
    let partial = effects.iter().any(|e| {
        matches!(
            e.state,
            EffectState::Failed
                | EffectState::Unknown
                | EffectState::Skipped
                | EffectState::Approved
                | EffectState::Releasing
        )
    });
    run.state = if partial {
        RunState::PartiallyCommitted
    } else {
        RunState::Committed
    };
    true
}

/// Aborts an open or sealed run: returns the effects of `effects` that become `discarded`
/// (write them and the run), or `None` when the run was already aborted (write nothing).
///
/// Errors: [`Refused::RunTransition`] when a commit decision was already written.
pub fn abort(
    run: &mut Run,
    effects: &[Effect],
    by: &str,
    at_ms: u64,
) -> Result<Option<Vec<Effect>>, Refused> {
    match run.state {
        RunState::Aborted => return Ok(None),
        RunState::Open | RunState::Sealed => {}
        state => {
            return Err(Refused::RunTransition {
                run: run.id.clone(),
                state,
                action: "aborted",
            })
        }
    }
    let mut discarded = Vec::new();
    for effect in effects {
        if effect.state.can_become(EffectState::Discarded) {
            let mut effect = effect.clone();
            effect.state = EffectState::Discarded;
            effect.state_reason = Some(ABORT_REASON.into());
            discarded.push(effect);
        }
    }
    run.state = RunState::Aborted;
    run.decisions.push(DecisionRecord {
        kind: "abort".into(),
        by: by.into(),
        at_ms,
        note: None,
    });
    Ok(Some(discarded))
}

/// Whether `run` accepts a new effect.
///
/// Errors: [`Refused::RunNotOpen`] unless the run is open.
pub fn check_stage(run: &Run) -> Result<(), Refused> {
    if run.state != RunState::Open {
        return Err(Refused::RunNotOpen {
            run: run.id.clone(),
            state: run.state,
        });
    }
    Ok(())
}

/// The record of a newly staged effect: `staged`, with identifier `id`, staging order
/// `seq` in its run, the SHA-256 `body_digest` of `new.body`, the allocated
/// `placeholders` and the adapter's `notes`, created at `at_ms`.
pub fn new_effect(
    new: NewEffect<'_>,
    notes: EffectNotes,
    id: EffectId,
    seq: u64,
    body_digest: Digest,
    placeholders: Vec<Placeholder>,
    at_ms: u64,
) -> Effect {
    let mut effect = Effect {
        id,
        run_id: new.run_id.clone(),
        seq,
        method: new.method.to_owned(),
        url: new.url.to_owned(),
        headers: new.headers,
        body_digest,
        body_len: new.body.len() as u64,
        rule: new.rule.map(str::to_owned),
        policy_revision: new.policy_revision.to_owned(),
        created_at_ms: at_ms,
        state: EffectState::Staged,
        state_reason: None,
        decisions: Vec::new(),
        release: None,
        placeholders,
        depends_on: new.depends_on,
        inject: new.inject.map(str::to_owned),
        approval: None,
        summary: notes.summary,
        adapter: notes.adapter,
        compensates: notes.compensates,
        retriable: false,
        earlier_releases: Vec::new(),
        idempotency: None,
        context: notes.context,
    };
    effect.idempotency = notes
        .idempotency
        .map(|spec| outcome::idempotency_of(&effect, spec));
    effect
}

/// A run's per-run random base of number placeholders, in [10^15, 9 * 10^15) (16 digits,
/// within JSON's safe integers once the run's placeholder count is added).
pub fn random_placeholder_base() -> u64 {
    rand::thread_rng().gen_range(1_000_000_000_000_000..9_000_000_000_000_000)
}

/// A placeholder value of `kind`: for a number, `base + seq` (the run's base and the
/// placeholder's sequence number in the run); for a string, `ph_` and 24 random
/// characters; for a Slack timestamp, `9DDDDDDDDD.DDDDDD` (seconds after 2255); for a
/// SHA-1, `ffffffff` and 32 random hex digits; for a URL, `https://airlock.invalid/p/` and
/// 24 random characters (`base` and `seq` unused but for numbers).
/// The random kinds carry 80 to 128 random bits, so two placeholders of a run do not
/// collide.
pub fn placeholder_value(kind: ValueKind, base: u64, seq: u64) -> String {
    let mut rng = rand::thread_rng();
    let mut random = |alphabet: &[u8], n: usize| -> String {
        (0..n)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
            .collect()
    };
    const DIGITS: &[u8] = b"0123456789";
    match kind {
        ValueKind::Number => (base + seq).to_string(),
        ValueKind::String => format!("ph_{}", random(b"abcdefghijkmnopqrstuvwxyz23456789", 24)),
        ValueKind::SlackTs => format!("9{}.{}", random(DIGITS, 9), random(DIGITS, 6)),
        ValueKind::Sha1 => format!("ffffffff{}", random(b"0123456789abcdef", 32)),
        ValueKind::Url => format!(
            "https://airlock.invalid/p/{}",
            random(b"abcdefghijkmnopqrstuvwxyz23456789", 24)
        ),
    }
}

/// Records a reviewer's verdict on `effect` of `run`, by `by` at `at_ms`.
///
/// Errors: [`Refused::RunTransition`] unless the run is open or sealed;
/// [`Refused::EffectTransition`] unless the effect is pending.
pub fn decide_effect(
    effect: &mut Effect,
    run: &Run,
    verdict: Verdict,
    by: &str,
    at_ms: u64,
) -> Result<(), Refused> {
    let to = match verdict {
        Verdict::Approve => EffectState::Approved,
        Verdict::Reject => EffectState::Rejected,
    };
    if !matches!(run.state, RunState::Open | RunState::Sealed) {
        return Err(Refused::RunTransition {
            run: run.id.clone(),
            state: run.state,
            action: if verdict == Verdict::Approve {
                "changed by approving an effect"
            } else {
                "changed by rejecting an effect"
            },
        });
    }
    // A verdict is for pending effects only: the edges out of `failed`, `unknown` and
    // `skipped` are a retry's or a settlement's (`outcome`).
    if !effect.state.is_pending() {
        return Err(Refused::EffectTransition {
            effect: effect.id.clone(),
            from: effect.state,
            to,
        });
    }
    check_effect_transition(effect, to)?;
    effect.state = to;
    effect.approval = match verdict {
        Verdict::Approve => Some(Approval::new(by, effect.body_digest.clone(), at_ms)),
        Verdict::Reject => None,
    };
    effect.decisions.push(DecisionRecord {
        kind: if verdict == Verdict::Approve {
            "approve"
        } else {
            "reject"
        }
        .into(),
        by: by.into(),
        at_ms,
        note: None,
    });
    Ok(())
}

/// A reviewer's own approval of `effect` ([`decide_effect`] with [`Verdict::Approve`]),
/// marked explicit and recording the `review` flows (`flows`, ids) it was shown.
///
/// Errors: as [`decide_effect`].
pub fn approve_explicitly(
    effect: &mut Effect,
    run: &Run,
    by: &str,
    flows: &[String],
    at_ms: u64,
) -> Result<(), Refused> {
    decide_effect(effect, run, Verdict::Approve, by, at_ms)?;
    if let Some(approval) = effect.approval.as_mut() {
        approval.explicit = true;
        approval.flows = flows.to_vec();
    }
    Ok(())
}

/// Errors: [`Refused::EffectTransition`] unless `effect` may become `to`.
fn check_effect_transition(effect: &Effect, to: EffectState) -> Result<(), Refused> {
    if effect.state.can_become(to) {
        Ok(())
    } else {
        Err(Refused::EffectTransition {
            effect: effect.id.clone(),
            from: effect.state,
            to,
        })
    }
}

fn release_started(at_ms: u64) -> ReleaseRecord {
    ReleaseRecord {
        started_at_ms: at_ms,
        finished_at_ms: None,
        status: None,
        headers: Vec::new(),
        body_digest: None,
        body_len: 0,
        error: None,
    }
}

/// Marks an approved effect `releasing`, its release started at `at_ms`. Because only
/// `approved` may become `releasing` and nothing returns to `approved` after it, this
/// succeeds at most once per effect.
///
/// Errors: [`Refused::EffectTransition`] unless the effect is `approved`.
pub fn mark_releasing(effect: &mut Effect, at_ms: u64) -> Result<(), Refused> {
    check_effect_transition(effect, EffectState::Releasing)?;
    effect.state = EffectState::Releasing;
    effect.release = Some(release_started(at_ms));
    Ok(())
}

/// Records a release's outcome on `effect`: `released` when `outcome.error` is `None`;
/// else, by [`ReleaseOutcome::delivery`], `failed` (the origin answered), `failed` and
/// retriable (provably nothing was sent) or `unknown` (the request may have reached the
/// origin, and no answer came). `response_digest` is the SHA-256 digest of
/// `outcome.body`, which the caller stores (only once this returned `Ok`). Finished at
/// `at_ms`.
///
/// Errors: [`Refused::EffectTransition`] when the effect may not take that state.
pub fn record_release(
    effect: &mut Effect,
    outcome: ReleaseOutcome<'_>,
    response_digest: Digest,
    at_ms: u64,
) -> Result<(), Refused> {
    let ReleaseOutcome {
        status,
        headers,
        body: _,
        body_len,
        error,
        resolved,
        delivery,
    } = outcome;
    let to = match (&error, delivery) {
        (None, _) => EffectState::Released,
        (Some(_), Delivery::Unanswered) => EffectState::Unknown,
        (Some(_), Delivery::Answered | Delivery::NotSent) => EffectState::Failed,
    };
    check_effect_transition(effect, to)?;
    let release = effect.release.get_or_insert(release_started(at_ms));
    release.finished_at_ms = Some(at_ms);
    release.status = status;
    release.headers = headers;
    release.body_digest = Some(response_digest);
    release.body_len = body_len;
    release.error = error.clone();
    effect.state = to;
    effect.retriable = to == EffectState::Failed && delivery == Delivery::NotSent;
    effect.state_reason = error;
    for (value, real) in resolved {
        if let Some(placeholder) = effect.placeholders.iter_mut().find(|p| p.value == value) {
            placeholder.real = real;
        }
    }
    Ok(())
}

/// Ends an approved effect without sending it: `to` is `skipped` or `failed` (retriable:
/// nothing was sent), for `reason`;
/// or `rejected` (from `staged` or `approved`), which a `block` flow decides at commit: the
/// approval is dropped and a `reject` decision by `policy: flow rules` recorded.
///
/// Errors: [`Refused::EffectTransition`] for any other `to`, or when the effect may not
/// take it.
pub fn settle_unsent(effect: &mut Effect, to: EffectState, reason: &str) -> Result<(), Refused> {
    if to == EffectState::Rejected
        && matches!(effect.state, EffectState::Staged | EffectState::Approved)
    {
        effect.state = to;
        effect.state_reason = Some(reason.to_owned());
        effect.approval = None;
        effect.decisions.push(DecisionRecord {
            kind: "reject".into(),
            by: FLOW_RULES_ACTOR.into(),
            at_ms: crate::now_ms(),
            note: None,
        });
        return Ok(());
    }
    if !matches!(to, EffectState::Skipped | EffectState::Failed) {
        return Err(Refused::EffectTransition {
            effect: effect.id.clone(),
            from: effect.state,
            to,
        });
    }
    check_effect_transition(effect, to)?;
    effect.state = to;
    effect.state_reason = Some(reason.to_owned());
    // Nothing was sent, so a failure here may be retried.
    effect.retriable = to == EffectState::Failed;
    Ok(())
}

/// The `by` recorded when a `block` flow rejects an effect at commit.
pub const FLOW_RULES_ACTOR: &str = "policy: flow rules";

/// Recovery after a restart: an effect left `releasing` becomes `unknown` (it may or may
/// not have reached its origin). Returns whether it changed (write it).
pub fn recover(effect: &mut Effect) -> bool {
    if effect.state != EffectState::Releasing {
        return false;
    }
    effect.state = EffectState::Unknown;
    effect.state_reason = Some(RECOVERY_REASON.into());
    true
}
