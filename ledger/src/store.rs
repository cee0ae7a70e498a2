//! The storage trait: what every ledger backend (sled, the in-memory model, PostgreSQL)
//! provides, grouped by concern, with the contracts callers rely on.
//!
//! # Contracts (every backend; the `conformance` module checks them)
//!
//! - **Atomic against other callers.** Each method takes effect entirely or not at all
//!   as other callers see it. A refusal changes nothing. A *storage fault* (an `Err`
//!   that is not a refusal) may leave part of a multi-record write visible and not
//!   durable, and may leave a sequence number unused: the sled store writes record by
//!   record (a staged effect's counter, body, record and index; a commit's effects, then
//!   its run), so after a fault callers fail stop rather than guess; the in-memory model
//!   never faults. A backend with transactions (PostgreSQL) gives all-or-nothing.
//! - **Refusals change nothing.** [`crate::Refused`] comes from the pure rules in
//!   [`crate::rules`], which every backend calls: the same request in the same state is
//!   refused by every backend, and leaves every record as it was.
//! - **Durable on return.** A method documented "durable" has its write on disk
//!   (fsync-class for a database) before it returns `Ok`: the client may be answered and
//!   the commit authority may act on it. Journal methods (reads, denials, lineage
//!   analyses) are not durable on their own; the next durable write carries them.
//! - **At most once.** [`EffectStore::mark_releasing`] succeeds at most once per effect,
//!   even with several writers: the second caller gets [`crate::Refused::EffectTransition`]
//!   (or [`crate::LedgerError::Conflict`] to retry, which then refuses).
//! - **Gap-free sequence numbers.** Per run, effects, reads and denials are numbered
//!   1, 2, 3 … in the order the store accepted them, with no repeats, and with no gaps
//!   unless a storage fault interrupted a write (above).
//! - **Identifiers.** Runs are `run_<ulid>`, effects `eff_<ulid>` ([`crate::RunId`],
//!   [`crate::EffectId`]); listings "oldest first" are in identifier order (ULIDs created
//!   in the same millisecond sort in random order).
//! - **Retention.** [`RunStore::prune_run`] removes every record of one *finished* run
//!   ([`crate::rules::retention`]) and nothing of any other run; a body stays while an
//!   effect of another run (its request or a release's response) references it.
//! - **Recovery reads an index.** [`EffectStore::recover`] finds the effects left
//!   `releasing` through an index kept in the same write as each effect's state change
//!   (sled: tree `in_flight`), never by scanning every effect, so start-up does not grow
//!   with the ledger.
//! - **Leased and fenced release.** Several control instances may share one store; a
//!   run's release lease ([`LeaseStore`]) says which of them releases it now. The store's
//!   clock decides expiry. The writes of a release carry the lease (the `_fenced`
//!   methods) and are refused with [`crate::Refused::StaleLease`] once a newer lease
//!   exists, so a holder that was paused past its expiry records nothing after a takeover.
//!   A takeover turns the run's effects left `releasing` into `unknown` in the same write.
//! - **Notifications.** After each durable write the store sends the [`Change`]s it made
//!   to every [`Store::subscribe`]r; see [`crate::change`]. Changes of one writer arrive
//!   in the order of its writes; changes of concurrent writers may interleave.
//!
//! The trait is dyn-compatible: hold an `Arc<dyn Store>`. Methods of the concern traits
//! are callable on `dyn Store` without importing them.

use std::sync::mpsc::Receiver;

use crate::audit::{AuditEntry, AuditPage, NewAuditEntry};
use crate::change::Change;
use crate::denials::Denial;
use crate::lease::Lease;
use crate::lineage::{placeholder_edges, Edge, EffectLineage, ReadContent};
use crate::model::{
    Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder, NewEffect, Read, Run,
    RunFlag, RunId,
};
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{ReleaseOutcome, Result, Settlement, Verdict};

/// A ledger backend: every concern, plus flushing, sizes and change notifications.
pub trait Store:
    RunStore
    + EffectStore
    + LeaseStore
    + JournalStore
    + LineageStore
    + WorkspaceStore
    + AuditStore
    + std::fmt::Debug
{
    /// Makes every write so far durable (journal writes included). Concurrent callers may
    /// share one flush (group commit).
    ///
    /// Errors: [`crate::LedgerError::Storage`].
    fn flush(&self) -> Result<()>;

    /// Bytes the backend's files take on disk (0 for a backend without files).
    ///
    /// Errors: [`crate::LedgerError::Storage`] when the size cannot be read.
    fn size_on_disk(&self) -> Result<u64>;

    /// The page cache the backend was opened with, in bytes (0 when it has none).
    fn cache_capacity(&self) -> u64;

    /// A new subscriber to this store's changes ([`crate::change`]): every durable write
    /// from now on sends its [`Change`]s, in order. Drop the receiver to unsubscribe.
    fn subscribe(&self) -> Receiver<Change>;

    /// Whether the backend can write now, and its fault counts; `/healthz` and `/metrics`
    /// report it. A backend that never faults (the in-memory model) is always writable.
    fn health(&self) -> Health {
        Health::default()
    }

    /// Whether a read's journal entry and its lineage can be written now, asked before a
    /// read is passed (a read that cannot be journaled is refused, never passed
    /// unjournaled: docs/durability.md). Cheap: a backend may answer from a check at most
    /// 50 ms old. The default (a backend with no floor) is always `Ok`.
    ///
    /// Errors: [`crate::LedgerError::LowSpace`] below the free-space floor,
    /// [`crate::LedgerError::Degraded`] while the store heals from a fault.
    fn journal_room(&self) -> Result<()> {
        Ok(())
    }
}

/// A backend's health ([`Store::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Whether durable writes can succeed now.
    pub writable: bool,
    /// Why not, as a stable code: `ledger_degraded` (a storage fault; reopening) or
    /// `ledger_low_space` (below `--ledger-min-free-mib`); `None` when writable.
    pub reason: Option<&'static str>,
    /// The fault or the space figures, for people.
    pub detail: Option<String>,
    /// Storage faults seen since the process started.
    pub storage_faults: u64,
    /// Times the backend was reopened and proved writable after a fault.
    pub recoveries: u64,
    /// Torn files (a sled snapshot left unfinished, a blob cut short) set aside by this
    /// process's opens of the backend, which then opened from what was whole.
    pub repaired_files: u64,
}

impl Default for Health {
    /// Writable, no faults.
    fn default() -> Self {
        Self {
            writable: true,
            reason: None,
            detail: None,
            storage_faults: 0,
            recoveries: 0,
            repaired_files: 0,
        }
    }
}

/// A page request of [`RunStore::runs_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPage {
    /// The cursor: the last run id of the previous page (`None` for the first page).
    pub after: Option<RunId>,
    /// Most runs returned.
    pub limit: usize,
    /// Newest first (descending identifier order) instead of oldest first.
    pub newest_first: bool,
}

/// What [`RunStore::prune_run`] removed, by kind (counts of records as the API lists
/// them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    /// Effects removed.
    pub effects: u64,
    /// Reads removed.
    pub reads: u64,
    /// Denials removed.
    pub denials: u64,
    /// Placeholders removed.
    pub placeholders: u64,
    /// Bodies removed: referenced by no effect of another run.
    pub bodies_removed: u64,
    /// Bodies of the run kept because an effect of another run references them.
    pub bodies_kept: u64,
}

/// Runs: one agent execution, one transaction.
pub trait RunStore: Send + Sync + 'static {
    /// Creates an open run; its token is derived from its id ([`crate::RunTokens::token_for`])
    /// and not stored. Durable.
    /// Sends [`Change::RunChanged`].
    ///
    /// Errors: storage faults.
    fn create_run(&self, profile: Option<String>) -> Result<Run> {
        self.create_run_from(profile, None)
    }

    /// [`RunStore::create_run`] for a run whose connections are known by their source
    /// address (`source`, an address or CIDR as text, stored as given; the caller checks
    /// it parses and overlaps no open run's).
    ///
    /// Errors: storage faults.
    fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run>;

    /// The run with this id, if any.
    fn run(&self, id: &RunId) -> Result<Option<Run>>;

    /// Every run, oldest first (identifier order). Loads every run: listings a person
    /// pages through use [`RunStore::runs_page`].
    fn runs(&self) -> Result<Vec<Run>>;

    /// One page of runs in identifier order: at most `page.limit` runs whose id is after
    /// `page.after` (strictly; from the first run when `None`), oldest first, or, with
    /// `page.newest_first`, before `page.after` and newest first. Reads only the runs it
    /// returns (plus index steps), never every run. Following pages (`after` = the last
    /// id of the previous page) until one comes back shorter than `limit` visits every
    /// run that existed throughout, exactly once, in order; `after` need not be an
    /// existing run (a pruned one is fine). A `limit` of 0 returns nothing.
    ///
    /// Errors: storage faults.
    fn runs_page(&self, page: &RunPage) -> Result<Vec<Run>>;

    /// Removes every record of a finished run ([`crate::rules::retention::check_finished`],
    /// judged on the records under the write lock): the run, its effects and their
    /// sequence index, reads, read analyses and fingerprints, effect lineage,
    /// placeholders, denials, workspace record, per-run counters, recovery-index
    /// entries and its release lease record ([`LeaseStore`]), and each body (request or response) no effect of another run
    /// references; a body another run references is kept. Afterwards the run is unknown
    /// ([`RunStore::run`] is `None`, [`EffectStore::effects`] is `NotFound`, reads and
    /// denials are empty) and every other run reads exactly as before. Pruning a run
    /// that a fault interrupted mid-way again finishes it (the run record goes last).
    /// Durable. Sends [`Change::RunChanged`] and [`Change::PlaceholdersIssued`] (caches of
    /// the run drop it).
    ///
    /// Errors: [`crate::Refused::NotFinished`] for an open, sealed or committing run, a
    /// partially committed one with an effect `releasing`, `approved` or `unknown`, or
    /// an unfinished workspace decision (nothing removed);
    /// [`crate::LedgerError::NotFound`] for an unknown run.
    fn prune_run(&self, id: &RunId) -> Result<Pruned>;

    /// The run whose id and token match ([`crate::RunTokens::verify`]: the token derived
    /// from the id with `tokens`' key, or the keyed hash of an old run's token), compared
    /// in constant time; `None` for a malformed id, an unknown run or a wrong token.
    fn authenticate(
        &self,
        tokens: &crate::RunTokens,
        run_id: &str,
        token: &str,
    ) -> Result<Option<Run>> {
        let Some(id) = RunId::parse(run_id) else {
            return Ok(None);
        };
        Ok(self.run(&id)?.filter(|run| tokens.verify(run, token)))
    }

    /// Rewrites every run record that still holds a plaintext token (written before tokens
    /// were derived; [`crate::tokens`]) to hold only its keyed hash under `tokens`' key
    /// ([`crate::RunTokens::seal`]), so that token keeps working and is no longer stored.
    /// Idempotent; run by the server when it opens the ledger. Returns how many records
    /// were rewritten. Durable. Sends no change: nothing a reader shows differs.
    ///
    /// Errors: storage faults.
    fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize>;

    /// Adds `flag` to the run (kept up to [`crate::MAX_RUN_FLAGS`]; later flags are dropped
    /// and `false` is returned). Durable.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] for an unknown run, and storage faults.
    fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool>;

    /// Seals an open run (no new effects); a sealed run stays sealed. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] when the run is committing, committed or
    /// aborted; [`crate::LedgerError::NotFound`].
    fn seal(&self, id: &RunId, by: &str) -> Result<Run>;

    /// Writes the commit decision ([`crate::rules::begin_commit`]): seals the run if open,
    /// approves undecided effects when `approve_pending`, and moves the run to
    /// `committing`, all in one atomic write. Durable. Sends [`Change::RunClosed`].
    ///
    /// Returns `(run, true)` when the decision was written now or earlier and release must
    /// (still) proceed, `(run, false)` when the run already finished committing.
    ///
    /// Errors: [`crate::Refused::Undecided`] when effects are `staged` and
    /// `approve_pending` is false; [`crate::Refused::RunTransition`] for an aborted run.
    fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)>;

    /// Ends a commit: `committed` when every approved effect was released,
    /// `partially_committed` otherwise; a run not `committing` is returned unchanged.
    /// Durable.
    ///
    /// Errors: [`crate::LedgerError::NotFound`].
    fn finish_commit(&self, id: &RunId) -> Result<Run>;

    /// Aborts an open or sealed run: every `staged` or `approved` effect becomes
    /// `discarded`; nothing is sent. Aborting an aborted run is a no-op. Durable. Sends
    /// [`Change::RunClosed`].
    ///
    /// Errors: [`crate::Refused::RunTransition`] when a commit decision was already written.
    fn abort(&self, id: &RunId, by: &str) -> Result<Run>;
}

/// Effects: staging, reviewers' verdicts, release bookkeeping and recovery.
pub trait EffectStore: Send + Sync + 'static {
    /// [`EffectStore::stage_with`] without an adapter's notes.
    fn stage(&self, new: NewEffect<'_>) -> Result<Effect> {
        self.stage_with(new, EffectNotes::default())
    }

    /// Stages an effect: its body stored by SHA-256 digest, the next effect sequence
    /// number of its run, placeholders allocated for its synthetic response, `notes`
    /// kept. Durable: only after this returns may the client be answered. Sends
    /// [`Change::EffectChanged`], and [`Change::PlaceholdersIssued`] when it issued any.
    ///
    /// Errors: [`crate::Refused::RunNotOpen`] unless the run is open;
    /// [`crate::LedgerError::NotFound`] for an unknown run.
    fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect>;

    /// The effect with this id, if any.
    fn effect(&self, id: &EffectId) -> Result<Option<Effect>>;

    /// A run's effects in staging order (by sequence number).
    ///
    /// Errors: [`crate::LedgerError::NotFound`] for an unknown run.
    fn effects(&self, run: &RunId) -> Result<Vec<Effect>>;

    /// A stored body (of an effect or a release's response) by digest.
    fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>>;

    /// Records a reviewer's verdict ([`crate::rules::decide_effect`]). Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`] or [`crate::Refused::RunTransition`];
    /// [`crate::LedgerError::NotFound`].
    fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect>;

    /// Records a reviewer's own approval of this one effect, shown the `review` flows in
    /// `flows` ([`crate::rules::approve_explicitly`]). Durable.
    ///
    /// Errors: as [`Self::decide_effect`].
    fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect>;

    /// Marks an approved effect `releasing`, durably, just before it is sent. Succeeds at
    /// most once per effect.
    ///
    /// Errors: [`crate::Refused::EffectTransition`] unless the effect is `approved`.
    fn mark_releasing(&self, id: &EffectId) -> Result<Effect>;

    /// Records the outcome of a release: `released` when `outcome.error` is `None`, else
    /// `failed`; the response body stored by SHA-256 digest; resolved placeholders get
    /// their real values. Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`] unless the effect is `releasing`
    /// (or `approved`, for `failed`).
    fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect>;

    /// Ends an approved effect without sending it: `to` is `skipped` or `failed`; or
    /// rejects a staged or approved effect a `block` flow forbids (`rejected`, with
    /// `reason`; [`crate::rules::settle_unsent`]). Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`].
    fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect>;

    /// Recovery after a restart: every effect left `releasing` becomes `unknown`, except
    /// those of runs whose release lease ([`LeaseStore`]) is live now: another instance
    /// may be releasing them, and it records their outcome (or, once its lease expires,
    /// the next [`LeaseStore::acquire_lease`] makes them `unknown`). Returns the effects
    /// changed (identifier order). Durable. With one process and no leases this is every
    /// `releasing` effect, as before leases existed. Reads the index of effects in
    /// `releasing`, which every write of an effect keeps in step (an effect enters it no
    /// later than its record becomes `releasing` and leaves it no earlier than its record
    /// leaves `releasing`), so the work is proportional to the effects in flight, not to
    /// the ledger; a backend opening storage written before the index existed builds it
    /// once.
    fn recover(&self) -> Result<Vec<Effect>>;

    /// A reviewer's retry of an effect ([`crate::rules::outcome::retry`]): a `failed`
    /// effect of which provably nothing was sent, or an `unknown` one whose origin
    /// honours its idempotency key, becomes `approved` again; its skipped dependents are
    /// requeued; a finished commit goes back to `committing`. Effects and run in one
    /// atomic write. Durable. Returns the changed effects, the retried one first. At most
    /// once per attempt: a second retry is refused until the release ends.
    ///
    /// Errors: [`crate::Refused::NotRetriable`], [`crate::Refused::EffectTransition`],
    /// [`crate::Refused::RunTransition`]; [`crate::LedgerError::NotFound`].
    fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>>;

    /// A reviewer's settlement of an `unknown` effect after checking its origin
    /// ([`crate::rules::outcome::settle`]): delivered makes it `released` (with the real
    /// values given), requeues its skipped dependents and puts a finished commit back to
    /// `committing`; not delivered makes it `failed` and retriable. Effects and run in one
    /// atomic write. Durable. Returns the changed effects, the settled one first.
    ///
    /// Errors: [`crate::Refused::EffectTransition`], [`crate::Refused::BadSettlement`],
    /// [`crate::Refused::RunTransition`]; [`crate::LedgerError::NotFound`].
    fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>>;
}

/// Release leases and the fenced writes of a release (module [`crate::lease`] has the rules
/// and the SQL each one is): one record per run ever leased, `(run id, holder, token,
/// expires_at)`; the store's clock (ms since the Unix epoch) decides expiry. Every method
/// is one atomic write, durable, and refusals change nothing.
///
/// In SQL: one table `release_leases (run_id PRIMARY KEY, holder, token BIGINT,
/// expires_at_ms BIGINT)`, `now` the database's clock; `acquire_lease` is one
/// transaction of the conditional upsert in [`crate::lease::acquire`] plus `UPDATE
/// effects SET state = 'unknown', state_reason = [`crate::rules::RECOVERY_REASON`] WHERE run_id =
/// $run AND state = 'releasing' RETURNING …`; each fenced write adds the condition of
/// [`crate::lease::check_fence`] to its own statement (or checks the row `FOR SHARE` in
/// its transaction), and `recover` skips `run_id IN (SELECT run_id FROM release_leases
/// WHERE expires_at_ms > now)`.
///
/// The control plane's commit authority acquires a run's lease before it releases or
/// settles anything of it, renews it at a third of its TTL, and gives it up when done.
/// A holder id names one process: a process must not acquire a lease concurrently with
/// itself (the control plane serialises each run with its in-process commit lock).
pub trait LeaseStore: EffectStore {
    /// Grants `holder` the release lease of `run` for `ttl_ms` (at least 1) from the
    /// store's clock, with the next fencing token (1 for the run's first lease, then one
    /// more per grant; never reused). Granted when the run has no lease, its lease has
    /// expired or was given up, or `holder` itself holds it (its previous process died).
    /// In the same atomic write every effect of the run left `releasing` becomes
    /// `unknown` (as [`EffectStore::recover`] does after a crash: never re-sent blindly).
    /// Durable. Returns the lease and the effects made `unknown` (staging order), and
    /// sends [`Change::EffectChanged`] for each of them.
    ///
    /// Errors: [`crate::Refused::LeaseHeld`] (holder and expiry) while another holder's
    /// lease is live; [`crate::LedgerError::NotFound`] for an unknown run.
    fn acquire_lease(&self, run: &RunId, holder: &str, ttl_ms: u64)
        -> Result<(Lease, Vec<Effect>)>;

    /// Extends `lease` to `ttl_ms` from the store's clock. Only the run's newest lease,
    /// still live, is renewed: an expired one is lost even when nobody took it. Durable.
    ///
    /// Errors: [`crate::Refused::StaleLease`].
    fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease>;

    /// Gives `lease` up: it expires now (its token stays, so the next grant gets a
    /// higher one). Returns `false`, changing nothing, when `lease` is not the run's
    /// newest. Durable.
    ///
    /// Errors: storage faults.
    fn give_up_lease(&self, lease: &Lease) -> Result<bool>;

    /// The run's live lease, if any (`None` when never leased, expired or given up).
    fn lease(&self, run: &RunId) -> Result<Option<Lease>>;

    /// [`EffectStore::mark_releasing`] under `fence`: also refused unless `fence` is the
    /// effect's run's newest lease and is live (a send must not start on an expired
    /// lease). Durable; same change notification.
    ///
    /// Errors: [`crate::Refused::StaleLease`], then as [`EffectStore::mark_releasing`].
    fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect>;

    /// [`EffectStore::record_release`] under `fence`: refused unless `fence` is the
    /// effect's run's newest lease (live or expired: an outcome learnt before anyone took
    /// over is kept). Durable.
    ///
    /// Errors: [`crate::Refused::StaleLease`], then as [`EffectStore::record_release`].
    fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect>;

    /// [`EffectStore::settle_unsent`] under `fence` (newest lease, live or expired).
    /// Durable.
    ///
    /// Errors: [`crate::Refused::StaleLease`], then as [`EffectStore::settle_unsent`].
    fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect>;

    /// [`RunStore::finish_commit`] under `fence` (newest lease of `run`, live or
    /// expired). Durable.
    ///
    /// Errors: [`crate::Refused::StaleLease`]; [`crate::LedgerError::NotFound`].
    fn finish_commit_fenced(&self, run: &RunId, fence: &Lease) -> Result<Run>;
}

/// The journal: reads and denials, numbered per run, not durable on their own.
pub trait JournalStore: Send + Sync + 'static {
    /// Journals a read with the next read sequence number of its run (the run need not
    /// exist). Not durable on its own.
    fn journal_read(&self, read: Read) -> Result<Read>;

    /// Journals several reads and returns them, in the order given, with their sequence
    /// numbers; the reads of one run get consecutive numbers. Not durable on its own.
    fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>>;

    /// A run's reads in sequence order (empty for an unknown run).
    fn reads(&self, run: &RunId) -> Result<Vec<Read>>;

    /// Journals a denial; returns its sequence number. Past
    /// [`crate::DENIALS_KEPT_PER_RUN`] the number still counts but nothing is stored. Not
    /// durable on its own.
    fn journal_denial(&self, denial: Denial) -> Result<u64>;

    /// A run's stored denials in sequence order.
    fn denials(&self, run: &RunId) -> Result<Vec<Denial>>;
}

/// Lineage: placeholders issued, analyses of reads and effects, edges.
pub trait LineageStore: EffectStore {
    /// Every placeholder issued in `run`, in value order (bytewise).
    fn placeholders(&self, run: &RunId) -> Result<Vec<IssuedPlaceholder>>;

    /// Whether other processes may issue placeholders in this store's runs, so a
    /// process's copy of [`LineageStore::placeholders`] may be stale at any moment and
    /// must be checked with [`LineageStore::placeholder_count`] before it is trusted.
    /// `false` (the default) for a store with one writer process (sled, memory): every
    /// placeholder was issued through this process, which then knows of it
    /// (docs/fleet.md, "Bounds").
    fn placeholders_shared(&self) -> bool {
        false
    }

    /// How many placeholders `run` has now (0 for an unknown or pruned run), as of a
    /// read that sees every write committed before the call began, or `None` when
    /// [`LineageStore::placeholders_shared`] is `false`: then the caller's copy is
    /// authoritative and nothing is read (no I/O).
    ///
    /// A run's placeholders are only ever added, with values unique in the run, until a
    /// prune removes them all, so a copy of the list as long as this count is the list:
    /// a caller reloads on any difference (more: issued elsewhere; fewer: pruned).
    fn placeholder_count(&self, _run: &RunId) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Stores the analysis of read `content.seq`'s response with its winnowed
    /// `fingerprints` (sorted; computed by the caller with [`crate::fingerprint`]),
    /// replacing an earlier one. Not durable on its own.
    fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()>;

    /// The analyses of `run`'s reads with their fingerprints, in read order.
    fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>>;

    /// Stores an effect's content analysis and read -> effect edges, replacing an earlier
    /// one. Not durable on its own.
    fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()>;

    /// An effect's content analysis, once it finished.
    fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>>;

    /// Every edge of a run: for each effect in staging order, its effect -> effect edges
    /// (placeholders), then its stored read -> effect edges.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] for an unknown run.
    fn edges(&self, run: &RunId) -> Result<Vec<Edge>> {
        let mut out = Vec::new();
        for effect in self.effects(run)? {
            out.extend(placeholder_edges(&effect));
            if let Some(lineage) = self.effect_lineage(&effect.id)? {
                out.extend(lineage.edges);
            }
        }
        Ok(out)
    }
}

/// The workspace side of a run (`airlock run`).
pub trait WorkspaceStore: Send + Sync + 'static {
    /// The workspace of a run, if one was attached.
    fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>>;

    /// Attaches a workspace and its starting snapshot to a run; attaching again returns
    /// the first record unchanged. Durable.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] for an unknown run.
    fn attach_workspace(&self, run: &RunId, record: WorkspaceRecord) -> Result<WorkspaceRecord>;

    /// Records a command run in the workspace. Durable.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] without a workspace.
    fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord>;

    /// The sequence number of the run's last staged effect (0 when none).
    fn last_effect_seq(&self, run: &RunId) -> Result<u64>;

    /// Adds a savepoint at the run's current ledger position. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] unless the run is open or sealed, or
    /// when the name is taken or a final decision was written;
    /// [`crate::LedgerError::NotFound`].
    fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint>;

    /// Writes a workspace decision ([`crate::rules::workspace::decide_workspace`]) before
    /// anything acts on it. Durable. `(decision, false)` is the decision already written.
    ///
    /// Errors: [`crate::Refused::RunTransition`]; [`crate::LedgerError::NotFound`].
    fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)>;

    /// Marks the unfinished decision finished, with the residue found after a rollback
    /// (`unverified` marks the run `rollback_unverified`). Durable.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] without a workspace.
    fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord>;

    /// Discards every pending effect staged after `after_seq` and every effect depending
    /// on a discarded one. Idempotent. Returns the effects discarded now. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] unless the run is open or sealed.
    fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>>;
}

/// The audit log ([`crate::audit`]): append-only, numbered, kept across prunes.
pub trait AuditStore: Send + Sync + 'static {
    /// Appends `entry`, numbered after every entry before it and timed by the store's
    /// clock, and returns it as stored. Durable. No method changes or removes an entry
    /// afterwards; [`RunStore::prune_run`] keeps them.
    ///
    /// Errors: storage faults.
    fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry>;

    /// One page of the log: at most `page.limit` (capped at
    /// [`crate::audit::MAX_AUDIT_PAGE`]) entries admitted by [`AuditPage::admits`], oldest
    /// first or, with `page.newest_first`, newest first. Following pages (`after` = the
    /// last `seq` of the previous page) visits every entry once, in order.
    ///
    /// Errors: storage faults.
    fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>>;
}
