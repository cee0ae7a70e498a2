//! The `overlay` driver over the whole filesystem (`airlock run --snapshot overlay --scope
//! root`, issue #22): each step sees every writable filesystem of the machine through an
//! overlay of its own, so the upper directories hold everything the step wrote, anywhere.
//! A rollback drops them all; a keep merges the workspace's part and reports the rest as
//! residue (docs/run.md, "The whole filesystem: `--scope root`").
//!
//! The plan ([`RootPlan`]) is made for each step, from `/proc/self/mountinfo` (proc(5)),
//! so a mount made or removed after the run attached is seen as it is when the step
//! starts; the plan made when the run attached is kept in `STATE/root.json`, for where
//! the workspace lies (a step whose plan puts it elsewhere is refused). For each mount
//! still visible at its mount point (`statx`'s mount id is the entry's), parents first,
//!
//! - the root filesystem and every other writable mount get an overlay: the mount's own
//!   path as the lowest layer, upper and work directories `upper/KEY`, `work/KEY` in the
//!   run's state directory, KEY the mount point with `%` and `/` percent-encoded (`%2F`
//!   for the root filesystem, `%2Ftmp` for `/tmp`), since an overlay does not cross
//!   mounts (overlayfs.rst) and each filesystem needs its own;
//! - `/proc`, `/sys` and `/dev` are bound as they are, with everything under them
//!   (`mount --rbind`), and so are kernel filesystems elsewhere ([`PASSED_TYPES`]) and
//!   mounts of a file;
//! - a read-only mount is bound as it is (`mount --bind` keeps it read-only).
//!
//! The step's mount namespace then mounts that view at `STATE/root-mnt`, enters it with
//! `pivot_root . .` and a lazy unmount of the old root (pivot_root(2): a user namespace,
//! which a fence makes inside, cannot be made in a chroot), and `cd`s to the workspace.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{io, unsupported, Layout};
use crate::snapshot::{write_durable, SnapshotError};

/// File of the state directory that holds the run's [`RootPlan`].
pub const ROOT_PLAN_FILE: &str = "root.json";

/// Filesystem types passed through as they are, wherever they are mounted: kernel
/// interfaces whose files are not data a rollback could or should undo (an overlay of
/// them would also hide the kernel's own writes to them).
pub const PASSED_TYPES: [&str; 20] = [
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "mqueue",
    "cgroup",
    "cgroup2",
    "nsfs",
    "bpf",
    "tracefs",
    "debugfs",
    "securityfs",
    "pstore",
    "efivarfs",
    "configfs",
    "fusectl",
    "binfmt_misc",
    "hugetlbfs",
    "autofs",
    "rpc_pipefs",
];

/// The trees bound whole, with every mount under them (`mount --rbind`).
pub const PASSED_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// How one mount appears in the step's view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum How {
    /// An overlay whose lowest layer is the mount, with upper directory `upper/KEY`.
    Overlay {
        /// The name of its upper and work directories ([`key_of`] its mount point).
        key: String,
    },
    /// Bound as it is: with everything under it (`recursive`, `/proc`, `/sys`, `/dev`),
    /// or alone (a read-only mount, a kernel filesystem, a mount of a file).
    Bind {
        /// `mount --rbind` rather than `mount --bind`.
        recursive: bool,
    },
}

/// One mount of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    /// Its mount point, absolute.
    pub path: String,
    /// Its filesystem type, as mountinfo names it.
    pub fstype: String,
    /// How the step sees it.
    #[serde(flatten)]
    pub how: How,
}

/// The root scope's view of the machine, parents before children, and where the
/// workspace lies in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootPlan {
    /// The mounts, parents first (`/` first).
    pub mounts: Vec<Planned>,
    /// The key of the overlay that holds the workspace.
    pub workspace_key: String,
    /// The workspace relative to that overlay's mount point (empty when it is the mount
    /// point itself).
    pub workspace_rel: String,
}

impl RootPlan {
    /// The workspace's part of an upper directory (or of a frozen layer): `KEY/REL`.
    pub fn workspace_part(&self) -> PathBuf {
        Path::new(&self.workspace_key).join(&self.workspace_rel)
    }

    /// The overlaid mounts: `(key, mount point)`.
    pub fn overlays(&self) -> impl Iterator<Item = (&str, &str)> {
        self.mounts.iter().filter_map(|m| match &m.how {
            How::Overlay { key } => Some((key.as_str(), m.path.as_str())),
            How::Bind { .. } => None,
        })
    }
}

/// The key of the mount at `path`: the name of its upper and work directories, one
/// path component (`%` and `/` percent-encoded), from which [`path_of`] gets it back.
pub fn key_of(path: &str) -> String {
    path.replace('%', "%25").replace('/', "%2F")
}

/// The mount point of `key` ([`key_of`]'s inverse); `None` for a name it never makes.
pub fn path_of(key: &str) -> Option<String> {
    let path = key.replace("%2F", "/").replace("%25", "%");
    (path.starts_with('/') && key_of(&path) == key).then_some(path)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Some(v) = field
                .get(i + 1..i + 4)
                .and_then(|s| u8::from_str_radix(s, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of mountinfo: mount id, mount point, per-mount options, filesystem type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::snapshot) struct MountLine {
    pub(in crate::snapshot) id: u64,
    pub(super) path: String,
    pub(super) read_only: bool,
    pub(super) fstype: String,
}

/// Parses `/proc/self/mountinfo` text (proc(5): `ID PARENT MAJ:MIN ROOT MOUNTPOINT
/// OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`).
pub(in crate::snapshot) fn parse_mountinfo(text: &str) -> Vec<MountLine> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let id = fields.first()?.parse().ok()?;
            let path = unescape(fields.get(4)?);
            let read_only = fields.get(5)?.split(',').any(|o| o == "ro");
            let fstype = right.split(' ').next()?.to_owned();
            Some(MountLine {
                id,
                path,
                read_only,
                fstype,
            })
        })
        .collect()
}

fn mount_id_of(path: &Path) -> Option<u64> {
    rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW | rustix::fs::AtFlags::NO_AUTOMOUNT,
        rustix::fs::StatxFlags::MNT_ID,
    )
    .ok()
    .map(|s| s.stx_mnt_id)
}

fn under(path: &str, dir: &str) -> bool {
    Path::new(path).starts_with(dir)
}

/// Makes the plan of `lines` (the visible mounts, as [`parse_mountinfo`] read them) for
/// `workspace`; `visible` says whether a line is the mount seen at its path and `is_dir`
/// whether its mount point is a directory (so tests can plan a made-up table).
///
/// Errors: [`SnapshotError::Unsupported`] when the workspace is not on an overlaid
/// mount, or an overlaid mount point has a character the mount options cannot carry.
pub(in crate::snapshot) fn plan_of(
    mut lines: Vec<MountLine>,
    workspace: &Path,
    visible: impl Fn(&MountLine) -> bool,
    is_dir: impl Fn(&str) -> bool,
) -> Result<RootPlan, SnapshotError> {
    lines.retain(|line| visible(line));
    lines.sort_by(|a, b| {
        Path::new(&a.path)
            .components()
            .cmp(Path::new(&b.path).components())
    });
    lines.dedup_by(|a, b| a.path == b.path);
    let mut mounts: Vec<Planned> = Vec::new();
    let mut trees: Vec<String> = Vec::new();
    for line in lines {
        if trees.iter().any(|tree| under(&line.path, tree)) {
            continue;
        }
        let how = if PASSED_TREES.contains(&line.path.as_str()) {
            trees.push(line.path.clone());
            How::Bind { recursive: true }
        } else if line.path == "/" {
            How::Overlay {
                key: key_of(&line.path),
            }
        } else if line.read_only
            || PASSED_TYPES.contains(&line.fstype.as_str())
            || PASSED_TREES.iter().any(|tree| under(&line.path, tree))
            || !is_dir(&line.path)
        {
            How::Bind { recursive: false }
        } else {
            How::Overlay {
                key: key_of(&line.path),
            }
        };
        if let How::Overlay { .. } = how {
            if line.path.contains([',', ':', '\\']) {
                return Err(unsupported(format!(
                    "the mount {} has a `,`, `:` or `\\` in its path, which overlayfs mount \
                     options cannot carry, so --scope root cannot overlay it",
                    line.path
                )));
            }
        }
        mounts.push(Planned {
            path: line.path,
            fstype: line.fstype,
            how,
        });
    }
    if mounts.first().is_none_or(|m| m.path != "/") {
        return Err(unsupported(
            "/proc/self/mountinfo names no root filesystem".into(),
        ));
    }
    let holder = mounts
        .iter()
        .rev()
        .find(|m| workspace.starts_with(&m.path))
        .ok_or_else(|| unsupported("no mount holds the workspace".into()))?;
    let How::Overlay { key } = &holder.how else {
        return Err(unsupported(format!(
            "the workspace {} is on {} ({}), which --scope root passes through as it is \
             (read-only, or a kernel filesystem), so its changes could not be captured",
            workspace.display(),
            holder.path,
            holder.fstype
        )));
    };
    let workspace_rel = workspace
        .strip_prefix(&holder.path)
        .unwrap_or(workspace)
        .display()
        .to_string();
    let workspace_key = key.clone();
    Ok(RootPlan {
        mounts,
        workspace_key,
        workspace_rel,
    })
}

/// The plan of this machine's mounts for `workspace`, as this process sees them.
///
/// Errors: [`SnapshotError::Io`] when mountinfo cannot be read; those of `plan_of`.
pub fn plan(workspace: &Path) -> Result<RootPlan, SnapshotError> {
    let path = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(path).map_err(io("cannot read", path))?;
    plan_of(
        parse_mountinfo(&text),
        workspace,
        |line| mount_id_of(Path::new(&line.path)) == Some(line.id),
        |path| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()),
    )
}

/// Checks what the root scope needs beyond the workspace scope's [`super::check`]: the
/// data directory outside every passed-through tree, and the state directory's path
/// free of the characters mount options cannot carry (checked there too).
///
/// Errors: [`SnapshotError::Unsupported`] saying which.
pub fn check(plan: &RootPlan, store_dir: &Path) -> Result<(), SnapshotError> {
    let holder = plan
        .mounts
        .iter()
        .rev()
        .find(|m| store_dir.starts_with(&m.path));
    if let Some(Planned {
        how: How::Bind { .. },
        path,
        ..
    }) = holder
    {
        return Err(unsupported(format!(
            "the data directory {} is on {path}, which --scope root passes through, and \
             cannot hold the run's upper directories",
            store_dir.display()
        )));
    }
    Ok(())
}

impl Layout {
    fn root_plan_path(&self) -> PathBuf {
        self.state().join(ROOT_PLAN_FILE)
    }

    /// Where the step's view is assembled before `pivot_root` enters it.
    pub(super) fn new_root(&self) -> PathBuf {
        self.state().join("root-mnt")
    }

    /// The run's root plan; `None` for a run of the workspace scope.
    ///
    /// Errors: [`SnapshotError::Io`], [`SnapshotError::Corrupt`] for an unreadable plan.
    pub fn root_plan(&self) -> Result<Option<RootPlan>, SnapshotError> {
        let path = self.root_plan_path();
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| SnapshotError::Corrupt {
                        path: path.display().to_string(),
                        source,
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot read the root plan", &path)(e)),
        }
    }

    pub(super) fn write_root_plan(&self, plan: &RootPlan) -> Result<(), SnapshotError> {
        let dir = self.new_root();
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        write_durable(
            &self.root_plan_path(),
            &serde_json::to_vec_pretty(plan).unwrap_or_default(),
        )
    }

    /// The part of `dir` (an upper directory or a frozen layer) that covers the
    /// workspace: `dir` itself for the workspace scope, `dir/KEY/REL` for the root scope.
    pub(super) fn workspace_part(&self, dir: PathBuf) -> Result<PathBuf, SnapshotError> {
        Ok(match self.root_plan()? {
            Some(plan) => dir.join(plan.workspace_part()),
            None => dir,
        })
    }
}

/// The mounts' directories of `dir` (an upper directory or a frozen layer): `(mount
/// point, directory)`, by key; names that are not keys are left out.
pub(super) fn keyed(dir: &Path) -> Result<Vec<(String, PathBuf)>, SnapshotError> {
    let mut out = Vec::new();
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io("cannot list", dir)(e)),
    };
    for item in listing {
        let item = item.map_err(io("cannot list", dir))?;
        if let Some(path) = item.file_name().to_str().and_then(path_of) {
            out.push((path, item.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The most lines of writes outside the workspace a keep lists (the rest are counted).
pub const OUTSIDE_LINES: usize = 1000;

/// What the steps wrote outside the workspace, from `dirs` (frozen layers, oldest
/// first, then the upper directory): one `not applied: PATH (written outside the
/// workspace)` or `(deleted outside the workspace)` line each, a directory that the host
/// already has as one left out (it only holds the others). And a `differs:` line when
/// the workspace directory itself, or one above it, was replaced or removed (a keep
/// merges what is under it only).
pub(super) fn outside(
    dirs: &[PathBuf],
    workspace: &Path,
    step: &crate::snapshot::Step,
) -> Result<Vec<String>, SnapshotError> {
    let mut lines = Vec::new();
    let mut more = 0usize;
    let mut replaced = false;
    for dir in dirs {
        for (mount, base) in keyed(dir)? {
            for (rel, kind) in super::merge::scan(&base, step)? {
                let path = Path::new(&mount).join(&rel);
                if path.starts_with(workspace) && path != workspace {
                    continue;
                }
                let above = workspace.starts_with(&path);
                let line = match kind {
                    super::merge::Kind::Dir { opaque: false, .. }
                        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) =>
                    {
                        continue
                    }
                    _ if above => {
                        replaced = true;
                        continue;
                    }
                    super::merge::Kind::Whiteout => format!(
                        "not applied: {} (deleted outside the workspace)",
                        path.display()
                    ),
                    _ => format!(
                        "not applied: {} (written outside the workspace)",
                        path.display()
                    ),
                };
                if lines.len() < OUTSIDE_LINES {
                    lines.push(line);
                } else {
                    more += 1;
                }
            }
        }
    }
    if more > 0 {
        lines.push(format!(
            "not applied: {more} more path(s) written outside the workspace"
        ));
    }
    if replaced {
        lines.push(format!(
            "differs: {} (the step replaced or removed the workspace directory itself, or \
             one above it; a keep merges only what is under it)",
            workspace.display()
        ));
    }
    Ok(lines)
}
