//! The audit log: who did what, in the order the store accepted it. Every person's or
//! program's action on the control plane (a decision, a commit, an abort, a policy reload,
//! a prune, a compensation, a retry, a settlement, a sign-in link, the tokens a server
//! started with) is one [`AuditEntry`]. The log is append-only: no store method changes or
//! removes an entry, and [`crate::RunStore::prune_run`] leaves the entries of the run it
//! prunes (the prune itself is recorded as one more entry), so removing evidence is
//! itself visible.

use serde::{Deserialize, Serialize};

use crate::model::{EffectId, RunId};

/// Longest `detail` kept, in bytes of its JSON text; a longer one is replaced by
/// `{"truncated": true, "bytes": N}` so that one entry stays small.
pub const MAX_DETAIL_BYTES: usize = 16 * 1024;

/// Most entries one [`crate::AuditStore::audit_page`] call returns, whatever the page asks.
pub const MAX_AUDIT_PAGE: usize = 1000;

/// How an audited action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// The action took effect.
    Done,
    /// The store or the rules refused it (nothing changed).
    Refused,
    /// The caller's role may not take it (HTTP 403 `forbidden_for_role`).
    Forbidden,
}

impl AuditOutcome {
    /// The stable text: `done`, `refused` or `forbidden`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Refused => "refused",
            Self::Forbidden => "forbidden",
        }
    }

    /// The outcome whose [`AuditOutcome::as_str`] is `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "done" => Some(Self::Done),
            "refused" => Some(Self::Refused),
            "forbidden" => Some(Self::Forbidden),
            _ => None,
        }
    }
}

/// An entry to append ([`crate::AuditStore::append_audit`]); the store gives it its
/// sequence number and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    /// Who: a token's name (`admin`, `alice`), `airlock run`, `recovery`, or
    /// `policy: rule "ID"` for a rule's automatic review.
    pub who: String,
    /// The role the action was taken in: `admin`, `runner`, `reviewer`, `viewer`, or
    /// `airlock` for the server's own actions.
    pub role: String,
    /// The action, a stable snake_case name (`approve`, `commit`, `policy_reload`,
    /// `prune`…; docs/admin-api.md#audit).
    pub action: String,
    /// The run it concerns, if any.
    pub run: Option<RunId>,
    /// The effect it concerns, if any.
    pub effect: Option<EffectId>,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// What else a reader needs: a JSON object (the policy revisions before and after, what
    /// a prune removed, a refusal's reason). At most [`MAX_DETAIL_BYTES`] as JSON text.
    pub detail: serde_json::Value,
}

impl NewAuditEntry {
    /// An entry with `outcome` done and an empty detail object.
    pub fn new(who: impl Into<String>, role: impl Into<String>, action: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            role: role.into(),
            action: action.into(),
            run: None,
            effect: None,
            outcome: AuditOutcome::Done,
            detail: serde_json::Value::Object(serde_json::Map::new()),
        }
    }

    /// The same entry about `run`.
    pub fn run(mut self, run: &RunId) -> Self {
        self.run = Some(run.clone());
        self
    }

    /// The same entry about `effect`.
    pub fn effect(mut self, effect: &EffectId) -> Self {
        self.effect = Some(effect.clone());
        self
    }

    /// The same entry ending in `outcome`.
    pub fn outcome(mut self, outcome: AuditOutcome) -> Self {
        self.outcome = outcome;
        self
    }

    /// The same entry with `detail`.
    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = detail;
        self
    }

    /// The entry as stored: numbered `seq`, at `at_ms`, the detail cut to
    /// [`MAX_DETAIL_BYTES`].
    pub fn stored(self, seq: u64, at_ms: u64) -> AuditEntry {
        let bytes = serde_json::to_vec(&self.detail).map_or(0, |v| v.len());
        let detail = if bytes > MAX_DETAIL_BYTES {
            serde_json::json!({"truncated": true, "bytes": bytes})
        } else {
            self.detail
        };
        AuditEntry {
            seq,
            at_ms,
            who: self.who,
            role: self.role,
            action: self.action,
            run: self.run,
            effect: self.effect,
            outcome: self.outcome,
            detail,
        }
    }
}

/// One entry of the audit log, as stored and served (`GET /v1/audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its place in the log: 1, 2, 3 … in the order the store accepted entries (on
    /// PostgreSQL increasing, with a gap where a transaction failed).
    pub seq: u64,
    /// When the store accepted it, ms since the Unix epoch.
    pub at_ms: u64,
    /// Who ([`NewAuditEntry::who`]).
    pub who: String,
    /// In which role ([`NewAuditEntry::role`]).
    pub role: String,
    /// What ([`NewAuditEntry::action`]).
    pub action: String,
    /// The run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    /// The effect, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectId>,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// The rest ([`NewAuditEntry::detail`]).
    pub detail: serde_json::Value,
}

/// A page request of [`crate::AuditStore::audit_page`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditPage {
    /// The cursor: the `seq` of the last entry of the previous page (`None`: from the
    /// start, or from the end with `newest_first`).
    pub after: Option<u64>,
    /// Most entries returned (capped at [`MAX_AUDIT_PAGE`]).
    pub limit: usize,
    /// Newest first (descending `seq`, entries before `after`) instead of oldest first.
    pub newest_first: bool,
    /// Only the entries about this run.
    pub run: Option<RunId>,
}

impl AuditPage {
    /// Whether `entry` belongs to this page's filter and lies past its cursor.
    pub fn admits(&self, entry: &AuditEntry) -> bool {
        let past = match (self.after, self.newest_first) {
            (None, _) => true,
            (Some(after), false) => entry.seq > after,
            (Some(after), true) => entry.seq < after,
        };
        past && self
            .run
            .as_ref()
            .is_none_or(|run| entry.run.as_ref() == Some(run))
    }

    /// The limit actually applied: `limit` capped at [`MAX_AUDIT_PAGE`].
    pub fn capped_limit(&self) -> usize {
        self.limit.min(MAX_AUDIT_PAGE)
    }
}
