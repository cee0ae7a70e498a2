//! Walking and hashing a workspace without ever blocking on what is in it.
//!
//! Every path is classified by `lstat` (never followed): symlinks are recorded as links (a
//! symlink loop is just a link), and FIFOs, sockets and device nodes by kind and mode,
//! never opened. A regular file is opened with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, so a
//! path swapped for a FIFO or a link after the `lstat` neither blocks nor leads out, and
//! its `fstat` must still say "regular file". A file whose size, modification or change
//! time or inode differ after the read from before it changed while being read: it is
//! read again, up to [`READS`] times, then recorded with a note. A file that cannot be
//! read (no permission, I/O error) and a directory that cannot be listed are recorded
//! by kind and mode with a note saying why. See docs/run.md, "Special files".

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use super::index::{now_ns, Index, Stamp};
use super::objects::Batch;
use super::{io, mode_of, relative, Entry, SnapshotError, Step};

/// Reads of a file that keeps changing before it is recorded as changing.
pub const READS: usize = 3;

/// Path (relative, `/`-separated) -> what the snapshot could not capture, in words.
pub type Notes = BTreeMap<String, String>;

/// What a walk found.
#[derive(Debug, Default)]
pub(super) struct Walked {
    /// Path -> entry.
    pub entries: BTreeMap<String, Entry>,
    /// Path -> note.
    pub notes: Notes,
    /// The stamp index of the regular files found (read now or taken from the index).
    pub index: Index,
}

/// How a walk treats the content of regular files.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hashing<'a> {
    /// Keep each file's content as an object of this batch's store (reflinked where the
    /// filesystem can, else copied); the caller commits the batch.
    pub keep: Option<&'a Batch<'a>>,
    /// Take the hash of a file whose stamp this index trusts instead of reading it.
    pub index: Option<&'a Index>,
    /// Trust any entry of `index` whose stamp is the file's, racily clean or not: for a
    /// second look within one step at what that step's own walk read.
    pub exact: bool,
}

/// Walks `root` (not following symlinks), skipping `exclude`, treating contents as
/// `hashing` says. Checks `step`'s deadline at every path.
pub(super) fn walk(
    root: &Path,
    exclude: &[PathBuf],
    hashing: Hashing<'_>,
    step: &Step,
) -> Result<Walked, SnapshotError> {
    let started_ns = now_ns();
    let mut walked = Walked {
        index: Index::new(root),
        ..Walked::default()
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        step.at(dir.display());
        step.check()?;
        let listing = match std::fs::read_dir(&dir) {
            Ok(listing) => listing,
            Err(e) if dir != root => {
                let rel = relative(root, &dir)?;
                if let Some(Entry::Dir { unlisted, .. }) = walked.entries.get_mut(&rel) {
                    *unlisted = true;
                }
                walked.notes.insert(
                    rel,
                    format!("cannot be listed ({e}): what it holds is not in the snapshot"),
                );
                continue;
            }
            Err(e) => return Err(io("cannot list", &dir)(e)),
        };
        for item in listing {
            let item = item.map_err(io("cannot list", &dir))?;
            let path = item.path();
            if exclude.iter().any(|e| e == &path) {
                continue;
            }
            let rel = relative(root, &path)?;
            let Some((entry, stamp)) =
                entry_stamped(&path, &rel, hashing, step, &mut walked.notes)?
            else {
                continue;
            };
            match (&entry, stamp) {
                (Entry::File { sha256, .. }, Some(Found::Read(stamp))) => {
                    walked.index.record(&rel, stamp, sha256, started_ns)
                }
                (Entry::File { .. }, Some(Found::Indexed)) => {
                    if let Some(index) = hashing.index {
                        walked.index.keep(&rel, index);
                    }
                }
                _ => {}
            }
            if matches!(entry, Entry::Dir { .. }) {
                stack.push(path);
            }
            walked.entries.insert(rel, entry);
        }
    }
    Ok(walked)
}

/// How a regular file's hash was found.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// Read now; the file had this stamp throughout the read.
    Read(Stamp),
    /// Taken from the index, which trusted the file's stamp.
    Indexed,
}

/// The manifest entry of `path` (`rel` names it in `notes`); `None` when it is gone.
/// Never blocks on the path and never follows it; checks `step` while reading.
pub(super) fn entry_of(
    path: &Path,
    rel: &str,
    hashing: Hashing<'_>,
    step: &Step,
    notes: &mut Notes,
) -> Result<Option<Entry>, SnapshotError> {
    Ok(entry_stamped(path, rel, hashing, step, notes)?.map(|(entry, _)| entry))
}

/// [`entry_of`], with how a regular file's hash was found.
fn entry_stamped(
    path: &Path,
    rel: &str,
    hashing: Hashing<'_>,
    step: &Step,
    notes: &mut Notes,
) -> Result<Option<(Entry, Option<Found>)>, SnapshotError> {
    step.at(path.display());
    step.check()?;
    // A path whose kind changes between the lstat and the open is classified again.
    for _ in 0..READS {
        let metadata = match std::fs::symlink_metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("cannot stat", path)(e)),
        };
        let kind = metadata.file_type();
        let mode = mode_of(&metadata);
        if kind.is_file() {
            let now = Stamp::of(&metadata);
            let indexed = hashing.index.and_then(|index| {
                if hashing.exact {
                    index.lookup_exact(rel, &now)
                } else {
                    index.lookup(rel, &now)
                }
            });
            if let Some(sha256) = indexed.filter(|sha256| {
                hashing
                    .keep
                    .is_none_or(|batch| batch.store.object_path(sha256).exists())
            }) {
                notes.remove(rel);
                let entry = Entry::File {
                    mode,
                    size: now.size,
                    sha256: sha256.to_owned(),
                };
                return Ok(Some((entry, Some(Found::Indexed))));
            }
            match read_file(path, rel, mode, hashing.keep, step, notes)? {
                Read::Entry(entry, stamp) => return Ok(Some((entry, stamp.map(Found::Read)))),
                Read::Gone => return Ok(None),
                Read::NotRegular => continue,
            }
        }
        let entry = if kind.is_symlink() {
            let target = match std::fs::read_link(path) {
                Ok(target) => target,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
                Err(e) => return Err(io("cannot read link", path)(e)),
            };
            Entry::Symlink {
                target: target
                    .to_str()
                    .ok_or_else(|| SnapshotError::NotUtf8(path.display().to_string()))?
                    .to_owned(),
            }
        } else if kind.is_dir() {
            Entry::Dir {
                mode,
                unlisted: false,
            }
        } else if kind.is_fifo() {
            Entry::Fifo { mode }
        } else if kind.is_socket() {
            notes.insert(
                rel.to_owned(),
                "a socket: recorded, never opened; a rollback cannot recreate it".into(),
            );
            Entry::Socket { mode }
        } else if kind.is_char_device() || kind.is_block_device() {
            let rdev = metadata.rdev();
            let block = kind.is_block_device();
            notes.insert(
                rel.to_owned(),
                format!(
                    "a {} device node ({}:{}): recorded, never opened; a rollback does not recreate it",
                    if block { "block" } else { "character" },
                    rustix::fs::major(rdev),
                    rustix::fs::minor(rdev)
                ),
            );
            Entry::Device {
                mode,
                block,
                major: rustix::fs::major(rdev),
                minor: rustix::fs::minor(rdev),
            }
        } else {
            // Neither a regular file nor anything else lstat knows: look again.
            continue;
        };
        return Ok(Some((entry, None)));
    }
    Err(SnapshotError::Unstable(path.display().to_string()))
}

enum Read {
    /// What was read, with the file's stamp when it held still throughout the read.
    Entry(Entry, Option<Stamp>),
    Gone,
    /// It is no longer a regular file (swapped after the lstat).
    NotRegular,
}

/// The change stamp of an open file: size, mtime, ctime (ns) and inode.
fn stamp(metadata: &std::fs::Metadata) -> (u64, i64, i64, i64, i64, u64) {
    (
        metadata.len(),
        metadata.mtime(),
        metadata.mtime_nsec(),
        metadata.ctime(),
        metadata.ctime_nsec(),
        metadata.ino(),
    )
}

/// A test's hook on a read in progress.
#[cfg(test)]
type ReadHook = Box<dyn FnMut(&Path)>;

#[cfg(test)]
thread_local! {
    /// Test hook: called with the path after each read's first chunk, before the read
    /// goes on (a test writes to the file there, as a concurrent writer would).
    pub(super) static DURING_READ: std::cell::RefCell<Option<ReadHook>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
fn during_read(path: &Path) {
    DURING_READ.with(|hook| {
        if let Some(hook) = hook.borrow_mut().as_mut() {
            hook(path)
        }
    });
}

#[cfg(not(test))]
fn during_read(_: &Path) {}

fn read_file(
    path: &Path,
    rel: &str,
    mode: u32,
    store: Option<&Batch<'_>>,
    step: &Step,
    notes: &mut Notes,
) -> Result<Read, SnapshotError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags =
        rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let mut last = None;
    for _ in 0..READS {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Gone),
            // ELOOP: it became a symlink.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Ok(Read::NotRegular)
            }
            Err(e) => return Ok(Read::Entry(unreadable(path, rel, mode, &e, notes), None)),
        };
        let before = file.metadata().map_err(io("cannot stat", path))?;
        if !before.file_type().is_file() {
            return Ok(Read::NotRegular);
        }
        let mut object = match store {
            Some(store) => Some(store.new_object()?),
            None => None,
        };
        // A reflink (FICLONE, on btrfs and XFS) shares the blocks instead of copying them,
        // and the hash is then read from the clone. Elsewhere the content is copied while
        // it is hashed.
        let cloned = object
            .as_ref()
            .filter(|object| rustix::fs::ioctl_ficlone(object.as_file(), &file).is_ok())
            .map(|object| object.reopen())
            .transpose()
            .map_err(io("cannot read the copy of", path))?;
        let copying = cloned.is_none();
        // `Read` for `&File`: the clone when there is one, else the file itself.
        let mut source: &std::fs::File = cloned.as_ref().unwrap_or(&file);
        let mut hasher = sha2::Sha256::new();
        let mut buffer = vec![0u8; 64 * 1024];
        let mut size = 0u64;
        let mut first = true;
        loop {
            step.check()?;
            let n = match source.read(&mut buffer) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Ok(Read::Entry(unreadable(path, rel, mode, &e, notes), None)),
            };
            if n == 0 {
                break;
            }
            size += n as u64;
            hasher.update(&buffer[..n]);
            if let Some(object) = object.as_mut().filter(|_| copying) {
                std::io::Write::write_all(object, &buffer[..n]).map_err(io("cannot copy", path))?;
            }
            if std::mem::take(&mut first) {
                during_read(path);
            }
        }
        let after = file.metadata().map_err(io("cannot stat", path))?;
        let sha256: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if let (Some(store), Some(object)) = (store, object) {
            store.keep(object, &sha256);
        }
        let entry = Entry::File { mode, size, sha256 };
        if stamp(&before) == stamp(&after) && size == after.len() {
            notes.remove(rel);
            return Ok(Read::Entry(entry, Some(Stamp::of(&before))));
        }
        last = Some(entry);
    }
    notes.insert(
        rel.to_owned(),
        format!(
            "changed while being read, {READS} times: the snapshot holds the last read, \
             which may mix old and new content"
        ),
    );
    Ok(Read::Entry(
        last.unwrap_or(Entry::Unreadable { mode, size: 0 }),
        None,
    ))
}

fn unreadable(
    path: &Path,
    rel: &str,
    mode: u32,
    error: &std::io::Error,
    notes: &mut Notes,
) -> Entry {
    let size = std::fs::symlink_metadata(path)
        .map(|m| m.len())
        .unwrap_or(0);
    notes.insert(
        rel.to_owned(),
        format!(
            "cannot be read ({error}): recorded by mode and size; its content is not in the \
             snapshot and a rollback cannot restore it"
        ),
    );
    Entry::Unreadable { mode, size }
}
