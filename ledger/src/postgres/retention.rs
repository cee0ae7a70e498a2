//! Retention on PostgreSQL: the paged run listing and the prune of a finished run
//! ([`crate::RunStore::runs_page`], [`crate::RunStore::prune_run`]), in one transaction
//! under the run's row lock; bodies go when no other run references them (`body_refs`,
//! kept by a trigger on every effect write; migration 0002).

use super::pool::Tx;
use super::records::{self, big, fault, locked_run, parse};
use super::workspace::workspace_of;
use crate::change::Change;
use crate::model::{Run, RunId};
use crate::rules::retention::check_finished;
use crate::store::{Pruned, RunPage};
use crate::Result;

/// The runs of `page`, reading only those it returns (the primary key's order).
pub(super) fn runs_page(tx: &mut Tx<'_>, page: &RunPage) -> Result<Vec<Run>> {
    let limit = big(page.limit as u64);
    let after = page.after.as_ref().map(|id| id.0.clone());
    let rows = match (page.newest_first, after) {
        (false, None) => tx.query(
            "SELECT id, record::text FROM runs ORDER BY id LIMIT $1",
            &[&limit],
        ),
        (false, Some(after)) => tx.query(
            "SELECT id, record::text FROM runs WHERE id > $1 ORDER BY id LIMIT $2",
            &[&after, &limit],
        ),
        (true, None) => tx.query(
            "SELECT id, record::text FROM runs ORDER BY id DESC LIMIT $1",
            &[&limit],
        ),
        (true, Some(after)) => tx.query(
            "SELECT id, record::text FROM runs WHERE id < $1 ORDER BY id DESC LIMIT $2",
            &[&after, &limit],
        ),
    }
    .map_err(fault)?;
    rows.iter()
        .map(|row| parse(row.get(0), row.get(1)))
        .collect()
}

/// Removes every record of finished run `id` ([`check_finished`], judged on the records
/// under the run's lock) and the bodies no other run references; returns the counts and
/// the changes to announce.
pub(super) fn prune_run(tx: &mut Tx<'_>, id: &RunId) -> Result<(Pruned, Vec<Change>)> {
    let run = locked_run(tx, id)?;
    let effects = records::effects_of(tx, id)?;
    let workspace = workspace_of(tx, id)?;
    check_finished(&run, &effects, workspace.as_ref())?;
    let deleted = |tx: &mut Tx<'_>, sql: &'static str| -> Result<u64> {
        tx.execute(sql, &[&id.0]).map_err(fault)
    };
    let mut pruned = Pruned {
        effects: effects.len() as u64,
        ..Pruned::default()
    };
    pruned.reads = deleted(tx, "DELETE FROM reads WHERE run_id = $1")?;
    deleted(tx, "DELETE FROM read_contents WHERE run_id = $1")?;
    pruned.denials = deleted(tx, "DELETE FROM denials WHERE run_id = $1")?;
    pruned.placeholders = deleted(tx, "DELETE FROM placeholders WHERE run_id = $1")?;
    deleted(
        tx,
        "DELETE FROM effect_lineage WHERE effect_id IN (SELECT id FROM effects WHERE run_id = $1)",
    )?;
    deleted(tx, "DELETE FROM run_counters WHERE run_id = $1")?;
    // The run's own references go first; a body another run references stays.
    let digests = tx
        .query(
            "DELETE FROM body_refs WHERE run_id = $1 RETURNING digest",
            &[&id.0],
        )
        .map_err(fault)?;
    for row in &digests {
        let digest: String = row.get(0);
        let removed = tx
            .execute(
                "DELETE FROM bodies WHERE digest = $1
                 AND NOT EXISTS (SELECT 1 FROM body_refs WHERE digest = $1)",
                &[&digest],
            )
            .map_err(fault)?;
        if removed > 0 {
            pruned.bodies_removed += 1;
        } else {
            pruned.bodies_kept += 1;
        }
    }
    // Effects, placeholders, workspaces and leases cascade from the run.
    deleted(tx, "DELETE FROM runs WHERE id = $1")?;
    let changes = vec![
        Change::RunChanged(id.clone()),
        Change::PlaceholdersIssued(id.clone()),
    ];
    Ok((pruned, changes))
}
