//! The `overlay` driver: each step of the run runs on an overlayfs mount over the
//! workspace, made in a mount namespace of its own ([`StepMount`]), so the host's view of
//! the workspace is untouched while it runs. Everything the step writes lands in the
//! run's upper directory under `DATA/snapshots/overlay/RUN/`; a rollback drops it, a keep
//! merges it into the workspace (`merge`). See docs/run.md, "The overlay driver".
//!
//! Layout of the run's state directory (on the workspace's filesystem and mount):
//!
//! - `upper/`, `work/`: the upper and work directories of the next step's mount;
//! - `layers/SNAP/`: an upper directory frozen by savepoint `SNAP`;
//! - `stack.json`: the frozen layers, oldest first (the mount's lower stack is these,
//!   newest on top, over the workspace);
//! - `lock`: held (shared) by `airlock run` while a step's mount is live; a savepoint, a
//!   rollback and a keep take it exclusively, or refuse;
//! - under `--scope root` (`root`): `root.json`, the plan of the machine's mounts,
//!   `root-mnt/`, where each step's view is assembled, and `frozen-mnt/KEY`,
//!   `frozen-work/KEY` for the read-only overlay of a mount's oldest frozen layer;
//!   `upper/`, `work/` and each layer then hold one directory per overlaid mount (KEY,
//!   `%2F` the root filesystem).
//!
//! A snapshot records the workspace by stamp (device, inode, size, modification and
//! change time to the nanosecond; a change time cannot be set from user space) rather
//! than by content: the driver never writes to the workspace before the keep, so an
//! unchanged stamp is an unchanged file, and taking one costs a walk of inodes, not a
//! read of contents.

mod merge;
mod mount;
pub mod root;
mod stamps;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{io, write_durable, Entry, Manifest, Notes, SnapshotError, Step};
use crate::snapshot::Store;

pub use merge::{Kept, OPAQUE_XATTR};
pub use mount::StepMount;
pub(super) use stamps::stamp_walk;

/// Directory under the snapshot store that holds each run's overlay state.
pub const OVERLAY_DIR: &str = "overlay";

/// `statfs` magic of overlayfs (`OVERLAYFS_SUPER_MAGIC`, linux/magic.h).
const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;

/// Mount options besides the layers: no redirects (a renamed lower directory is copied
/// up whole, so the upper directory never holds a redirect), no metacopy (every copied-up
/// file holds its data), no index, no xino (nothing the merge would have to read).
pub const MOUNT_OPTIONS: &str = "redirect_dir=off,metacopy=off,index=off,xino=off";

/// The overlay state a manifest of the `overlay` driver records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayState {
    /// The run's state directory (`DATA/snapshots/overlay/RUN`).
    pub state: String,
    /// The frozen layers below the upper directory when the snapshot was taken, oldest
    /// first (names under `layers/`).
    pub layers: Vec<String>,
}

/// Paths of one run's overlay state.
#[derive(Debug, Clone)]
pub struct Layout {
    state: PathBuf,
}

impl Layout {
    /// The layout of state directory `state`.
    pub fn new(state: &Path) -> Self {
        Self {
            state: state.to_owned(),
        }
    }

    /// The state directory of run `run` in `store`.
    pub(super) fn of(store: &Store, run: &str) -> Self {
        Self::new(&store.root.join(OVERLAY_DIR).join(run))
    }

    /// The state directory.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// The upper directory of the next step's mount.
    pub fn upper(&self) -> PathBuf {
        self.state.join("upper")
    }

    fn work(&self) -> PathBuf {
        self.state.join("work")
    }

    /// The frozen layer `name`.
    pub fn layer(&self, name: &str) -> PathBuf {
        self.state.join("layers").join(name)
    }

    fn stack_path(&self) -> PathBuf {
        self.state.join("stack.json")
    }

    fn lock_path(&self) -> PathBuf {
        self.state.join("lock")
    }

    /// The frozen layers, oldest first (none when no savepoint froze one).
    ///
    /// Errors: [`SnapshotError::Io`] or [`SnapshotError::Corrupt`] for an unreadable stack.
    pub fn stack(&self) -> Result<Vec<String>, SnapshotError> {
        let path = self.stack_path();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| SnapshotError::Corrupt {
                path: path.display().to_string(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io("cannot read the overlay layer stack", &path)(e)),
        }
    }

    fn write_stack(&self, stack: &[String]) -> Result<(), SnapshotError> {
        if self.stack()? == stack {
            return Ok(());
        }
        write_durable(
            &self.stack_path(),
            &serde_json::to_vec(stack).unwrap_or_default(),
        )
    }

    /// Where dropped directories wait to be removed (`DATA/snapshots/overlay/.trash`,
    /// the same filesystem, so dropping one is a rename).
    fn trash(&self) -> PathBuf {
        self.state.parent().unwrap_or(&self.state).join(".trash")
    }

    /// Drops `dir`: renamed into the trash at once (a rollback costs one rename, whatever
    /// the step wrote), removed there by a thread of its own. Whatever a stopped process
    /// left in the trash goes with the next drop.
    fn drop_dir(&self, dir: &Path) -> Result<(), SnapshotError> {
        let trash = self.trash();
        std::fs::create_dir_all(&trash).map_err(io("cannot create", &trash))?;
        let doomed = trash.join(ulid::Ulid::new().to_string());
        match std::fs::rename(dir, &doomed) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("cannot drop", dir)(e)),
            Ok(()) => {}
        }
        std::thread::spawn(move || {
            for item in std::fs::read_dir(&trash).into_iter().flatten().flatten() {
                let _ = std::fs::remove_dir_all(item.path());
            }
        });
        Ok(())
    }

    /// Empties the upper and work directories (a rollback, a new layer); under the root
    /// scope, each step's mount makes one of each per overlaid mount.
    fn fresh_upper(&self) -> Result<(), SnapshotError> {
        for dir in [self.upper(), self.work()] {
            self.drop_dir(&dir)?;
            std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        }
        Ok(())
    }

    /// Takes the lock exclusively for `doing`: refused while a step's mount is live.
    ///
    /// A step's shared lock can outlive its mount for a moment: a child that another
    /// thread of this process spawns meanwhile holds a copy of the descriptor, and with it
    /// the lock (`flock(2)`: locks belong to the open file description), from its fork
    /// until its `exec` closes the copy; on a loaded machine the child may wait to run in
    /// between. So a refusal is retried for up to [`LOCK_GRACE`] before it is reported; a
    /// live step holds the lock for its whole run and is still refused.
    fn exclusive(&self, doing: &str) -> Result<std::fs::File, SnapshotError> {
        let path = self.lock_path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("cannot open the overlay lock", &path))?;
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        while rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .is_err()
        {
            if std::time::Instant::now() >= deadline {
                return Err(SnapshotError::Unsupported(format!(
                    "cannot {doing} while a step of the run is running on its overlay: the \
                     overlay driver freezes and drops upper directories, which it cannot do \
                     under a live mount; take savepoints and roll back between steps, or use \
                     --snapshot dir"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(file)
    }
}

/// How long [`Layout::exclusive`] retries a refused lock before it reports a live step.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

fn unsupported(why: String) -> SnapshotError {
    SnapshotError::Unsupported(format!(
        "the overlay snapshot driver cannot be used here: {why}; use --snapshot dir (a copy \
         of the tree) instead"
    ))
}

// `f_type`'s type differs between architectures (i64 here, u32 on others).
#[allow(clippy::unnecessary_cast)]
fn statfs_type(path: &Path) -> Result<i64, SnapshotError> {
    rustix::fs::statfs(path)
        .map(|s| s.f_type as i64)
        .map_err(|e| io("cannot statfs", path)(e.into()))
}

fn mount_id(path: &Path) -> Result<u64, SnapshotError> {
    rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::MNT_ID,
    )
    .map(|s| s.stx_mnt_id)
    .map_err(|e| io("cannot statx", path)(e.into()))
}

/// Checks that an overlay over `workspace` with its upper directory under `store_dir`
/// (an existing directory) can be made and merged: root, overlayfs in the kernel, no
/// nested overlay, the same filesystem and mount, names the mount options can carry.
///
/// Errors: [`SnapshotError::Unsupported`] saying which, and naming `dir`.
pub fn check(workspace: &Path, store_dir: &Path) -> Result<(), SnapshotError> {
    let uid = rustix::process::geteuid();
    if !uid.is_root() {
        return Err(unsupported(format!(
            "it mounts overlayfs in the run's own mount namespace, which needs root \
             (CAP_SYS_ADMIN in the initial user namespace; the merge also reads the trusted.* \
             xattrs overlayfs writes), and airlock runs as uid {}",
            uid.as_raw()
        )));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|line| line.split_whitespace().last() == Some("overlay"))
    {
        return Err(unsupported(
            "this kernel has no overlayfs (no `overlay` in /proc/filesystems; `modprobe \
             overlay` loads it where it is a module)"
                .into(),
        ));
    }
    for (what, path) in [
        ("the workspace", workspace),
        ("the data directory", store_dir),
    ] {
        if statfs_type(path)? == OVERLAYFS_SUPER_MAGIC {
            return Err(unsupported(format!(
                "nested overlay: {what} {} is itself on overlayfs (a container's root?), \
                 which cannot hold the run's upper directory",
                path.display()
            )));
        }
        let text = path.to_str().unwrap_or(",");
        if text.contains([',', ':', '\\']) {
            return Err(unsupported(format!(
                "{what} {} has a `,`, `:` or `\\` in its path, which overlayfs mount options \
                 cannot carry",
                path.display()
            )));
        }
    }
    if store_dir.starts_with(workspace) {
        return Err(unsupported(format!(
            "the data directory {} lies inside the workspace {}, and overlayfs refuses an \
             upper directory inside its lower one; put --data outside the workspace",
            store_dir.display(),
            workspace.display()
        )));
    }
    let (ws_dev, st_dev) = (
        std::fs::metadata(workspace)
            .map_err(io("cannot stat", workspace))?
            .dev(),
        std::fs::metadata(store_dir)
            .map_err(io("cannot stat", store_dir))?
            .dev(),
    );
    if ws_dev != st_dev || mount_id(workspace)? != mount_id(store_dir)? {
        return Err(unsupported(format!(
            "the upper directory would be on a different filesystem or mount ({}) than the \
             workspace ({}): keep moves the step's files into the workspace by rename, which \
             cannot cross them; put --data on the workspace's filesystem",
            store_dir.display(),
            workspace.display()
        )));
    }
    Ok(())
}

/// Takes an `overlay` snapshot: the first of a run prepares its state directory (with
/// `whole`, `--scope root`, the plan of every mount: [`root`]), checks that the overlay
/// can be made (a real mount in a throwaway mount namespace); a later one (a savepoint)
/// freezes the upper directory as a layer.
pub(super) fn take(
    store: &Store,
    workspace: &Path,
    run: &str,
    id: &str,
    (exclude, whole): (&[PathBuf], bool),
    step: &Step,
) -> Result<Manifest, SnapshotError> {
    let layout = Layout::of(store, run);
    let stack = if layout.state.join("upper").is_dir() {
        let _lock = layout.exclusive("take a savepoint")?;
        let mut stack = layout.stack()?;
        let layer = layout.layer(id);
        let parent = layer.parent().unwrap_or(&layout.state);
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        std::fs::rename(layout.upper(), &layer).map_err(io("cannot freeze", &layer))?;
        stack.push(id.to_owned());
        layout.write_stack(&stack)?;
        layout.fresh_upper()?;
        stack
    } else {
        let parent = layout.state.parent().unwrap_or(&store.root).to_owned();
        std::fs::create_dir_all(&parent).map_err(io("cannot create", &parent))?;
        check(workspace, &parent)?;
        let plan = match whole {
            true => {
                let plan = root::plan(workspace)?;
                root::check(&plan, &parent)?;
                Some(plan)
            }
            false => None,
        };
        std::fs::create_dir_all(&layout.state).map_err(io("cannot create", &layout.state))?;
        if let Some(plan) = &plan {
            layout.write_root_plan(plan)?;
        }
        layout.fresh_upper()?;
        if let Err(error) = StepMount::prepare(&layout.state, workspace).and_then(|m| m.probe()) {
            let _ = std::fs::remove_dir_all(&layout.state);
            return Err(error);
        }
        Vec::new()
    };
    // The workspace is not written before a keep: its stamps are walked while the step
    // runs, and the residue check waits for them (`stamps`).
    stamps::walk_behind(&layout, id, workspace, exclude, step.timeout())?;
    Ok(Manifest {
        id: id.to_owned(),
        driver: "overlay".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries: BTreeMap::new(),
        git: None,
        commands: None,
        overlay: Some(OverlayState {
            state: layout.state.display().to_string(),
            layers: stack,
        }),
        notes: Notes::new(),
    })
}

fn state_of(manifest: &Manifest) -> Result<(Layout, &[String]), SnapshotError> {
    let state = manifest.overlay.as_ref().ok_or_else(|| {
        SnapshotError::Unsupported(format!(
            "snapshot {} records no overlay state directory",
            manifest.id
        ))
    })?;
    Ok((Layout::new(Path::new(&state.state)), &state.layers))
}

/// Rolls back to `manifest`: drops the upper directory and every layer frozen after it.
/// The workspace itself was never written, so nothing there is touched. Idempotent.
///
/// Errors: [`SnapshotError::Unsupported`] while a step's mount is live, or when a layer
/// of the snapshot is gone (dropped by a rollback to an earlier savepoint).
pub(super) fn restore(manifest: &Manifest, step: &Step) -> Result<Notes, SnapshotError> {
    let (layout, wanted) = state_of(manifest)?;
    step.at(layout.state.display());
    if wanted.is_empty() && !layout.state.exists() {
        // Rolled back and discarded earlier (the final rollback removes the state).
        return Ok(Notes::new());
    }
    let _lock = layout.exclusive("roll back")?;
    for name in wanted {
        if !layout.layer(name).is_dir() {
            return Err(SnapshotError::Unsupported(format!(
                "the overlay layer of snapshot {name} is gone (a rollback to an earlier \
                 savepoint dropped it, or the run was kept), so snapshot {} cannot be restored",
                manifest.id
            )));
        }
    }
    let stack = layout.stack()?;
    layout.write_stack(wanted)?;
    for name in stack.iter().filter(|name| !wanted.contains(name)) {
        layout.drop_dir(&layout.layer(name))?;
    }
    layout.fresh_upper()?;
    Ok(Notes::new())
}

/// The workspace as snapshot `manifest` recorded it, by stamp (waiting for the walk
/// begun when it was taken, up to `step`'s deadline).
///
/// Errors: [`SnapshotError::Unsupported`] when the walk failed or did not finish (the
/// server stopped under it); [`SnapshotError::TimedOut`].
pub(super) fn entries(
    manifest: &Manifest,
    step: &Step,
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let (layout, _) = state_of(manifest)?;
    stamps::entries(&layout, &manifest.id, step)
}

/// The overlay part of the residue check after a rollback to `manifest`: anything in the
/// upper directory, and a layer stack other than the snapshot's.
pub(super) fn leftovers(manifest: &Manifest, step: &Step) -> Result<Vec<String>, SnapshotError> {
    let (layout, wanted) = state_of(manifest)?;
    let mut residue = Vec::new();
    if wanted.is_empty() && !layout.state.exists() {
        return Ok(residue);
    }
    let upper = layout.upper();
    match layout.root_plan()? {
        Some(_) => {
            for (mount, dir) in root::keyed(&upper)? {
                residue.extend(stamp_walk(&dir, &[], step)?.keys().map(|path| {
                    format!(
                        "left behind: {} (in the overlay's upper directory)",
                        Path::new(&mount).join(path).display()
                    )
                }));
            }
        }
        None => {
            let walked = stamp_walk(&upper, &[], step)?;
            residue.extend(
                walked
                    .keys()
                    .map(|path| format!("left behind: {path} (in the overlay's upper directory)")),
            );
        }
    }
    let stack = layout.stack()?;
    if stack != wanted {
        residue.push(format!(
            "differs: the overlay's layers are [{}], the snapshot's [{}]",
            stack.join(", "),
            wanted.join(", ")
        ));
    }
    Ok(residue)
}

/// Refuses a restore to `manifest` while a step's mount is live (its lock is held).
pub(super) fn ready_to_restore(manifest: &Manifest) -> Result<(), SnapshotError> {
    let (layout, _) = state_of(manifest)?;
    if layout.state.exists() {
        layout.exclusive("roll back")?;
    }
    Ok(())
}

/// Removes the run's overlay state after its final rollback was verified (nothing is
/// left to restore to). Idempotent; a failure is only logged: it leaves empty directories.
pub(super) fn discard(manifest: &Manifest) {
    if let Ok((layout, _)) = state_of(manifest) {
        if let Ok(_lock) = layout.exclusive("discard the overlay") {
            if let Err(error) = layout.drop_dir(&layout.state) {
                tracing::warn!(%error, state = %layout.state.display(), "cannot remove the run's overlay state");
            }
        }
    }
}

/// Keeps what the steps wrote: merges every frozen layer (oldest first) and the upper
/// directory into the workspace, checks the result, and removes the run's overlay state.
/// Under `--scope root` only the workspace's part is merged: what the steps wrote
/// anywhere else is [`Kept::outside`], and goes with the state.
pub(super) fn keep(manifest: &Manifest, step: &Step) -> Result<Kept, SnapshotError> {
    let (layout, _) = state_of(manifest)?;
    if !layout.state.exists() {
        // Kept earlier (a keep run again after it finished removes nothing more).
        return Ok(Kept::default());
    }
    let _lock = layout.exclusive("keep the files")?;
    let workspace = Path::new(&manifest.workspace);
    let outside = match layout.root_plan()? {
        Some(_) => {
            let mut dirs: Vec<PathBuf> = layout.stack()?.iter().map(|n| layout.layer(n)).collect();
            dirs.push(layout.upper());
            root::outside(&dirs, workspace, step)?
        }
        None => Vec::new(),
    };
    let mut kept = merge::keep(&layout, workspace, step)?;
    // The workspace replaced whole is the merge's residue; the rest is the outside's.
    let (replaced, outside): (Vec<String>, Vec<String>) =
        outside.into_iter().partition(|l| l.starts_with("differs:"));
    kept.residue.extend(replaced);
    let whole = layout.root_plan()?.is_some();
    kept.outside = outside;
    if kept.residue.is_empty() {
        if whole {
            // What the steps wrote elsewhere (caches, builds) goes by a rename, as a
            // rollback's does.
            layout.drop_dir(&layout.state)?;
        } else {
            let _ = std::fs::remove_dir_all(&layout.state);
        }
    }
    Ok(kept)
}

/// The changes of the steps since `manifest`: the layers frozen after it and the upper
/// directory, read as overlayfs wrote them (nothing in the workspace is read).
pub(super) fn changes(
    manifest: &Manifest,
    step: &Step,
) -> Result<airlock_ledger::Changes, SnapshotError> {
    let (layout, wanted) = state_of(manifest)?;
    let stack = layout.stack()?;
    let part = |dir: PathBuf| layout.workspace_part(dir);
    let mut above: Vec<PathBuf> = stack
        .iter()
        .filter(|name| !wanted.contains(name))
        .map(|name| part(layout.layer(name)))
        .collect::<Result<_, _>>()?;
    above.push(part(layout.upper())?);
    let below: Vec<PathBuf> = wanted
        .iter()
        .rev()
        .map(|n| part(layout.layer(n)))
        .collect::<Result<_, _>>()?;
    let entries = stamps::entries(&layout, &manifest.id, step)?;
    merge::changes(&above, &below, &entries, step)
}
