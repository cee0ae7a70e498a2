//! An ordinary user's view (docs/containment.md, "A user's fence"): the host's
//! filesystems under overlays whose upper directories are the run's layer, built by the
//! fence's PID 1 in its own user and mount namespace.
//!
//! A user namespace may not take a mount with mounts below it as an overlay's lower
//! layer (the kernel refuses to clone it: "failed to clone lowerpath"), and `/` always has
//! mounts below it. So the root of the view is a skeleton: a directory of the layer
//! (`upper/%2F`, marked by the file `skeleton` beside `upper`, which lists the host
//! directories repeated entry by entry, one per line) that repeats the host's
//! directories down to the mount points. Each directory with no mount below it is an
//! overlay of the host's; each file and symlink beside a mount is a read-only bind or a
//! copy of the link; each mount point is left to the caller, which binds or overlays it.
//! What the command creates in a skeleton directory lands in the layer too.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::{bind, bind_read_only, key_of, mkdirs, overlay, under, Line, RootSpec};
use crate::FenceError;

/// The name of the marker file beside `upper` that says `upper/%2F` is a skeleton.
pub(super) const SKELETON: &str = "skeleton";

/// Whether a mount lies strictly below `dir`.
pub(super) fn has_mount_below(lines: &[Line], dir: &str) -> bool {
    lines.iter().any(|l| l.path != dir && under(&l.path, dir))
}

fn is_mount_point(lines: &[Line], path: &str) -> bool {
    lines.iter().any(|l| l.path == path)
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> FenceError {
    move |e| FenceError::Setup(format!("{what}: {e}"))
}

/// Makes the skeleton of `/` at `root.new_root` (a bind of the layer's `upper/%2F`).
pub(super) fn skeleton_root(
    root: &RootSpec,
    lines: &[Line],
    repeated: &mut Vec<String>,
) -> Result<(), FenceError> {
    let skeleton = root.layer.join("upper").join(key_of("/"));
    mkdirs(&skeleton)?;
    bind(&skeleton, &root.new_root, false)?;
    populate(root, lines, Path::new("/"), &root.new_root, repeated)
}

/// Writes the skeleton's marker: the host directories it repeats entry by entry.
pub(super) fn mark(root: &RootSpec, repeated: &[String]) -> Result<(), FenceError> {
    let mut text = repeated.join("\n");
    text.push('\n');
    std::fs::write(root.layer.join(SKELETON), text)
        .map_err(io(format!("cannot mark {}", root.layer.display())))
}

/// The host directories a layer's skeleton repeats entry by entry (empty when the layer
/// has no skeleton).
pub(super) fn repeated(layer: &Path) -> Vec<String> {
    std::fs::read_to_string(layer.join(SKELETON))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Repeats the host directory `host` (which has mounts below it) at `target`: see the
/// module. Mount points get an empty directory or file to be mounted on.
pub(super) fn populate(
    root: &RootSpec,
    lines: &[Line],
    host: &Path,
    target: &Path,
    repeated: &mut Vec<String>,
) -> Result<(), FenceError> {
    repeated.push(host.display().to_string());
    let entries = std::fs::read_dir(host).map_err(io(format!("cannot list {}", host.display())))?;
    for entry in entries.flatten() {
        let from = entry.path();
        let to = target.join(entry.file_name());
        let Ok(meta) = from.symlink_metadata() else {
            continue;
        };
        let name = from.display().to_string();
        if meta.file_type().is_symlink() {
            let link = std::fs::read_link(&from).map_err(io(format!("cannot read {name}")))?;
            std::os::unix::fs::symlink(link, &to).map_err(io(format!("cannot copy {name}")))?;
        } else if meta.is_dir() {
            std::fs::create_dir(&to).map_err(io(format!("cannot repeat {name}")))?;
            let mode = meta.permissions().mode() & 0o7777;
            let _ = std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode));
            if is_mount_point(lines, &name) {
                continue;
            }
            if has_mount_below(lines, &name) {
                populate(root, lines, &from, &to, repeated)?;
            } else if overlay(root, None, &name, &to).is_err() {
                bind_read_only(&from, &to)?;
            }
        } else {
            std::fs::File::create(&to).map_err(io(format!("cannot repeat {name}")))?;
            if !is_mount_point(lines, &name) {
                bind_read_only(&from, &to)?;
            }
        }
    }
    Ok(())
}

/// Whether `entry` of a skeleton directory (at `host` on the host) is the skeleton's own
/// copy of the host's entry rather than something the command made: the same kind, and
/// for a symlink the same target.
pub(super) fn is_copy(entry: &Path, host: &Path) -> bool {
    let (Ok(ours), Ok(theirs)) = (entry.symlink_metadata(), host.symlink_metadata()) else {
        return false;
    };
    let (ours, theirs) = (ours.file_type(), theirs.file_type());
    if ours.is_symlink() || theirs.is_symlink() {
        return ours.is_symlink()
            && theirs.is_symlink()
            && std::fs::read_link(entry).ok() == std::fs::read_link(host).ok();
    }
    ours.is_dir() == theirs.is_dir()
}
