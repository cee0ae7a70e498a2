//! `--check-residue-outside PATHS`: what the command changed outside the workspace. These
//! paths are only watched, never snapshotted or restored: each path's kind, size, mode and
//! modification time are compared before and after. Unreadable entries are skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use airlock_ledger::Changes;

/// A path's kind, size, mode and modification time (ns), as text.
type Stamp = String;

fn stamp(metadata: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let kind = if metadata.file_type().is_symlink() {
        "link"
    } else if metadata.is_dir() {
        "dir"
    } else {
        "file"
    };
    let size = if metadata.is_dir() {
        0
    } else {
        metadata.size()
    };
    format!(
        "{kind} {size} {:o} {}.{}",
        metadata.mode() & 0o7777,
        metadata.mtime(),
        metadata.mtime_nsec()
    )
}

/// Stamps of every path under `roots` (absolute paths), at most `limit` of them.
pub(super) fn scan(
    roots: &[PathBuf],
    exclude: &[PathBuf],
    limit: usize,
) -> BTreeMap<String, Stamp> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = roots.to_vec();
    while let Some(path) = stack.pop() {
        if out.len() >= limit || exclude.iter().any(|e| path.starts_with(e)) {
            continue;
        }
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        out.insert(path.display().to_string(), stamp(&metadata));
        if metadata.is_dir() {
            if let Ok(listing) = std::fs::read_dir(&path) {
                stack.extend(listing.flatten().map(|e| e.path()));
            }
        }
    }
    out
}

/// Paths added, modified and deleted between two scans.
pub(super) fn diff(before: &BTreeMap<String, Stamp>, after: &BTreeMap<String, Stamp>) -> Changes {
    let mut changes = Changes::default();
    for (path, old) in before {
        match after.get(path) {
            None => changes.deleted.push(path.clone()),
            Some(new) if new != old && !old.starts_with("dir ") => {
                changes.modified.push(path.clone())
            }
            Some(_) => {}
        }
    }
    changes.added = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .cloned()
        .collect();
    changes
}

/// Absolute forms of the paths given.
pub(super) fn absolute(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect()
}
