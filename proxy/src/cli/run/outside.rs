//! `--check-residue-outside PATHS`: what the command changed outside the workspace. These
//! paths are only watched, never snapshotted or restored: each path's kind, size, mode,
//! modification and change times and inode are compared before and after. Unreadable
//! entries are skipped.

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
    // ctime and the inode too: a command can reset mtime (`touch -d`), not ctime.
    format!(
        "{kind} {size} {:o} {}.{} {}.{} {}",
        metadata.mode() & 0o7777,
        metadata.mtime(),
        metadata.mtime_nsec(),
        metadata.ctime(),
        metadata.ctime_nsec(),
        metadata.ino()
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

/// Where cron, at and systemd keep jobs and units a command could schedule to run later,
/// outside the run (and outside any fence): each that exists is watched by every `airlock
/// run`, and what changed under it is residue (docs/run.md, "Residue").
pub(super) fn schedule_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = [
        "/var/spool/cron",
        "/var/spool/at",
        "/var/spool/atjobs",
        "/etc/crontab",
        "/etc/cron.d",
        "/etc/cron.hourly",
        "/etc/cron.daily",
        "/etc/cron.weekly",
        "/etc/cron.monthly",
        "/etc/systemd/system",
        "/etc/systemd/user",
        "/usr/lib/systemd/system",
        "/usr/lib/systemd/user",
        "/etc/profile.d",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        roots.push(home.join(".config/systemd/user"));
        roots.push(home.join(".local/share/systemd/user"));
    }
    roots.retain(|root| root.exists());
    roots
}

/// Absolute forms of the paths given.
pub(super) fn absolute(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect()
}

/// Processes still running that the command started (their environment carries
/// `AIRLOCK_RUN=run`), with the addresses each listens on. Linux only (`/proc`); empty
/// elsewhere.
pub(super) fn leftover_processes(run: &str) -> Vec<airlock_fence::Leftover> {
    airlock_fence::leftovers::processes(&format!("AIRLOCK_RUN={run}"))
}
