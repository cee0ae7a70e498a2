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

/// Most paths listed as written outside the workspace.
const WRITTEN_LIMIT: usize = 10_000;

/// The run record's `written_outside` under root's fence: every path the steps wrote
/// outside the workspace, read from the run's layer (exact: the overlays' upper
/// directories hold nothing else), with the `--keep-outside` paths copied to the host
/// when the run was kept. The layer is discarded when the run ends.
pub(super) fn layer_report(
    layer: &std::path::Path,
    workspace: &std::path::Path,
    keep: &[PathBuf],
    report: &serde_json::Value,
) -> serde_json::Value {
    let written: Vec<_> = airlock_fence::root::written(layer, WRITTEN_LIMIT)
        .into_iter()
        .filter(|w| !std::path::Path::new(&w.path).starts_with(workspace))
        .collect();
    let kept_run = report["decision"]["kind"] == "keep";
    let mut kept = Vec::new();
    let mut errors = Vec::new();
    if kept_run {
        for path in keep {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            match keep_one(layer, &path) {
                Ok(true) => kept.push(path.display().to_string()),
                Ok(false) => errors.push(format!("{}: not written by the run", path.display())),
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    serde_json::json!({
        "paths": written,
        "truncated": written.len() >= WRITTEN_LIMIT,
        "kept": kept,
        "keep_errors": errors,
        "discarded": true,
    })
}

/// Copies `path` from the layer's upper directory to the host (a whiteout removes it),
/// with the subordinate ids shifted back to the host's. `Ok(false)` when the run did not
/// write it.
fn keep_one(layer: &std::path::Path, path: &std::path::Path) -> std::io::Result<bool> {
    let uids = airlock_fence::idmap::subordinate(std::path::Path::new("/etc/subuid"));
    let gids = airlock_fence::idmap::subordinate(std::path::Path::new("/etc/subgid"));
    let mut best: Option<(PathBuf, PathBuf)> = None;
    for key in std::fs::read_dir(layer.join("upper"))?.flatten() {
        let mount = PathBuf::from(airlock_fence::root::path_of(
            &key.file_name().to_string_lossy(),
        ));
        if let Ok(rel) = path.strip_prefix(&mount) {
            let longer = best
                .as_ref()
                .is_none_or(|(m, _)| mount.components().count() > m.components().count());
            if longer {
                best = Some((mount.clone(), key.path().join(rel)));
            }
        }
    }
    let Some((_, source)) = best else {
        return Ok(false);
    };
    let Ok(meta) = source.symlink_metadata() else {
        return Ok(false);
    };
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    if meta.file_type().is_char_device() && meta.rdev() == 0 {
        if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(path)?;
        } else if path.symlink_metadata().is_ok() {
            std::fs::remove_file(path)?;
        }
        return Ok(true);
    }
    copy_tree(&source, path, (uids, gids))?;
    Ok(true)
}

fn shift(id: u32, range: airlock_fence::idmap::Range) -> u32 {
    if id >= range.start && id - range.start < range.count {
        id - range.start
    } else {
        id
    }
}

type Ranges = (airlock_fence::idmap::Range, airlock_fence::idmap::Range);

fn copy_tree(
    source: &std::path::Path,
    target: &std::path::Path,
    ids: Ranges,
) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let meta = source.symlink_metadata()?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if meta.file_type().is_char_device() && meta.rdev() == 0 {
        // A whiteout below a kept directory: the path was deleted.
        if target.is_dir() && !target.is_symlink() {
            return std::fs::remove_dir_all(target);
        }
        return std::fs::remove_file(target).or_else(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(())
            } else {
                Err(e)
            }
        });
    }
    if meta.is_dir() {
        std::fs::create_dir_all(target)?;
        for entry in std::fs::read_dir(source)?.flatten() {
            copy_tree(&entry.path(), &target.join(entry.file_name()), ids)?;
        }
    } else if meta.file_type().is_symlink() {
        let _ = std::fs::remove_file(target);
        std::os::unix::fs::symlink(std::fs::read_link(source)?, target)?;
    } else if meta.is_file() {
        std::fs::copy(source, target)?;
    } else {
        return Ok(());
    }
    std::os::unix::fs::lchown(
        target,
        Some(shift(meta.uid(), ids.0)),
        Some(shift(meta.gid(), ids.1)),
    )?;
    if !meta.file_type().is_symlink() {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            target,
            std::fs::Permissions::from_mode(meta.mode() & 0o7777),
        )?;
    }
    Ok(())
}
