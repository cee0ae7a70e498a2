//! Where a faulted sled store goes: dropped on a thread of its own, and its lock on
//! `db` released when that drop hangs.
//!
//! Dropping a sled 0.34 store flushes it, and a store wedged by a failed blob write
//! (`sled_store/bounded.rs`) waits forever in that flush. So the reopen thread never drops
//! one: [`bury`] hands it to a detached `ledger-graveyard` thread, which waits until it is
//! the store's last owner (a request still running holds a clone, and must never be the
//! one that drops it) and drops it there. When the drop does not finish soon,
//! [`release_lock`] releases sled's `flock` on `<ledger>/db`, held by the buried store's
//! descriptor, so that the directory can be opened again in this process. The buried
//! store keeps its memory and descriptor, and its writes fail with its first error (sled
//! refuses every write after one), so it never writes to the file the new store uses.

use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::sled_store::Ledger;

/// How often the graveyard checks whether it owns the store alone.
const OWNER_POLL: Duration = Duration::from_millis(50);

/// Drops `old` on a detached thread once no one else holds it; the receiver gets `()`
/// when the drop has finished (sled's files are then closed), and nothing when it hangs.
pub(super) fn bury(old: Arc<Ledger>) -> mpsc::Receiver<()> {
    let (done, finished) = mpsc::channel();
    // Held until the thread runs, so that a failed spawn never drops the store here.
    let keep = old.clone();
    let spawned = std::thread::Builder::new()
        .name("ledger-graveyard".into())
        .spawn(move || {
            let mut old = old;
            loop {
                match Arc::try_unwrap(old) {
                    Ok(ledger) => {
                        drop(ledger);
                        let _ = done.send(());
                        return;
                    }
                    Err(shared) => {
                        old = shared;
                        std::thread::sleep(OWNER_POLL);
                    }
                }
            }
        });
    if spawned.is_ok() {
        drop(keep);
    } else {
        // No thread: keep it for good rather than risk the drop here.
        std::mem::forget(keep);
    }
    finished
}

/// Releases every `flock` this process holds on `dir/db`: finds the descriptors open on
/// it in `/proc/self/fd`, duplicates each with `pidfd_getfd` (the same open file
/// description, so the same lock) and unlocks it. Returns how many descriptors it
/// unlocked (a descriptor that held no lock counts too).
///
/// Errors: `/proc` cannot be read, or `pidfd_open`/`pidfd_getfd`/`flock` fails (Linux
/// 5.6 or later is needed).
pub(super) fn release_lock(dir: &Path) -> std::io::Result<usize> {
    let db = dir.join("db");
    let db = std::fs::canonicalize(&db).unwrap_or(db);
    let me = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )?;
    let mut unlocked = 0;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target != db {
            continue;
        }
        let Some(number) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let Ok(fd) =
            rustix::process::pidfd_getfd(&me, number, rustix::process::PidfdGetfdFlags::empty())
        else {
            // Closed since it was listed.
            continue;
        };
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::Unlock)?;
        unlocked += 1;
    }
    Ok(unlocked)
}
