//! sled's flush, run on a thread of its own and waited for with a deadline, so that no
//! request thread blocks forever on a faulted store.
//!
//! sled 0.34 can wedge: when writing a value's blob (values above ≈128 KiB) fails in
//! `IoBufs::encapsulate` (`ENOSPC`, `EIO`), the log buffer's writer count stays raised,
//! and every later flush waits for that writer forever. A caller of [`Flusher::flush`]
//! gets [`LedgerError::Storage`] (`TimedOut`) after the deadline instead, which degrades a
//! [`super::HealingLedger`]; the flush thread stays blocked, costing only itself.

use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{LedgerError, Result};

/// How long a flush may take before the store is treated as faulted. A healthy flush
/// takes milliseconds (one `pwrite` and `sync_file_range` of the log); a slow disk under
/// load can take a second or two.
pub(super) const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// A reply channel for one flush.
type Reply = mpsc::SyncSender<std::result::Result<(), sled::Error>>;

/// The thread that runs one sled database's flushes.
#[derive(Debug)]
pub(super) struct Flusher {
    requests: Mutex<Option<mpsc::Sender<Reply>>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts the flush thread of `db`.
    ///
    /// Errors: the thread could not be spawned.
    pub(super) fn start(db: sled::Db) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Reply>();
        let thread = std::thread::Builder::new()
            .name("ledger-flush".into())
            .spawn(move || {
                for reply in rx {
                    let _ = reply.send(db.flush().map(|_| ()));
                }
            })?;
        Ok(Self {
            requests: Mutex::new(Some(tx)),
            thread: Some(thread),
        })
    }

    /// Runs sled's flush and waits for it up to `within`.
    ///
    /// Errors: sled's, as [`LedgerError::Storage`]; `TimedOut` (also storage) when the
    /// flush did not finish in time, or the flush thread is gone.
    pub(super) fn flush(&self, within: Duration) -> Result<()> {
        let (reply, answer) = mpsc::sync_channel(1);
        let sent = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|tx| tx.send(reply).is_ok());
        if !sent {
            return Err(timed_out("the ledger's flush thread is gone"));
        }
        match answer.recv_timeout(within) {
            Ok(result) => result.map_err(LedgerError::storage),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(timed_out(&format!(
                "sled's flush did not finish within {} s (a write it waits for failed)",
                within.as_secs()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(timed_out("the ledger's flush thread ended"))
            }
        }
    }
}

fn timed_out(why: &str) -> LedgerError {
    LedgerError::storage(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        why.to_owned(),
    ))
}

impl Drop for Flusher {
    /// Ends the flush thread and waits for it, so that sled's files are closed (and its
    /// lock released) when the store is dropped. A faulted store is never dropped on a
    /// thread that must make progress (`healing/graveyard.rs`), so this wait costs nothing
    /// there.
    fn drop(&mut self) {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
