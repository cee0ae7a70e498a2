//! The sled store: airlock's embedded default ledger, on sled 0.34, one process writing.
//!
//! On-disk format (kept so old data directories open): one tree per record kind, keys
//! below, values serde JSON unless said otherwise. Each method holds the write lock over
//! its read-modify-write, so its changes are atomic with respect to every other method;
//! durable methods flush (group commit) before they return: sled's own flush, then
//! `fdatasync` of its files ([`files`]), so an acknowledged write survives power loss.
//! [`HealingLedger`] reopens the store after a storage fault.
//!
//! Reads and their analyses are not in sled: since the read log (issue #22) they are
//! appended to one file per run under `reads/` and `read-analyses/` ([`read_log`]); the trees `reads`,
//! `read_content` and `read_hashes` are only read, for a data directory written before it.
//!
//! Trees: `runs` (run id -> Run), `effects` (effect id -> Effect), `run_effects`, `reads`,
//! `denials` (`run_id \0 seq(be u64)` -> effect id / Read or a JSON array of consecutive
//! Reads / Denial), `bodies` (digest -> raw bytes), `counters` (`KIND/run_id` -> be u64),
//! `placeholders`, `read_content`, `read_hashes`, `effect_lineage`, `workspaces`,
//! `release_leases` (fields of [`Ledger`] below), and since the retention change (issue 19):
//!
//! - `in_flight`: effect id -> run id, for every effect whose record is `releasing`
//!   (written before the record enters `releasing`, removed after it leaves), which
//!   [`Ledger::recover`] reads instead of scanning `effects`;
//! - `body_refs`: `digest \0 run_id` -> empty, one per run referencing a body (an
//!   effect's request or a release's response), so that pruning a run removes a body
//!   exactly when no other run references it;
//! - `meta`: `indexes` -> `1` once `in_flight` and `body_refs` were built. A data
//!   directory written before them opens as before: the first open scans `effects` once
//!   to build both, then writes the marker ([`retention`]). A binary older than the
//!   marker that writes to the directory afterwards leaves the indexes stale: delete
//!   the `meta` tree's marker (or restore from before) to have them rebuilt;
//! - `audit`: `seq` (be u64) -> [`crate::AuditEntry`], the audit log (issue 36), which no
//!   method removes from.

pub use healing::{HealingLedger, DEFAULT_MIN_FREE_BYTES};

mod audit;
mod bounded;
mod effects;
mod files;
mod healing;
mod journal;
mod leases;
mod lineage;
mod read_log;
mod repair;
mod retention;
mod runs;
mod store_impl;
mod workspace;

pub use repair::SetAside;

/// Values this long or longer are checked for room before they are written
/// ([`Ledger::room_for`]): sled 0.34 writes a log message above ≈128 KiB (its segment of
/// 512 KiB over 4) as a blob file, and a message holds a value with its neighbours.
const BLOB_RISK_BYTES: usize = 64 << 10;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use serde::{de::DeserializeOwned, Serialize};

use crate::change::{Change, Notifier};
use crate::model::{EffectId, RunId};
use crate::{LedgerError, Result, DEFAULT_CACHE_BYTES};

/// The sled store ([`crate::Store`] on sled; the name predates the trait). Cheap to share
/// behind an `Arc`.
pub struct Ledger {
    db: sled::Db,
    /// The page cache asked of sled, in bytes.
    cache_bytes: u64,
    runs: sled::Tree,
    effects: sled::Tree,
    /// `run_id \0 seq(be u64)` -> effect id
    run_effects: sled::Tree,
    /// `run_id \0 seq(be u64)` -> Read: a data directory's reads from before the read log
    /// (read, never written)
    reads: sled::Tree,
    /// digest -> bytes
    bodies: sled::Tree,
    /// `effects/run_id` and `reads/run_id` -> last sequence number (be u64)
    counters: sled::Tree,
    /// `run_id \0 value` -> IssuedPlaceholder
    placeholders: sled::Tree,
    /// `run_id \0 read seq` -> read content meta (notable values); hashes in `read_hashes`
    /// (from before the read log: read, never written)
    read_content: sled::Tree,
    /// `run_id \0 read seq` -> winnowed fingerprints, little-endian u64s, sorted (from
    /// before the read log)
    read_hashes: sled::Tree,
    /// Reads, one append-only file per run ([`read_log`]).
    read_log: read_log::ReadLog,
    /// Reads' lineage analyses, one append-only file per run ([`read_log`]).
    analysis_log: read_log::ReadLog,
    /// effect id -> EffectLineage
    effect_lineage: sled::Tree,
    /// run id -> WorkspaceRecord (`airlock run`)
    workspaces: sled::Tree,
    /// `run_id \0 seq(be u64)` -> Denial
    denials: sled::Tree,
    /// effect id -> run id, for effects in `releasing` (the recovery index)
    in_flight: sled::Tree,
    /// `digest \0 run_id` -> empty: which runs reference a body
    body_refs: sled::Tree,
    /// `indexes` -> `1` once `in_flight` and `body_refs` are built
    meta: sled::Tree,
    /// run id -> [`crate::Lease`] (the run's newest release lease, kept after it expires)
    release_leases: sled::Tree,
    /// `seq` (be u64) -> [`crate::AuditEntry`]: the audit log, append-only ([`audit`])
    audit: sled::Tree,
    /// Serialises read-modify-write of run and effect records.
    write: Mutex<()>,
    /// Group commit: callers that arrive while a flush runs share the next one.
    flushes: Mutex<FlushState>,
    flushed: std::sync::Condvar,
    /// Subscribers to this store's changes.
    notifier: std::sync::Arc<Notifier>,
    /// The data directory's files, synced after sled's flush.
    files: files::DataFiles,
    /// Runs sled's flushes with a deadline ([`bounded`]).
    flusher: bounded::Flusher,
    /// The torn files set aside before this store opened ([`repair`]).
    repaired: Vec<repair::SetAside>,
    /// Effects whose staging failed at the flush (their clients got an error), with
    /// their run and sequence number: never listed, and removed by the next store that
    /// opens this directory in this process ([`HealingLedger`]).
    unacknowledged: Mutex<HashMap<EffectId, (RunId, u64)>>,
}

/// Flush generations: `started` counts flushes begun, `completed` the last one finished.
#[derive(Debug, Default)]
struct FlushState {
    started: u64,
    completed: u64,
    running: bool,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

fn index_key(run: &RunId, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(run.0.len() + 9);
    key.extend_from_slice(run.0.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn run_prefix(run: &RunId) -> Vec<u8> {
    let mut key = run.0.as_bytes().to_vec();
    key.push(0);
    key
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| LedgerError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising these plain structs (strings, numbers, vectors) cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Wraps a sled fault as [`LedgerError::Storage`].
trait OrStorage<T> {
    fn or_storage(self) -> Result<T>;
}

impl<T> OrStorage<T> for std::result::Result<T, sled::Error> {
    fn or_storage(self) -> Result<T> {
        self.map_err(LedgerError::storage)
    }
}

/// Winnowed fingerprints stored as little-endian u64s (the `read_hashes` tree's values and
/// the read log's analyses); a trailing partial u64 is ignored.
fn fingerprints_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .filter_map(|c| <[u8; 8]>::try_from(c).ok())
        .map(u64::from_le_bytes)
        .collect()
}

/// A read log result as the ledger's: a damaged or unparsable record is
/// [`LedgerError::Corrupt`] under key `reads/RUN` (one run's journal is unreadable, the
/// store is not at fault), any other I/O error [`LedgerError::Storage`].
fn read_log_result<T>(run: &RunId, result: std::io::Result<T>) -> Result<T> {
    result.map_err(|error| {
        if error.kind() == std::io::ErrorKind::InvalidData {
            LedgerError::Corrupt {
                key: format!("reads/{run}"),
                source: serde_json::Error::io(error),
            }
        } else {
            LedgerError::storage(error)
        }
    })
}

impl<T> OrStorage<T> for std::io::Result<T> {
    fn or_storage(self) -> Result<T> {
        self.map_err(LedgerError::storage)
    }
}

impl Ledger {
    /// Opens (or creates) the ledger in directory `path`, with a page cache of
    /// [`DEFAULT_CACHE_BYTES`].
    ///
    /// Errors: [`LedgerError::Storage`] when sled cannot open it (for example another
    /// process holds it).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the ledger in directory `path`, keeping about `cache_bytes` of
    /// its pages in memory (sled's `cache_capacity`, counted by the pages' size on disk;
    /// older pages are read back from disk when needed). The cache fills as the ledger
    /// grows and then stops growing; resident memory ends above base + `cache_bytes`
    /// (sled's pages take more room in memory than on disk: with 64 MiB the soak reached
    /// ≈128 MiB), and sled's per-page bookkeeping still grows with the ledger's size beyond
    /// that (≈0.2 MiB per MB of ledger; docs/protocols.md "Known gaps").
    ///
    /// Errors: as [`Ledger::open`].
    pub fn open_with_cache(path: &Path, cache_bytes: u64) -> Result<Self> {
        Self::open_with_notifier(path, cache_bytes, std::sync::Arc::default())
    }

    /// [`Ledger::open_with_cache`] announcing its changes through `notifier`, which
    /// outlives this store ([`HealingLedger`] keeps its subscribers across reopens).
    pub(crate) fn open_with_notifier(
        path: &Path,
        cache_bytes: u64,
        notifier: std::sync::Arc<Notifier>,
    ) -> Result<Self> {
        let repaired = repair::set_aside_torn_files(path).or_storage()?;
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(Some(200))
            .open()
            .or_storage()?;
        let files = files::DataFiles::open(path).or_storage()?;
        let flusher = bounded::Flusher::start(db.clone()).or_storage()?;
        let counters = db.open_tree("counters").or_storage()?;
        let ledger = Self {
            read_log: read_log::ReadLog::new(path, read_log::READS, counters.clone()),
            analysis_log: read_log::ReadLog::new(path, read_log::ANALYSES, counters.clone()),
            runs: db.open_tree("runs").or_storage()?,
            effects: db.open_tree("effects").or_storage()?,
            run_effects: db.open_tree("run_effects").or_storage()?,
            reads: db.open_tree("reads").or_storage()?,
            bodies: db.open_tree("bodies").or_storage()?,
            counters,
            placeholders: db.open_tree("placeholders").or_storage()?,
            read_content: db.open_tree("read_content").or_storage()?,
            read_hashes: db.open_tree("read_hashes").or_storage()?,
            effect_lineage: db.open_tree("effect_lineage").or_storage()?,
            workspaces: db.open_tree("workspaces").or_storage()?,
            denials: db.open_tree("denials").or_storage()?,
            in_flight: db.open_tree("in_flight").or_storage()?,
            body_refs: db.open_tree("body_refs").or_storage()?,
            meta: db.open_tree("meta").or_storage()?,
            release_leases: db.open_tree("release_leases").or_storage()?,
            audit: db.open_tree("audit").or_storage()?,
            db,
            cache_bytes,
            write: Mutex::new(()),
            flushes: Mutex::default(),
            flushed: std::sync::Condvar::new(),
            notifier,
            files,
            flusher,
            repaired,
            unacknowledged: Mutex::default(),
        };
        ledger.build_indexes_once()?;
        Ok(ledger)
    }

    /// The torn files set aside before this store opened (`sled_store/repair.rs`): a
    /// snapshot left unfinished or a blob cut short, moved to `quarantine/<unix ms>/`.
    pub fn repaired(&self) -> &[SetAside] {
        &self.repaired
    }

    /// Refuses a value of `len` bytes that sled may write as a blob of its own when the
    /// file system has less than twice that (plus 1 MiB) available, before sled is
    /// touched: a blob write that fails in sled 0.34 wedges its log (`bounded.rs`), so the
    /// staging gets a clean [`LedgerError::LowSpace`] (507) instead. Values below
    /// [`BLOB_RISK_BYTES`] are not checked; neither is anything when statvfs fails.
    fn room_for(&self, len: usize) -> Result<()> {
        if len < BLOB_RISK_BYTES {
            return Ok(());
        }
        let Ok(stat) = rustix::fs::statvfs(self.files.dir()) else {
            return Ok(());
        };
        let free_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
        let needed = u64::try_from(len)
            .unwrap_or(u64::MAX)
            .saturating_mul(2)
            .saturating_add(1 << 20);
        if free_bytes < needed {
            return Err(LedgerError::LowSpace {
                free_bytes,
                floor_bytes: needed,
            });
        }
        Ok(())
    }

    /// The page cache this ledger was opened with, in bytes.
    pub fn cache_capacity(&self) -> u64 {
        self.cache_bytes
    }

    /// [`crate::Store::subscribe`] on sled: a receiver of this ledger's changes.
    pub fn subscribe(&self) -> std::sync::mpsc::Receiver<Change> {
        self.notifier.subscribe()
    }

    /// Bytes the ledger's files take on disk: sled's `size_on_disk` plus the read log's files.
    ///
    /// Errors: [`LedgerError::Storage`] when sled or the read log cannot read its files' sizes.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk().or_storage()?
            + self.read_log.size_on_disk().or_storage()?
            + self.analysis_log.size_on_disk().or_storage()?)
    }

    /// Flushes, then announces `changes`: the tail of every durable write.
    fn flush_and_send(&self, changes: impl IntoIterator<Item = Change>) -> Result<()> {
        self.flush()?;
        self.notifier.send(changes);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guard protects no data of its own, so a poisoned lock is still usable.
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flushes every write so far to disk: sled's flush (`pwrite` + `sync_file_range` of
    /// its log), then `fdatasync` of `db` and any new blob and `fsync` of the directories
    /// whose entries changed (`sled_store/files.rs`), so that what returns `Ok` survives power loss.
    ///
    /// Group commit: a caller needs a flush that *started* after it arrived (one already
    /// running may miss its writes). Callers that arrive while a flush runs wait for it,
    /// then one of them runs the next flush for all of them, so concurrent stagers share
    /// disk syncs instead of queueing one each.
    pub fn flush(&self) -> Result<()> {
        let mut state = self.flushes.lock().unwrap_or_else(|e| e.into_inner());
        let needed = state.started + 1;
        loop {
            if state.completed >= needed {
                return Ok(());
            }
            if !state.running {
                state.running = true;
                state.started += 1;
                let generation = state.started;
                drop(state);
                let result = self
                    .flusher
                    .flush(bounded::FLUSH_WITHIN)
                    .and_then(|()| self.files.sync().or_storage())
                    .and_then(|()| self.read_log.sync().or_storage())
                    .and_then(|()| self.analysis_log.sync().or_storage());
                state = self.flushes.lock().unwrap_or_else(|e| e.into_inner());
                state.running = false;
                if result.is_ok() {
                    state.completed = generation;
                }
                self.flushed.notify_all();
                result?;
                if generation >= needed {
                    return Ok(());
                }
                continue;
            }
            state = self.flushed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn next_seq(&self, counter: &str, run: &RunId) -> Result<u64> {
        self.next_seqs(counter, run, 1)
    }

    /// Reserves `n` consecutive sequence numbers of `counter` for `run`; returns the last.
    fn next_seqs(&self, counter: &str, run: &RunId, n: u64) -> Result<u64> {
        let key = format!("{counter}/{run}");
        let next = self
            .counters
            .update_and_fetch(key.as_bytes(), |old| {
                let current = old
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or(0);
                Some((current + n).to_be_bytes().to_vec())
            })
            .or_storage()?;
        Ok(next
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(n))
    }
}
