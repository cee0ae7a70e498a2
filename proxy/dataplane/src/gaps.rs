//! What the journal could not write (issue 38 item 2): a read, a denial or a lineage
//! record refused because the ledger's disk is below its free-space floor
//! (`LedgerError::LowSpace`) or the ledger is healing from a fault. Each is counted
//! (`airlock_journal_dropped_total{record}`) and logged; a run whose read went unjournaled
//! or unanalysed is flagged `lineage_incomplete` (a small write the floor lets through),
//! and flows then hold every effect of the run as `unanalysed`
//! (`crate::flows::RunSources`): a read with no journal entry is a lineage hole, and
//! nothing it carried may leave unseen.

use std::sync::atomic::{AtomicU64, Ordering};

use airlock_ledger::{LedgerError, RunFlag, RunId, Store};
use tracing::warn;

/// The run flag of a run whose lineage has a hole.
pub const LINEAGE_INCOMPLETE: &str = "lineage_incomplete";

/// Records dropped since the process started, by kind.
#[derive(Debug, Default)]
pub struct Dropped {
    /// Reads whose journal entry was not written.
    pub reads: AtomicU64,
    /// Denials not journaled.
    pub denials: AtomicU64,
    /// Lineage records (a read's analysis, an effect's lineage) not written.
    pub lineage: AtomicU64,
}

/// The process's counts.
pub static DROPPED: Dropped = Dropped {
    reads: AtomicU64::new(0),
    denials: AtomicU64::new(0),
    lineage: AtomicU64::new(0),
};

impl Dropped {
    /// The Prometheus text of the counts.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP airlock_journal_dropped_total Records the ledger refused to write (below its free-space floor, or healing): reads, denials and lineage. A dropped read or lineage record flags its run lineage_incomplete.\n# TYPE airlock_journal_dropped_total counter\n",
        );
        for (record, count) in [
            ("read", &self.reads),
            ("denial", &self.denials),
            ("lineage", &self.lineage),
        ] {
            out.push_str(&format!(
                "airlock_journal_dropped_total{{record=\"{record}\"}} {}\n",
                count.load(Ordering::Relaxed)
            ));
        }
        out
    }
}

/// A read of `run` to `url` that was not journaled, or whose analysis was not stored
/// (`lineage`): counted, logged, and the run flagged [`LINEAGE_INCOMPLETE`] once.
pub fn read_dropped(
    ledger: &dyn Store,
    run: &RunId,
    url: &str,
    error: &LedgerError,
    lineage: bool,
) {
    let counter = if lineage {
        &DROPPED.lineage
    } else {
        &DROPPED.reads
    };
    counter.fetch_add(1, Ordering::Relaxed);
    warn!(run.id = %run, url = %url, error = %error, "a read was not journaled in full: the run's lineage is incomplete and flows hold its effects as unanalysed");
    flag_lineage_incomplete(
        ledger,
        run,
        format!(
            "a read of {url} was not {} ({error}); flows hold the run's effects as unanalysed",
            if lineage { "analysed" } else { "journaled" }
        ),
    );
}

/// Flags `run` [`LINEAGE_INCOMPLETE`] with `detail`, unless it is flagged so already.
/// A ledger error is logged.
pub fn flag_lineage_incomplete(ledger: &dyn Store, run: &RunId, detail: String) {
    let flagged = ledger
        .run(run)
        .ok()
        .flatten()
        .is_some_and(|r| r.flags.iter().any(|f| f.code == LINEAGE_INCOMPLETE));
    if flagged {
        return;
    }
    let flag = RunFlag {
        code: LINEAGE_INCOMPLETE.to_owned(),
        detail,
        at_ms: airlock_ledger::now_ms(),
    };
    if let Err(error) = ledger.flag_run(run, flag) {
        warn!(run.id = %run, error = %error, "could not flag the run's lineage as incomplete");
    }
}

/// A denial that was not journaled: counted.
pub fn denial_dropped() {
    DROPPED.denials.fetch_add(1, Ordering::Relaxed);
}

/// An effect's lineage that was not stored: counted (the effect stays "not analysed", so
/// flows hold it as unanalysed).
pub fn lineage_dropped() {
    DROPPED.lineage.fetch_add(1, Ordering::Relaxed);
}
