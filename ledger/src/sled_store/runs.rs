//! Runs on sled: creation, authentication, flags, seal, commit and abort.

use crate::model::{
    now_ms, DecisionRecord, Effect, EffectState, Run, RunFlag, RunId, RunState, MAX_RUN_FLAGS,
};
use crate::{approval, LedgerError, Refused, Result};

use super::{constant_time_eq, decode, encode, random_token, Ledger};

impl Ledger {
    // ----- runs -------------------------------------------------------------------------

    /// Creates an open run with a fresh random token (48 hex characters), flushed.
    pub fn create_run(&self, profile: Option<String>) -> Result<Run> {
        let run = Run {
            id: RunId::generate(),
            token: random_token(),
            state: RunState::Open,
            profile,
            created_at_ms: now_ms(),
            decisions: Vec::new(),
            flags: Vec::new(),
        };
        self.runs.insert(run.id.0.as_bytes(), encode(&run))?;
        self.flush()?;
        Ok(run)
    }

    /// The run with this id, if any.
    pub fn run(&self, id: &RunId) -> Result<Option<Run>> {
        match self.runs.get(id.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(id.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    pub(super) fn must_run(&self, id: &RunId) -> Result<Run> {
        self.run(id)?.ok_or_else(|| LedgerError::NotFound {
            kind: "run",
            id: id.0.clone(),
        })
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<Run>> {
        self.runs
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(&key, &value)
            })
            .collect()
    }

    /// The run whose id and token match, compared in constant time; `None` otherwise.
    pub fn authenticate(&self, run_id: &str, token: &str) -> Result<Option<Run>> {
        let Some(id) = RunId::parse(run_id) else {
            return Ok(None);
        };
        Ok(self
            .run(&id)?
            .filter(|run| constant_time_eq(run.token.as_bytes(), token.as_bytes())))
    }

    /// Adds `flag` to the run (kept up to [`MAX_RUN_FLAGS`]; later flags are dropped and
    /// `false` is returned). Flushed.
    ///
    /// Errors: [`LedgerError::NotFound`] for an unknown run, and storage faults.
    pub fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        let stored = {
            let _guard = self.lock();
            let mut run = self.must_run(id)?;
            if run.flags.len() >= MAX_RUN_FLAGS {
                false
            } else {
                run.flags.push(flag);
                self.put_run(&run)?;
                true
            }
        };
        self.flush()?;
        Ok(stored)
    }

    pub(super) fn put_run(&self, run: &Run) -> Result<()> {
        self.runs.insert(run.id.0.as_bytes(), encode(run))?;
        Ok(())
    }

    /// Seals an open run (no new effects); a sealed run stays sealed. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] when the run is committing, committed or aborted.
    pub fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Sealed => return Ok(run),
            RunState::Open => {}
            state => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state,
                    action: "sealed",
                }
                .into())
            }
        }
        run.state = RunState::Sealed;
        run.decisions.push(DecisionRecord {
            kind: "seal".into(),
            by: by.into(),
            at_ms: now_ms(),
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }

    /// Writes the commit decision: seals the run if open, approves undecided effects when
    /// `approve_pending`, and moves the run to `committing`. Flushed before it returns.
    ///
    /// Returns `(run, true)` when the decision was written now or earlier and release must
    /// (still) proceed, `(run, false)` when the run already finished committing (a second
    /// commit is a no-op).
    ///
    /// Errors: [`Refused::Undecided`] when effects are `staged` and `approve_pending` is
    /// false; [`Refused::RunTransition`] for an aborted run.
    pub fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Committed | RunState::PartiallyCommitted => return Ok((run, false)),
            RunState::Committing => return Ok((run, true)),
            RunState::Aborted => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state: run.state,
                    action: "committed",
                }
                .into())
            }
            RunState::Open | RunState::Sealed => {}
        }
        let effects = self.effects_unlocked(id)?;
        let undecided: Vec<&Effect> = effects
            .iter()
            .filter(|e| e.state == EffectState::Staged)
            .collect();
        if !undecided.is_empty() && !approve_pending {
            return Err(Refused::Undecided {
                run: id.clone(),
                effects: undecided.iter().map(|e| e.id.clone()).collect(),
            }
            .into());
        }
        let at_ms = now_ms();
        for effect in undecided {
            let mut effect = effect.clone();
            effect.state = EffectState::Approved;
            effect.approval = Some(approval::Approval::of(
                &effect,
                &format!("{by} (approve_pending)"),
            ));
            effect.decisions.push(DecisionRecord {
                kind: "approve".into(),
                by: format!("{by} (approve_pending)"),
                at_ms,
            });
            self.put_effect(&effect)?;
        }
        if run.state == RunState::Open {
            run.decisions.push(DecisionRecord {
                kind: "seal".into(),
                by: by.into(),
                at_ms,
            });
        }
        run.state = RunState::Committing;
        run.decisions.push(DecisionRecord {
            kind: "commit".into(),
            by: by.into(),
            at_ms,
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok((run, true))
    }

    /// Ends a commit: `committed` when every approved effect was released,
    /// `partially_committed` when any failed, was skipped, or is unknown. Flushed.
    pub fn finish_commit(&self, id: &RunId) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        if run.state != RunState::Committing {
            return Ok(run);
        }
        let effects = self.effects_unlocked(id)?;
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
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }

    /// Aborts an open or sealed run: every `staged` or `approved` effect becomes `discarded`;
    /// nothing is sent. Aborting an aborted run is a no-op. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] when a commit decision was already written.
    pub fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Aborted => return Ok(run),
            RunState::Open | RunState::Sealed => {}
            state => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state,
                    action: "aborted",
                }
                .into())
            }
        }
        let at_ms = now_ms();
        for mut effect in self.effects_unlocked(id)? {
            if effect.state.can_become(EffectState::Discarded) {
                effect.state = EffectState::Discarded;
                effect.state_reason = Some("run aborted".into());
                self.put_effect(&effect)?;
            }
        }
        run.state = RunState::Aborted;
        run.decisions.push(DecisionRecord {
            kind: "abort".into(),
            by: by.into(),
            at_ms,
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }
}
