//! [`WorkspaceStore`] on PostgreSQL: the workspace record beside its run, changed under
//! the run's row lock.

use super::pool::Tx;

use super::records::{self, effects_count, fault, json, locked_run, parse, put_effects, put_run};
use super::PgStore;
use crate::change::Change;
use crate::model::{now_ms, Effect, RunId};
use crate::rules::workspace as workspace_rules;
use crate::store::WorkspaceStore;
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{LedgerError, Result};

/// The workspace of `run`, if attached.
pub(super) fn workspace_of(tx: &mut Tx<'_>, run: &RunId) -> Result<Option<WorkspaceRecord>> {
    let row = tx
        .query_opt(
            "SELECT record::text FROM workspaces WHERE run_id = $1",
            &[&run.0],
        )
        .map_err(fault)?;
    row.map(|row| parse(&run.0, row.get(0))).transpose()
}

/// The workspace of `run`; [`LedgerError::NotFound`] without one.
fn must_workspace(tx: &mut Tx<'_>, run: &RunId) -> Result<WorkspaceRecord> {
    workspace_of(tx, run)?.ok_or_else(|| LedgerError::NotFound {
        kind: "workspace of run",
        id: run.0.clone(),
    })
}

fn put_workspace(tx: &mut Tx<'_>, run: &RunId, record: &WorkspaceRecord) -> Result<()> {
    tx.execute(
        "INSERT INTO workspaces (run_id, record) VALUES ($1, $2::text::json)
         ON CONFLICT (run_id) DO UPDATE SET record = EXCLUDED.record",
        &[&run.0, &json(record)?],
    )
    .map_err(fault)?;
    Ok(())
}

/// Locks the run's row when it exists (workspace writes queue behind its other writes).
fn lock_run_if_any(tx: &mut Tx<'_>, run: &RunId) -> Result<()> {
    records::run(tx, run, true)?;
    Ok(())
}

impl WorkspaceStore for PgStore {
    fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        let run = run.clone();
        self.read(move |tx| workspace_of(tx, &run))
    }

    fn attach_workspace(&self, run: &RunId, record: WorkspaceRecord) -> Result<WorkspaceRecord> {
        let run = run.clone();
        self.write(run.0.clone(), false, move |tx| {
            locked_run(tx, &run)?;
            if let Some(existing) = workspace_of(tx, &run)? {
                return Ok((existing, Vec::new()));
            }
            put_workspace(tx, &run, &record)?;
            Ok((record.clone(), vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        let run = run.clone();
        self.write(run.0.clone(), false, move |tx| {
            lock_run_if_any(tx, &run)?;
            let mut record = must_workspace(tx, &run)?;
            record.steps.push(step.clone());
            put_workspace(tx, &run, &record)?;
            Ok((record, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        let run = run.clone();
        self.read(move |tx| effects_count(tx, &run))
    }

    fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        let (run, name, snapshot) = (run.clone(), name.to_owned(), snapshot.to_owned());
        self.write(run.0.clone(), false, move |tx| {
            let run_record = locked_run(tx, &run)?;
            let mut record = must_workspace(tx, &run)?;
            let position = effects_count(tx, &run)?;
            let savepoint = workspace_rules::add_savepoint(
                &run_record,
                &mut record,
                &name,
                &snapshot,
                position,
                now_ms(),
            )?;
            put_workspace(tx, &run, &record)?;
            Ok((savepoint, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        let run = run.clone();
        self.write(run.0.clone(), false, move |tx| {
            let mut run_record = locked_run(tx, &run)?;
            let mut record = must_workspace(tx, &run)?;
            let (decision, fresh) =
                workspace_rules::decide_workspace(&mut run_record, &mut record, decision.clone())?;
            if !fresh {
                return Ok(((decision, false), Vec::new()));
            }
            put_workspace(tx, &run, &record)?;
            put_run(tx, &run_record)?;
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
        let (run, outcome) = (run.clone(), outcome.to_owned());
        self.write(run.0.clone(), false, move |tx| {
            lock_run_if_any(tx, &run)?;
            let mut record = must_workspace(tx, &run)?;
            if !workspace_rules::finish_workspace_decision(
                &mut record,
                residue.clone(),
                unverified,
                &outcome,
                now_ms(),
            ) {
                return Ok((record, Vec::new()));
            }
            put_workspace(tx, &run, &record)?;
            Ok((record, vec![Change::WorkspaceChanged(run.clone())]))
        })
    }

    fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        let (run, reason) = (run.clone(), reason.to_owned());
        self.write(run.0.clone(), false, move |tx| {
            let run_record = locked_run(tx, &run)?;
            let effects = records::effects_of(tx, &run)?;
            let discarded = workspace_rules::discard_effects_after(
                &run_record,
                &effects,
                after_seq,
                &reason,
                now_ms(),
            )?;
            put_effects(tx, &discarded)?;
            let changes = discarded.iter().map(Change::of_effect).collect();
            Ok((discarded, changes))
        })
    }
}
