//! [`RunStore`] on PostgreSQL: each decision reads the run (locked) and its effects, asks
//! [`crate::rules`], and writes what changed, in one transaction.

use super::records::{self, fault, locked_run, parse, put_effects, put_run};
use super::PgStore;
use crate::change::Change;
use crate::model::{now_ms, Run, RunFlag, RunId};
use crate::rules::{self, CommitStart};
use crate::store::RunStore;
use crate::Result;

impl RunStore for PgStore {
    fn runs_page(&self, page: &crate::store::RunPage) -> Result<Vec<Run>> {
        let page = page.clone();
        self.read(move |tx| super::retention::runs_page(tx, &page))
    }

    fn prune_run(&self, id: &RunId) -> Result<crate::store::Pruned> {
        let id = id.clone();
        self.write(id.0.clone(), false, move |tx| {
            super::retention::prune_run(tx, &id)
        })
    }

    fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run> {
        let run = rules::new_run(RunId::generate(), profile, source, now_ms());
        self.write(run.id.0.clone(), false, move |tx| {
            put_run(tx, &run)?;
            Ok((run.clone(), vec![Change::RunChanged(run.id.clone())]))
        })
    }

    fn run(&self, id: &RunId) -> Result<Option<Run>> {
        let id = id.clone();
        self.read(move |tx| records::run(tx, &id, false))
    }

    fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize> {
        // The runs whose record still has a `token`; each is then locked and rewritten in
        // a transaction of its own (idempotent: two instances starting at once with the
        // same key write the same hash, and the second finds nothing to do).
        let ids: Vec<String> = self.read(|tx| {
            let rows = tx
                .query(
                    "SELECT id FROM runs WHERE record->>'token' IS NOT NULL ORDER BY id",
                    &[],
                )
                .map_err(fault)?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })?;
        let mut rewritten = 0;
        for id in ids {
            let (tokens, run_id) = (tokens.clone(), RunId(id.clone()));
            let sealed = self.write(id, false, move |tx| {
                let mut run = locked_run(tx, &run_id)?;
                let sealed = tokens.seal(&mut run);
                if sealed {
                    put_run(tx, &run)?;
                }
                Ok((sealed, Vec::new()))
            })?;
            rewritten += usize::from(sealed);
        }
        Ok(rewritten)
    }

    fn runs(&self) -> Result<Vec<Run>> {
        self.read(|tx| {
            let rows = tx
                .query("SELECT id, record::text FROM runs ORDER BY id", &[])
                .map_err(fault)?;
            rows.iter()
                .map(|row| parse(row.get(0), row.get(1)))
                .collect()
        })
    }

    fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        let id = id.clone();
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            let stored = rules::flag_run(&mut run, flag.clone());
            if stored {
                put_run(tx, &run)?;
            }
            let changes = stored
                .then(|| Change::RunChanged(id.clone()))
                .into_iter()
                .collect();
            Ok((stored, changes))
        })
    }

    fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        let (id, by) = (id.clone(), by.to_owned());
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            if !rules::seal(&mut run, &by, now_ms())? {
                return Ok((run, Vec::new()));
            }
            put_run(tx, &run)?;
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }

    fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        let (id, by) = (id.clone(), by.to_owned());
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            let effects = records::effects_of(tx, &id)?;
            let approved =
                match rules::begin_commit(&mut run, &effects, approve_pending, &by, now_ms())? {
                    CommitStart::Begun(approved) => approved,
                    start => return Ok(((run, start.proceeds()), Vec::new())),
                };
            put_effects(tx, &approved)?;
            put_run(tx, &run)?;
            let mut changes: Vec<Change> = approved.iter().map(Change::of_effect).collect();
            changes.push(Change::RunChanged(id.clone()));
            changes.push(Change::RunClosed(id.clone()));
            Ok(((run, true), changes))
        })
    }

    fn finish_commit(&self, id: &RunId) -> Result<Run> {
        let id = id.clone();
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            let effects = records::effects_of(tx, &id)?;
            if !rules::finish_commit(&mut run, &effects) {
                return Ok((run, Vec::new()));
            }
            put_run(tx, &run)?;
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }

    fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        let (id, by) = (id.clone(), by.to_owned());
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            let effects = records::effects_of(tx, &id)?;
            let Some(discarded) = rules::abort(&mut run, &effects, &by, now_ms())? else {
                return Ok((run, Vec::new()));
            };
            put_effects(tx, &discarded)?;
            put_run(tx, &run)?;
            let mut changes: Vec<Change> = discarded.iter().map(Change::of_effect).collect();
            changes.push(Change::RunChanged(id.clone()));
            changes.push(Change::RunClosed(id.clone()));
            Ok((run, changes))
        })
    }
}
