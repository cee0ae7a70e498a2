//! The sled data directory's files, made durable with `fdatasync`/`fsync`.
//!
//! sled 0.34's own flush writes its log with `pwrite` and then calls `sync_file_range`
//! (`pagecache/iobuf.rs`), which starts and waits for write-back of that range but
//! neither flushes the device's write cache nor writes the file's metadata (size,
//! extents): after a power loss the data may be gone. Its blobs (values above its inline
//! threshold, one file each under `blobs/`) are written with no sync at all. So every
//! durable write of the ledger, after sled's flush, also syncs here:
//!
//! - `db`, the log and page file: `fdatasync` (std's [`File::sync_data`]) on every flush;
//! - `blobs/<lsn>`: `fdatasync` once each, when it first appears;
//! - `blobs/` and the data directory itself: `fsync` ([`File::sync_all`]) when their
//!   entries changed (a new blob; `snap.*` written to a temporary name and renamed), so
//!   that the names survive as well as the bytes;
//! - `conf`: `fsync` once, at open (sled writes it only when the directory is created).
//!
//! `snap.<lsn>` files are written and `fsync`ed by sled itself before their rename; the
//! directory sync above makes the rename durable.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How long after a directory's last change its modification time is trusted to show
/// every later change: the kernel's timestamps are coarse (a clock tick, a few ms), so
/// an entry added within the same tick as a scan leaves the time unchanged.
const MTIME_SETTLE: Duration = Duration::from_millis(100);

/// The files of one sled data directory, kept open for syncing.
#[derive(Debug)]
pub(super) struct DataFiles {
    dir: PathBuf,
    /// The data directory, opened read-only for `fsync`.
    dir_handle: File,
    /// `db`, opened read-only for `fdatasync` (sync applies to the inode, whatever the
    /// descriptor's mode).
    db: File,
    state: Mutex<DirState>,
}

/// What was synced already: the blobs by name, and each directory's modification time at
/// its last scan.
#[derive(Debug, Default)]
struct DirState {
    blobs: HashSet<std::ffi::OsString>,
    blobs_seen: Option<SystemTime>,
    dir_seen: Option<SystemTime>,
}

impl DataFiles {
    /// The data directory.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the files of sled data directory `dir` (after sled opened it) and syncs
    /// `conf`, every blob and both directories once.
    ///
    /// Errors: the I/O error of opening or syncing a file.
    pub(super) fn open(dir: &Path) -> io::Result<Self> {
        let files = Self {
            dir: dir.to_path_buf(),
            dir_handle: File::open(dir)?,
            db: File::open(dir.join("db"))?,
            state: Mutex::default(),
        };
        match File::open(dir.join("conf")) {
            Ok(conf) => conf.sync_all()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        files.sync()?;
        Ok(files)
    }

    /// Makes what sled wrote so far durable: `fdatasync` of `db`, of every blob not yet
    /// synced, and `fsync` of each directory whose entries changed since its last sync.
    /// Call after sled's own flush returned.
    ///
    /// Errors: the first I/O error (`ENOSPC`, `EIO`, …); the caller must treat the writes
    /// since the last success as not durable.
    pub(super) fn sync(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let blobs_dir = self.dir.join("blobs");
        if let Some(seen) = changed_since(&blobs_dir, state.blobs_seen)? {
            let mut added = false;
            let mut present = HashSet::new();
            for entry in std::fs::read_dir(&blobs_dir)? {
                let entry = entry?;
                let name = entry.file_name();
                present.insert(name.clone());
                if state.blobs.contains(&name) {
                    continue;
                }
                match File::open(entry.path()) {
                    Ok(blob) => blob.sync_data()?,
                    // Collected by sled's blob GC between the listing and the open.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                state.blobs.insert(name);
                added = true;
            }
            if added {
                File::open(&blobs_dir)?.sync_all()?;
            }
            // Blobs sled collected are forgotten, so the set stays the directory's size.
            state.blobs.retain(|name| present.contains(name));
            state.blobs_seen = seen;
        }
        self.db.sync_data()?;
        if let Some(seen) = changed_since(&self.dir, state.dir_seen)? {
            self.dir_handle.sync_all()?;
            state.dir_seen = seen;
        }
        Ok(())
    }

    /// How many blobs are known synced (tests).
    #[cfg(test)]
    pub(super) fn synced_blobs(&self) -> usize {
        self.state.lock().map(|s| s.blobs.len()).unwrap_or(0)
    }
}

/// `Some(mtime to remember)` when directory `dir` may have changed since a scan that saw
/// modification time `seen` (`Some(None)`: scan, but remember nothing, as the time is too
/// recent to trust); `None` when it certainly did not. A missing directory never changed.
fn changed_since(dir: &Path, seen: Option<SystemTime>) -> io::Result<Option<Option<SystemTime>>> {
    let mtime = match std::fs::metadata(dir) {
        Ok(meta) => meta.modified()?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if seen == Some(mtime) {
        return Ok(None);
    }
    let settled = SystemTime::now()
        .duration_since(mtime)
        .is_ok_and(|age| age >= MTIME_SETTLE);
    Ok(Some(settled.then_some(mtime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_new_blobs_once_and_survives_their_removal() {
        let dir = tempfile::tempdir().expect("in a temporary directory");
        std::fs::write(dir.path().join("db"), b"log").expect("in a temporary directory");
        std::fs::write(dir.path().join("conf"), b"conf").expect("in a temporary directory");
        let files = DataFiles::open(dir.path()).expect("in a temporary directory");
        assert_eq!(files.synced_blobs(), 0);
        std::fs::create_dir(dir.path().join("blobs")).expect("in a temporary directory");
        std::fs::write(dir.path().join("blobs/17"), b"blob").expect("in a temporary directory");
        files.sync().expect("in a temporary directory");
        assert_eq!(files.synced_blobs(), 1);
        std::fs::write(dir.path().join("blobs/18"), b"blob").expect("in a temporary directory");
        std::fs::remove_file(dir.path().join("blobs/17")).expect("in a temporary directory");
        files.sync().expect("in a temporary directory");
        assert_eq!(files.synced_blobs(), 1);
    }

    #[test]
    fn a_missing_db_file_is_an_error() {
        let dir = tempfile::tempdir().expect("in a temporary directory");
        assert!(DataFiles::open(dir.path()).is_err());
    }
}
