//! Workspaces in the in-memory model, by the same rules as sled ([`crate::rules::workspace`]).

use super::MemoryStore;
use crate::change::Change;
use crate::model::{now_ms, Effect, RunId};
use crate::rules::workspace as workspace_rules;
use crate::store::WorkspaceStore;
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::Result;

impl WorkspaceStore for MemoryStore {
    fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        Ok(self.lock().workspaces.get(run).cloned())
    }

    fn attach_workspace(&self, run: &RunId, record: WorkspaceRecord) -> Result<WorkspaceRecord> {
        self.write(|state| {
            state.must_run(run)?;
            if let Some(existing) = state.workspaces.get(run) {
                return Ok((existing.clone(), Vec::new()));
            }
            state.workspaces.insert(run.clone(), record.clone());
            Ok((record, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        self.write(|state| {
            let mut record = state.must_workspace(run)?.clone();
            record.steps.push(step);
            state.workspaces.insert(run.clone(), record.clone());
            Ok((record, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        Ok(self.lock().counters.get(run).map_or(0, |c| c.effects))
    }

    fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        self.write(|state| {
            let run_record = state.must_run(run)?;
            let mut record = state.must_workspace(run)?.clone();
            let position = state.counters.get(run).map_or(0, |c| c.effects);
            let savepoint = workspace_rules::add_savepoint(
                run_record,
                &mut record,
                name,
                snapshot,
                position,
                now_ms(),
            )?;
            state.workspaces.insert(run.clone(), record);
            Ok((savepoint, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        self.write(|state| {
            let mut run_record = state.must_run(run)?.clone();
            let mut record = state.must_workspace(run)?.clone();
            let (decision, fresh) =
                workspace_rules::decide_workspace(&mut run_record, &mut record, decision)?;
            if !fresh {
                return Ok(((decision, false), Vec::new()));
            }
            state.workspaces.insert(run.clone(), record);
            state.runs.insert(run.clone(), run_record);
            let changes = vec![
                Change::WorkspaceChanged(run.clone()),
                Change::RunChanged(run.clone()),
            ];
            Ok(((decision, true), changes))
        })
    }

    fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        self.write(|state| {
            let mut record = state.must_workspace(run)?.clone();
            if !workspace_rules::finish_workspace_decision(
                &mut record,
                residue,
                unverified,
                outcome,
                now_ms(),
            ) {
                return Ok((record, Vec::new()));
            }
            state.workspaces.insert(run.clone(), record.clone());
            Ok((record, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        self.write(|state| {
            let run_record = state.must_run(run)?;
            let effects = state.effects_of(run);
            let discarded = workspace_rules::discard_effects_after(
                run_record,
                &effects,
                after_seq,
                reason,
                now_ms(),
            )?;
            state.put_effects(&discarded);
            let changes = discarded.iter().map(Change::of_effect).collect();
            Ok((discarded, changes))
        })
    }
}
