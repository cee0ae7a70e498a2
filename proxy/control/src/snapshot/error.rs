//! The snapshot drivers' errors, each naming the path or command at fault.

use std::path::Path;

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
    /// A workspace step passed its time limit (`--workspace-step-timeout`).
    #[error(
        "the workspace {step} step timed out after {secs} s while processing {at} \
         (the limit is --workspace-step-timeout)"
    )]
    TimedOut {
        /// `snapshot`, `diff`, `rollback`, `keep` or `residue check`.
        step: &'static str,
        /// The limit, in seconds.
        secs: f64,
        /// The path or command being processed.
        at: String,
    },
    /// A path kept changing kind (file, link, FIFO…) while it was being looked at.
    #[error("cannot snapshot {0}: it kept changing kind while it was being read")]
    Unstable(String),
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

pub(super) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SnapshotError + 'a {
    move |source| SnapshotError::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}
