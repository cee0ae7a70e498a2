//! Workspace snapshots for `airlock run`: a manifest of every path (mode, SHA-256 of the
//! content, symlink target) and the drivers that take and restore them (`dir`, `git`).
//!
//! Snapshots live under `DATA/snapshots/`: `manifests/ID.json`, content-addressed
//! `objects/` (the `dir` driver's copy of the tree, each file once), and `git/` (the saved
//! index of the `git` driver). A restore is idempotent: running it twice, or again after
//! it was interrupted, ends in the same tree. See docs/run.md.

mod cmd;
mod dir;
mod git;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use airlock_ledger::Changes;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// Directory under the data directory that holds snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// Errors taking or restoring a snapshot; each names the path or command at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A file operation failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A path is not valid UTF-8 (manifests store paths as text).
    #[error("cannot snapshot {0}: the name is not UTF-8")]
    NotUtf8(String),
    /// A git command failed.
    #[error("git {command} failed: {stderr}")]
    Git {
        /// The arguments.
        command: String,
        /// What git said.
        stderr: String,
    },
    /// The driver cannot be used here.
    #[error("{0}")]
    Unsupported(String),
    /// A user-given snapshot or rollback command failed.
    #[error("{what} failed: {detail}")]
    Command {
        /// Which command.
        what: String,
        /// Its exit status and stderr.
        detail: String,
    },
    /// A manifest does not parse.
    #[error("snapshot manifest {path} is corrupt")]
    Corrupt {
        /// The manifest file.
        path: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SnapshotError + 'a {
    move |source| SnapshotError::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}

/// A snapshot driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// A copy of the tree (content-addressed, so unchanged files are stored once).
    Dir,
    /// A commit of everything not ignored on a private ref, plus the saved index and HEAD.
    Git,
    /// User-given commands take and restore the snapshot; airlock keeps a manifest.
    Cmd,
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
            "btrfs" | "overlay" => Err(SnapshotError::Unsupported(format!(
                "the {name} snapshot driver is not available in this build; use dir, git, or cmd \
                 with your own --snapshot-cmd and --rollback-cmd"
            ))),
            other => Err(SnapshotError::Unsupported(format!(
                "unknown snapshot driver {other:?}; use dir, git or cmd"
            ))),
        }
    }

    /// The driver's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dir => "dir",
            Self::Git => "git",
            Self::Cmd => "cmd",
        }
    }
}

/// One path of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Size in bytes.
        size: u64,
        /// SHA-256 of the content, lowercase hex.
        sha256: String,
    },
    /// A symbolic link.
    Symlink {
        /// Where it points.
        target: String,
    },
}

/// Git state saved beside a `git` snapshot so that rollback restores index and HEAD exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitState {
    /// The snapshot commit (on `refs/airlock/snapshots/RUN/ID`).
    pub commit: String,
    /// The ref holding it.
    pub reference: String,
    /// The branch HEAD named (`refs/heads/main`), or `None` when detached.
    pub head_ref: Option<String>,
    /// The commit HEAD pointed at, or `None` on an unborn branch.
    pub head_commit: Option<String>,
    /// Whether the repository had an index file.
    pub had_index: bool,
}

/// A snapshot: what the workspace held, path by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// `snap_<ulid>`.
    pub id: String,
    /// The driver that took it.
    pub driver: String,
    /// The workspace (absolute).
    pub workspace: String,
    /// When it was taken, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Relative path (`/`-separated) -> entry.
    pub entries: BTreeMap<String, Entry>,
    /// The `git` driver's saved state.
    #[serde(default)]
    pub git: Option<GitState>,
    /// The `cmd` driver's commands.
    #[serde(default)]
    pub commands: Option<Commands>,
}

impl Manifest {
    /// Counts of files, directories and symlinks, in words.
    pub fn describe(&self) -> String {
        let files = self
            .entries
            .values()
            .filter(|e| matches!(e, Entry::File { .. }))
            .count();
        let links = self
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Symlink { .. }))
            .count();
        format!("{files} files, {links} symlinks")
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

    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
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
    /// driver's. Returns the manifest,
    /// written to disk (synced) before this returns.
    pub fn take(
        &self,
        driver: Driver,
        workspace: &Path,
        run: &str,
        exclude: &[PathBuf],
        commands: Option<&Commands>,
    ) -> Result<Manifest, SnapshotError> {
        let id = format!("snap_{}", ulid::Ulid::new());
        let manifest = match (driver, commands) {
            (Driver::Dir, _) => dir::take(self, workspace, &id, exclude)?,
            (Driver::Git, _) => git::take(self, workspace, run, &id, exclude)?,
            (Driver::Cmd, Some(commands)) => cmd::take(workspace, run, &id, exclude, commands)?,
            (Driver::Cmd, None) => {
                return Err(SnapshotError::Unsupported(
                    "the cmd driver needs --snapshot-cmd and --rollback-cmd".into(),
                ))
            }
        };
        self.save(&manifest)?;
        Ok(manifest)
    }

    /// Restores the workspace to snapshot `id`, then compares it with the manifest.
    /// Returns the residue: paths that still differ (empty when the rollback is verified).
    pub fn restore(&self, id: &str, exclude: &[PathBuf]) -> Result<Vec<String>, SnapshotError> {
        let manifest = self.load(id)?;
        let workspace = PathBuf::from(&manifest.workspace);
        match manifest.driver.as_str() {
            "git" => git::restore(self, &workspace, &manifest, exclude)?,
            "cmd" => cmd::restore(&workspace, &manifest)?,
            _ => dir::restore(self, &workspace, &manifest, exclude)?,
        }
        self.residue(&manifest, exclude)
    }

    /// What the workspace holds now, as a manifest of the same driver (nothing stored).
    pub fn current(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
    ) -> Result<BTreeMap<String, Entry>, SnapshotError> {
        let workspace = Path::new(&manifest.workspace);
        match manifest.driver.as_str() {
            "git" => git::current(workspace, exclude),
            _ => walk(workspace, exclude, None),
        }
    }

    /// Changes of the workspace since snapshot `manifest`.
    pub fn changes(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
    ) -> Result<Changes, SnapshotError> {
        let now = self.current(manifest, exclude)?;
        Ok(diff(&manifest.entries, &now, manifest.driver == "git"))
    }

    /// Paths where the workspace differs from `manifest`, each prefixed with how.
    pub fn residue(
        &self,
        manifest: &Manifest,
        exclude: &[PathBuf],
    ) -> Result<Vec<String>, SnapshotError> {
        let changes = self.changes(manifest, exclude)?;
        let mut residue = Vec::new();
        residue.extend(changes.added.iter().map(|p| format!("left behind: {p}")));
        residue.extend(changes.modified.iter().map(|p| format!("differs: {p}")));
        residue.extend(changes.deleted.iter().map(|p| format!("missing: {p}")));
        Ok(residue)
    }
}

/// Compares two manifests' entries. With `exec_only`, file modes are compared by their
/// executable bit alone (all git records).
pub fn diff(
    before: &BTreeMap<String, Entry>,
    after: &BTreeMap<String, Entry>,
    exec_only: bool,
) -> Changes {
    let mut changes = Changes::default();
    for (path, old) in before {
        match after.get(path) {
            None => changes.deleted.push(path.clone()),
            Some(new) if !same(old, new, exec_only) => changes.modified.push(path.clone()),
            Some(_) => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            changes.added.push(path.clone());
        }
    }
    changes
}

fn same(a: &Entry, b: &Entry, exec_only: bool) -> bool {
    match (a, b) {
        (
            Entry::File {
                mode: m1,
                sha256: h1,
                ..
            },
            Entry::File {
                mode: m2,
                sha256: h2,
                ..
            },
        ) => {
            h1 == h2
                && if exec_only {
                    (m1 & 0o100) == (m2 & 0o100)
                } else {
                    m1 == m2
                }
        }
        (Entry::Dir { mode: m1 }, Entry::Dir { mode: m2 }) => exec_only || m1 == m2,
        (a, b) => a == b,
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

/// Hashes a file; when `store` is given, also keeps its content as an object there.
fn hash_file(path: &Path, store: Option<&Store>) -> Result<(String, u64), SnapshotError> {
    let mut file = std::fs::File::open(path).map_err(io("cannot read", path))?;
    let mut hasher = sha2::Sha256::new();
    let mut tmp = match store {
        Some(store) => {
            let dir = store.tmp_dir();
            std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
            Some(
                tempfile::NamedTempFile::new_in(&dir)
                    .map_err(io("cannot create a file in", &dir))?,
            )
        }
        None => None,
    };
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(io("cannot read", path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buffer[..n]);
        if let Some(tmp) = tmp.as_mut() {
            std::io::Write::write_all(tmp, &buffer[..n]).map_err(io("cannot copy", path))?;
        }
    }
    let sha: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let (Some(store), Some(tmp)) = (store, tmp) {
        let object = store.object_path(&sha);
        if !object.exists() {
            if let Some(parent) = object.parent() {
                std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
            }
            tmp.as_file()
                .sync_all()
                .map_err(io("cannot sync", &object))?;
            tmp.persist(&object).map_err(|e| SnapshotError::Io {
                action: "cannot store",
                path: object.display().to_string(),
                source: e.error,
            })?;
        }
    }
    Ok((sha, size))
}

/// Walks `root` (not following symlinks), skipping `exclude`. With `store`, file contents
/// are kept as objects.
fn walk(
    root: &Path,
    exclude: &[PathBuf],
    store: Option<&Store>,
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let mut entries = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let listing = std::fs::read_dir(&dir).map_err(io("cannot list", &dir))?;
        for item in listing {
            let item = item.map_err(io("cannot list", &dir))?;
            let path = item.path();
            if exclude.iter().any(|e| e == &path) {
                continue;
            }
            entries.insert(relative(root, &path)?, entry_of(&path, store)?);
            if item.file_type().map_err(io("cannot stat", &path))?.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(entries)
}

/// The manifest entry of one path.
fn entry_of(path: &Path, store: Option<&Store>) -> Result<Entry, SnapshotError> {
    let metadata = std::fs::symlink_metadata(path).map_err(io("cannot stat", path))?;
    let kind = metadata.file_type();
    Ok(if kind.is_symlink() {
        let target = std::fs::read_link(path).map_err(io("cannot read link", path))?;
        Entry::Symlink {
            target: target
                .to_str()
                .ok_or_else(|| SnapshotError::NotUtf8(path.display().to_string()))?
                .to_owned(),
        }
    } else if kind.is_dir() {
        Entry::Dir {
            mode: mode_of(&metadata),
        }
    } else {
        let (sha256, size) = hash_file(path, store)?;
        Entry::File {
            mode: mode_of(&metadata),
            size,
            sha256,
        }
    })
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
