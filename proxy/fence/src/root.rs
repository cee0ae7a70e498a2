//! `airlock fence-root`: root's fence, outside (docs/containment.md, "Root inside the
//! fence"). When `airlock run` is root, the fence's PID 1 is not started by `unshare
//! --map-root-user` directly: first, in a mount namespace of its own (`unshare --mount
//! --propagation private`), this builds the view the fence will have and enters it:
//!
//! - every writable filesystem (the root filesystem first) is an overlay whose lower
//!   layer is the host's mount shown through an idmapped mount (host ids `0…` seen as
//!   the subordinate range, which is the command's ids `0…`) and whose upper directory is
//!   the run's layer (`LAYER/upper/KEY`), so the command may write anywhere it could as
//!   root and nothing of it reaches the host. overlayfs takes idmapped layers, but not
//!   an idmapped mount of itself (`EINVAL`);
//! - the workspace is an idmapped bind of the host's, mapping the workspace's owner to
//!   the command's root, so what the command creates there is the owner's on the host;
//! - `/proc` and `/dev` are bound as they are (the fence mounts a `/proc` of its own), with
//!   private `/dev/shm` and `/dev/mqueue`; `/sys` is bound read-only; read-only and kernel
//!   filesystems are bound as they are; the fence's own directory and airlock's fence
//!   socket are bound from the host;
//!
//! then `pivot_root` enters the view and the old root is detached, and the fence's
//! `unshare` starts with no mapping: this process maps the fence's user namespace (id 0
//! to host root, for PID 1, which must reach the fence socket; ids `1…` to the
//! subordinate range) and waits for it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::idmap::{self, Range};
use crate::{FenceError, Spec};

mod user;

/// What root's fence needs beyond the [`Spec`]: the ranges, the run's layer, and what is
/// bound from the host as it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootSpec {
    /// Host uids of the command's uids `0…` (`/etc/subuid`'s range for root, else
    /// 100000–165535).
    pub uids: Range,
    /// Host gids of the command's gids `0…` (`/etc/subgid`).
    pub gids: Range,
    /// The run's layer (mode 0700): `upper/KEY` and `work/KEY` of each overlay, KEY the
    /// mount point percent-encoded (`%2F` for `/`).
    pub layer: PathBuf,
    /// The workspace (idmapped, owner to the command's root).
    pub workspace: PathBuf,
    /// Host paths shown as they are: the fence's directory and airlock's fence socket.
    pub pass: Vec<PathBuf>,
    /// Where the view is assembled (in the fence's directory).
    pub new_root: PathBuf,
    /// `true` under root: the command's ids are the subordinate range, the lower layers
    /// and the workspace are idmapped, and `airlock fence-root` builds the view outside
    /// the fence. `false` as an ordinary user: the user is root inside, so the lower
    /// layers and the workspace are the host's mounts as they are (no idmap), and the
    /// fence's PID 1 builds the view in its own user and mount namespace (overlayfs may
    /// be mounted there since Linux 5.11, with `userxattr`). `uids` and `gids` are unused.
    #[serde(default = "shifted")]
    pub shift: bool,
}

fn shifted() -> bool {
    true
}

/// The key of a mount point: `/` and `%` percent-encoded (`%2F` for the root).
pub fn key_of(path: &str) -> String {
    path.replace('%', "%25").replace('/', "%2F")
}

/// The mount point of a key ([`key_of`] undone).
pub fn path_of(key: &str) -> String {
    key.replace("%2F", "/").replace("%25", "%")
}

/// Kernel filesystems bound as they are wherever they are mounted.
const KERNEL_TYPES: [&str; 16] = [
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
    "binfmt_misc",
];

/// One line of `/proc/self/mountinfo` (proc(5)): mount point, type, read-only.
struct Line {
    path: String,
    fstype: String,
    read_only: bool,
}

fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            if let Ok(code) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn mountinfo() -> Result<Vec<Line>, FenceError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| FenceError::Setup(format!("cannot read /proc/self/mountinfo: {e}")))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            Some(Line {
                path: unescape(left.get(4)?),
                fstype: right.first()?.to_string(),
                read_only: left.get(5)?.split(',').any(|o| o == "ro"),
            })
        })
        .collect())
}

fn under(path: &str, dir: &str) -> bool {
    path == dir || dir == "/" || path.starts_with(&format!("{dir}/"))
}

fn beneath(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn setup(what: String) -> impl FnOnce(rustix::io::Errno) -> FenceError {
    move |e| FenceError::Setup(format!("{what}: {e}"))
}

fn mkdirs(path: &Path) -> Result<(), FenceError> {
    std::fs::create_dir_all(path)
        .map_err(|e| FenceError::Setup(format!("cannot create {}: {e}", path.display())))
}

/// Mounts an overlay of `mount` at `target`: its lower layer the host's mount through
/// `ns`'s mapping (attached at `lower`), its upper and work directories the layer's.
///
/// With no `ns` (an ordinary user's fence) the lower layer is the mount itself, and the
/// overlay keeps its metadata in `user.overlay.*` attributes (`userxattr`), the only ones
/// a user namespace may set (overlayfs(5) of the kernel's documentation, "Permission
/// model").
fn overlay(
    root: &RootSpec,
    ns: Option<&std::os::fd::OwnedFd>,
    mount: &str,
    target: &Path,
) -> Result<(), FenceError> {
    let key = key_of(mount);
    let upper = root.layer.join("upper").join(&key);
    let work = root.layer.join("work").join(&key);
    for dir in [&upper, &work] {
        mkdirs(dir)?;
    }
    let (lower, options) = match ns {
        Some(ns) => {
            let lower = root.new_root.with_file_name("lower").join(&key);
            mkdirs(&lower)?;
            let tree = idmap::idmapped(Path::new(mount), ns, false)?;
            idmap::attach(&tree, &lower)?;
            (lower, "")
        }
        None => (PathBuf::from(mount), ",userxattr"),
    };
    let data = format!(
        "lowerdir={},upperdir={},workdir={}{options}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let data = std::ffi::CString::new(data)
        .map_err(|_| FenceError::Setup(format!("a path of the overlay of {mount} holds NUL")))?;
    rustix::mount::mount(
        "overlay",
        target,
        "overlay",
        rustix::mount::MountFlags::empty(),
        Some(data.as_c_str()),
    )
    .map_err(setup(format!("cannot mount an overlay over {mount}")))
}

fn bind(source: &Path, target: &Path, recursive: bool) -> Result<(), FenceError> {
    let result = if recursive {
        rustix::mount::mount_bind_recursive(source, target)
    } else {
        rustix::mount::mount_bind(source, target)
    };
    result.map_err(setup(format!(
        "cannot bind {} over {}",
        source.display(),
        target.display()
    )))
}

/// A read-only copy of the tree at `source` (every mount under it), attached at `target`.
fn bind_read_only(source: &Path, target: &Path) -> Result<(), FenceError> {
    use rustix::mount::{open_tree, OpenTreeFlags};
    use std::os::fd::AsFd as _;
    let tree = open_tree(
        rustix::fs::CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )
    .map_err(setup(format!("cannot copy the mount {}", source.display())))?;
    airlock_sys::mount_setattr(tree.as_fd(), true, airlock_sys::MOUNT_ATTR_RDONLY, None).map_err(
        |e| FenceError::Setup(format!("cannot make {} read-only: {e}", source.display())),
    )?;
    idmap::attach(&tree, target)
}

/// Builds the fence's view of the machine at `root.new_root` (see the module): root's
/// (idmapped, `root.shift`) or an ordinary user's (the host's mounts as they are).
///
/// A user namespace locks the mounts it was given together (mount_namespaces(7), "Restrictions
/// on mount namespaces"): a mount with mounts below it can be bound only with them, so a
/// user's view binds each tree recursively and then mounts an overlay or a read-only copy
/// over each writable mount below it, parents first.
fn build(root: &RootSpec) -> Result<(), FenceError> {
    let lines = mountinfo()?;
    let new_root = &root.new_root;
    mkdirs(new_root)?;
    let shift = if root.shift {
        Some(idmap::userns(
            &idmap::swapped(0, root.uids),
            &idmap::swapped(0, root.gids),
        )?)
    } else {
        None
    };
    let shift = shift.as_ref();
    let recursive = !root.shift;
    let mut repeated = Vec::new();
    if root.shift {
        overlay(root, shift, "/", new_root)?;
    } else {
        user::skeleton_root(root, &lines, &mut repeated)?;
    }
    let trees = ["/proc", "/sys", "/dev"];
    let ours = new_root
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| new_root.clone());
    // Parents before children; of mounts stacked on one path, the top one (the last).
    let mut others: Vec<&Line> = Vec::new();
    for line in lines.iter().rev() {
        if line.path != "/" && !others.iter().any(|o| o.path == line.path) {
            others.push(line);
        }
    }
    others.sort_by_key(|l| Path::new(&l.path).components().count());
    for line in others {
        let path = line.path.as_str();
        if trees.iter().any(|t| under(path, t)) || Path::new(path).starts_with(&ours) {
            continue;
        }
        let target = beneath(new_root, Path::new(path));
        if !target.exists() {
            continue;
        }
        if line.read_only || KERNEL_TYPES.contains(&line.fstype.as_str()) {
            bind(Path::new(path), &target, recursive)?;
        } else if !root.shift && user::has_mount_below(&lines, path) {
            user::populate(root, &lines, Path::new(path), &target, &mut repeated)?;
        } else if overlay(root, shift, path, &target).is_err() {
            // A filesystem that takes no idmapped mount (overlayfs, FUSE): seen, never
            // written.
            bind_read_only(Path::new(path), &target)?;
        }
    }
    bind(
        Path::new("/proc"),
        &beneath(new_root, Path::new("/proc")),
        true,
    )?;
    bind(
        Path::new("/dev"),
        &beneath(new_root, Path::new("/dev")),
        true,
    )?;
    // The host's POSIX shared memory and message queues are files there: the fence gets
    // empty ones of its own (its IPC namespace has its own SysV IPC).
    for dir in ["/dev/shm", "/dev/mqueue"] {
        let target = beneath(new_root, Path::new(dir));
        if target.is_dir() {
            rustix::mount::mount(
                "tmpfs",
                &target,
                "tmpfs",
                rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
                Some(c"mode=1777"),
            )
            .map_err(setup(format!("cannot mount a private {dir}")))?;
        }
    }
    bind_read_only(Path::new("/sys"), &beneath(new_root, Path::new("/sys")))?;
    if !root.shift {
        bind(&root.workspace, &beneath(new_root, &root.workspace), true)?;
        user::mark(root, &repeated)?;
        return pass(root);
    }
    use std::os::unix::fs::MetadataExt as _;
    let owner = std::fs::metadata(&root.workspace)
        .map_err(|e| FenceError::Setup(format!("cannot read {}: {e}", root.workspace.display())))?;
    let workspace_ns = idmap::userns(
        &idmap::swapped(owner.uid(), root.uids),
        &idmap::swapped(owner.gid(), root.gids),
    )?;
    let tree = idmap::idmapped(&root.workspace, &workspace_ns, true).map_err(|e| {
        FenceError::Setup(format!(
            "{e}; the workspace must be on a filesystem that takes idmapped mounts \
             (not an overlay: --snapshot overlay needs --allow-host-root under root)"
        ))
    })?;
    idmap::attach(&tree, &beneath(new_root, &root.workspace))?;
    pass(root)
}

/// Binds the paths shown as they are (the fence's directory, the fence socket).
fn pass(root: &RootSpec) -> Result<(), FenceError> {
    for path in &root.pass {
        let target = beneath(&root.new_root, path);
        if target.exists() {
            bind(path, &target, !root.shift)?;
        }
    }
    Ok(())
}

/// An ordinary user's fence, from its PID 1 (in the fence's user and mount namespace,
/// before the masks and the command): builds the view over the run's layer at
/// `root.new_root`, not yet entered ([`enter_user_view`] enters it). On `Err` nothing is
/// left mounted at `new_root`: the command then sees the host's filesystems as before,
/// and what it writes outside the workspace reaches the host (the caller reports that;
/// it is the user's own authority, never root's).
///
/// # Errors
/// [`FenceError::Setup`] naming the mount the kernel refused (overlayfs in a user
/// namespace needs Linux 5.11, and an upper filesystem that is not itself an overlay).
pub fn build_user_view(root: &RootSpec) -> Result<(), FenceError> {
    build(root).inspect_err(|_| {
        let _ = rustix::mount::unmount(&root.new_root, rustix::mount::UnmountFlags::DETACH);
    })
}

/// Enters the view [`build_user_view`] built (`pivot_root`, the old root detached).
/// Every process of the fence's mount namespace whose root was the old one is moved to
/// the view (pivot_root(2)), so PID 1 calls it when no other process runs there.
///
/// # Errors
/// [`FenceError::Setup`] when `pivot_root` or the detach is refused.
pub fn enter_user_view(root: &RootSpec) -> Result<(), FenceError> {
    enter(&root.new_root)
}

/// Enters the view at `new_root`: `pivot_root . .`, then the old root detached.
fn enter(new_root: &Path) -> Result<(), FenceError> {
    std::env::set_current_dir(new_root)
        .map_err(|e| FenceError::Setup(format!("cannot enter {}: {e}", new_root.display())))?;
    rustix::process::pivot_root(".", ".").map_err(setup("pivot_root".to_owned()))?;
    rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH)
        .map_err(setup("cannot detach the old root".to_owned()))?;
    std::env::set_current_dir("/")
        .map_err(|e| FenceError::Setup(format!("cannot enter the new root: {e}")))
}

/// The fence's user namespace map: id 0 to host root (PID 1), ids `1…` to `range`.
pub fn fence_map(range: Range) -> String {
    format!("0 0 1\n1 {} {}\n", range.start, range.count)
}

/// Runs `airlock fence-root`: builds and enters root's view, starts the fence's `unshare`
/// (`unshare` and `args`) unmapped, maps it, and returns its exit code (125 when the
/// view cannot be built: the step fails, nothing runs).
pub fn run(unshare: &Path, args: &[String]) -> i32 {
    match start(unshare, args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("airlock fence: {error}");
            125
        }
    }
}

fn start(unshare: &Path, args: &[String]) -> Result<i32, FenceError> {
    let spec: Spec = crate::init::read_spec()?;
    let root = spec
        .root
        .as_ref()
        .ok_or_else(|| FenceError::Setup("fence-root needs a spec with a root layer".to_owned()))?;
    build(root)?;
    enter(&root.new_root)?;
    let mut child = Command::new(unshare)
        .args(args)
        .current_dir(&spec.cwd)
        .spawn()
        .map_err(|e| FenceError::Setup(format!("cannot run {}: {e}", unshare.display())))?;
    let mapped = idmap::wait_for_userns(child.id())
        .and_then(|()| idmap::write_maps(child.id(), &fence_map(root.uids), &fence_map(root.gids)));
    if let Err(error) = mapped {
        let _ = child.kill();
        let _ = child.wait();
        return Err(error);
    }
    let status = child
        .wait()
        .map_err(|e| FenceError::Setup(format!("waiting for the fence: {e}")))?;
    use std::os::unix::process::ExitStatusExt as _;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Gives every directory under `layer` (not following symlinks) its owner's read, write
/// and search permission, so that an ordinary user can remove the layer: overlayfs makes
/// its `work/work` directory with mode 0, and the command may have made others. Errors
/// are ignored (what cannot be opened is left for the removal to report).
pub fn open_up(layer: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut stack = vec![layer.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
}

/// One path the command wrote outside the workspace, from the run's layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The path as the host names it.
    pub path: String,
    /// `file`, `dir` (made by the command), `symlink`, `deleted` (a whiteout) or `other`.
    pub kind: String,
}

/// The paths the command wrote outside the workspace: every entry of the layer's upper
/// directories but the directories overlayfs copied up only to hold what is below them
/// (they exist on the host). At most `limit` paths, sorted.
pub fn written(layer: &Path, limit: usize) -> Vec<Written> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let mut out = Vec::new();
    let Ok(keys) = std::fs::read_dir(layer.join("upper")) else {
        return out;
    };
    let repeated = user::repeated(layer);
    for key in keys.flatten() {
        let mount = path_of(&key.file_name().to_string_lossy());
        // A user's `/` is a skeleton, not an overlay's upper: its copies of the host's
        // entries are not writes, and what the command removed from it is missing.
        let copies = !repeated.is_empty() && mount == "/";
        let mut stack = vec![key.path()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut deleted = Vec::new();
            let rel = dir.strip_prefix(key.path()).unwrap_or(&dir);
            let host_dir = Path::new("/").join(rel);
            if copies && repeated.iter().any(|r| Path::new(r) == host_dir) {
                for theirs in std::fs::read_dir(&host_dir).into_iter().flatten().flatten() {
                    if dir.join(theirs.file_name()).symlink_metadata().is_err() {
                        deleted.push(host_dir.join(theirs.file_name()));
                    }
                }
            }
            for host in deleted {
                out.push(Written {
                    path: host.display().to_string(),
                    kind: "deleted".to_owned(),
                });
            }
            for entry in entries.flatten() {
                let Ok(meta) = entry.path().symlink_metadata() else {
                    continue;
                };
                let rel = entry.path();
                let rel = rel.strip_prefix(key.path()).unwrap_or(&rel);
                let host = Path::new(&mount).join(rel);
                if copies && user::is_copy(&entry.path(), &host) {
                    if meta.is_dir() {
                        stack.push(entry.path());
                    }
                    continue;
                }
                let kind = if meta.file_type().is_char_device() && meta.rdev() == 0 {
                    "deleted"
                } else if meta.is_dir() {
                    stack.push(entry.path());
                    if host.symlink_metadata().is_ok() {
                        continue;
                    }
                    "dir"
                } else if meta.file_type().is_symlink() {
                    "symlink"
                } else if meta.is_file() {
                    "file"
                } else {
                    "other"
                };
                out.push(Written {
                    path: host.display().to_string(),
                    kind: kind.to_owned(),
                });
                if out.len() >= limit {
                    out.sort_by(|a, b| a.path.cmp(&b.path));
                    return out;
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
