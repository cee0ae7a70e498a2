//! Durable ledger of airlock's runs, effects, reads and decisions on sled, with their state machines.
//!
//! The ledger is the only writer of its trees; callers use this typed, synchronous API
//! (wrap calls in `spawn_blocking` from async code). Records are serde JSON. Every
//! operation that a client or the commit authority acts on (staging, decisions,
//! `releasing`, release outcomes) is flushed to disk before it returns.

mod approval;
mod denials;
mod effects;
mod error;
pub mod fingerprint;
mod lineage;
mod model;
mod workspace;

use std::path::Path;
use std::sync::Mutex;

use serde::{de::DeserializeOwned, Serialize};

pub use approval::{Approval, ApprovalMismatch};
pub use denials::{Denial, DENIALS_KEPT_PER_RUN};
pub use error::{LedgerError, Refused};
pub use lineage::{
    placeholder_edges, read_content as lineage_read_content, readiness, Edge,
    EdgeKind, EdgeSource, EffectLineage, Notable, ReadContent, Readiness,
};
pub use model::{
    now_ms, DecisionRecord, Dependency, Digest, Effect, EffectId, EffectNotes, EffectState, Header,
    HeaderText, IssuedPlaceholder, NewEffect, Placeholder, PlaceholderSpec, Read, ReleaseRecord,
    Run, RunId, RunState, ValueKind,
};
pub use model::{RunFlag, MAX_RUN_FLAGS};
pub use workspace::{
    Changes, DecisionKind, Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord,
};

/// Result of ledger operations.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// What the origin answered a release, for [`Ledger::record_release`].
#[derive(Debug, Clone, Default)]
pub struct ReleaseOutcome<'a> {
    /// The origin's status, when it answered.
    pub status: Option<u16>,
    /// The origin's response headers.
    pub headers: Vec<Header>,
    /// The captured response body.
    pub body: &'a [u8],
    /// Bytes of response body received in all.
    pub body_len: u64,
    /// Why the release failed, when it did.
    pub error: Option<String>,
    /// Placeholders of the effect with the real value found for each (or none).
    pub resolved: Vec<(String, Option<String>)>,
}

/// A reviewer's verdict on an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Release it at commit.
    Approve,
    /// Never send it.
    Reject,
}

/// The durable store. Cheap to share behind an `Arc`.
pub struct Ledger {
    db: sled::Db,
    /// The page cache asked of sled, in bytes.
    cache_bytes: u64,
    runs: sled::Tree,
    effects: sled::Tree,
    /// `run_id \0 seq(be u64)` -> effect id
    run_effects: sled::Tree,
    /// `run_id \0 seq(be u64)` -> Read
    reads: sled::Tree,
    /// digest -> bytes
    bodies: sled::Tree,
    /// `effects/run_id` and `reads/run_id` -> last sequence number (be u64)
    counters: sled::Tree,
    /// `run_id \0 value` -> IssuedPlaceholder
    placeholders: sled::Tree,
    /// `run_id \0 read seq` -> read content meta (notable values); hashes in `read_hashes`
    read_content: sled::Tree,
    /// `run_id \0 read seq` -> winnowed fingerprints, little-endian u64s, sorted
    read_hashes: sled::Tree,
    /// effect id -> EffectLineage
    effect_lineage: sled::Tree,
    /// run id -> WorkspaceRecord (`airlock run`)
    workspaces: sled::Tree,
    /// `run_id \0 seq(be u64)` -> Denial
    denials: sled::Tree,
    /// Serialises read-modify-write of run and effect records.
    write: Mutex<()>,
    /// Group commit: callers that arrive while a flush runs share the next one.
    flushes: Mutex<FlushState>,
    flushed: std::sync::Condvar,
}

/// Flush generations: `started` counts flushes begun, `completed` the last one finished.
#[derive(Debug, Default)]
struct FlushState {
    started: u64,
    completed: u64,
    running: bool,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

fn index_key(run: &RunId, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(run.0.len() + 9);
    key.extend_from_slice(run.0.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn run_prefix(run: &RunId) -> Vec<u8> {
    let mut key = run.0.as_bytes().to_vec();
    key.push(0);
    key
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| LedgerError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising these plain structs (strings, numbers, vectors) cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The ledger's page cache unless told otherwise: 64 MiB (sled's own default is 1 GiB).
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

impl Ledger {
    /// Opens (or creates) the ledger in directory `path`, with a page cache of
    /// [`DEFAULT_CACHE_BYTES`].
    ///
    /// Errors: [`LedgerError::Storage`] when sled cannot open it (for example another
    /// process holds it).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the ledger in directory `path`, keeping about `cache_bytes` of
    /// its pages in memory (sled's `cache_capacity`, counted by the pages' size on disk;
    /// older pages are read back from disk when needed). The cache fills as the ledger
    /// grows and then stops growing; resident memory ends above base + `cache_bytes`
    /// (sled's pages take more room in memory than on disk: with 64 MiB the soak reached
    /// ≈128 MiB), and sled's per-page bookkeeping still grows with the ledger's size beyond
    /// that (≈0.2 MiB per MB of ledger; docs/protocols.md "Known gaps").
    ///
    /// Errors: as [`Ledger::open`].
    pub fn open_with_cache(path: &Path, cache_bytes: u64) -> Result<Self> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(Some(200))
            .open()?;
        Ok(Self {
            runs: db.open_tree("runs")?,
            effects: db.open_tree("effects")?,
            run_effects: db.open_tree("run_effects")?,
            reads: db.open_tree("reads")?,
            bodies: db.open_tree("bodies")?,
            counters: db.open_tree("counters")?,
            placeholders: db.open_tree("placeholders")?,
            read_content: db.open_tree("read_content")?,
            read_hashes: db.open_tree("read_hashes")?,
            effect_lineage: db.open_tree("effect_lineage")?,
            workspaces: db.open_tree("workspaces")?,
            denials: db.open_tree("denials")?,
            db,
            cache_bytes,
            write: Mutex::new(()),
            flushes: Mutex::default(),
            flushed: std::sync::Condvar::new(),
        })
    }

    /// The page cache this ledger was opened with, in bytes.
    pub fn cache_capacity(&self) -> u64 {
        self.cache_bytes
    }

    /// Bytes the ledger's files take on disk (sled's `size_on_disk`).
    ///
    /// Errors: [`LedgerError::Storage`] when sled cannot read its files' sizes.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk()?)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guard protects no data of its own, so a poisoned lock is still usable.
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flushes every write so far to disk.
    ///
    /// Group commit: a caller needs a flush that *started* after it arrived (one already
    /// running may miss its writes). Callers that arrive while a flush runs wait for it,
    /// then one of them runs the next flush for all of them, so concurrent stagers share
    /// disk syncs instead of queueing one each.
    pub fn flush(&self) -> Result<()> {
        let mut state = self.flushes.lock().unwrap_or_else(|e| e.into_inner());
        let needed = state.started + 1;
        loop {
            if state.completed >= needed {
                return Ok(());
            }
            if !state.running {
                state.running = true;
                state.started += 1;
                let generation = state.started;
                drop(state);
                let result = self.db.flush();
                state = self.flushes.lock().unwrap_or_else(|e| e.into_inner());
                state.running = false;
                if result.is_ok() {
                    state.completed = generation;
                }
                self.flushed.notify_all();
                result?;
                if generation >= needed {
                    return Ok(());
                }
                continue;
            }
            state = self.flushed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn next_seq(&self, counter: &str, run: &RunId) -> Result<u64> {
        self.next_seqs(counter, run, 1)
    }

    /// Reserves `n` consecutive sequence numbers of `counter` for `run`; returns the last.
    fn next_seqs(&self, counter: &str, run: &RunId, n: u64) -> Result<u64> {
        let key = format!("{counter}/{run}");
        let next = self.counters.update_and_fetch(key.as_bytes(), |old| {
            let current = old
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0);
            Some((current + n).to_be_bytes().to_vec())
        })?;
        Ok(next
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(n))
    }

    // ----- runs -------------------------------------------------------------------------

    /// Creates an open run with a fresh random token (48 hex characters), flushed.
    pub fn create_run(&self, profile: Option<String>) -> Result<Run> {
        let run = Run {
            id: RunId::generate(),
            token: random_token(),
            state: RunState::Open,
            profile,
            created_at_ms: now_ms(),
            decisions: Vec::new(),
            flags: Vec::new(),
        };
        self.runs.insert(run.id.0.as_bytes(), encode(&run))?;
        self.flush()?;
        Ok(run)
    }

    /// The run with this id, if any.
    pub fn run(&self, id: &RunId) -> Result<Option<Run>> {
        match self.runs.get(id.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(id.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    fn must_run(&self, id: &RunId) -> Result<Run> {
        self.run(id)?.ok_or_else(|| LedgerError::NotFound {
            kind: "run",
            id: id.0.clone(),
        })
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<Run>> {
        self.runs
            .iter()
            .map(|item| {
                let (key, value) = item?;
                decode(&key, &value)
            })
            .collect()
    }

    /// The run whose id and token match, compared in constant time; `None` otherwise.
    pub fn authenticate(&self, run_id: &str, token: &str) -> Result<Option<Run>> {
        let Some(id) = RunId::parse(run_id) else {
            return Ok(None);
        };
        Ok(self
            .run(&id)?
            .filter(|run| constant_time_eq(run.token.as_bytes(), token.as_bytes())))
    }

    /// Adds `flag` to the run (kept up to [`MAX_RUN_FLAGS`]; later flags are dropped and
    /// `false` is returned). Flushed.
    ///
    /// Errors: [`LedgerError::NotFound`] for an unknown run, and storage faults.
    pub fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        let stored = {
            let _guard = self.lock();
            let mut run = self.must_run(id)?;
            if run.flags.len() >= MAX_RUN_FLAGS {
                false
            } else {
                run.flags.push(flag);
                self.put_run(&run)?;
                true
            }
        };
        self.flush()?;
        Ok(stored)
    }

    fn put_run(&self, run: &Run) -> Result<()> {
        self.runs.insert(run.id.0.as_bytes(), encode(run))?;
        Ok(())
    }

    /// Seals an open run (no new effects); a sealed run stays sealed. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] when the run is committing, committed or aborted.
    pub fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Sealed => return Ok(run),
            RunState::Open => {}
            state => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state,
                    action: "sealed",
                }
                .into())
            }
        }
        run.state = RunState::Sealed;
        run.decisions.push(DecisionRecord {
            kind: "seal".into(),
            by: by.into(),
            at_ms: now_ms(),
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }

    /// Writes the commit decision: seals the run if open, approves undecided effects when
    /// `approve_pending`, and moves the run to `committing`. Flushed before it returns.
    ///
    /// Returns `(run, true)` when the decision was written now or earlier and release must
    /// (still) proceed, `(run, false)` when the run already finished committing (a second
    /// commit is a no-op).
    ///
    /// Errors: [`Refused::Undecided`] when effects are `staged` and `approve_pending` is
    /// false; [`Refused::RunTransition`] for an aborted run.
    pub fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Committed | RunState::PartiallyCommitted => return Ok((run, false)),
            RunState::Committing => return Ok((run, true)),
            RunState::Aborted => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state: run.state,
                    action: "committed",
                }
                .into())
            }
            RunState::Open | RunState::Sealed => {}
        }
        let effects = self.effects_unlocked(id)?;
        let undecided: Vec<&Effect> = effects
            .iter()
            .filter(|e| e.state == EffectState::Staged)
            .collect();
        if !undecided.is_empty() && !approve_pending {
            return Err(Refused::Undecided {
                run: id.clone(),
                effects: undecided.iter().map(|e| e.id.clone()).collect(),
            }
            .into());
        }
        let at_ms = now_ms();
        for effect in undecided {
            let mut effect = effect.clone();
            effect.state = EffectState::Approved;
            effect.approval = Some(approval::Approval::of(
                &effect,
                &format!("{by} (approve_pending)"),
            ));
            effect.decisions.push(DecisionRecord {
                kind: "approve".into(),
                by: format!("{by} (approve_pending)"),
                at_ms,
            });
            self.put_effect(&effect)?;
        }
        if run.state == RunState::Open {
            run.decisions.push(DecisionRecord {
                kind: "seal".into(),
                by: by.into(),
                at_ms,
            });
        }
        run.state = RunState::Committing;
        run.decisions.push(DecisionRecord {
            kind: "commit".into(),
            by: by.into(),
            at_ms,
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok((run, true))
    }

    /// Ends a commit: `committed` when every approved effect was released,
    /// `partially_committed` when any failed, was skipped, or is unknown. Flushed.
    pub fn finish_commit(&self, id: &RunId) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        if run.state != RunState::Committing {
            return Ok(run);
        }
        let effects = self.effects_unlocked(id)?;
        let partial = effects.iter().any(|e| {
            matches!(
                e.state,
                EffectState::Failed
                    | EffectState::Unknown
                    | EffectState::Skipped
                    | EffectState::Approved
                    | EffectState::Releasing
            )
        });
        run.state = if partial {
            RunState::PartiallyCommitted
        } else {
            RunState::Committed
        };
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }

    /// Aborts an open or sealed run: every `staged` or `approved` effect becomes `discarded`;
    /// nothing is sent. Aborting an aborted run is a no-op. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] when a commit decision was already written.
    pub fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        match run.state {
            RunState::Aborted => return Ok(run),
            RunState::Open | RunState::Sealed => {}
            state => {
                return Err(Refused::RunTransition {
                    run: id.clone(),
                    state,
                    action: "aborted",
                }
                .into())
            }
        }
        let at_ms = now_ms();
        for mut effect in self.effects_unlocked(id)? {
            if effect.state.can_become(EffectState::Discarded) {
                effect.state = EffectState::Discarded;
                effect.state_reason = Some("run aborted".into());
                self.put_effect(&effect)?;
            }
        }
        run.state = RunState::Aborted;
        run.decisions.push(DecisionRecord {
            kind: "abort".into(),
            by: by.into(),
            at_ms,
        });
        self.put_run(&run)?;
        self.flush()?;
        Ok(run)
    }

    // ----- reads ------------------------------------------------------------------------

    /// Journals a read. Not flushed on its own (reads are lineage, not promises to a client);
    /// sled flushes within 200 ms, and every staging flush carries it too.
    pub fn journal_read(&self, mut read: Read) -> Result<Read> {
        read.seq = self.next_seq("reads", &read.run_id)?;
        self.reads
            .insert(index_key(&read.run_id, read.seq), encode(&read))?;
        Ok(read)
    }

    /// Journals several reads at once and returns them, in the order given, with their
    /// sequence numbers. The reads of one run get consecutive numbers and are stored as one record
    /// (one JSON array under the first one's key): a busy agent's reads then cost one
    /// counter update and one tree insert per batch instead of per read. Not flushed on
    /// its own, like [`Ledger::journal_read`].
    pub fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        // Group by run (remembering each read's place), keeping each run's reads in order.
        let count = reads.len();
        let mut groups: Vec<(RunId, Vec<usize>, Vec<Read>)> = Vec::new();
        for (place, read) in reads.into_iter().enumerate() {
            match groups.iter_mut().find(|(run, _, _)| *run == read.run_id) {
                Some((_, places, group)) => {
                    places.push(place);
                    group.push(read);
                }
                None => groups.push((read.run_id.clone(), vec![place], vec![read])),
            }
        }
        let mut out: Vec<Option<Read>> = (0..count).map(|_| None).collect();
        for (run, places, mut group) in groups {
            if group.len() == 1 {
                if let Some(read) = group.pop() {
                    out[places[0]] = Some(self.journal_read(read)?);
                }
                continue;
            }
            let last = self.next_seqs("reads", &run, group.len() as u64)?;
            let first = last + 1 - group.len() as u64;
            for (i, read) in group.iter_mut().enumerate() {
                read.seq = first + i as u64;
            }
            self.reads.insert(index_key(&run, first), encode(&group))?;
            for (place, read) in places.into_iter().zip(group) {
                out[place] = Some(read);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// A run's reads in order.
    pub fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        let mut out = Vec::new();
        for item in self.reads.scan_prefix(run_prefix(run)) {
            let (key, value) = item?;
            // A record is one read, or a batch of consecutive reads (a JSON array).
            if value.first() == Some(&b'[') {
                out.extend(decode::<Vec<Read>>(&key, &value)?);
            } else {
                out.push(decode(&key, &value)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
