//! Actions bound to what the reviewer was shown (docs/admin-api.md#expectations).
//!
//! A commit (with or without `approve_pending`) and an approval of a run's effects staged
//! by one rule act on a set of effects that keeps changing while the run is open: the
//! agent stages more, `review = "auto"` approves some, other reviewers decide others.
//! Each such action carries an [`Expectation`] of the set it was shown, and the runs
//! service refuses it with [`SetChanged`] when the set it would act on is no longer that
//! one, before anything is approved or released.
//!
//! A commit checks the expectation under the run's commit lock, before the final pass
//! over flow rules; then, after that pass and before the commit decision is written, it
//! seals the run (nothing more can be staged) and refuses again if an effect was staged
//! in between. That second refusal, the only one, leaves the run sealed.

use std::fmt;
use std::sync::Arc;

use airlock_ledger::{Digest, Effect, EffectState, RunId, RunState};
use serde::{Deserialize, Serialize};

use crate::release::{blocking, CommitError};
use crate::Control;

/// The effects an action covers, and so what its [`Expectation`] is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope<'a> {
    /// A commit: every effect that is `staged` or `approved` — what `approve_pending`
    /// approves, and what the commit releases.
    Commit,
    /// Approving the run's effects staged by one rule: the `staged` effects that rule
    /// staged (`None`: the policy default, no rule).
    Rule(Option<&'a str>),
}

impl Scope<'_> {
    /// Whether the action covers `effect`.
    pub fn covers(&self, effect: &Effect) -> bool {
        match self {
            Self::Commit => matches!(effect.state, EffectState::Staged | EffectState::Approved),
            Self::Rule(rule) => {
                effect.state == EffectState::Staged && effect.rule.as_deref() == *rule
            }
        }
    }
}

/// What an action was shown: `{"through_seq": N, "digest": "sha256:HEX"}`.
///
/// - `through_seq`: the highest `seq` among all the run's effects when the set was read
///   (0 when it had none); any effect staged later has a higher one.
/// - `digest`: `sha256:` and the lowercase hex SHA-256 of the covered effects
///   ([`Scope`]), in `seq` order, each as the line `ID STATE\n` (`eff_01… staged\n`);
///   the digest of no effect is that of the empty string.
///
/// The action goes ahead only when the digest of the set it would act on now is this one;
/// `through_seq` says which of the covered effects are new ([`SetChanged::added`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// The highest `seq` among the run's effects when the set was read.
    pub through_seq: u64,
    /// `sha256:HEX` of the covered effects' `ID STATE\n` lines, in `seq` order.
    pub digest: String,
}

impl Expectation {
    /// The expectation of `effects` (all of one run's) for `scope`.
    pub fn of(effects: &[Effect], scope: Scope<'_>) -> Self {
        let mut covered: Vec<&Effect> = effects.iter().filter(|e| scope.covers(e)).collect();
        covered.sort_by_key(|e| e.seq);
        let mut lines = String::new();
        for effect in covered {
            lines.push_str(&format!("{} {}\n", effect.id, effect.state.as_str()));
        }
        Self {
            through_seq: effects.iter().map(|e| e.seq).max().unwrap_or(0),
            digest: Digest::sha256_of(lines.as_bytes()).to_string(),
        }
    }

    /// Parses the CLI's text form `SEQ:sha256:HEX` (its [`fmt::Display`]); `None` when it
    /// is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (seq, digest) = text.trim().split_once(':')?;
        let hex = digest.strip_prefix("sha256:")?;
        let valid = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        let through_seq = seq.parse().ok().filter(|_| valid)?;
        Some(Self {
            through_seq,
            digest: digest.to_ascii_lowercase(),
        })
    }
}

impl fmt::Display for Expectation {
    /// `SEQ:sha256:HEX`, the form `airlock commit --expect` takes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.through_seq, self.digest)
    }
}

/// An action refused because the effects it covers are not the ones it was shown.
/// Nothing was approved or released (the one exception: see the module docs).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", self.describe())]
pub struct SetChanged {
    /// The run.
    pub run: RunId,
    /// What the action was shown.
    pub expected: Expectation,
    /// The same set now.
    pub now: Expectation,
    /// Covered effects staged after `expected.through_seq`, in `seq` order.
    pub added: Vec<Effect>,
    /// Every effect the action covers now, in `seq` order.
    pub covered: Vec<Effect>,
}

impl SetChanged {
    fn new(run: &RunId, effects: &[Effect], scope: Scope<'_>, expected: &Expectation) -> Self {
        let mut covered: Vec<Effect> = effects
            .iter()
            .filter(|e| scope.covers(e))
            .cloned()
            .collect();
        covered.sort_by_key(|e| e.seq);
        Self {
            run: run.clone(),
            expected: expected.clone(),
            now: Expectation::of(effects, scope),
            added: covered
                .iter()
                .filter(|e| e.seq > expected.through_seq)
                .cloned()
                .collect(),
            covered,
        }
    }

    fn describe(&self) -> String {
        let mut out = format!(
            "the effects of run {} changed since they were shown (through #{}): ",
            self.run, self.expected.through_seq
        );
        if !self.added.is_empty() {
            let seqs: Vec<String> = self.added.iter().map(|e| format!("#{}", e.seq)).collect();
            out.push_str(&format!(
                "{} effect(s) staged since ({}); ",
                self.added.len(),
                seqs.join(", ")
            ));
        } else {
            out.push_str("effects shown were decided since (approved, rejected or discarded); ");
        }
        out.push_str(&format!(
            "the action would now act on {} effect(s) (expectation {}: pass it as --expect, \
             or as expect in the API, to act on exactly those); nothing was approved or \
             released",
            self.covered.len(),
            self.now
        ));
        out
    }
}

/// Checks `effects` (all of `run`'s, now) against `expected` for `scope`.
///
/// Errors: [`SetChanged`] when the covered set's digest is not `expected.digest`.
pub fn check(
    run: &RunId,
    effects: &[Effect],
    scope: Scope<'_>,
    expected: &Expectation,
) -> Result<(), Box<SetChanged>> {
    if Expectation::of(effects, scope).digest == expected.digest {
        Ok(())
    } else {
        Err(Box::new(SetChanged::new(run, effects, scope, expected)))
    }
}

/// What [`commit_check`] saw, for [`commit_recheck`].
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    expected: Expectation,
    /// The highest `seq` of the run's effects when checked (the server's, not the
    /// client's `through_seq`).
    through_seq: u64,
}

/// A commit's first check, under its commit lock before the final pass: refuses when the
/// run's `staged` and `approved` effects are not the `expected` ones. `None` when the run
/// is past its commit decision (the commit then only finishes or reports it).
///
/// Errors: [`CommitError::Changed`]; storage faults.
pub(crate) async fn commit_check(
    control: &Arc<Control>,
    run: &RunId,
    expected: &Expectation,
) -> Result<Option<Seen>, CommitError> {
    let (ledger, run, expected) = (control.ledger().clone(), run.clone(), expected.clone());
    let seen = blocking(move || {
        let Some(record) = ledger.run(&run)? else {
            return Ok(Ok(None));
        };
        if !matches!(record.state, RunState::Open | RunState::Sealed) {
            return Ok(Ok(None));
        }
        let effects = ledger.effects(&run)?;
        Ok(check(&run, &effects, Scope::Commit, &expected).map(|()| {
            Some(Seen {
                through_seq: effects.iter().map(|e| e.seq).max().unwrap_or(0),
                expected,
            })
        }))
    })
    .await?;
    seen.map_err(CommitError::Changed)
}

/// A commit's second check, after the final pass and before the decision is written:
/// seals the run if it is still open, so nothing more is staged, and refuses when an
/// effect the commit covers was staged after [`commit_check`] looked (the run then stays
/// sealed; nothing is approved or released).
///
/// Errors: [`CommitError::Changed`]; the ledger's refusal to seal; storage faults.
pub(crate) async fn commit_recheck(
    control: &Arc<Control>,
    run: &RunId,
    seen: Seen,
    by: &str,
) -> Result<(), CommitError> {
    let (ledger, run, by) = (control.ledger().clone(), run.clone(), by.to_owned());
    let changed = blocking(move || {
        let Some(record) = ledger.run(&run)? else {
            return Ok(None);
        };
        if record.state == RunState::Open {
            ledger.seal(&run, &by)?;
        }
        let effects = ledger.effects(&run)?;
        let late = effects
            .iter()
            .any(|e| e.seq > seen.through_seq && Scope::Commit.covers(e));
        Ok(late.then(|| {
            Box::new(SetChanged::new(
                &run,
                &effects,
                Scope::Commit,
                &seen.expected,
            ))
        }))
    })
    .await?;
    match changed {
        Some(changed) => Err(CommitError::Changed(changed)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
