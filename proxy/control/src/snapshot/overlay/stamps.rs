//! The `overlay` driver's record of the workspace, by stamp: walked by a thread of its
//! own while the step runs (the workspace is not written before a keep, so the walk
//! need not come before the step), written to `STATE/stamps-SNAP.json`, and waited
//! for by the diff and the residue check. The walker holds `STATE/stamps-SNAP.lock`
//! while it walks, so a reader tells a walk still going from one that died with its
//! process.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{io, Layout};
use crate::snapshot::{mode_of, relative, write_durable, Entry, SnapshotError, Step};

fn paths(layout: &Layout, id: &str) -> (PathBuf, PathBuf) {
    (
        layout.state().join(format!("stamps-{id}.json")),
        layout.state().join(format!("stamps-{id}.lock")),
    )
}

/// Starts the stamp walk of `workspace` for snapshot `id`, under its own time limit.
///
/// Errors: [`SnapshotError::Io`] when the walk's lock cannot be made.
pub(super) fn walk_behind(
    layout: &Layout,
    id: &str,
    workspace: &Path,
    exclude: &[PathBuf],
    timeout: Duration,
) -> Result<(), SnapshotError> {
    let (done, lock_path) = paths(layout, id);
    let lock = std::fs::File::create(&lock_path).map_err(io("cannot create", &lock_path))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io("cannot lock", &lock_path)(e.into()))?;
    let (workspace, exclude) = (workspace.to_owned(), exclude.to_vec());
    std::thread::spawn(move || {
        let step = Step::new("snapshot", timeout);
        let walked = stamp_walk(&workspace, &exclude, &step).map_err(|e| e.to_string());
        let bytes = serde_json::to_vec(&walked).unwrap_or_default();
        if let Err(error) = write_durable(&done, &bytes) {
            tracing::warn!(%error, "cannot record the overlay snapshot's stamps");
        }
        drop(lock);
    });
    Ok(())
}

/// The stamps of snapshot `id`, once its walk is done.
pub(super) fn entries(
    layout: &Layout,
    id: &str,
    step: &Step,
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let (done, lock_path) = paths(layout, id);
    let mut pause = Duration::from_millis(1);
    loop {
        match std::fs::read(&done) {
            Ok(bytes) => {
                let walked: Result<BTreeMap<String, Entry>, String> =
                    serde_json::from_slice(&bytes).map_err(|source| SnapshotError::Corrupt {
                        path: done.display().to_string(),
                        source,
                    })?;
                return walked.map_err(|why| {
                    SnapshotError::Unsupported(format!(
                        "the stamp walk of overlay snapshot {id} failed: {why}"
                    ))
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot read", &done)(e)),
        }
        let walking = std::fs::File::open(&lock_path).is_ok_and(|lock| {
            rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
        });
        if !walking && !done.exists() {
            return Err(SnapshotError::Unsupported(format!(
                "the stamp walk of overlay snapshot {id} did not finish (the server stopped \
                 under it), so the workspace cannot be compared with it"
            )));
        }
        step.check()?;
        std::thread::sleep(pause.min(step.remaining()));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Walks `root` by stamp: every path with its kind and mode, files with their stamp
/// (`stamp:DEV:INO:SIZE:MTIME_NS:CTIME_NS` in the `sha256` field) instead of a hash.
/// Skips `exclude`; never follows a symlink.
pub(in crate::snapshot) fn stamp_walk(
    root: &Path,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        step.check()?;
        let listing = std::fs::read_dir(&dir).map_err(io("cannot list", &dir))?;
        for item in listing {
            let item = item.map_err(io("cannot list", &dir))?;
            let path = item.path();
            if exclude.contains(&path) {
                continue;
            }
            let metadata = item.metadata().map_err(io("cannot stat", &path))?;
            let rel = relative(root, &path)?;
            let entry = entry_by_stamp(&path, &metadata)?;
            if matches!(entry, Entry::Dir { .. }) {
                pending.push(path);
            }
            entries.insert(rel, entry);
        }
    }
    Ok(entries)
}

fn entry_by_stamp(path: &Path, metadata: &std::fs::Metadata) -> Result<Entry, SnapshotError> {
    let kind = metadata.file_type();
    let mode = mode_of(metadata);
    Ok(if kind.is_dir() {
        Entry::Dir {
            mode,
            unlisted: false,
        }
    } else if kind.is_file() {
        let stamp = crate::snapshot::index::Stamp::of(metadata);
        Entry::File {
            mode,
            size: metadata.len(),
            sha256: format!(
                "stamp:{}:{}:{}:{}:{}",
                stamp.dev, stamp.ino, stamp.size, stamp.mtime_ns, stamp.ctime_ns
            ),
        }
    } else if kind.is_symlink() {
        let target = std::fs::read_link(path).map_err(io("cannot read the link", path))?;
        Entry::Symlink {
            target: target
                .to_str()
                .ok_or_else(|| SnapshotError::NotUtf8(path.display().to_string()))?
                .to_owned(),
        }
    } else if kind.is_fifo() {
        Entry::Fifo { mode }
    } else if kind.is_socket() {
        Entry::Socket { mode }
    } else {
        let rdev = metadata.rdev();
        Entry::Device {
            mode,
            block: kind.is_block_device(),
            major: rustix::fs::major(rdev),
            minor: rustix::fs::minor(rdev),
        }
    })
}
