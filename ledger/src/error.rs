//! Typed errors of the ledger: storage faults versus refused transitions. No backend's
//! own error type appears here: a backend wraps its faults in [`LedgerError::Storage`].

use crate::model::{EffectId, EffectState, RunId, RunState};

/// Anything the ledger cannot do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The backend failed (sled, a database connection …); the ledger stops rather than
    /// guess (fail-stop). Build it with [`LedgerError::storage`].
    #[error("ledger storage failed")]
    Storage {
        /// The backend's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another writer changed the record between this operation's read and its write, so
    /// nothing was written; the caller may retry the whole operation. An embedded store
    /// with one writer never returns it; a shared backend (PostgreSQL) does.
    #[error("ledger record {key} was changed by another writer; retry")]
    Conflict {
        /// The key of the record (a run or effect identifier, or a backend's key).
        key: String,
    },
    /// A stored record does not parse: the data directory is damaged or from a newer version.
    #[error("ledger record {key} is corrupt")]
    Corrupt {
        /// The key of the record.
        key: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// No run or effect with that identifier.
    #[error("no {kind} with id {id}")]
    NotFound {
        /// `run` or `effect`.
        kind: &'static str,
        /// The identifier asked for.
        id: String,
    },
    /// The ledger cannot write now: a storage fault left it read-only and it is being
    /// reopened in the background ([`crate::HealingLedger`]); nothing was written. Retry
    /// once `/healthz` answers 200.
    #[error("ledger degraded: {reason}")]
    Degraded {
        /// The storage fault that degraded it.
        reason: String,
    },
    /// The ledger's file system has less free space than the floor
    /// (`airlock serve --ledger-min-free-mib`); nothing was written.
    #[error("ledger disk nearly full: {free_bytes} bytes free, below the floor of {floor_bytes}")]
    LowSpace {
        /// Bytes available to airlock on the ledger's file system (statvfs `f_bavail`).
        free_bytes: u64,
        /// The floor, in bytes.
        floor_bytes: u64,
    },
    /// The state machine refuses the request; nothing was changed.
    #[error(transparent)]
    Refused(#[from] Refused),
}

impl LedgerError {
    /// A [`LedgerError::Storage`] wrapping a backend's error.
    pub fn storage(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Storage {
            source: source.into(),
        }
    }
}

/// An expected refusal: the request is well formed but the state does not allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The run no longer accepts effects.
    #[error("run {run} is {state}: it accepts no new effects")]
    RunNotOpen {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
    },
    /// An effect cannot move from its state to the one asked for.
    #[error("effect {effect} is {from}: it cannot become {to}")]
    EffectTransition {
        /// The effect.
        effect: EffectId,
        /// Its state.
        from: EffectState,
        /// The state asked for.
        to: EffectState,
    },
    /// A run cannot take the decision asked for in its state.
    #[error("run {run} is {state}: it cannot be {action}")]
    RunTransition {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
        /// `sealed`, `committed`, `aborted`, `approved` …
        action: &'static str,
    },
    /// Commit was asked while effects still wait for a reviewer.
    #[error("run {run} has {} undecided effect(s); approve or reject them, or commit with --approve-pending (API: approve_pending)", effects.len())]
    Undecided {
        /// The run.
        run: RunId,
        /// The effects still `staged`.
        effects: Vec<EffectId>,
    },
    /// Commit was asked while `review` flows hold effects that no reviewer approved by
    /// themselves, shown the violation (docs/policy.md#flow-rules). Nothing was changed.
    #[error("run {run}: {} effect(s) held by flow rules need a reviewer's own approval ({detail}); bulk approvals and review = \"auto\" do not release them: approve or reject each effect, then commit again", effects.len())]
    FlowHeld {
        /// The run.
        run: RunId,
        /// The effects held.
        effects: Vec<EffectId>,
        /// Each effect with the flows that hold it: `EFFECT: flow "ID"`, `; ` separated.
        detail: String,
    },
    /// A `block` flow forbids releasing this effect, so it cannot be approved.
    #[error("effect {effect} cannot be approved: {detail}")]
    FlowBlocked {
        /// The effect.
        effect: EffectId,
        /// The `block` flows it violates.
        flows: Vec<String>,
        /// `flow "ID": REASON`, `; ` separated.
        detail: String,
    },
    /// A retry was asked for an effect that may have reached its origin (or whose origin
    /// refused it): re-sending it could act twice. Nothing was changed.
    #[error("effect {effect} is {state} and cannot be retried: {reason}")]
    NotRetriable {
        /// The effect.
        effect: EffectId,
        /// Its state.
        state: EffectState,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A settlement names a placeholder the effect does not have, gives a value that
    /// cannot stand for it, or gives values with `--not-delivered`. Nothing was changed.
    #[error("effect {effect} cannot be settled so: {reason}")]
    BadSettlement {
        /// The effect.
        effect: EffectId,
        /// What is wrong.
        reason: String,
    },
    /// A run was asked to be pruned before it finished ([`crate::rules::retention`]).
    /// Nothing was removed.
    #[error("run {run} is {state} and not finished, so it cannot be pruned: {reason}")]
    NotFinished {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
        /// What is still owed or in flight.
        reason: String,
    },
    /// Another control instance holds the run's release lease and it has not expired
    /// ([`crate::LeaseStore::acquire_lease`]). Nothing was changed; ask again after
    /// `expires_at_ms`, or wait for that holder to finish.
    #[error("run {run} is being released by {holder} (its lease expires at {expires_at_ms} ms)")]
    LeaseHeld {
        /// The run.
        run: RunId,
        /// The live lease's holder.
        holder: String,
        /// When that lease expires, by the store's clock (ms since the Unix epoch).
        expires_at_ms: u64,
    },
    /// A write of a release carried a lease that is no longer the run's newest (a newer
    /// holder took over: this writer was fenced), or, for a write that starts a send,
    /// one that expired ([`crate::LeaseStore`]). Nothing was changed: stop releasing.
    #[error("run {run}: release lease token {token} is {}; the newest is {newest}", if *expired { "expired" } else { "stale" })]
    StaleLease {
        /// The run.
        run: RunId,
        /// The token the write carried.
        token: u64,
        /// The run's newest token (0 when it was never leased).
        newest: u64,
        /// Whether the token is the newest one but expired (else a newer one exists).
        expired: bool,
    },
}

impl Refused {
    /// A stable machine-readable code for API bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RunNotOpen { .. } => "run_not_open",
            Self::EffectTransition { .. } => "invalid_effect_transition",
            Self::RunTransition { .. } => "invalid_run_transition",
            Self::Undecided { .. } => "undecided_effects",
            Self::FlowHeld { .. } => "flow_review_required",
            Self::FlowBlocked { .. } => "flow_blocked",
            Self::NotRetriable { .. } => "not_retriable",
            Self::BadSettlement { .. } => "bad_settlement",
            Self::NotFinished { .. } => "run_not_finished",
            Self::LeaseHeld { .. } => "lease_held",
            Self::StaleLease { .. } => "stale_lease",
        }
    }
}
