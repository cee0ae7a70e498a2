//! Workspaces on sled (`airlock run`): attach, steps, savepoints and decisions.

use super::{decode, encode, Ledger};
use crate::model::{now_ms, DecisionRecord, Effect, EffectId, EffectState, RunId, RunState};
use crate::workspace::{DecisionKind, Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{LedgerError, Refused, Result};

impl Ledger {
    fn put_workspace(&self, run: &RunId, record: &WorkspaceRecord) -> Result<()> {
        self.workspaces.insert(run.0.as_bytes(), encode(record))?;
        Ok(())
    }

    /// The workspace of a run, if one was attached.
    pub fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        match self.workspaces.get(run.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(run.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    fn must_workspace(&self, run: &RunId) -> Result<WorkspaceRecord> {
        self.workspace(run)?.ok_or_else(|| LedgerError::NotFound {
            kind: "workspace of run",
            id: run.0.clone(),
        })
    }

    /// Attaches a workspace and its starting snapshot to a run. Attaching again returns the
    /// first record unchanged. Flushed.
    pub fn attach_workspace(
        &self,
        run: &RunId,
        record: WorkspaceRecord,
    ) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        self.must_run(run)?;
        if let Some(existing) = self.workspace(run)? {
            return Ok(existing);
        }
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// Records a command run in the workspace. Flushed.
    pub fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        record.steps.push(step);
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// The sequence number of the run's last staged effect (0 when none).
    pub fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        let key = format!("effects/{run}");
        Ok(self
            .counters
            .get(key.as_bytes())?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// Adds a savepoint at the run's current ledger position. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] unless the run is open or sealed, or when the
    /// name is taken or a final decision was written.
    pub fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        let _guard = self.lock();
        let state = self.must_run(run)?.state;
        let mut record = self.must_workspace(run)?;
        if !matches!(state, RunState::Open | RunState::Sealed)
            || record.final_decision().is_some()
            || record.savepoints.iter().any(|s| s.name == name)
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state,
                action: "given this savepoint (the name is taken, or the run is decided)",
            }
            .into());
        }
        let savepoint = Savepoint {
            name: name.to_owned(),
            snapshot: snapshot.to_owned(),
            effect_seq: self.last_effect_seq(run)?,
            at_ms: now_ms(),
        };
        record.savepoints.push(savepoint.clone());
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(savepoint)
    }

    /// Writes a workspace decision, flushed, before anything acts on it.
    ///
    /// Returns `(decision, true)` when written now. When a decision is still unfinished,
    /// or a final decision exists and `decision` is final too, returns that one and
    /// `false`: a decision is never re-made differently.
    ///
    /// Errors: [`Refused::RunTransition`] for a `rollback_to` after the final decision or
    /// when the run is not open or sealed.
    pub fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        let _guard = self.lock();
        let mut run_record = self.must_run(run)?;
        let mut record = self.must_workspace(run)?;
        if let Some(pending) = record.unfinished() {
            return Ok((pending.clone(), false));
        }
        if let Some(existing) = record.final_decision() {
            if decision.kind != DecisionKind::RollbackTo {
                return Ok((existing.clone(), false));
            }
        }
        let open = matches!(run_record.state, RunState::Open | RunState::Sealed);
        if decision.kind == DecisionKind::RollbackTo && (!open || record.final_decision().is_some())
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state: run_record.state,
                action: "rolled back to a savepoint",
            }
            .into());
        }
        if decision.kind == DecisionKind::Rollback
            && !matches!(
                run_record.state,
                RunState::Open | RunState::Sealed | RunState::Aborted
            )
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state: run_record.state,
                action: "rolled back (a commit decision was written)",
            }
            .into());
        }
        record.decisions.push(decision.clone());
        run_record.decisions.push(DecisionRecord {
            kind: format!("workspace_{}", decision.kind.as_str()),
            by: decision.by.clone(),
            at_ms: decision.at_ms,
        });
        self.put_workspace(run, &record)?;
        self.put_run(&run_record)?;
        self.flush()?;
        Ok((decision, true))
    }

    /// Marks the unfinished decision finished, with the residue found after a rollback
    /// (a non-empty residue marks the run `rollback_unverified`). Flushed.
    pub fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        let Some(decision) = record
            .decisions
            .iter_mut()
            .find(|d| d.finished_at_ms.is_none())
        else {
            return Ok(record);
        };
        decision.finished_at_ms = Some(now_ms());
        decision.residue = residue;
        decision.outcome = Some(outcome.to_owned());
        if unverified {
            record.rollback_unverified = true;
        }
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// Discards every pending (`staged` or `approved`) effect of the run staged after
    /// `after_seq`, and every effect that depends on a discarded one, whatever its seq.
    /// Earlier effects stay as they are. Idempotent. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] unless the run is open or sealed.
    pub fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let state = self.must_run(run)?.state;
        if !matches!(state, RunState::Open | RunState::Sealed) {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state,
                action: "rolled back to a savepoint",
            }
            .into());
        }
        let effects = self.effects_unlocked(run)?;
        let mut gone: std::collections::HashSet<EffectId> = effects
            .iter()
            .filter(|e| e.seq > after_seq)
            .map(|e| e.id.clone())
            .collect();
        // Dependents of anything gone are gone too (closure over effect -> effect lineage).
        loop {
            let before = gone.len();
            for effect in &effects {
                if effect.depends_on.iter().any(|d| gone.contains(&d.effect)) {
                    gone.insert(effect.id.clone());
                }
            }
            if gone.len() == before {
                break;
            }
        }
        let mut discarded = Vec::new();
        for mut effect in effects {
            if gone.contains(&effect.id) && effect.state.can_become(EffectState::Discarded) {
                effect.state = EffectState::Discarded;
                effect.state_reason = Some(reason.to_owned());
                effect.decisions.push(DecisionRecord {
                    kind: "discard".into(),
                    by: "rollback_to".into(),
                    at_ms: now_ms(),
                });
                self.put_effect(&effect)?;
                discarded.push(effect);
            }
        }
        self.flush()?;
        Ok(discarded)
    }
}
