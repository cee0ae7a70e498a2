//! A sled ledger that heals: after a storage fault it is marked degraded, refuses writes
//! with [`LedgerError::Degraded`], and is reopened in the background until a probe write
//! and flush succeed; and it refuses staging while its disk is below a free-space floor.
//!
//! sled 0.34 keeps its first I/O error (`ENOSPC`, `EIO`) as a global error and fails
//! every later write with it, so a full disk would otherwise break staging until a
//! restart even once space returns. The reopened store removes the records of effects
//! whose staging failed ([`Ledger::unacknowledged`]): their clients were told so, and
//! they are never listed.
//!
//! No thread that must make progress blocks on a faulted store (issue #38 item 1):
//!
//! - **Room before a blob.** A value that sled may write as a blob file of its own is
//!   refused with [`LedgerError::LowSpace`] (507) when the disk has less than twice its
//!   size free, before sled is touched (`Ledger::room_for`): a blob write that fails
//!   inside sled wedges its log buffer (its writer count stays raised), after which
//!   sled's flush and its `Drop` wait forever.
//! - **Bounded flushes.** When a blob write fails anyway (the space went between the
//!   check and the write, or `EIO`), every flush is waited for at most
//!   `bounded::FLUSH_WITHIN` (5 s) on a thread of its own; a caller then gets a storage
//!   error, which degrades the store, instead of hanging.
//! - **The faulted store is never dropped where it matters.** The reopen thread hands it
//!   to a detached graveyard thread ([`graveyard`]), which drops it once it is its last
//!   owner; when that drop has not closed sled's files within [`BURIAL_WAIT`], the reopen
//!   releases the buried store's `flock` on `db` (found in `/proc/self/fd`, duplicated
//!   with `pidfd_getfd`), so the same process can open the directory again. A wedged
//!   store's memory (up to its page cache) and descriptor stay with the graveyard thread
//!   for the life of the process. The ledger takes no sled batch or transaction
//!   (`retention.rs`, `remove_prefix`): they take a process-wide lock that waits for the
//!   wedged store's flush, which holds a reader forever, and would stop the new store too.
//! - **Torn files set aside at every open** (`sled_store/repair.rs`): an unfinished
//!   `snap.*.generating` or a blob that fails its CRC is moved to `quarantine/`, so a
//!   fault during a snapshot cannot make the reopen (or the next start) fail forever.

mod forward;
mod graveyard;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use super::Ledger;
use crate::change::Notifier;
use crate::store::Health;
use crate::{LedgerError, Result};

/// The default free-space floor below which staging is refused: 64 MiB
/// (`airlock serve --ledger-min-free-mib`).
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// Longest a free-space check of [`HealingLedger::journal_room`] is reused.
pub const ROOM_CHECK_EVERY: Duration = Duration::from_millis(50);

/// How often a degraded ledger tries to reopen.
const REOPEN_EVERY: Duration = Duration::from_millis(250);

/// How long the reopen waits for the faulted store's drop to close its files before it
/// releases the store's lock itself ([`graveyard`]).
const BURIAL_WAIT: Duration = Duration::from_secs(1);

/// A [`Ledger`] behind a swappable handle, reopened after storage faults. Implements
/// [`crate::Store`] by forwarding every method to the current store. Build with
/// [`HealingLedger::open`]; share the returned `Arc`.
pub struct HealingLedger {
    path: PathBuf,
    cache_bytes: u64,
    min_free_bytes: u64,
    /// The open store; `None` while a reopen is under way.
    current: RwLock<Option<Arc<Ledger>>>,
    /// Subscribers, kept across reopens.
    notifier: Arc<Notifier>,
    /// The fault that degraded the store, while it is degraded.
    fault: Mutex<Option<String>>,
    faults: AtomicU64,
    recoveries: AtomicU64,
    /// Torn files set aside by this process's opens (`sled_store/repair.rs`).
    repaired: AtomicU64,
    /// The last free-space figure of [`HealingLedger::journal_room`] and when it was read
    /// (ms since the epoch).
    room_free_bytes: AtomicU64,
    room_checked_ms: AtomicU64,
    me: Weak<HealingLedger>,
}

impl std::fmt::Debug for HealingLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealingLedger")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HealingLedger {
    /// Opens (or creates) the ledger in directory `path` with a page cache of about
    /// `cache_bytes` ([`Ledger::open_with_cache`]); staging, and the journal's reads,
    /// denials and lineage records, are refused with [`LedgerError::LowSpace`] while the
    /// file system has fewer than `min_free_bytes` available (0 turns the floor off).
    ///
    /// Errors: as [`Ledger::open`]; the first open does not retry.
    pub fn open(path: &Path, cache_bytes: u64, min_free_bytes: u64) -> Result<Arc<Self>> {
        let notifier = Arc::new(Notifier::new());
        let ledger = Ledger::open_with_notifier(path, cache_bytes, notifier.clone())?;
        log_repairs(path, ledger.repaired());
        let repaired = ledger.repaired().len() as u64;
        Ok(Arc::new_cyclic(|me| Self {
            path: path.to_path_buf(),
            cache_bytes,
            min_free_bytes,
            current: RwLock::new(Some(Arc::new(ledger))),
            notifier,
            fault: Mutex::new(None),
            faults: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            repaired: AtomicU64::new(repaired),
            room_free_bytes: AtomicU64::new(0),
            room_checked_ms: AtomicU64::new(0),
            me: me.clone(),
        }))
    }

    /// Runs `f` on the current store; a storage fault degrades it and starts a reopen.
    ///
    /// Errors: [`LedgerError::Degraded`] while degraded, else `f`'s.
    fn with<T>(&self, f: impl FnOnce(&Ledger) -> Result<T>) -> Result<T> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(ledger) = current else {
            return Err(self.degraded_error());
        };
        if let Some(reason) = self.fault_lock().clone() {
            return Err(LedgerError::Degraded { reason });
        }
        let result = f(&ledger);
        if let Err(LedgerError::Storage { source }) = &result {
            self.degrade(error_chain(source.as_ref()));
        }
        result
    }

    /// [`HealingLedger::with`] for a write that stages: refused below the floor first.
    fn with_space<T>(&self, f: impl FnOnce(&Ledger) -> Result<T>) -> Result<T> {
        if let Some((free_bytes, floor_bytes)) = self.below_floor() {
            return Err(LedgerError::LowSpace {
                free_bytes,
                floor_bytes,
            });
        }
        self.with(f)
    }

    fn degraded_error(&self) -> LedgerError {
        LedgerError::Degraded {
            reason: self
                .fault_lock()
                .clone()
                .unwrap_or_else(|| "reopening after a storage fault".into()),
        }
    }

    fn fault_lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`crate::Store::journal_room`]: `Degraded` while a fault is unresolved, `LowSpace`
    /// below the floor, from a statvfs at most `ROOM_CHECK_EVERY` (50 ms) old (the pass path
    /// asks before every read).
    pub fn journal_room(&self) -> Result<()> {
        if let Some(reason) = self.fault_lock().clone() {
            return Err(LedgerError::Degraded { reason });
        }
        if self.min_free_bytes == 0 {
            return Ok(());
        }
        let now = crate::now_ms();
        let checked = self.room_checked_ms.load(Ordering::Relaxed);
        let free = if now.saturating_sub(checked) < ROOM_CHECK_EVERY.as_millis() as u64 {
            self.room_free_bytes.load(Ordering::Relaxed)
        } else {
            let Ok(stat) = rustix::fs::statvfs(&self.path) else {
                return Ok(());
            };
            let free = stat.f_bavail.saturating_mul(stat.f_frsize);
            self.room_free_bytes.store(free, Ordering::Relaxed);
            self.room_checked_ms.store(now, Ordering::Relaxed);
            free
        };
        if free < self.min_free_bytes {
            return Err(LedgerError::LowSpace {
                free_bytes: free,
                floor_bytes: self.min_free_bytes,
            });
        }
        Ok(())
    }

    /// `(available, floor)` in bytes when the ledger's file system has less available
    /// than the floor; `None` when above it, with no floor, or when statvfs fails (the
    /// write itself then reports the fault).
    fn below_floor(&self) -> Option<(u64, u64)> {
        if self.min_free_bytes == 0 {
            return None;
        }
        let stat = rustix::fs::statvfs(&self.path).ok()?;
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        (free < self.min_free_bytes).then_some((free, self.min_free_bytes))
    }

    /// Marks the store degraded by `reason` and, unless one runs already, starts the
    /// thread that reopens it.
    fn degrade(&self, reason: String) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        {
            let mut fault = self.fault_lock();
            if fault.is_some() {
                return;
            }
            *fault = Some(reason);
        }
        let me = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name("ledger-reopen".into())
            .spawn(move || reopen(&me));
        if spawned.is_err() {
            // No thread now: the next fault tries again.
            *self.fault_lock() = None;
        }
    }
}

/// The reopen loop: buries the faulted store ([`graveyard::bury`]: dropped on a thread of
/// its own, since a wedged sled store's drop never returns) and, when its drop has not
/// closed its files within [`BURIAL_WAIT`], releases its lock on `db`; then every
/// [`REOPEN_EVERY`] opens the directory again (setting aside torn files first), removes
/// the effects whose staging failed, and probes with a write and a flush (bounded by
/// `bounded::FLUSH_WITHIN`); the first store that passes replaces the old one. Ends when
/// it does or when the ledger is dropped. Nothing here waits without a deadline.
fn reopen(me: &Weak<HealingLedger>) {
    let mut gone = Vec::new();
    if let Some(healing) = me.upgrade() {
        let old = healing
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(old) = old {
            gone = old.unacknowledged();
            let closed = graveyard::bury(old);
            if closed.recv_timeout(BURIAL_WAIT).is_err() {
                match graveyard::release_lock(&healing.path) {
                    Ok(n) => tracing::warn!(
                        ledger = %healing.path.display(),
                        descriptors = n,
                        "ledger: the faulted store did not close within {BURIAL_WAIT:?}; released its lock on db and left it to a graveyard thread"
                    ),
                    Err(error) => tracing::warn!(
                        ledger = %healing.path.display(),
                        %error,
                        "ledger: could not release the faulted store's lock on db; reopening waits for its drop"
                    ),
                }
            }
        }
    }
    loop {
        std::thread::sleep(REOPEN_EVERY);
        let Some(healing) = me.upgrade() else {
            return;
        };
        let opened = Ledger::open_with_notifier(
            &healing.path,
            healing.cache_bytes,
            healing.notifier.clone(),
        )
        .and_then(|ledger| {
            ledger.remove_unacknowledged(&gone)?;
            ledger.probe()?;
            Ok(ledger)
        });
        if let Ok(ledger) = opened {
            log_repairs(&healing.path, ledger.repaired());
            healing
                .repaired
                .fetch_add(ledger.repaired().len() as u64, Ordering::Relaxed);
            *healing.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ledger));
            *healing.fault_lock() = None;
            healing.recoveries.fetch_add(1, Ordering::Relaxed);
            tracing::info!(ledger = %healing.path.display(), "ledger: reopened after a storage fault");
            return;
        }
    }
}

/// One line saying what an open repaired, when it repaired anything (each file was
/// named as it was moved: `sled_store/repair.rs`).
fn log_repairs(path: &Path, repaired: &[super::SetAside]) {
    if let Some(first) = repaired.first() {
        let into = first
            .to
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        tracing::warn!(
            ledger = %path.display(),
            set_aside = repaired.len(),
            quarantine = %into,
            "ledger: opened after setting aside {} torn file(s)",
            repaired.len()
        );
    }
}

impl Ledger {
    /// A write and a flush that change nothing a caller sees: proves the store writable.
    ///
    /// Errors: storage faults.
    pub(crate) fn probe(&self) -> Result<()> {
        use super::OrStorage as _;
        self.counters
            .insert(b"probe/writable", &crate::model::now_ms().to_be_bytes())
            .or_storage()?;
        self.flush()
    }
}

/// `error: cause: cause …`, for the degraded reason.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

impl HealingLedger {
    /// [`crate::Store::health`]: degraded while a fault is unresolved, low on space
    /// below the floor.
    pub fn health(&self) -> Health {
        let storage_faults = self.faults.load(Ordering::Relaxed);
        let recoveries = self.recoveries.load(Ordering::Relaxed);
        let (writable, reason, detail) = if let Some(fault) = self.fault_lock().clone() {
            (false, Some("ledger_degraded"), Some(fault))
        } else if let Some((free, floor)) = self.below_floor() {
            (
                false,
                Some("ledger_low_space"),
                Some(format!(
                    "{free} bytes free on the ledger's file system, below the floor of {floor} (--ledger-min-free-mib)"
                )),
            )
        } else {
            (true, None, None)
        };
        Health {
            writable,
            reason,
            detail,
            storage_faults,
            recoveries,
            repaired_files: self.repaired.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
