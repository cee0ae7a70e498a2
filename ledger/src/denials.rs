//! Denied requests, journaled per run so a past run can be re-decided under a candidate
//! policy (`airlock policy replay`) and reviewers see what was refused.

use serde::{Deserialize, Serialize};

use crate::RunId;

/// At most this many denials are kept per run; later ones are counted, not stored (a
/// looping agent must not grow the ledger without bound).
pub const DENIALS_KEPT_PER_RUN: u64 = 10_000;

/// A request the policy (or an invariant) refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// The run the request came from.
    pub run_id: RunId,
    /// Order among the run's denials, from 1.
    pub seq: u64,
    /// Request method (`CONNECT` for a refused tunnel).
    pub method: String,
    /// Absolute request URL (`https://host:port` for a CONNECT).
    pub url: String,
    /// Whether the request's framing carried a body.
    pub has_body: bool,
    /// The deciding rule, when one decided.
    pub rule: Option<String>,
    /// The stable reason code (e.g. `rule_deny`, `default_deny`).
    pub reason_code: String,
    /// The revision of the policy that decided.
    pub policy_revision: String,
    /// When, ms since the Unix epoch.
    pub created_at_ms: u64,
}
