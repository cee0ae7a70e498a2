//! Workspace snapshots for `airlock run`: a manifest of every path (mode, SHA-256 of the
//! content, symlink target; FIFOs, sockets, device nodes and unreadable files by kind and
//! mode) and the drivers that take and restore them (`dir`, `git`, `cmd`, `overlay`). Walking never
//! opens anything but regular files and never follows a symlink (`walk`), and every step
//! runs under a time limit (`step`).
//!
//! Snapshots live under `DATA/snapshots/`: `manifests/ID.json`, content-addressed
//! `objects/` (the `dir` driver's copy of the tree, each file once), and `git/` (the saved
//! index of the `git` driver), and `overlay/RUN/` (the `overlay` driver's upper directory
//! and frozen layers of run RUN). A restore is idempotent: running it twice, or again after
//! it was interrupted, ends in the same tree. See docs/run.md.

mod cmd;
mod dir;
mod error;
mod git;
pub mod index;
#[cfg(test)]
mod index_tests;
mod manifest;
mod objects;
pub mod overlay;
#[cfg(test)]
mod overlay_root_tests;
#[cfg(test)]
mod overlay_tests;
#[cfg(test)]
mod reflink_tests;
mod step;
#[cfg(test)]
mod tests;
mod walk;

use std::path::{Path, PathBuf};

use airlock_ledger::Changes;
use serde::{Deserialize, Serialize};

use error::io;
pub use error::SnapshotError;
use index::Index;
use manifest::same;
pub use manifest::{diff, note_lines, Entry, GitState, Manifest};
pub use step::{Step, DEFAULT_STEP_TIMEOUT, GRACE};
use walk::{entry_of, walk, Hashing, Walked};
pub use walk::{Notes, READS};

/// Directory under the data directory that holds snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// A snapshot driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// A copy of the tree (content-addressed, so unchanged files are stored once).
    Dir,
    /// A commit of everything not ignored on a private ref, plus the saved index and HEAD.
    Git,
    /// User-given commands take and restore the snapshot; airlock keeps a manifest.
    Cmd,
    /// Each step runs on an overlayfs mount over the workspace in its own mount
    /// namespace; keep merges the upper directory in, rollback drops it (`overlay`).
    Overlay,
    /// `overlay` over every writable filesystem (`--scope root`, `overlay::root`): keep
    /// merges the workspace's part and reports the rest. Its manifests say `overlay`.
    OverlayRoot,
}

/// The `cmd` driver's commands, run with `sh -c` in the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commands {
    /// Takes a snapshot named `$AIRLOCK_SNAPSHOT`.
    pub snapshot: String,
    /// Restores the workspace to snapshot `$AIRLOCK_SNAPSHOT`.
    pub rollback: String,
}

impl Driver {
    /// Parses a driver name; names the drivers that exist when it is not one of them.
    pub fn parse(name: &str) -> Result<Self, SnapshotError> {
        match name {
            "dir" => Ok(Self::Dir),
            "git" => Ok(Self::Git),
            "cmd" => Ok(Self::Cmd),
            "overlay" => Ok(Self::Overlay),
            "overlay-root" => Ok(Self::OverlayRoot),
            "btrfs" => Err(SnapshotError::Unsupported(format!(
                "the {name} snapshot driver is not available in this build; use dir, overlay, \
                 git, or cmd with your own --snapshot-cmd and --rollback-cmd"
            ))),
            other => Err(SnapshotError::Unsupported(format!(
                "unknown snapshot driver {other:?}; use dir, overlay, git or cmd"
            ))),
        }
    }

    /// The driver's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dir => "dir",
            Self::Git => "git",
            Self::Cmd => "cmd",
            Self::Overlay => "overlay",
            Self::OverlayRoot => "overlay-root",
        }
    }
}

/// Where snapshots of one data directory live.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store of data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join(SNAPSHOTS_DIR),
        }
    }

    fn manifest_path(&self, id: &str) -> PathBuf {
        self.root.join("manifests").join(format!("{id}.json"))
    }

    fn object_path(&self, sha256: &str) -> PathBuf {
        self.root
            .join("objects")
            .join(&sha256[..2.min(sha256.len())])
            .join(sha256)
    }

    /// The `dir` driver's stamp index of `workspace` (empty when there is none).
    fn index_of(&self, workspace: &Path) -> Index {
        Index::load(&self.root, workspace)
    }

    /// Saves a walk's stamp index. Failing to is harmless (the index is a cache), so it
    /// is only logged.
    fn save_index(&self, index: &Index) {
        if let Err(error) = index.save(&self.root) {
            tracing::warn!(%error, "cannot save the snapshot stamp index; the next snapshot reads every file");
        }
    }

    /// Where objects are written before they are named (`objects.rs`).
    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The `overlay` driver's state directory of run `run` (`DATA/snapshots/overlay/RUN`:
    /// the upper directory, the frozen layers), which `airlock run` mounts each step from.
    pub fn overlay_state(&self, run: &str) -> PathBuf {
        overlay::Layout::of(self, run).state().to_owned()
    }

    fn git_index_path(&self, id: &str) -> PathBuf {
        self.root.join("git").join(format!("{id}.index"))
    }

    /// Loads a manifest.
    pub fn load(&self, id: &str) -> Result<Manifest, SnapshotError> {
        let path = self.manifest_path(id);
        let bytes = std::fs::read(&path).map_err(io("cannot read snapshot manifest", &path))?;
        serde_json::from_slice(&bytes).map_err(|source| SnapshotError::Corrupt {
            path: path.display().to_string(),
            source,
        })
    }

    fn save(&self, manifest: &Manifest) -> Result<(), SnapshotError> {
        let path = self.manifest_path(&manifest.id);
        let bytes = serde_json::to_vec_pretty(manifest).unwrap_or_default();
        write_durable(&path, &bytes)
    }

    /// Takes a snapshot of `workspace` with `driver` for run `run`; `exclude` (the data
    /// directory, when it lies inside the workspace) is left out; `commands` are the `cmd`
    /// driver's. Returns the manifest (its `notes` name what was recorded without being
    /// captured whole), written to disk (synced) before this returns.
    ///
    /// Errors: [`SnapshotError::TimedOut`] past `step`'s deadline; the driver's errors.
    pub fn take(
        &self,
        driver: Driver,
        workspace: &Path,
        run: &str,
        exclude: &[PathBuf],
        commands: Option<&Commands>,
        step: &Step,
    ) -> Result<Manifest, SnapshotError> {
        let id = format!("snap_{}", ulid::Ulid::new());
        let manifest = match (driver, commands) {
            (Driver::Dir, _) => dir::take(self, workspace, &id, exclude, step)?,
            (Driver::Git, _) => git::take(self, workspace, run, &id, exclude, step)?,
            (Driver::Overlay | Driver::OverlayRoot, _) => {
                let whole = driver == Driver::OverlayRoot;
                overlay::take(self, workspace, run, &id, (exclude, whole), step)?
            }
            (Driver::Cmd, Some(commands)) => {
                cmd::take(workspace, run, &id, exclude, commands, step)?
            }
            (Driver::Cmd, None) => {
                return Err(SnapshotError::Unsupported(
                    "the cmd driver needs --snapshot-cmd and --rollback-cmd".into(),
                ))
            }
        };
        self.save(&manifest)?;
        Ok(manifest)
    }

    /// Restores the workspace to snapshot `manifest` (the rollback step; the residue
    /// check is [`Store::residue`]). Returns path -> why for each path of the snapshot
    /// that could not be put back (a socket, a device node, an unreadable file).
    ///
    /// Errors: [`SnapshotError::TimedOut`] past `step`'s deadline; the driver's errors.
    pub fn restore(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
        step: &Step,
    ) -> Result<Notes, SnapshotError> {
        let workspace = PathBuf::from(&manifest.workspace);
        match manifest.driver.as_str() {
            "git" => git::restore(self, &workspace, manifest, exclude, step),
            "cmd" => cmd::restore(&workspace, manifest, step),
            "overlay" => overlay::restore(manifest, step),
            _ => dir::restore(self, &workspace, manifest, exclude, step),
        }
    }

    /// What the workspace holds now, as a manifest of the same driver (nothing stored).
    /// With `verify`, every file is read (the residue check); else a file whose stamp the
    /// index trusts is not (the diff step).
    fn current(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
        step: &Step,
        verify: bool,
    ) -> Result<Walked, SnapshotError> {
        let workspace = Path::new(&manifest.workspace);
        match manifest.driver.as_str() {
            "git" => git::current(workspace, exclude, step),
            "overlay" => Ok(Walked {
                entries: overlay::stamp_walk(workspace, exclude, step)?,
                ..Walked::default()
            }),
            "dir" => {
                let index = (!verify).then(|| self.index_of(workspace));
                let walked = walk(
                    workspace,
                    exclude,
                    Hashing {
                        index: index.as_ref(),
                        ..Hashing::default()
                    },
                    step,
                )?;
                if verify {
                    self.save_index(&walked.index);
                }
                Ok(walked)
            }
            _ => walk(workspace, exclude, Hashing::default(), step),
        }
    }

    /// Changes of the workspace since snapshot `manifest` (the diff step), and notes on
    /// what the walk could not read whole now.
    ///
    /// Errors: [`SnapshotError::TimedOut`] past `step`'s deadline; the driver's errors.
    pub fn changes(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
        step: &Step,
    ) -> Result<(Changes, Notes), SnapshotError> {
        if manifest.driver == "overlay" {
            return Ok((overlay::changes(manifest, step)?, Notes::new()));
        }
        let now = self.current(manifest, exclude, step, false)?;
        Ok((
            diff(&manifest.entries, &now.entries, manifest.driver == "git"),
            now.notes,
        ))
    }

    /// The residue check: paths where the workspace differs from `manifest`, each
    /// prefixed with how (`left behind: `, `differs: `, `missing: `) and followed by
    /// why in parentheses when `not_restored` (from [`Store::restore`]) says.
    ///
    /// Errors: [`SnapshotError::TimedOut`] past `step`'s deadline; the driver's errors.
    pub fn residue(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
        not_restored: &Notes,
        step: &Step,
    ) -> Result<Vec<String>, SnapshotError> {
        let now = self.current(manifest, exclude, step, true)?;
        let recorded = match manifest.driver.as_str() {
            "overlay" => std::borrow::Cow::Owned(overlay::entries(manifest, step)?),
            _ => std::borrow::Cow::Borrowed(&manifest.entries),
        };
        let changes = diff(&recorded, &now.entries, manifest.driver == "git");
        let line = |how: &str, path: &String| match not_restored.get(path) {
            Some(why) => format!("{how}: {path} ({why})"),
            None => format!("{how}: {path}"),
        };
        let mut residue = Vec::new();
        residue.extend(changes.added.iter().map(|p| line("left behind", p)));
        residue.extend(changes.modified.iter().map(|p| line("differs", p)));
        residue.extend(changes.deleted.iter().map(|p| line("missing", p)));
        if manifest.driver == "overlay" {
            residue.extend(overlay::leftovers(manifest, step)?);
        }
        Ok(residue)
    }

    /// Whether a restore to `manifest` can start now: for the `overlay` driver, no step
    /// may be running on the run's overlay (a rollback-to is refused before its decision
    /// is written); always for the other drivers.
    ///
    /// Errors: [`SnapshotError::Unsupported`] saying why.
    pub fn ready_to_restore(&self, manifest: &Manifest) -> Result<(), SnapshotError> {
        match manifest.driver.as_str() {
            "overlay" => overlay::ready_to_restore(manifest),
            _ => Ok(()),
        }
    }

    /// After a run's final rollback was verified: removes what the driver kept for the
    /// run outside the workspace (the `overlay` driver's state directory); nothing for
    /// the other drivers, whose snapshots stay in the store.
    pub fn discard(&self, manifest: &Manifest) {
        if manifest.driver == "overlay" {
            overlay::discard(manifest);
        }
    }

    /// The keep step's files: for the `overlay` driver, merges what the steps wrote into
    /// the workspace and checks it (`Some`, whose `residue` is empty when verified); the
    /// other drivers' steps wrote the workspace itself (`None`).
    ///
    /// Errors: [`SnapshotError::TimedOut`] past `step`'s deadline; the merge's errors.
    pub fn keep(
        &self,
        manifest: &Manifest,
        step: &Step,
    ) -> Result<Option<overlay::Kept>, SnapshotError> {
        match manifest.driver.as_str() {
            "overlay" => overlay::keep(manifest, step).map(Some),
            _ => Ok(None),
        }
    }
}

fn mode_of(metadata: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    metadata.permissions().mode() & 0o7777
}

/// Relative `/`-separated text of `path` under `root`.
fn relative(root: &Path, path: &Path) -> Result<String, SnapshotError> {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.to_str()
        .map(str::to_owned)
        .ok_or_else(|| SnapshotError::NotUtf8(path.display().to_string()))
}

/// Writes `bytes` to `path` through a synced temporary file and a rename.
fn write_durable(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
    let mut tmp =
        tempfile::NamedTempFile::new_in(parent).map_err(io("cannot create a file in", parent))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io("cannot write", path))?;
    tmp.as_file().sync_all().map_err(io("cannot sync", path))?;
    tmp.persist(path).map_err(|e| SnapshotError::Io {
        action: "cannot write",
        path: path.display().to_string(),
        source: e.error,
    })?;
    Ok(())
}

/// Test hook: when `AIRLOCK_TEST_PAUSE_AT` names `point`, says so on stderr and stops
/// there for good, so a test can SIGKILL the process at exactly that step.
pub fn pause_point(point: &str) {
    if std::env::var(airlock_net::config::ENV_TEST_PAUSE_AT)
        .ok()
        .as_deref()
        == Some(point)
    {
        eprintln!("airlock: paused at {point}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}
