//! Torn files in a sled data directory, set aside before sled opens it, so that nothing
//! left on disk by a crash or a full disk stops a start (issue #38 item 3).
//!
//! sled 0.34's layout (`pagecache/snapshot.rs`, `pagecache/blob_io.rs`, `config.rs`):
//!
//! - `snap.<lsn as 16 hex digits>`: a snapshot of the page table, bytes then their
//!   length (8 bytes) and a CRC32 (4 bytes, little-endian) of the bytes. sled writes it as
//!   `snap.<lsn>.generating`, `fsync`s it and renames it, then removes older snapshots.
//!   At open it reads only the name that sorts last, and refuses to open ("Read corrupted
//!   data") when that file is 12 bytes or shorter or its CRC does not match. A
//!   `.generating` file sorts after the finished snapshot of the same lsn, so one left
//!   empty by `ENOSPC` or a crash bricks the directory. A snapshot is an index over the
//!   log in `db`, which is the record: without it sled replays the log.
//! - `blobs/<lsn in decimal>`: a value of its own (a log message above ≈128 KiB), a
//!   CRC32 (4 bytes, little-endian) of the rest, a kind byte, then the bytes; read when
//!   its page is. A blob cut short by `ENOSPC` or a crash fails its CRC.
//!
//! Each torn file is moved (never deleted) to `quarantine/<unix ms>/` in the data
//! directory (`quarantine/<unix ms>/blobs/` for blobs), with a warning naming it; the
//! ledger then opens from what is whole. A `.generating` snapshot is always torn: its
//! rename never happened, and the finished snapshot before it (if any) is still there.

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

/// The data directory's subdirectory that holds what was set aside.
pub(super) const QUARANTINE: &str = "quarantine";

/// One torn file that was moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Where it was, in the data directory.
    pub from: PathBuf,
    /// Where it is now, under `quarantine/`.
    pub to: PathBuf,
    /// Why it was taken as torn.
    pub why: &'static str,
}

/// Moves every torn snapshot and blob of sled data directory `dir` into
/// `dir/quarantine/<unix ms>/`, logging each; returns what it moved.
///
/// Errors: the I/O error of listing the directory or of moving a torn file (a file that
/// cannot be read is taken as torn, not as an error).
pub(super) fn set_aside_torn_files(dir: &Path) -> io::Result<Vec<SetAside>> {
    let mut torn = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let path = entry?.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if !name.starts_with("snap.") || name.ends_with(".in___motion") {
                    continue;
                }
                let why = if name.ends_with(".generating") {
                    Some("an unfinished snapshot (snap.*.generating)")
                } else {
                    snapshot_fault(&path)
                };
                if let Some(why) = why {
                    torn.push((path, why, false));
                }
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    }
    match std::fs::read_dir(dir.join("blobs")) {
        Ok(entries) => {
            for entry in entries {
                let path = entry?.path();
                if !path.is_file() {
                    continue;
                }
                if let Some(why) = blob_fault(&path) {
                    torn.push((path, why, true));
                }
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    if torn.is_empty() {
        return Ok(Vec::new());
    }
    let into = dir
        .join(QUARANTINE)
        .join(crate::model::now_ms().to_string());
    let mut moved = Vec::with_capacity(torn.len());
    for (from, why, blob) in torn {
        let folder = if blob {
            into.join("blobs")
        } else {
            into.clone()
        };
        std::fs::create_dir_all(&folder)?;
        let to = folder.join(from.file_name().unwrap_or_default());
        std::fs::rename(&from, &to)?;
        tracing::warn!(
            file = %from.display(),
            moved_to = %to.display(),
            reason = why,
            "ledger: set aside a torn file before opening"
        );
        moved.push(SetAside { from, to, why });
    }
    sync_dir(dir)?;
    Ok(moved)
}

/// Why the finished snapshot at `path` is torn, or `None` when its CRC holds.
fn snapshot_fault(path: &Path) -> Option<&'static str> {
    let Ok(bytes) = std::fs::read(path) else {
        return Some("an unreadable snapshot");
    };
    if bytes.len() <= 12 {
        return Some("a snapshot too short to hold its length and CRC");
    }
    let (body, tail) = bytes.split_at(bytes.len() - 12);
    let expected = tail[8..].try_into().map(u32::from_le_bytes).ok();
    (expected != Some(crc32fast::hash(body))).then_some("a snapshot whose CRC does not match")
}

/// Why the blob at `path` is torn, or `None` when its CRC holds.
fn blob_fault(path: &Path) -> Option<&'static str> {
    let mut bytes = Vec::new();
    if std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .is_err()
    {
        return Some("an unreadable blob");
    }
    if bytes.len() < 5 {
        return Some("a blob too short to hold its CRC and kind");
    }
    let (crc, rest) = bytes.split_at(4);
    let expected = crc.try_into().map(u32::from_le_bytes).ok();
    (expected != Some(crc32fast::hash(rest))).then_some("a blob whose CRC does not match")
}

/// `fsync` of directory `dir`, so that the moves survive a power loss.
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
