//! Durable ledger of airlock's runs, effects, reads and decisions: the storage trait
//! [`Store`] with its written contracts, its sled implementation [`Ledger`] (the embedded
//! default), the PostgreSQL backend [`PgStore`] that many processes share, and the
//! in-memory model [`MemoryStore`], the state machines as pure
//! functions ([`rules`]) every backend calls, and content fingerprinting ([`fingerprint`]),
//! which is pure and stays out of the stores.
//!
//! Callers use this typed, synchronous API (wrap calls in `spawn_blocking` from async
//! code), usually as an `Arc<dyn Store>`. Records are serde JSON. Every operation that a
//! client or the commit authority acts on (staging, decisions, `releasing`, release
//! outcomes) is durable before it returns. A new backend passes the `conformance` suite
//! (feature `conformance`).

mod approval;
pub mod audit;
pub mod change;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod denials;
mod error;
pub mod fingerprint;
pub mod lease;
mod lineage;
mod memory;
mod model;
pub mod outcome;
pub mod postgres;
pub mod rules;
mod sled_store;
mod store;
pub mod tokens;
mod values;
mod workspace;

pub use approval::{Approval, ApprovalMismatch};
pub use audit::{AuditEntry, AuditOutcome, AuditPage, NewAuditEntry};
pub use change::Change;
pub use denials::{Denial, DENIALS_KEPT_PER_RUN};
pub use error::{LedgerError, Refused};
pub use lease::Lease;
pub use lineage::{
    placeholder_edges, read_content as lineage_read_content, readiness, Edge, EdgeKind, EdgeSource,
    EffectLineage, Notable, ReadContent, Readiness,
};
pub use memory::MemoryStore;
pub use model::{
    now_ms, DecisionRecord, Dependency, Digest, Effect, EffectId, EffectNotes, EffectState, Header,
    HeaderText, IssuedPlaceholder, NewEffect, Placeholder, PlaceholderSpec, Read, ReleaseRecord,
    Run, RunId, RunState, ValueKind,
};
pub use model::{RunFlag, MAX_RUN_FLAGS};
pub use outcome::{Delivery, Idempotency, IdempotencySpec, Settlement};
pub use postgres::{PgOpenError, PgStore};
pub use sled_store::{HealingLedger, Ledger, SetAside, DEFAULT_MIN_FREE_BYTES};
pub use store::{
    AuditStore, EffectStore, Health, JournalStore, LeaseStore, LineageStore, Pruned, RunPage,
    RunStore, Store, WorkspaceStore,
};
pub use tokens::{RunTokens, TokenKeyError, RUN_TOKEN_KEY_FILE};
pub use workspace::{
    Changes, Containment, DecisionKind, LeftRunning, Savepoint, StepRecord, WorkspaceDecision,
    WorkspaceRecord,
};

/// Result of ledger operations.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// What the origin answered a release, for [`EffectStore::record_release`].
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
    /// How far a failed release got (`failed`, `failed` and retriable, or `unknown`);
    /// ignored when `error` is `None`.
    pub delivery: Delivery,
}

/// A reviewer's verdict on an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Release it at commit.
    Approve,
    /// Never send it.
    Reject,
}

/// The ledger's page cache unless told otherwise: 64 MiB (sled's own default is 1 GiB).
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

#[cfg(test)]
mod tests;
