//! The `dir` driver's stamp index: for each regular file of a workspace, the stamp it had
//! (device, inode, size, modification and change times in nanoseconds) when its content was
//! last hashed, and that hash. A walk that finds a file with the same stamp takes the hash
//! from the index instead of reading the file, as `git status` does with its index.
//!
//! Racily clean files: file times come from the kernel's coarse clock, so a file written
//! again within the same clock tick as the read that recorded it can keep its stamp. An
//! entry is therefore trusted only when the file's change time is at least [`RACY_MARGIN`]
//! older than the moment the walk that recorded it started; any write after that moment
//! gives a later change time, and the change time cannot be set from user space. Files
//! changed within the margin are simply hashed again next time. A clock stepped backwards
//! by more than the margin defeats this guard (as it does git's).
//!
//! The index is a cache: a missing, corrupt or foreign index only costs reading the files
//! again. It lives at `DATA/snapshots/index/WORKSPACE-DIGEST.json` (one per workspace
//! path) and is written through a temporary file and a rename after every `dir` snapshot.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// How much older than the recording walk a file's change time must be for its entry to
/// be trusted. File times tick at most every 10 ms (HZ=100); one second leaves room.
pub const RACY_MARGIN: Duration = Duration::from_secs(1);

/// A file's stamp: what changes whenever its content can have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i128,
    /// Change time (inode change), ns since the Unix epoch.
    pub ctime_ns: i128,
}

impl Stamp {
    /// The stamp of `metadata` (from `lstat` or `fstat`).
    pub fn of(metadata: &std::fs::Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.len(),
            mtime_ns: ns(metadata.mtime(), metadata.mtime_nsec()),
            ctime_ns: ns(metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// One file's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Indexed {
    /// The stamp when it was hashed.
    pub stamp: Stamp,
    /// SHA-256 of the content then, lowercase hex.
    pub sha256: String,
    /// When the walk that hashed it started, ns since the Unix epoch.
    pub walked_at_ns: i128,
}

impl Indexed {
    /// Whether this entry may stand for a file whose stamp is now `now` (see the module
    /// doc for the racy-clean rule).
    pub fn trusted_for(&self, now: &Stamp) -> bool {
        self.stamp == *now
            && self.stamp.ctime_ns < self.walked_at_ns - RACY_MARGIN.as_nanos() as i128
    }
}

/// The index of one workspace: relative path -> entry.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// The workspace it describes (a path-digest collision is then harmless).
    workspace: String,
    files: BTreeMap<String, Indexed>,
}

/// Now, in ns since the Unix epoch.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

impl Index {
    /// An empty index of `workspace`.
    pub fn new(workspace: &Path) -> Self {
        Self {
            workspace: workspace.display().to_string(),
            files: BTreeMap::new(),
        }
    }

    /// Where the index of `workspace` lives under the snapshot store `root`.
    pub fn path(root: &Path, workspace: &Path) -> PathBuf {
        let digest = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
        let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        root.join("index").join(format!("{name}.json"))
    }

    /// Loads the index of `workspace`; an empty one when there is none or it does not
    /// parse (it is only a cache).
    pub fn load(root: &Path, workspace: &Path) -> Self {
        std::fs::read(Self::path(root, workspace))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Self>(&bytes).ok())
            .filter(|index| index.workspace == workspace.display().to_string())
            .unwrap_or_else(|| Self::new(workspace))
    }

    /// The hash of `rel` when its entry may stand for stamp `now`.
    pub fn lookup(&self, rel: &str, now: &Stamp) -> Option<&str> {
        self.files
            .get(rel)
            .filter(|entry| entry.trusted_for(now))
            .map(|entry| entry.sha256.as_str())
    }

    /// The hash of `rel` when its stamp is exactly `now`, without the racy-clean rule: for
    /// a second look within one step at what a walk of that step just read.
    pub fn lookup_exact(&self, rel: &str, now: &Stamp) -> Option<&str> {
        self.files
            .get(rel)
            .filter(|entry| entry.stamp == *now)
            .map(|entry| entry.sha256.as_str())
    }

    /// Records that `rel`, with stamp `stamp`, hashed to `sha256` in a walk that started
    /// at `walked_at_ns`.
    pub fn record(&mut self, rel: &str, stamp: Stamp, sha256: &str, walked_at_ns: i128) {
        self.files.insert(
            rel.to_owned(),
            Indexed {
                stamp,
                sha256: sha256.to_owned(),
                walked_at_ns,
            },
        );
    }

    /// Keeps an entry of `from` for `rel` (a file the walk took from the index).
    pub fn keep(&mut self, rel: &str, from: &Index) {
        if let Some(entry) = from.files.get(rel) {
            self.files.insert(rel.to_owned(), entry.clone());
        }
    }

    /// Files indexed.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is indexed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Writes the index under the snapshot store `root` (temporary file and rename; not
    /// synced: losing it only costs a re-read).
    ///
    /// Errors: the I/O error of creating the directory, writing or renaming.
    pub fn save(&self, root: &Path) -> std::io::Result<()> {
        let path = Self::path(root, Path::new(&self.workspace));
        let parent = path.parent().unwrap_or(root);
        std::fs::create_dir_all(parent)?;
        let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
        std::io::Write::write_all(&mut tmp, &serde_json::to_vec(self).unwrap_or_default())?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}
