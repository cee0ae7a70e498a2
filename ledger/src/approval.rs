//! Approvals bound to the exact request: who approved an effect, when, and the SHA-256
//! digest of the body they saw. Release checks the binding, so an effect whose request
//! changed after it was approved is never sent on the old approval.

use serde::{Deserialize, Serialize};

use crate::values::Digest;

/// A reviewer's approval of one effect as it stood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The reviewer: the name of the admin token that approved (`admin` for the default
    /// token), or the actor that approved on a reviewer's behalf (`admin (approve_pending)`).
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Digest of the request body the reviewer approved.
    pub body_digest: Digest,
    /// True when a reviewer approved this effect by itself (the admin API's or the review
    /// UI's approve of one effect); false for bulk approvals (`approve_pending`, approve
    /// staged by rule), `review = "auto"` and `airlock run`. Only an explicit approval
    /// releases an effect a `review` flow holds (docs/policy.md#flow-rules).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explicit: bool,
    /// Ids of the `review` flows the effect violated when it was approved, shown to the
    /// reviewer: an explicit approval releases the effect only while every `review` flow
    /// it violates at commit is among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<String>,
}

impl Approval {
    /// An approval by `by` at `at_ms` (ms since the Unix epoch) of the request whose body
    /// has digest `body_digest` (the effect's as it stands).
    pub fn new(by: &str, body_digest: Digest, at_ms: u64) -> Self {
        Self {
            by: by.to_owned(),
            at_ms,
            body_digest,
            explicit: false,
            flows: Vec::new(),
        }
    }
}

/// Why an approved effect may not be released on its approval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalMismatch {
    /// The request recorded now is not the one the reviewer approved.
    #[error(
        "the request changed after it was approved: {by} approved body {approved}, the effect now carries {now}; approve it again to release it"
    )]
    Changed {
        /// Who approved.
        by: String,
        /// The digest the reviewer approved.
        approved: Digest,
        /// The digest the effect carries now.
        now: Digest,
    },
    /// The stored body does not hash to the effect's digest (storage was altered).
    #[error("the stored body hashes to {actual}, not to the effect's digest {expected}")]
    Body {
        /// The effect's recorded digest.
        expected: Digest,
        /// The digest of the body found in storage.
        actual: Digest,
    },
}
