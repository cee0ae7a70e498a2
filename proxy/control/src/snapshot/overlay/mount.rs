//! The `overlay` driver's mount of one step ([`StepMount`]): util-linux's `unshare` makes
//! the step a mount namespace of its own, `mount -t overlay` covers the workspace there,
//! and the step's program runs on it (docs/run.md, "The overlay driver"). Under `--scope
//! root` (`root`) every writable filesystem gets an overlay of its own in a new root,
//! which the step enters with `pivot_root`.

use std::path::{Path, PathBuf};

use super::root::{How, RootPlan};
use super::{io, unsupported, Layout, MOUNT_OPTIONS};
use crate::snapshot::SnapshotError;

/// An overlay mount for one step: the layers of `stack.json` over the workspace, the
/// run's upper and work directories. The step runs under [`StepMount::command_line`]:
/// util-linux's `unshare --mount --propagation private` (a mount namespace of its own,
/// every mount private, so nothing propagates to the host), then `mount -t overlay` over
/// the workspace and a `cd` into it (so the working directory is the overlay's, not the
/// directory beneath it), then the step's program. Holds the run's lock (shared) while
/// it lives, so no savepoint, rollback or keep touches the layers under a live mount.
#[derive(Debug)]
pub struct StepMount {
    target: String,
    data: String,
    lowerdir: String,
    root: Option<RootMount>,
    _lock: std::fs::File,
}

/// The root scope's mounts of one step: the new root, and the mounts made under it
/// before `pivot_root` enters it, each `[how, source or options, target]` (`o` an
/// overlay, `r` a recursive bind, `b` a bind).
#[derive(Debug)]
struct RootMount {
    new_root: PathBuf,
    ops: Vec<[String; 3]>,
}

/// The script `sh` runs inside the new mount namespace under `--scope root`: `$1`..`$4`
/// the paths of `mount`, `pivot_root` and `umount` and the new root, then the mounts as
/// triples up to `--`, then the workspace, the program and its arguments. A mount that
/// fails because its mount point is gone from the host (unmounted and removed since the
/// plan was read) is skipped: nothing is there to see or write. The old root is put on
/// top of the new one and detached (`pivot_root . .`, pivot_root(2)), so nothing is
/// written for it.
const ENTER_ROOT: &str = "m=$1 p=$2 u=$3 r=$4; shift 4; \
while [ \"$1\" != -- ]; do \
case $1 in \
o) \"$m\" -t overlay -o \"$2\" overlay \"$3\" ;; \
r) \"$m\" --rbind \"$2\" \"$3\" ;; \
*) \"$m\" --bind \"$2\" \"$3\" ;; \
esac || { [ \"$3\" != \"$r/\" ] && [ ! -e \"${3#\"$r\"}\" ]; } || exit 125; \
shift 3; done; shift; \
cd \"$r\" && \"$p\" . . && \"$u\" -l . || exit 125; \
cd \"$1\" || exit 125; shift; exec \"$@\"";

/// `path` (absolute) under `root`.
fn beneath(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The script `sh` runs inside the new mount namespace: `$1` the options, `$2` the
/// workspace, then the program and its arguments.
const ENTER: &str =
    "mount -t overlay -o \"$1\" overlay \"$2\" || exit 125; cd \"$2\" || exit 125; \
                     shift 2; exec \"$@\"";

/// `name` in the system directories (never `PATH`: a directory early on a user's `PATH`
/// must not stand in for `mount`).
fn tool(name: &str) -> Result<PathBuf, SnapshotError> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            unsupported(format!(
                "`{name}` (util-linux) is not installed in /usr/bin, /bin, /usr/sbin or /sbin"
            ))
        })
}

impl StepMount {
    /// The mount of the next step over `workspace`, from state directory `state` (the
    /// `overlay_state` of the workspace's attach answer).
    ///
    /// Errors: [`SnapshotError::Io`] for a missing state directory; the stack's errors;
    /// [`SnapshotError::Unsupported`] when the options pass a page (too many layers).
    pub fn prepare(state: &Path, workspace: &Path) -> Result<Self, SnapshotError> {
        let layout = Layout::new(state);
        let path = layout.lock_path();
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("cannot open the overlay lock", &path))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockShared)
            .map_err(|e| io("cannot lock", &path)(e.into()))?;
        let mut lowers: Vec<String> = layout
            .stack()?
            .iter()
            .rev()
            .map(|name| layout.layer(name).display().to_string())
            .collect();
        let root = match layout.root_plan()? {
            Some(attached) => {
                let plan = super::root::plan(workspace)?;
                if plan.workspace_part() != attached.workspace_part() {
                    return Err(SnapshotError::Unsupported(format!(
                        "the mounts changed since the run attached: the workspace {} is \
                         now on {} (it was on {}), so --scope root cannot tell its changes \
                         from the rest",
                        workspace.display(),
                        plan.workspace_part().display(),
                        attached.workspace_part().display()
                    )));
                }
                Some(Self::root_mounts(&layout, &plan)?)
            }
            None => None,
        };
        lowers.push(workspace.display().to_string());
        let lowerdir = lowers.join(":");
        let data = format!(
            "lowerdir={lowerdir},upperdir={},workdir={},{MOUNT_OPTIONS}",
            layout.upper().display(),
            layout.work().display()
        );
        if data.len() >= 4096 {
            return Err(SnapshotError::Unsupported(format!(
                "the overlay mount options of {} layers pass the kernel's 4,096 bytes; take \
                 fewer savepoints",
                lowers.len()
            )));
        }
        Ok(Self {
            target: workspace.display().to_string(),
            data,
            lowerdir,
            root,
            _lock: lock,
        })
    }

    fn root_mounts(layout: &Layout, plan: &RootPlan) -> Result<RootMount, SnapshotError> {
        let new_root = layout.new_root();
        let stack = layout.stack()?;
        let mut ops = Vec::new();
        for mount in &plan.mounts {
            let target = beneath(&new_root, Path::new(&mount.path))
                .display()
                .to_string();
            let op = match &mount.how {
                How::Overlay { key } => {
                    for dir in [layout.upper().join(key), layout.work().join(key)] {
                        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
                    }
                    // A layer frozen before this mount was there has nothing of it.
                    let mut frozen: Vec<String> = stack
                        .iter()
                        .rev()
                        .map(|name| layout.layer(name).join(key))
                        .filter(|dir| dir.is_dir())
                        .map(|dir| dir.display().to_string())
                        .collect();
                    // Only where the layers lie on the mount's own filesystem (below).
                    let same_fs = |a: &str, b: &Path| {
                        use std::os::unix::fs::MetadataExt as _;
                        let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
                        dev(Path::new(a)).is_some() && dev(Path::new(a)) == dev(b)
                    };
                    let inside = same_fs(&mount.path, layout.state());
                    let lowest = match frozen.pop() {
                        None => mount.path.clone(),
                        Some(oldest) if !inside => {
                            frozen.push(oldest);
                            mount.path.clone()
                        }
                        // The layers lie inside the mount (the data directory is on the
                        // workspace's filesystem), and overlayfs refuses a lower layer
                        // inside another ("overlapping lowerdir path"); an upper inside
                        // its lower is allowed. So the oldest layer is the upper of a
                        // read-only overlay of the mount, and that is the lowest layer.
                        Some(oldest) => {
                            let (view, work) = (
                                layout.state().join("frozen-mnt").join(key),
                                layout.state().join("frozen-work").join(key),
                            );
                            for dir in [&view, &work] {
                                std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
                            }
                            let data = format!(
                                "ro,lowerdir={},upperdir={oldest},workdir={},{MOUNT_OPTIONS}",
                                mount.path,
                                work.display()
                            );
                            ops.push(["o".to_owned(), data, view.display().to_string()]);
                            view.display().to_string()
                        }
                    };
                    let mut lowers = frozen;
                    lowers.push(lowest);
                    let data = format!(
                        "lowerdir={},upperdir={},workdir={},{MOUNT_OPTIONS}",
                        lowers.join(":"),
                        layout.upper().join(key).display(),
                        layout.work().join(key).display()
                    );
                    if data.len() >= 4096 {
                        return Err(SnapshotError::Unsupported(format!(
                            "the overlay mount options of {} over {} pass the kernel's \
                             4,096 bytes; take fewer savepoints",
                            lowers.len(),
                            mount.path
                        )));
                    }
                    ["o".to_owned(), data, target]
                }
                How::Bind { recursive } => [
                    if *recursive { "r" } else { "b" }.to_owned(),
                    mount.path.clone(),
                    target,
                ],
            };
            ops.push(op);
        }
        Ok(RootMount { new_root, ops })
    }

    /// Under `--scope root`, shows the host's own `path` (absolute, existing) at its
    /// place in the step's view, bound as it is, so what the step writes there reaches
    /// the host: the fence's directory (its report) and airlock's fence socket (a Unix
    /// socket cannot be connected to through overlayfs). Nothing under the workspace
    /// scope, where only the workspace is overlaid.
    pub fn pass_through(&mut self, path: &Path) {
        if let Some(root) = &mut self.root {
            let target = beneath(&root.new_root, path).display().to_string();
            root.ops
                .push(["b".to_owned(), path.display().to_string(), target]);
        }
    }

    /// Whether this is a `--scope root` mount (the step sees every filesystem through
    /// overlays of its own).
    pub fn is_root_scope(&self) -> bool {
        self.root.is_some()
    }

    /// The command line that runs `program` with `args` on this mount: `unshare`'s path
    /// and its arguments.
    ///
    /// Errors: [`SnapshotError::Unsupported`] when `unshare`, `sh` or `mount` is missing.
    pub fn command_line(
        &self,
        program: &str,
        args: &[String],
    ) -> Result<(String, Vec<String>), SnapshotError> {
        let unshare = tool("unshare")?.display().to_string();
        let (sh, mount) = (tool("sh")?, tool("mount")?);
        if let Some(root) = &self.root {
            let mut line = vec![
                "--mount".to_owned(),
                "--propagation".into(),
                "private".into(),
                "--".into(),
                sh.display().to_string(),
                "-c".into(),
                ENTER_ROOT.into(),
                "airlock-overlay".into(),
                mount.display().to_string(),
                tool("pivot_root")?.display().to_string(),
                tool("umount")?.display().to_string(),
                root.new_root.display().to_string(),
            ];
            line.extend(root.ops.iter().flatten().cloned());
            line.push("--".into());
            line.push(self.target.clone());
            line.push(program.to_owned());
            line.extend(args.iter().cloned());
            return Ok((unshare, line));
        }
        let mut line = vec![
            "--mount".to_owned(),
            "--propagation".into(),
            "private".into(),
            "--".into(),
            sh.display().to_string(),
            "-c".into(),
            ENTER.into(),
            "airlock-overlay".into(),
            self.data.clone(),
            self.target.clone(),
            program.to_owned(),
        ];
        line.extend(args.iter().cloned());
        Ok((unshare, line))
    }

    /// Makes the mount once in a throwaway mount namespace (`true` runs on it) and
    /// reports why it failed, in `mount`'s words and ours.
    pub(super) fn probe(&self) -> Result<(), SnapshotError> {
        let (unshare, args) = self.command_line("true", &[])?;
        let out = std::process::Command::new(unshare)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| unsupported(format!("cannot run unshare: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        let over = match &self.root {
            Some(root) => format!(
                "the whole filesystem ({} mount(s), in {})",
                root.ops.len(),
                root.new_root.display()
            ),
            None => format!("{} (lowerdir={})", self.target, self.lowerdir),
        };
        Err(unsupported(format!(
            "cannot mount overlayfs over {over}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
