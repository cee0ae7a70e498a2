//! What a snapshot records: the manifest, its entries, and how two manifests compare.

use std::collections::BTreeMap;

use airlock_ledger::Changes;
use serde::{Deserialize, Serialize};

use super::{overlay, Commands, Notes};

/// One path of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
        /// It could not be listed: what it holds is unknown, and a restore leaves it alone.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unlisted: bool,
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
    /// A symbolic link (never followed; a loop is a link like any other).
    Symlink {
        /// Where it points.
        target: String,
    },
    /// A named pipe: recorded, never opened; a restore recreates it (`mkfifo`).
    Fifo {
        /// Permission bits.
        mode: u32,
    },
    /// A Unix socket: recorded, never opened; a restore cannot recreate one.
    Socket {
        /// Permission bits.
        mode: u32,
    },
    /// A device node: recorded, never opened; a restore does not recreate one.
    Device {
        /// Permission bits.
        mode: u32,
        /// A block device (else a character device).
        block: bool,
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// A regular file that could not be read (no permission, an I/O error): recorded by
    /// mode and size; its content is not in the snapshot.
    Unreadable {
        /// Permission bits.
        mode: u32,
        /// Size in bytes.
        size: u64,
    },
}

impl Entry {
    /// The kind in words, for notes and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Dir { .. } => "directory",
            Self::File { .. } => "file",
            Self::Symlink { .. } => "symlink",
            Self::Fifo { .. } => "FIFO",
            Self::Socket { .. } => "socket",
            Self::Device { .. } => "device node",
            Self::Unreadable { .. } => "unreadable file",
        }
    }
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
    /// The `overlay` driver's state directory and frozen layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<overlay::OverlayState>,
    /// Paths the snapshot recorded without capturing them whole (a socket, a device node,
    /// an unreadable or changing file, a directory that cannot be listed, a special file
    /// git does not track), each with why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: Notes,
}

impl Manifest {
    /// Counts of files and symlinks, and of special files when there are any, in words
    /// (`3 files, 1 symlinks, 1 FIFOs`).
    pub fn describe(&self) -> String {
        let count = |f: fn(&Entry) -> bool| self.entries.values().filter(|e| f(e)).count();
        let mut out = format!(
            "{} files, {} symlinks",
            count(|e| matches!(e, Entry::File { .. })),
            count(|e| matches!(e, Entry::Symlink { .. }))
        );
        for (name, n) in [
            ("FIFOs", count(|e| matches!(e, Entry::Fifo { .. }))),
            ("sockets", count(|e| matches!(e, Entry::Socket { .. }))),
            ("device nodes", count(|e| matches!(e, Entry::Device { .. }))),
            (
                "unreadable files",
                count(|e| matches!(e, Entry::Unreadable { .. })),
            ),
        ] {
            if n > 0 {
                out.push_str(&format!(", {n} {name}"));
            }
        }
        out
    }

    /// The notes as `PATH: why` lines.
    pub fn note_lines(&self) -> Vec<String> {
        note_lines(&self.notes)
    }
}

/// Notes as `PATH: why` lines, in path order.
pub fn note_lines(notes: &Notes) -> Vec<String> {
    notes
        .iter()
        .map(|(path, why)| format!("{path}: {why}"))
        .collect()
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

pub(super) fn same(a: &Entry, b: &Entry, exec_only: bool) -> bool {
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
        (Entry::Dir { mode: m1, .. }, Entry::Dir { mode: m2, .. }) => exec_only || m1 == m2,
        (a, b) => a == b,
    }
}
