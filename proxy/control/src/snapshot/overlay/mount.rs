//! The `overlay` driver's mount of one step ([`StepMount`]): util-linux's `unshare` makes
//! the step a mount namespace of its own, `mount -t overlay` covers the workspace there,
//! and the step's program runs on it (docs/run.md, "The overlay driver").

use std::path::{Path, PathBuf};

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
    _lock: std::fs::File,
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
            _lock: lock,
        })
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
        let (sh, _) = (tool("sh")?, tool("mount")?);
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
        Err(unsupported(format!(
            "cannot mount overlayfs over {} (lowerdir={}): {}",
            self.target,
            self.lowerdir,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
