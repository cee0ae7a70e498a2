//! The `overlay` driver's keep and diff: reading upper directories as overlayfs writes
//! them (the kernel's Documentation/filesystems/overlayfs.rst) and merging them into the
//! workspace.
//!
//! In an upper directory, a character device 0/0 is a whiteout (the path was deleted), a
//! directory with `trusted.overlay.opaque=y` replaces the directory below it whole, and
//! anything else is the path as the step left it. Redirects and metacopy are off in the
//! mount ([`super::MOUNT_OPTIONS`]), so no other form appears.
//!
//! The keep merges layer by layer, oldest first, each walked parents before children: a
//! whiteout removes the path; an opaque directory empties (or replaces) the directory in
//! the workspace; a directory is created where none is; any other entry is renamed into
//! place (same filesystem: its inode, content, mode, owner and times move as they are).
//! Every entry is removed from the layer once applied (a whiteout unlinked, an opaque
//! mark cleared, a file moved), so a keep interrupted and run again resumes where it
//! stopped and never applies an entry twice. Then it checks the result.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use super::{Entry, Layout, SnapshotError, Step};
use crate::snapshot::io;

/// The xattr overlayfs marks an opaque directory with (value `y`), as root.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What a keep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// Paths written, replaced or deleted in the workspace.
    pub merged: usize,
    /// Where the workspace differs from what the layers said (`left behind: P`,
    /// `differs: P`, `missing: P`), or what was left in the layers; empty when verified.
    pub residue: Vec<String>,
    /// Under `--scope root`: what the steps wrote outside the workspace, which a keep
    /// does not apply (`not applied: /ABS/PATH (written outside the workspace)`, or
    /// `(deleted outside the workspace)`); empty for the workspace scope.
    pub outside: Vec<String>,
}

/// One entry of an upper directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Whiteout,
    Dir { opaque: bool, mode: u32 },
    Node { dev: u64, ino: u64 },
}

fn kind_of(path: &Path, metadata: &std::fs::Metadata) -> Kind {
    let file_type = metadata.file_type();
    if file_type.is_char_device() && metadata.rdev() == 0 {
        Kind::Whiteout
    } else if file_type.is_dir() {
        let mut value = [0u8; 4];
        let opaque = matches!(
            rustix::fs::lgetxattr(path, OPAQUE_XATTR, &mut value[..]),
            Ok(n) if value[..n] == *b"y"
        );
        Kind::Dir {
            opaque,
            mode: crate::snapshot::mode_of(metadata),
        }
    } else {
        Kind::Node {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }
}

/// Every entry of `layer`, parents before children, by `/`-separated relative path.
pub(super) fn scan(layer: &Path, step: &Step) -> Result<Vec<(String, Kind)>, SnapshotError> {
    let mut out = Vec::new();
    if !layer.is_dir() {
        return Ok(out);
    }
    let mut pending = vec![(layer.to_owned(), String::new())];
    while let Some((dir, rel)) = pending.pop() {
        step.check()?;
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .map_err(io("cannot list", &dir))?
            .filter_map(|e| e.ok())
            .collect();
        names.sort_by_key(|e| e.file_name());
        // Pushed in reverse so they are popped in name order.
        let mut dirs = Vec::new();
        for item in names {
            let path = item.path();
            let name = item
                .file_name()
                .into_string()
                .map_err(|_| SnapshotError::NotUtf8(path.display().to_string()))?;
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let metadata = std::fs::symlink_metadata(&path).map_err(io("cannot stat", &path))?;
            let kind = kind_of(&path, &metadata);
            if matches!(kind, Kind::Dir { .. }) {
                dirs.push((path, child.clone()));
            }
            out.push((child, kind));
        }
        pending.extend(dirs.into_iter().rev());
    }
    // A depth-first order with parents first: sort by path components.
    out.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
    Ok(out)
}

fn under(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// What the layers say each path they name must be once merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Absent,
    Dir(u32),
    Node { dev: u64, ino: u64 },
}

/// The merged outcome of `layers` (oldest first): path -> what it must be, and the
/// directories replaced whole (opaque).
fn expected(layers: &[Vec<(String, Kind)>]) -> (BTreeMap<String, Expect>, BTreeSet<String>) {
    let mut want: BTreeMap<String, Expect> = BTreeMap::new();
    let mut opaque = BTreeSet::new();
    for layer in layers {
        for (path, kind) in layer {
            let replaces = !matches!(kind, Kind::Dir { opaque: false, .. });
            if replaces {
                want.retain(|p, _| !under(p, path));
                opaque.retain(|p: &String| !under(p, path));
            }
            let expect = match *kind {
                Kind::Whiteout => {
                    opaque.remove(path);
                    Expect::Absent
                }
                Kind::Dir { opaque: o, mode } => {
                    if o {
                        opaque.insert(path.clone());
                    }
                    Expect::Dir(mode)
                }
                Kind::Node { dev, ino } => {
                    opaque.remove(path);
                    Expect::Node { dev, ino }
                }
            };
            want.insert(path.clone(), expect);
        }
    }
    (want, opaque)
}

fn remove_any(path: &Path) -> Result<(), SnapshotError> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("cannot remove", path)(e)),
        _ => Ok(()),
    }
}

/// Removes the `trusted.overlay.*` xattrs overlayfs left on `path` (`origin`, `impure`…),
/// so nothing of the overlay stays on a merged file.
fn strip_overlay_xattrs(path: &Path) {
    let mut names = vec![0u8; 4096];
    let Ok(n) = rustix::fs::llistxattr(path, &mut names[..]) else {
        return;
    };
    for name in names[..n].split(|b| *b == 0) {
        if name.starts_with(b"trusted.overlay.") {
            let _ = rustix::fs::lremovexattr(path, name);
        }
    }
}

/// Applies one layer to `workspace`; records directory modes in `modes`.
fn apply(
    layer: &Path,
    entries: &[(String, Kind)],
    workspace: &Path,
    modes: &mut BTreeMap<PathBuf, (u32, u32, u32)>,
    step: &Step,
) -> Result<usize, SnapshotError> {
    let mut merged = 0;
    for (rel, kind) in entries {
        let (src, dst) = (layer.join(rel), workspace.join(rel));
        step.at(dst.display());
        step.check()?;
        match *kind {
            Kind::Whiteout => {
                remove_any(&dst)?;
                std::fs::remove_file(&src).map_err(io("cannot remove the whiteout", &src))?;
                merged += 1;
            }
            Kind::Dir { opaque, mode } => {
                let existing = std::fs::symlink_metadata(&dst).ok();
                if opaque || existing.as_ref().is_some_and(|m| !m.is_dir()) {
                    remove_any(&dst)?;
                    merged += 1;
                }
                match std::fs::create_dir(&dst) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(io("cannot create", &dst)(e))
                    }
                    _ => {}
                }
                if opaque {
                    rustix::fs::lremovexattr(&src, OPAQUE_XATTR)
                        .map_err(|e| io("cannot clear the opaque mark of", &src)(e.into()))?;
                }
                let metadata = std::fs::symlink_metadata(&src).map_err(io("cannot stat", &src))?;
                modes.insert(dst, (mode, metadata.uid(), metadata.gid()));
            }
            Kind::Node { .. } => {
                if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
                    remove_any(&dst)?;
                }
                strip_overlay_xattrs(&src);
                std::fs::rename(&src, &dst).map_err(io("cannot move into the workspace", &dst))?;
                merged += 1;
            }
        }
    }
    // Children were moved out: the layer's directories are empty now, deepest first.
    for (rel, kind) in entries.iter().rev() {
        if matches!(kind, Kind::Dir { .. }) {
            let src = layer.join(rel);
            let _ = std::fs::remove_dir(&src);
        }
    }
    Ok(merged)
}

/// Merges the frozen layers of `layout` (oldest first), then its upper directory, into
/// `workspace`, and checks the result against what the layers said.
pub(super) fn keep(layout: &Layout, workspace: &Path, step: &Step) -> Result<Kept, SnapshotError> {
    let mut stack = layout.stack()?;
    // Under `--scope root`, the workspace's part of each layer (`KEY/REL`).
    let mut dirs: Vec<PathBuf> = stack
        .iter()
        .map(|n| layout.workspace_part(layout.layer(n)))
        .collect::<Result<_, _>>()?;
    dirs.push(layout.workspace_part(layout.upper())?);
    let scanned: Vec<Vec<(String, Kind)>> = dirs
        .iter()
        .map(|d| scan(d, step))
        .collect::<Result<_, _>>()?;
    let (want, opaque) = expected(&scanned);
    let mut modes = BTreeMap::new();
    let mut kept = Kept::default();
    let frozen = stack.len();
    for (index, (dir, entries)) in dirs.iter().zip(&scanned).enumerate() {
        kept.merged += apply(dir, entries, workspace, &mut modes, step)?;
        if index < frozen {
            // This layer is merged: a keep run again starts at the next one.
            let _ = std::fs::remove_dir_all(layout.layer(&stack[0]));
            stack.remove(0);
            layout.write_stack(&stack)?;
        }
    }
    // Directory modes and owners last, deepest first, so a read-only directory is
    // filled before it is closed.
    for (dir, (mode, uid, gid)) in modes.iter().rev() {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::os::unix::fs::lchown(dir, Some(*uid), Some(*gid));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))
            .map_err(io("cannot set the mode of", dir))?;
    }
    kept.residue = verify(workspace, &want, &opaque, &dirs, step)?;
    Ok(kept)
}

/// The keep's check: every path the layers name is what they said (a moved file by its
/// inode, a directory by its mode, a deleted path absent), a replaced directory holds
/// only what the layers put there, and the layers hold nothing more.
fn verify(
    workspace: &Path,
    want: &BTreeMap<String, Expect>,
    opaque: &BTreeSet<String>,
    layers: &[PathBuf],
    step: &Step,
) -> Result<Vec<String>, SnapshotError> {
    let mut residue = Vec::new();
    for (rel, expect) in want {
        step.check()?;
        let now = std::fs::symlink_metadata(workspace.join(rel)).ok();
        let line = match (expect, now) {
            (Expect::Absent, None) => continue,
            (Expect::Absent, Some(_)) => format!("left behind: {rel} (the step deleted it)"),
            (_, None) => format!("missing: {rel}"),
            (Expect::Dir(mode), Some(m)) if m.is_dir() && crate::snapshot::mode_of(&m) == *mode => {
                continue
            }
            (Expect::Node { dev, ino }, Some(m)) if m.dev() == *dev && m.ino() == *ino => continue,
            (_, Some(_)) => format!("differs: {rel}"),
        };
        residue.push(line);
    }
    for dir in opaque {
        let full = workspace.join(dir);
        for item in std::fs::read_dir(&full).map_err(io("cannot list", &full))? {
            let item = item.map_err(io("cannot list", &full))?;
            let rel = format!("{dir}/{}", item.file_name().to_string_lossy());
            if !matches!(want.get(&rel), Some(e) if *e != Expect::Absent) {
                residue.push(format!("left behind: {rel} (the step replaced {dir})"));
            }
        }
    }
    for layer in layers {
        for (rel, kind) in scan(layer, step)? {
            if !matches!(kind, Kind::Dir { opaque: false, .. }) {
                residue.push(format!(
                    "left behind: {rel} (not merged from the overlay layer {})",
                    layer.display()
                ));
            }
        }
    }
    Ok(residue)
}

/// Whether `rel` exists in the view of `lowers` (top first) over the snapshot's entries.
fn exists_below(rel: &str, lowers: &[PathBuf], entries: &BTreeMap<String, Entry>) -> bool {
    for lower in lowers {
        if let Ok(m) = std::fs::symlink_metadata(lower.join(rel)) {
            return !(m.file_type().is_char_device() && m.rdev() == 0);
        }
    }
    entries.contains_key(rel)
}

/// The changes `above` (layers, oldest first, the upper directory last) make over
/// `below` (the snapshot's layers, newest first) and the snapshot's workspace `entries`.
pub(super) fn changes(
    above: &[PathBuf],
    below: &[PathBuf],
    entries: &BTreeMap<String, Entry>,
    step: &Step,
) -> Result<airlock_ledger::Changes, SnapshotError> {
    let scanned: Vec<_> = above
        .iter()
        .map(|d| scan(d, step))
        .collect::<Result<_, _>>()?;
    let (want, opaque) = expected(&scanned);
    let mut changes = airlock_ledger::Changes::default();
    for (rel, expect) in &want {
        let before = exists_below(rel, below, entries);
        match (expect, before) {
            (Expect::Absent, true) => changes.deleted.push(rel.clone()),
            (Expect::Absent, false) => {}
            (Expect::Dir(mode), true) => {
                let was = entries.get(rel);
                if opaque.contains(rel)
                    || !matches!(was, Some(Entry::Dir { mode: m, .. }) if m == mode)
                {
                    changes.modified.push(rel.clone());
                }
            }
            (_, true) => changes.modified.push(rel.clone()),
            (_, false) => changes.added.push(rel.clone()),
        }
    }
    for dir in &opaque {
        for path in entries.keys().filter(|p| under(p, dir)) {
            if !matches!(want.get(path), Some(e) if *e != Expect::Absent) {
                changes.deleted.push(path.clone());
            }
        }
    }
    for list in [
        &mut changes.added,
        &mut changes.modified,
        &mut changes.deleted,
    ] {
        list.sort();
        list.dedup();
    }
    Ok(changes)
}
