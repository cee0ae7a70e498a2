//! The `dir` driver: every file's content kept once in the store's objects, and a manifest;
//! restore removes what the snapshot did not have and rewrites what differs.

use std::path::{Path, PathBuf};

use super::objects::Batch;
use super::{
    entry_of, io, pause_point, same, walk, Entry, Hashing, Manifest, Notes, SnapshotError, Step,
    Store,
};

/// Takes a `dir` snapshot of `workspace`.
pub(super) fn take(
    store: &Store,
    workspace: &Path,
    id: &str,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<Manifest, SnapshotError> {
    let index = store.index_of(workspace);
    let batch = Batch::new(store);
    let hashing = Hashing {
        keep: Some(&batch),
        index: Some(&index),
        exact: false,
    };
    let walked = walk(workspace, exclude, hashing, step)?;
    // Every object is durable under its name before the manifest naming it is written.
    batch.commit()?;
    if walked.index != index {
        store.save_index(&walked.index);
    }
    Ok(Manifest {
        id: id.to_owned(),
        driver: "dir".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries: walked.entries,
        git: None,
        commands: None,
        overlay: None,
        notes: walked.notes,
    })
}

fn kind_matches(a: &Entry, b: &Entry) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Whether `path` lies inside a directory of `manifest` that could not be listed.
fn under_unlisted(manifest: &Manifest, path: &str) -> bool {
    let mut prefix = path;
    while let Some((parent, _)) = prefix.rsplit_once('/') {
        if matches!(
            manifest.entries.get(parent),
            Some(Entry::Dir { unlisted: true, .. })
        ) {
            return true;
        }
        prefix = parent;
    }
    false
}

fn remove_any(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(path);
}

/// Restores `workspace` to `manifest`. Idempotent: paths already right are left alone.
/// FIFOs are recreated; sockets and device nodes are not (a socket needs its server, and
/// a restore makes no device nodes), and an unreadable file's content was never captured:
/// those are returned as notes. Paths inside a directory the snapshot could not list are
/// left alone.
pub(super) fn restore(
    store: &Store,
    workspace: &Path,
    manifest: &Manifest,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<Notes, SnapshotError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(workspace).map_err(io("cannot create", workspace))?;
    // Files whose stamps the index trusts are not read again: the residue check after
    // the restore reads every file.
    let index = store.index_of(workspace);
    let walked = walk(
        workspace,
        exclude,
        Hashing {
            index: Some(&index),
            ..Hashing::default()
        },
        step,
    )?;
    let current = walked.entries;
    // The second look at each path below reuses what this walk read.
    let hashing = Hashing {
        index: Some(&walked.index),
        exact: true,
        ..Hashing::default()
    };
    let mut not_restored = Notes::new();
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
        let full = workspace.join(path);
        step.at(full.display());
        step.check()?;
        let wanted = manifest.entries.get(path);
        // An unreadable file cannot be put back: whatever is there now stays.
        let keep = under_unlisted(manifest, path)
            || wanted.is_some_and(|wanted| {
                kind_matches(wanted, entry) || matches!(wanted, Entry::Unreadable { .. })
            });
        if keep {
            continue;
        }
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
        let now = entry_of(&full, path, hashing, step, &mut Notes::new())?;
        if now.as_ref().is_some_and(|now| same(now, wanted, false)) {
            continue;
        }
        let set_mode = |mode: u32| {
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode))
                .map_err(io("cannot set the mode of", &full))
        };
        match wanted {
            Entry::Dir { mode, .. } => {
                touched();
                if now.as_ref().is_some_and(|n| !kind_matches(n, wanted)) {
                    remove_any(&full);
                }
                std::fs::create_dir_all(&full).map_err(io("cannot create", &full))?;
                set_mode(*mode | 0o700)?;
            }
            Entry::File { mode, sha256, .. } => {
                touched();
                if now.as_ref().is_some_and(|n| !kind_matches(n, wanted)) {
                    remove_any(&full);
                }
                let parent = full.parent().unwrap_or(workspace);
                let mut tmp = tempfile::NamedTempFile::new_in(parent)
                    .map_err(io("cannot create a file in", parent))?;
                let object = store.object_path(sha256);
                let mut source = std::fs::File::open(&object)
                    .map_err(io("cannot read snapshot object", &object))?;
                // A reflink where the filesystem can (btrfs, XFS), else a copy
                // (copy_file_range, in the kernel).
                if rustix::fs::ioctl_ficlone(tmp.as_file(), &source).is_err() {
                    std::io::copy(&mut source, tmp.as_file_mut())
                        .map_err(io("cannot restore", &full))?;
                }
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
                touched();
                if now.is_some() {
                    remove_any(&full);
                }
                std::os::unix::fs::symlink(target, &full).map_err(io("cannot restore", &full))?;
            }
            Entry::Fifo { mode } => {
                touched();
                if !now.as_ref().is_some_and(|n| kind_matches(n, wanted)) {
                    if now.is_some() {
                        remove_any(&full);
                    }
                    let mode = rustix::fs::Mode::from_raw_mode(*mode);
                    rustix::fs::mkfifoat(rustix::fs::CWD, &full, mode)
                        .map_err(|e| io("cannot recreate the FIFO", &full)(e.into()))?;
                }
                // mkfifo's mode went through the umask.
                set_mode(*mode)?;
            }
            Entry::Socket { mode } | Entry::Device { mode, .. } => {
                if now.as_ref().is_some_and(|n| kind_matches(n, wanted))
                    && !is_other_device(now.as_ref(), wanted)
                {
                    touched();
                    set_mode(*mode)?;
                } else {
                    not_restored.insert(
                        path.clone(),
                        format!(
                            "not restored: a {} is not recreated by a rollback",
                            wanted.kind()
                        ),
                    );
                }
            }
            Entry::Unreadable { .. } => {
                not_restored.insert(
                    path.clone(),
                    "not restored: it could not be read when the snapshot was taken, so its \
                     content is not in the snapshot; what is there now was left as it is"
                        .into(),
                );
            }
        }
    }
    // Directory modes last, deepest first, so a read-only directory is filled before it
    // is closed.
    for (path, wanted) in manifest.entries.iter().rev() {
        if let Entry::Dir { mode, .. } = wanted {
            let full = workspace.join(path);
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
                .map_err(io("cannot set the mode of", &full))?;
        }
    }
    Ok(not_restored)
}

/// Whether `now` is a device node with other numbers than `wanted`'s.
fn is_other_device(now: Option<&Entry>, wanted: &Entry) -> bool {
    match (now, wanted) {
        (
            Some(Entry::Device {
                block,
                major,
                minor,
                ..
            }),
            Entry::Device {
                block: b,
                major: ma,
                minor: mi,
                ..
            },
        ) => (block, major, minor) != (b, ma, mi),
        _ => false,
    }
}
