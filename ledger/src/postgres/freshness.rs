//! Whether a process's copy of a run's placeholders is current: the count behind
//! [`crate::LineageStore::placeholder_count`] on PostgreSQL.
//!
//! Many processes issue placeholders in one database, and a process hears of another's
//! only by a change notification, some milliseconds after the other's commit. The data
//! plane therefore compares its cached list's length with this count on every inspected
//! request of a run, and reloads the list on a difference (docs/fleet.md, "Bounds"). The
//! staging transaction that issues a placeholder commits before the synthetic answer
//! carrying it is sent, so any request that can carry it starts after that commit, and a
//! count taken for it sees the placeholder.
//!
//! The count is one statement outside an explicit transaction (one round trip), served
//! from the primary key `placeholders (run_id, value)`: an index-only scan of the run's
//! entries once the visibility map covers the table, else an index scan of the run's
//! few rows. A run has a few placeholders per staged effect, so either is cheap.

use super::pool::fault;
use super::records::count;
use super::PgStore;
use crate::model::RunId;
use crate::Result;

/// The statement (also run under `EXPLAIN` by the tests).
pub(super) const COUNT: &str = "SELECT count(*) FROM placeholders WHERE run_id = $1";

impl PgStore {
    /// How many placeholders `run` has, as of now (0 for an unknown or pruned run).
    ///
    /// Errors: storage faults; [`crate::LedgerError::Degraded`] while the server cannot be
    /// reached.
    pub(super) fn count_placeholders(&self, run: &RunId) -> Result<u64> {
        let run = run.clone();
        self.pool.single(move |single| {
            let row = single.query_one(COUNT, &[&run.0]).map_err(fault)?;
            Ok(count(row.get(0)))
        })
    }
}
