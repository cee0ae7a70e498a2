//! The read log: the sled store's read journal and read analyses, appended to one file per
//! run beside sled's own files instead of inserted into sled trees.
//!
//! Why: reads outnumber every other record by orders of magnitude (a busy agent makes tens
//! of thousands a second), and sled 0.34 keeps the pages it wrote recently in memory
//! whatever its `cache_capacity` says: under the pass load its resident memory followed
//! the ledger's size on disk (0.75–1.3× it; docs/performance.md, "Seventh round"). An
//! append to a file costs one `write(2)` per batch and leaves the bytes to the kernel's
//! page cache, which gives them back under memory pressure.
//!
//! Layout: `DIR/reads/<run>.log` holds the reads, `DIR/read-analyses/<run>.log` their
//! analyses (two [`ReadLog`]s: an effect's analysis reads every analysis of its run, and
//! never needs the run's reads, which are many more bytes). A run id of other than
//! `[A-Za-z0-9_-]` characters, or starting with `x`, is hex-encoded, `x<hex>.log`, and one
//! too long for that is named by its SHA-256, `x<hex>.sha256.log`. A file is a sequence of
//! records:
//!
//! | bytes | field |
//! |---:|---|
//! | 1 | kind: 1 = a batch of reads (a JSON array of [`Read`], consecutive `seq`s), 2 = one read's analysis |
//! | 8 | the run's last read sequence number once this record is written (little-endian) |
//! | 4 | reads in this record (0 for an analysis) |
//! | 4 | payload length |
//! | 4 | CRC-32 (IEEE, `crc32fast`) of the 17 bytes above and the payload |
//! | n | payload; an analysis is a u32 JSON length, the [`ReadContent`] JSON, then its fingerprints as little-endian u64s |
//! | 4 | the whole record's length, so the last record can be found from the file's end |
//!
//! Sequence numbers are handed out under the log's lock from the run's last record (read
//! from the file's end the first time a run is touched after opening) or the floor kept in
//! sled's `counters` (`reads/RUN`, written after each batch), whichever is higher, so no
//! number is handed out twice, even after a power cut lost a record that something in
//! sled already names. A record torn by a crash or a full disk fails its CRC: the
//! first touch after opening finds the last whole record by scanning forward and cuts the
//! file there (its numbers are not reused: a gap); a failed write drops the run's open
//! file, so the next touch checks the tail again. Reads are not promises to a client: a write goes to the kernel at once (a
//! killed process loses none), and [`ReadLog::sync`] makes every file written since the
//! last sync durable with `fdatasync`, which the store's flush calls, so every staging
//! flush carries the reads before it, as sled's flush did.
//!
//! A data directory from before the log keeps its reads in the `reads`, `read_content` and
//! `read_hashes` trees and its counter in `counters`: those are still read, before the
//! file, and new numbers continue after the counter.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::lineage::ReadContent;
use crate::model::{Read, RunId};

/// The directory of the reads' log.
pub(super) const READS: &str = "reads";
/// The directory of the analyses' log.
pub(super) const ANALYSES: &str = "read-analyses";
/// Record kind: a batch of reads.
const KIND_READS: u8 = 1;
/// Record kind: one read's analysis.
const KIND_CONTENT: u8 = 2;
/// Header bytes before the payload: kind, last seq, count, payload length, CRC.
const HEADER: usize = 1 + 8 + 4 + 4 + 4;
/// Trailer bytes after the payload: the record's length.
const TRAILER: usize = 4;
/// Longest run id (bytes) whose file is named by its hex encoding: `x`, 250 hex digits and
/// `.log` make 255 bytes, Linux's `NAME_MAX`.
const MAX_HEX_ID: usize = 125;
/// Most runs whose files stay open at once (each of the two logs; counted in
/// `airlock_net::limits::FDS_RESERVED`); past it one is closed (synced first when it has
/// unsynced writes) and reopened when next written.
const OPEN_RUNS: usize = 32;

/// The read log of one sled data directory.
#[derive(Debug)]
pub(super) struct ReadLog {
    dir: PathBuf,
    /// The sled store's `counters` tree, where a run journaled before the log counted its
    /// reads (`reads/RUN`): new numbers continue after it.
    counters: sled::Tree,
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    runs: HashMap<RunId, RunFile>,
    /// The log directory's entries changed since its last `fsync`.
    dir_dirty: bool,
}

/// One run's open file and where it stands.
#[derive(Debug)]
struct RunFile {
    file: Arc<File>,
    /// Bytes of whole records: readers read up to here.
    len: u64,
    /// The run's last read sequence number.
    last_seq: u64,
    /// Written since the last sync.
    dirty: bool,
}

/// One record as read back, its payload borrowed from the bytes read.
struct Record<'a> {
    kind: u8,
    last_seq: u64,
    count: u32,
    payload: &'a [u8],
}

impl ReadLog {
    /// The log in directory `name` of sled data directory `dir` ([`READS`] or
    /// [`ANALYSES`], made when first written), continuing the numbers of `counters` (the
    /// store's `counters` tree).
    pub(super) fn new(dir: &Path, name: &str, counters: sled::Tree) -> Self {
        Self {
            dir: dir.join(name),
            counters,
            state: Mutex::default(),
        }
    }

    /// The number `run`'s counter of reads reached (0 when it has none): the old store's
    /// counter, or the floor [`ReadLog::append_reads`] keeps.
    fn old_counter(&self, run: &RunId) -> io::Result<u64> {
        let key = counter_key(run);
        let value = self
            .counters
            .get(key.as_bytes())
            .map_err(io::Error::other)?;
        Ok(value
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    fn path(&self, run: &RunId) -> PathBuf {
        let id = run.as_str();
        // A plain id never starts with `x`, so it never takes another id's hex name.
        let plain = !id.is_empty()
            && id.len() <= 128
            && !id.starts_with('x')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let name = if plain {
            format!("{id}.log")
        } else if id.len() <= MAX_HEX_ID {
            let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
            format!("x{hex}.log")
        } else {
            // Too long to hex-encode within a file name's 255 bytes: its SHA-256.
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(id.as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("x{hex}.sha256.log")
        };
        self.dir.join(name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        // Every change to the state is completed before the guard drops, so a poisoned
        // lock's state is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `reads` (all of run `run`) as one record, numbering them after the run's
    /// last read. Returns the reads with their numbers.
    ///
    /// Errors: the I/O error of opening or writing the file; nothing of the record stays.
    pub(super) fn append_reads(&self, run: &RunId, mut reads: Vec<Read>) -> io::Result<Vec<Read>> {
        let mut state = self.lock();
        let entry = self.open(&mut state, run)?;
        let first = entry.last_seq + 1;
        for (i, read) in reads.iter_mut().enumerate() {
            read.seq = first + i as u64;
        }
        let payload = serde_json::to_vec(&reads).map_err(io::Error::other)?;
        let last = entry.last_seq + reads.len() as u64;
        match write_record(entry, KIND_READS, last, reads.len() as u32, &payload) {
            Ok(()) => entry.last_seq = last,
            Err(error) => {
                // The next touch opens the file again and checks its tail (a failed
                // cut-back would otherwise leave later records after torn bytes).
                state.runs.remove(run);
                return Err(error);
            }
        }
        // The floor of the run's numbers, in sled, once the record is written: whatever
        // sled makes durable later (an effect's lineage naming read `last`) comes after it
        // in sled's log, so a record a power cut took from the file never has its numbers
        // handed out again while something in sled names them.
        self.counters
            .insert(counter_key(run).as_bytes(), last.to_be_bytes().to_vec())
            .map_err(io::Error::other)?;
        Ok(reads)
    }

    /// Appends read `content.seq`'s analysis and its fingerprints.
    ///
    /// Errors: as [`ReadLog::append_reads`].
    pub(super) fn append_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> io::Result<()> {
        let json = serde_json::to_vec(content).map_err(io::Error::other)?;
        let mut payload = Vec::with_capacity(4 + json.len() + fingerprints.len() * 8);
        payload.extend_from_slice(&(json.len() as u32).to_le_bytes());
        payload.extend_from_slice(&json);
        for hash in fingerprints {
            payload.extend_from_slice(&hash.to_le_bytes());
        }
        let mut state = self.lock();
        let entry = self.open(&mut state, run)?;
        let last = entry.last_seq;
        let written = write_record(entry, KIND_CONTENT, last, 0, &payload);
        if written.is_err() {
            // As in `append_reads`: the tail is checked again at the next touch.
            state.runs.remove(run);
        }
        written
    }

    /// The run's entry, opening its file (and checking its tail) when it is not open.
    fn open<'s>(&self, state: &'s mut LogState, run: &RunId) -> io::Result<&'s mut RunFile> {
        if !state.runs.contains_key(run) {
            if state.runs.len() >= OPEN_RUNS {
                // Close one other run's file; its unsynced writes are synced first.
                if let Some(other) = state.runs.keys().next().cloned() {
                    if let Some(closed) = state.runs.remove(&other) {
                        if closed.dirty {
                            closed.file.sync_data()?;
                        }
                    }
                }
            }
            std::fs::create_dir_all(&self.dir)?;
            let path = self.path(run);
            let existed = path.exists();
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&path)?;
            let (len, last) = recover_tail(&file)?;
            let last_seq = last.unwrap_or(0).max(self.old_counter(run)?);
            state.dir_dirty |= !existed;
            state.runs.insert(
                run.clone(),
                RunFile {
                    file: Arc::new(file),
                    len,
                    last_seq,
                    dirty: false,
                },
            );
        }
        state
            .runs
            .get_mut(run)
            .ok_or_else(|| io::Error::other("read log entry vanished under its lock"))
    }

    /// `f` of the whole records of `run`'s file, in the order written (none when it has
    /// no file).
    fn with_records<T>(
        &self,
        run: &RunId,
        f: impl FnOnce(Vec<Record<'_>>) -> io::Result<T>,
    ) -> io::Result<T> {
        let path = self.path(run);
        // An open run's readers stop at its last whole record, which a writer may be
        // appending after; a file not open here has no writer (and its tail is checked).
        let (file, len) = {
            let mut state = self.lock();
            match state.runs.get(run) {
                Some(entry) => (Arc::clone(&entry.file), entry.len),
                None => {
                    if !path.exists() {
                        return f(Vec::new());
                    }
                    let entry = self.open(&mut state, run)?;
                    (Arc::clone(&entry.file), entry.len)
                }
            }
        };
        // A positioned read (`pread`): the descriptor is shared with the writer and other
        // readers, whose appends and reads move its offset.
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            match parse_record(&bytes[at..]) {
                Some((record, used)) => {
                    out.push(record);
                    at += used;
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "read log {} is damaged at byte {at} (a record fails its check)",
                            path.display()
                        ),
                    ))
                }
            }
        }
        f(out)
    }

    /// `run`'s reads in the file, in order.
    ///
    /// Errors: an I/O error, or `InvalidData` for a damaged record or one that does not parse.
    pub(super) fn reads(&self, run: &RunId) -> io::Result<Vec<Read>> {
        self.with_records(run, |records| {
            let mut out = Vec::new();
            for record in records.iter().filter(|r| r.kind == KIND_READS) {
                let batch: Vec<Read> = serde_json::from_slice(record.payload)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                out.extend(batch);
            }
            Ok(out)
        })
    }

    /// How many reads `run`'s file holds, from its record headers.
    ///
    /// Errors: as [`ReadLog::reads`].
    pub(super) fn read_count(&self, run: &RunId) -> io::Result<u64> {
        // Summed record by record: numbers cut off with a torn tail are never reused, so
        // they may leave a gap.
        self.with_records(run, |records| {
            Ok(records
                .iter()
                .filter(|r| r.kind == KIND_READS)
                .map(|r| u64::from(r.count))
                .sum())
        })
    }

    /// `run`'s read analyses in the file with their fingerprints, in the order written.
    ///
    /// Errors: as [`ReadLog::reads`].
    pub(super) fn contents(&self, run: &RunId) -> io::Result<Vec<(ReadContent, Vec<u64>)>> {
        self.with_records(run, |records| {
            let mut out = Vec::new();
            for record in records.iter().filter(|r| r.kind == KIND_CONTENT) {
                let bad =
                    || io::Error::new(io::ErrorKind::InvalidData, "a read analysis is cut short");
                let (len, rest) = record.payload.split_at_checked(4).ok_or_else(bad)?;
                let len = u32::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
                let (json, hashes) = rest.split_at_checked(len).ok_or_else(bad)?;
                let content: ReadContent = serde_json::from_slice(json)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                out.push((content, super::fingerprints_of(hashes)));
            }
            Ok(out)
        })
    }

    /// Bytes of every run's file (0 before the first read).
    ///
    /// Errors: the I/O error of listing the directory or reading a file's size.
    pub(super) fn size_on_disk(&self) -> io::Result<u64> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut total = 0;
        for entry in entries {
            match entry.and_then(|e| e.metadata()) {
                Ok(meta) => total += meta.len(),
                // A pruned run's file removed while listing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    /// Removes `run`'s file and its numbers' floor (a pruned run).
    ///
    /// Errors: the I/O error of removing it.
    pub(super) fn remove(&self, run: &RunId) -> io::Result<()> {
        let mut state = self.lock();
        state.runs.remove(run);
        // The run's numbers start again from 1 (nothing names its reads any more).
        self.counters
            .remove(counter_key(run).as_bytes())
            .map_err(io::Error::other)?;
        match std::fs::remove_file(self.path(run)) {
            Ok(()) => {
                state.dir_dirty = true;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Makes every write so far durable: `fdatasync` of each file written since the last
    /// sync, and `fsync` of the log's directory when its entries changed.
    ///
    /// Errors: the first I/O error; the files not synced stay marked for the next sync.
    pub(super) fn sync(&self) -> io::Result<()> {
        let (files, dir) = {
            let mut state = self.lock();
            let files: Vec<Arc<File>> = state
                .runs
                .values_mut()
                .filter(|e| e.dirty)
                .map(|e| {
                    e.dirty = false;
                    Arc::clone(&e.file)
                })
                .collect();
            (files, std::mem::take(&mut state.dir_dirty))
        };
        let result = files.iter().try_for_each(|f| f.sync_data()).and_then(|()| {
            if dir {
                File::open(&self.dir)?.sync_all()?;
            }
            Ok(())
        });
        if result.is_err() {
            // Sync them again next time.
            let mut state = self.lock();
            state.dir_dirty |= dir;
            for entry in state.runs.values_mut() {
                if files.iter().any(|f| Arc::ptr_eq(f, &entry.file)) {
                    entry.dirty = true;
                }
            }
        }
        result
    }
}

/// The `counters` key of `run`'s reads (the sled store's, `reads/RUN`).
fn counter_key(run: &RunId) -> String {
    format!("reads/{run}")
}

/// Appends one record to `entry`'s file; on a failed or short write the file is cut back
/// to its last whole record.
fn write_record(
    entry: &mut RunFile,
    kind: u8,
    last_seq: u64,
    count: u32,
    payload: &[u8],
) -> io::Result<()> {
    let total = HEADER + payload.len() + TRAILER;
    let mut record = Vec::with_capacity(total);
    record.push(kind);
    record.extend_from_slice(&last_seq.to_le_bytes());
    record.extend_from_slice(&count.to_le_bytes());
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&record);
    crc.update(payload);
    record.extend_from_slice(&crc.finalize().to_le_bytes());
    record.extend_from_slice(payload);
    record.extend_from_slice(&(total as u32).to_le_bytes());
    if let Err(error) = (&*entry.file).write_all(&record) {
        // Best effort: a later open would cut the torn record anyway.
        let _ = entry.file.set_len(entry.len);
        return Err(error);
    }
    entry.len += total as u64;
    entry.dirty = true;
    Ok(())
}

/// Parses the record at the start of `bytes`: the record and its length, or `None` when
/// it is cut short or fails its CRC.
fn parse_record(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let header = bytes.get(..HEADER)?;
    let kind = header[0];
    let last_seq = u64::from_le_bytes(header[1..9].try_into().ok()?);
    let count = u32::from_le_bytes(header[9..13].try_into().ok()?);
    let len = u32::from_le_bytes(header[13..17].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[17..21].try_into().ok()?);
    let payload = bytes.get(HEADER..HEADER + len)?;
    let total = HEADER + len + TRAILER;
    let trailer = bytes.get(HEADER + len..total)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[..17]);
    hasher.update(payload);
    let whole = hasher.finalize() == crc
        && u32::from_le_bytes(trailer.try_into().ok()?) as usize == total
        && matches!(kind, KIND_READS | KIND_CONTENT);
    let record = Record {
        kind,
        last_seq,
        count,
        payload,
    };
    whole.then_some((record, total))
}

/// Checks `file`'s last record (found by its trailer); when it is not whole, scans from the
/// start and cuts the file after the last whole record. Returns the length of whole
/// records and the last record's sequence number (`None` for an empty file).
fn recover_tail(file: &File) -> io::Result<(u64, Option<u64>)> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok((0, None));
    }
    if len >= (HEADER + TRAILER) as u64 {
        let mut trailer = [0u8; TRAILER];
        file.read_exact_at(&mut trailer, len - TRAILER as u64)?;
        let total = u64::from(u32::from_le_bytes(trailer));
        if total >= (HEADER + TRAILER) as u64 && total <= len {
            let mut bytes = vec![0u8; total as usize];
            file.read_exact_at(&mut bytes, len - total)?;
            if let Some((record, used)) = parse_record(&bytes) {
                if used as u64 == total {
                    return Ok((len, Some(record.last_seq)));
                }
            }
        }
    }
    // The tail is torn: keep the whole records before it.
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    let (mut at, mut last) = (0usize, None);
    while let Some((record, used)) = parse_record(&bytes[at..]) {
        at += used;
        last = Some(record.last_seq);
    }
    tracing::warn!(
        kept = at,
        dropped = len - at as u64,
        "the read log's last record was torn (a crash or a full disk); cut back to the last whole record"
    );
    file.set_len(at as u64)?;
    Ok((at as u64, last))
}

#[cfg(test)]
#[path = "read_log_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "read_log_race_tests.rs"]
mod race_tests;
