//! The ways out of a doubtful or failed release, as pure functions (docs/design.md,
//! "Outcomes of a release"):
//!
//! - **retry** (`failed -> approved`, `unknown -> approved`): only an effect of which
//!   provably nothing was sent ([`Effect::retriable`]), or an `unknown` one whose origin
//!   honours the idempotency key it was sent with and whose rule allows it
//!   (`retry_unknown = "idempotent"`). At most once per attempt: the retry leaves the
//!   state the retry needs, so a second one is refused until that attempt ends.
//! - **settle** (`unknown -> released`, `unknown -> failed`): a reviewer who checked the
//!   origin says whether it has the effect; delivered may carry the real values of its
//!   placeholders, for its dependents.
//! - **requeue** (`skipped -> approved`): the skipped dependents of a retried or
//!   settled-delivered effect are put back, and the release decides them again.
//!
//! Each puts a finished commit back to `committing` (recorded as a `resume` decision on
//! the run), so that the commit authority releases what was put back and then ends the
//! commit again, `committed` or `partially_committed`; a restart in between finishes it
//! like any decided commit.

use std::collections::HashSet;

use crate::error::Refused;
use crate::model::{DecisionRecord, Effect, EffectId, EffectState, Run, RunState, ValueKind};
use crate::outcome::{kinds, Idempotency, IdempotencySpec, Settlement};

/// The idempotency key of a newly staged `effect` under `spec`: the client's own value of
/// the header when its request carried one, else `airlock-` and the effect's id (unique,
/// and the same on every attempt).
pub fn idempotency_of(effect: &Effect, spec: IdempotencySpec) -> Idempotency {
    let header = spec.header.to_ascii_lowercase();
    let key = effect
        .headers
        .iter()
        .find(|h| h.name == header)
        .map(|h| String::from_utf8_lossy(h.value.as_bytes()).into_owned())
        .unwrap_or_else(|| format!("airlock-{}", effect.id));
    Idempotency {
        header,
        key,
        retry_unknown: spec.retry_unknown,
    }
}

/// Why `effect` may not be retried, or `None` when it may.
fn not_retriable(effect: &Effect) -> Option<Refused> {
    let reason = match effect.state {
        EffectState::Failed if effect.retriable => return None,
        EffectState::Unknown
            if effect
                .idempotency
                .as_ref()
                .is_some_and(|key| key.retry_unknown) =>
        {
            return None
        }
        EffectState::Failed => match effect.release.as_ref().and_then(|r| r.status) {
            Some(status) => format!(
                "the origin received it and answered {status}; sending it again is a new request, not a retry"
            ),
            None => "the origin received it and refused it; sending it again is a new request, not a retry".to_owned(),
        },
        EffectState::Unknown => match &effect.idempotency {
            Some(key) => format!(
                "it may have reached the origin; it was sent with {} {}, but its rule does not say retry_unknown = \"idempotent\"; check the origin, then `airlock settle {} --delivered` or `--not-delivered`",
                key.header, key.key, effect.id
            ),
            None => format!(
                "it may have reached the origin, and it carries no idempotency key the origin would deduplicate by; check the origin, then `airlock settle {} --delivered` or `--not-delivered`",
                effect.id
            ),
        },
        from => {
            return Some(Refused::EffectTransition {
                effect: effect.id.clone(),
                from,
                to: EffectState::Approved,
            })
        }
    };
    Some(Refused::NotRetriable {
        effect: effect.id.clone(),
        state: effect.state,
        reason,
    })
}

/// Whether `effect` may be retried now ([`retry`] would not refuse it for its own state).
pub fn is_retriable(effect: &Effect) -> bool {
    not_retriable(effect).is_none()
}

/// Errors: [`Refused::RunTransition`] unless a commit decision was written for `run`.
fn check_committed(run: &Run, action: &'static str) -> Result<(), Refused> {
    match run.state {
        RunState::Committing | RunState::Committed | RunState::PartiallyCommitted => Ok(()),
        state => Err(Refused::RunTransition {
            run: run.id.clone(),
            state,
            action,
        }),
    }
}

/// Puts a finished commit of `run` back to `committing`, recording why.
fn resume(run: &mut Run, effect: &EffectId, by: &str, at_ms: u64) {
    if run.state != RunState::Committing {
        run.state = RunState::Committing;
        let mut decision = DecisionRecord::new(kinds::RESUME, by, at_ms);
        decision.note = Some(format!("to release {effect} again"));
        run.decisions.push(decision);
    }
}

/// The `skipped` effects of `effects` that wait, directly or through other skipped
/// effects, for `root`: each becomes `approved` again with a `requeue` decision.
fn requeue(effects: &[Effect], root: &EffectId, by: &str, at_ms: u64) -> Vec<Effect> {
    let mut waiting_for: HashSet<&EffectId> = HashSet::from([root]);
    let mut out: Vec<Effect> = Vec::new();
    loop {
        let found: Vec<&Effect> = effects
            .iter()
            .filter(|e| e.state == EffectState::Skipped && !waiting_for.contains(&e.id))
            .filter(|e| e.depends_on.iter().any(|d| waiting_for.contains(&d.effect)))
            .collect();
        if found.is_empty() {
            return out;
        }
        for effect in found {
            waiting_for.insert(&effect.id);
            let mut effect = effect.clone();
            effect.state = EffectState::Approved;
            effect.state_reason = None;
            let mut decision = DecisionRecord::new(kinds::REQUEUE, by, at_ms);
            decision.note = Some(format!(
                "{root}, which it depends on, was retried or settled"
            ));
            effect.decisions.push(decision);
            out.push(effect);
        }
    }
}

/// A retry of effect `id` of `run` (`effects`: the run's, in staging order), by `by` at
/// `at_ms`: the effect becomes `approved` (its last release record moves to
/// [`Effect::earlier_releases`]), its skipped dependents are requeued, and a finished
/// commit goes back to `committing`. Returns the changed effects, the retried one first;
/// write them and the run.
///
/// Errors: [`Refused::NotRetriable`] for an effect that may have reached its origin (or
/// that its origin refused); [`Refused::EffectTransition`] for any other state;
/// [`Refused::RunTransition`] unless a commit decision was written.
pub fn retry(
    run: &mut Run,
    effects: &[Effect],
    id: &EffectId,
    by: &str,
    at_ms: u64,
) -> Result<Vec<Effect>, Refused> {
    let Some(effect) = effects.iter().find(|e| &e.id == id) else {
        return Ok(Vec::new());
    };
    if let Some(refused) = not_retriable(effect) {
        return Err(refused);
    }
    check_committed(run, "resumed by a retry")?;
    let mut effect = effect.clone();
    if let Some(release) = effect.release.take() {
        effect.earlier_releases.push(release);
    }
    effect.state = EffectState::Approved;
    effect.state_reason = None;
    effect.retriable = false;
    effect
        .decisions
        .push(DecisionRecord::new(kinds::RETRY, by, at_ms));
    let mut changed = vec![effect];
    changed.extend(requeue(effects, id, by, at_ms));
    resume(run, id, by, at_ms);
    Ok(changed)
}

/// The placeholder of `effect` that `name` (its JSON pointer or its stand-in value) names.
fn placeholder_index(effect: &Effect, name: &str) -> Option<usize> {
    effect
        .placeholders
        .iter()
        .position(|p| p.pointer == name || p.value == name)
}

/// Sets the real values `values` on `effect`'s placeholders (on a copy the caller keeps
/// only on success). Returns the note of the `supply_values` decision.
fn supply_values(effect: &mut Effect, values: &[(String, String)]) -> Result<String, Refused> {
    let refuse = |reason: String| Refused::BadSettlement {
        effect: effect.id.clone(),
        reason,
    };
    let mut shown = Vec::with_capacity(values.len());
    for (name, value) in values {
        let Some(index) = placeholder_index(effect, name) else {
            let known: Vec<&str> = effect
                .placeholders
                .iter()
                .map(|p| p.pointer.as_str())
                .collect();
            return Err(refuse(if known.is_empty() {
                format!("it has no placeholders, so no value {name} to supply")
            } else {
                format!(
                    "it has no placeholder {name}; its placeholders: {}",
                    known.join(", ")
                )
            }));
        };
        let placeholder = &effect.placeholders[index];
        let digits = value.strip_prefix('-').unwrap_or(value);
        if placeholder.kind == ValueKind::Number
            && (digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(refuse(format!(
                "{} stands for a number, and {value:?} is not an integer",
                placeholder.pointer
            )));
        }
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(refuse(format!(
                "the value of {} is empty or holds control characters",
                placeholder.pointer
            )));
        }
        if let Some(real) = &placeholder.real {
            if real != value {
                return Err(refuse(format!(
                    "{} already has the real value {real:?}, which the origin gave or a reviewer supplied",
                    placeholder.pointer
                )));
            }
        }
        shown.push(format!("{}={value}", placeholder.pointer));
        effect.placeholders[index].real = Some(value.clone());
    }
    Ok(shown.join(", "))
}

/// A reviewer's settlement of effect `id` of `run` (`effects`: the run's), by `by` at
/// `at_ms`:
///
/// - delivered: `unknown -> released` (or a `released` effect, to supply values only),
///   the values set on its placeholders, its skipped dependents requeued, and a finished
///   commit put back to `committing` so the commit authority releases them and ends the
///   commit again (a run whose effects are all settled becomes `committed`);
/// - not delivered: `unknown -> failed`, retriable.
///
/// Returns the changed effects, the settled one first; write them and the run.
///
/// Errors: [`Refused::EffectTransition`] for an effect that is not `unknown` (nor, with
/// values, `released`); [`Refused::BadSettlement`] for a value that names no placeholder,
/// cannot stand for it or contradicts a real value, and for values given with not
/// delivered; [`Refused::RunTransition`] unless a commit decision was written.
pub fn settle(
    run: &mut Run,
    effects: &[Effect],
    id: &EffectId,
    settlement: &Settlement,
    by: &str,
    at_ms: u64,
) -> Result<Vec<Effect>, Refused> {
    let Some(found) = effects.iter().find(|e| &e.id == id) else {
        return Ok(Vec::new());
    };
    let mut effect = found.clone();
    let to = if settlement.delivered {
        EffectState::Released
    } else {
        EffectState::Failed
    };
    let values_only = settlement.delivered
        && effect.state == EffectState::Released
        && !settlement.values.is_empty();
    if effect.state != EffectState::Unknown && !values_only {
        return Err(Refused::EffectTransition {
            effect: effect.id.clone(),
            from: effect.state,
            to,
        });
    }
    if !settlement.delivered && !settlement.values.is_empty() {
        return Err(Refused::BadSettlement {
            effect: effect.id.clone(),
            reason: "real values come only from an origin that has the effect: give them with --delivered".into(),
        });
    }
    check_committed(run, "settled")?;
    let note = settlement
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    if settlement.delivered {
        let supplied = if settlement.values.is_empty() {
            None
        } else {
            Some(supply_values(&mut effect, &settlement.values)?)
        };
        if !values_only {
            effect.state = EffectState::Released;
            effect.state_reason = Some(format!(
                "settled delivered by {by}: the origin has it; airlock never saw the origin's answer"
            ));
            let mut decision = DecisionRecord::new(kinds::SETTLE_DELIVERED, by, at_ms);
            decision.note = note;
            effect.decisions.push(decision);
        }
        if let Some(supplied) = supplied {
            let mut decision = DecisionRecord::new(kinds::SUPPLY_VALUES, by, at_ms);
            decision.note = Some(supplied);
            effect.decisions.push(decision);
        }
        let mut changed = vec![effect];
        changed.extend(requeue(effects, id, by, at_ms));
        resume(run, id, by, at_ms);
        return Ok(changed);
    }
    effect.state = EffectState::Failed;
    effect.retriable = true;
    effect.state_reason = Some(format!(
        "settled not delivered by {by}: the origin does not have it; `airlock retry {}` sends it again",
        effect.id
    ));
    let mut decision = DecisionRecord::new(kinds::SETTLE_NOT_DELIVERED, by, at_ms);
    decision.note = note;
    effect.decisions.push(decision);
    Ok(vec![effect])
}
