//! Workspaces on sled (`airlock run`): attach, steps, savepoints and decisions, one
//! record per run in tree `workspaces`.

use super::{decode, encode, Ledger, OrStorage as _};
use crate::change::Change;
use crate::model::{now_ms, Effect, RunId};
use crate::rules::workspace as rules;
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{LedgerError, Result};

impl Ledger {
    fn put_workspace(&self, run: &RunId, record: &WorkspaceRecord) -> Result<()> {
        self.workspaces
            .insert(run.0.as_bytes(), encode(record))
            .or_storage()?;
        Ok(())
    }

    /// [`crate::WorkspaceStore::workspace`] on sled.
    pub fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        match self.workspaces.get(run.0.as_bytes()).or_storage()? {
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

    /// [`crate::WorkspaceStore::attach_workspace`] on sled. Durable.
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
        self.flush_and_send([Change::WorkspaceChanged(run.clone())])?;
        Ok(record)
    }

    /// [`crate::WorkspaceStore::record_step`] on sled. Durable.
    pub fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        record.steps.push(step);
        self.put_workspace(run, &record)?;
        self.flush_and_send([Change::WorkspaceChanged(run.clone())])?;
        Ok(record)
    }

    /// [`crate::WorkspaceStore::last_effect_seq`] on sled: the `effects/RUN` counter.
    pub fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        let key = format!("effects/{run}");
        Ok(self
            .counters
            .get(key.as_bytes())
            .or_storage()?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// [`crate::WorkspaceStore::add_savepoint`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] unless the run is open or sealed, or when
    /// the name is taken or a final decision was written.
    pub fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        let _guard = self.lock();
        let run_record = self.must_run(run)?;
        let mut record = self.must_workspace(run)?;
        let position = self.last_effect_seq(run)?;
        let savepoint =
            rules::add_savepoint(&run_record, &mut record, name, snapshot, position, now_ms())?;
        self.put_workspace(run, &record)?;
        self.flush_and_send([Change::WorkspaceChanged(run.clone())])?;
        Ok(savepoint)
    }

    /// [`crate::WorkspaceStore::decide_workspace`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`].
    pub fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        let _guard = self.lock();
        let mut run_record = self.must_run(run)?;
        let mut record = self.must_workspace(run)?;
        let (decision, fresh) = rules::decide_workspace(&mut run_record, &mut record, decision)?;
        if !fresh {
            return Ok((decision, false));
        }
        self.put_workspace(run, &record)?;
        self.put_run(&run_record)?;
        self.flush_and_send([
            Change::WorkspaceChanged(run.clone()),
            Change::RunChanged(run.clone()),
        ])?;
        Ok((decision, true))
    }

    /// [`crate::WorkspaceStore::finish_workspace_decision`] on sled. Durable.
    pub fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        if !rules::finish_workspace_decision(&mut record, residue, unverified, outcome, now_ms()) {
            return Ok(record);
        }
        self.put_workspace(run, &record)?;
        self.flush_and_send([Change::WorkspaceChanged(run.clone())])?;
        Ok(record)
    }

    /// [`crate::WorkspaceStore::discard_effects_after`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] unless the run is open or sealed.
    pub fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let run_record = self.must_run(run)?;
        let effects = self.effects_unlocked(run)?;
        let discarded =
            rules::discard_effects_after(&run_record, &effects, after_seq, reason, now_ms())?;
        for effect in &discarded {
            self.put_effect(effect)?;
        }
        self.flush_and_send(discarded.iter().map(Change::of_effect))?;
        Ok(discarded)
    }
}
