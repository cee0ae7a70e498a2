//! The `dir` driver: every file's content kept once in the store's objects, and a manifest;
//! restore removes what the snapshot did not have and rewrites what differs.

use std::path::{Path, PathBuf};

use super::{entry_of, io, pause_point, walk, Entry, Manifest, SnapshotError, Store};

/// Takes a `dir` snapshot of `workspace`.
pub(super) fn take(
    store: &Store,
    workspace: &Path,
    id: &str,
    exclude: &[PathBuf],
) -> Result<Manifest, SnapshotError> {
    let entries = walk(workspace, exclude, Some(store))?;
    Ok(Manifest {
        id: id.to_owned(),
        driver: "dir".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries,
        git: None,
        commands: None,
    })
}

fn kind_matches(a: &Entry, b: &Entry) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Restores `workspace` to `manifest`. Idempotent: paths already right are left alone.
pub(super) fn restore(
    store: &Store,
    workspace: &Path,
    manifest: &Manifest,
    exclude: &[PathBuf],
) -> Result<(), SnapshotError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(workspace).map_err(io("cannot create", workspace))?;
    let current = walk(workspace, exclude, None)?;
    let mut changed = false;
    let mut touched = || {
        if !changed {
            changed = true;
        } else {
            pause_point("rollback_midway");
        }
    };
    // Remove what the snapshot did not have, children before parents (reverse order).
    for (path, entry) in current.iter().rev() {
        let keep = manifest
            .entries
            .get(path)
            .is_some_and(|wanted| kind_matches(wanted, entry));
        if keep {
            continue;
        }
        let full = workspace.join(path);
        touched();
        let result = match entry {
            Entry::Dir { .. } => std::fs::remove_dir_all(&full),
            _ => std::fs::remove_file(&full),
        };
        match result {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("cannot remove", &full)(e))
            }
            _ => {}
        }
    }
    // Create and rewrite, parents before children.
    for (path, wanted) in &manifest.entries {
        let full = workspace.join(path);
        let now = if full.symlink_metadata().is_ok() {
            Some(entry_of(&full, None)?)
        } else {
            None
        };
        if now.as_ref() == Some(wanted) {
            continue;
        }
        touched();
        match wanted {
            Entry::Dir { mode } => {
                std::fs::create_dir_all(&full).map_err(io("cannot create", &full))?;
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode | 0o700))
                    .map_err(io("cannot set the mode of", &full))?;
            }
            Entry::File { mode, sha256, .. } => {
                if now.as_ref().is_some_and(|n| !kind_matches(n, wanted)) {
                    let _ = std::fs::remove_dir_all(&full);
                    let _ = std::fs::remove_file(&full);
                }
                let parent = full.parent().unwrap_or(workspace);
                let mut tmp = tempfile::NamedTempFile::new_in(parent)
                    .map_err(io("cannot create a file in", parent))?;
                let object = store.object_path(sha256);
                let mut source = std::fs::File::open(&object)
                    .map_err(io("cannot read snapshot object", &object))?;
                std::io::copy(&mut source, &mut tmp).map_err(io("cannot restore", &full))?;
                tmp.as_file()
                    .set_permissions(std::fs::Permissions::from_mode(*mode))
                    .map_err(io("cannot set the mode of", &full))?;
                tmp.persist(&full).map_err(|e| SnapshotError::Io {
                    action: "cannot restore",
                    path: full.display().to_string(),
                    source: e.error,
                })?;
            }
            Entry::Symlink { target } => {
                if now.is_some() {
                    let _ = std::fs::remove_dir_all(&full);
                    let _ = std::fs::remove_file(&full);
                }
                std::os::unix::fs::symlink(target, &full).map_err(io("cannot restore", &full))?;
            }
        }
    }
    // Directory modes last, deepest first, so a read-only directory is filled before it
    // is closed.
    for (path, wanted) in manifest.entries.iter().rev() {
        if let Entry::Dir { mode } = wanted {
            let full = workspace.join(path);
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
                .map_err(io("cannot set the mode of", &full))?;
        }
    }
    Ok(())
}
