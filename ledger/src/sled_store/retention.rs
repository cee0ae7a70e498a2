//! Retention on sled: paged run listings, pruning a finished run, and building the
//! recovery and body-reference indexes once for a data directory written before them.

use std::collections::HashSet;
use std::ops::Bound;

use super::{decode, run_prefix, Ledger, OrStorage as _};
use crate::change::Change;
use crate::model::{Digest, Effect, Run, RunId};
use crate::rules::retention::{body_digests, check_finished};
use crate::store::{Pruned, RunPage};
use crate::Result;

/// The `meta` key whose presence says `in_flight` and `body_refs` are built.
const INDEXES_BUILT: &[u8] = b"indexes";

/// The per-run counters (`counters` tree, `NAME/run_id`).
const RUN_COUNTERS: [&str; 5] = [
    "effects",
    "reads",
    "denials",
    "placeholders",
    "placeholder-base",
];

/// `digest \0 run_id`: a run's reference to a body in `body_refs`.
pub(super) fn body_ref_key(digest: &Digest, run: &RunId) -> Vec<u8> {
    let mut key = digest_prefix(digest);
    key.extend_from_slice(run.0.as_bytes());
    key
}

fn digest_prefix(digest: &Digest) -> Vec<u8> {
    let mut key = digest.0.as_bytes().to_vec();
    key.push(0);
    key
}

/// Removes every key of `tree` under `prefix`, one by one; returns how many.
///
/// Not one `sled::Batch`: sled 0.34's batches and transactions take a process-wide lock
/// (`concurrency_control::write`) that waits for every reader of every store in the
/// process, and a store wedged by a failed blob write holds a reader forever
/// (`sled_store/bounded.rs`), so one batch after such a fault would stop every sled call
/// in the process. While nothing takes that lock, sled's readers only count themselves.
/// The removals are idempotent: a prune cut short is finished by the next.
fn remove_prefix(tree: &sled::Tree, prefix: &[u8]) -> Result<u64> {
    let mut count = 0;
    for key in tree.scan_prefix(prefix).keys() {
        tree.remove(key.or_storage()?).or_storage()?;
        count += 1;
    }
    Ok(count)
}

impl Ledger {
    /// [`crate::RunStore::runs_page`] on sled: a range of tree `runs` from the cursor.
    pub fn runs_page(&self, page: &RunPage) -> Result<Vec<Run>> {
        let after = page.after.as_ref().map(|id| id.0.as_bytes().to_vec());
        let range = match (&after, page.newest_first) {
            (None, _) => self.runs.iter(),
            (Some(after), false) => self
                .runs
                .range::<&[u8], _>((Bound::Excluded(after.as_slice()), Bound::Unbounded)),
            (Some(after), true) => self.runs.range::<&[u8], _>(..after.as_slice()),
        };
        let items: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> =
            if page.newest_first {
                Box::new(range.rev())
            } else {
                Box::new(range)
            };
        items
            .take(page.limit)
            .map(|item| {
                let (key, value) = item.or_storage()?;
                decode(&key, &value)
            })
            .collect()
    }

    /// [`crate::RunStore::prune_run`] on sled: under the write lock, checks the run is
    /// finished, then removes its records tree by tree (prefix scans under
    /// `run_id \0`, the effects by id), its body references, each body left with
    /// none, and the run record last; then flushes. Durable.
    ///
    /// Errors: [`crate::Refused::NotFinished`]; [`crate::LedgerError::NotFound`].
    pub fn prune_run(&self, id: &RunId) -> Result<Pruned> {
        let pruned = {
            let _guard = self.lock();
            let run = self.must_run(id)?;
            let effects = self.effects_unlocked(id)?;
            let workspace = self.workspace(id)?;
            check_finished(&run, &effects, workspace.as_ref())?;
            self.remove_run_records(id, &effects)?
        };
        self.flush_and_send([
            Change::RunChanged(id.clone()),
            Change::PlaceholdersIssued(id.clone()),
        ])?;
        Ok(pruned)
    }

    /// Removes every record of run `id` whose effects are `effects`. Under the write lock.
    fn remove_run_records(&self, id: &RunId, effects: &[Effect]) -> Result<Pruned> {
        let prefix = run_prefix(id);
        let mut pruned = Pruned {
            reads: self.read_count(id)?,
            ..Pruned::default()
        };
        let mut digests = HashSet::new();
        for effect in effects {
            digests.extend(body_digests(effect).cloned());
            let key = effect.id.0.as_bytes();
            self.effect_lineage.remove(key).or_storage()?;
            self.in_flight.remove(key).or_storage()?;
            self.effects.remove(key).or_storage()?;
            pruned.effects += 1;
        }
        remove_prefix(&self.run_effects, &prefix)?;
        remove_prefix(&self.reads, &prefix)?;
        remove_prefix(&self.read_content, &prefix)?;
        remove_prefix(&self.read_hashes, &prefix)?;
        self.read_log.remove(id).or_storage()?;
        self.analysis_log.remove(id).or_storage()?;
        pruned.placeholders = remove_prefix(&self.placeholders, &prefix)?;
        pruned.denials = remove_prefix(&self.denials, &prefix)?;
        self.workspaces.remove(id.0.as_bytes()).or_storage()?;
        self.release_leases.remove(id.0.as_bytes()).or_storage()?;
        for name in RUN_COUNTERS {
            self.counters
                .remove(format!("{name}/{id}").as_bytes())
                .or_storage()?;
        }
        for digest in &digests {
            self.body_refs
                .remove(body_ref_key(digest, id))
                .or_storage()?;
            let referenced = self
                .body_refs
                .scan_prefix(digest_prefix(digest))
                .next()
                .transpose()
                .or_storage()?
                .is_some();
            if referenced {
                pruned.bodies_kept += 1;
            } else if self
                .bodies
                .remove(digest.0.as_bytes())
                .or_storage()?
                .is_some()
            {
                pruned.bodies_removed += 1;
            }
        }
        self.runs.remove(id.0.as_bytes()).or_storage()?;
        Ok(pruned)
    }

    /// Builds `in_flight` and `body_refs` from `effects` unless `meta` says they are
    /// built (a data directory from before them), then writes the marker and flushes.
    /// One scan of every effect, once per data directory.
    ///
    /// Errors: storage faults; [`crate::LedgerError::Corrupt`] for an unreadable effect.
    pub(super) fn build_indexes_once(&self) -> Result<()> {
        if self.meta.contains_key(INDEXES_BUILT).or_storage()? {
            return Ok(());
        }
        let _guard = self.lock();
        for item in self.effects.iter() {
            let (key, value) = item.or_storage()?;
            let effect: Effect = decode(&key, &value)?;
            if effect.state == crate::EffectState::Releasing {
                self.in_flight
                    .insert(&key, effect.run_id.0.as_bytes())
                    .or_storage()?;
            }
            for digest in body_digests(&effect) {
                self.body_refs
                    .insert(body_ref_key(digest, &effect.run_id), &[])
                    .or_storage()?;
            }
        }
        self.meta.insert(INDEXES_BUILT, b"1").or_storage()?;
        self.flush()
    }

    /// Drops the index marker and both indexes, as a data directory written before them
    /// looks: for the test that an old directory opens and is indexed.
    #[cfg(test)]
    pub(crate) fn forget_indexes(&self) -> Result<()> {
        self.meta.clear().or_storage()?;
        self.in_flight.clear().or_storage()?;
        self.body_refs.clear().or_storage()?;
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use crate::conformance::contracts::new_effect;
    use crate::{Digest, EffectState, Ledger, ReleaseOutcome};

    fn reopen(path: &std::path::Path) -> Ledger {
        for _ in 0..100 {
            if let Ok(ledger) = Ledger::open(path) {
                return ledger;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ledger::open(path).expect("reopen")
    }

    /// A data directory written before `in_flight` and `body_refs` existed opens, and
    /// its first open builds both: recovery finds the effect left releasing, and pruning
    /// keeps the body an open run shares and removes the rest.
    #[test]
    fn an_old_data_directory_is_indexed_once_when_opened() {
        let dir = tempfile::tempdir().expect("dir");
        let (done, doubtful, open, answer) = {
            let ledger = Ledger::open(dir.path()).expect("open");
            let done = ledger.create_run(None).expect("run").id;
            let sent = ledger
                .stage(new_effect(&done, b"shared", Vec::new()))
                .expect("stage");
            ledger.begin_commit(&done, true, "t").expect("commit");
            ledger.mark_releasing(&sent.id).expect("releasing");
            ledger
                .record_release(
                    &sent.id,
                    ReleaseOutcome {
                        status: Some(200),
                        body: b"answer",
                        body_len: 6,
                        ..ReleaseOutcome::default()
                    },
                )
                .expect("released");
            ledger.finish_commit(&done).expect("finish");
            let open = ledger.create_run(None).expect("run").id;
            ledger
                .stage(new_effect(&open, b"shared", Vec::new()))
                .expect("stage");
            let stuck = ledger.create_run(None).expect("run").id;
            let doubtful = ledger
                .stage(new_effect(&stuck, b"stuck", Vec::new()))
                .expect("stage");
            ledger.begin_commit(&stuck, true, "t").expect("commit");
            ledger.mark_releasing(&doubtful.id).expect("releasing");
            ledger.forget_indexes().expect("as an old directory");
            assert!(ledger.in_flight.is_empty() && ledger.body_refs.is_empty());
            (done, doubtful.id, open, Digest::sha256_of(b"answer"))
        };
        let ledger = reopen(dir.path());
        let recovered = ledger.recover().expect("recover");
        assert_eq!(recovered.len(), 1);
        assert_eq!(recovered[0].id, doubtful);
        assert_eq!(recovered[0].state, EffectState::Unknown);
        let pruned = ledger.prune_run(&done).expect("prune");
        assert_eq!((pruned.bodies_kept, pruned.bodies_removed), (1, 1));
        assert!(ledger.body(&answer).expect("body").is_none());
        assert!(ledger
            .body(&Digest::sha256_of(b"shared"))
            .expect("body")
            .is_some());
        assert_eq!(ledger.effects(&open).expect("open run").len(), 1);
    }
}
