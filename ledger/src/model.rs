//! The records the ledger keeps: runs, effects, reads and decisions, and their state machines.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::values::{now_ms, Digest};

/// Identifier of a run: `run_` followed by a ULID (26 Crockford base32 characters).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

/// Identifier of an effect: `eff_` followed by a ULID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EffectId(pub String);

macro_rules! id_impl {
    ($ty:ident, $prefix:literal) => {
        impl $ty {
            /// The prefix every identifier of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A new identifier, unique and sortable by creation time.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, ulid::Ulid::new()))
            }

            /// Parses an identifier, checking its prefix and ULID part; `None` when malformed.
            /// ULIDs are case-insensitive (Crockford base32); the stored form is upper case.
            pub fn parse(text: &str) -> Option<Self> {
                let rest = text.strip_prefix($prefix)?;
                let ulid = rest.to_ascii_uppercase().parse::<ulid::Ulid>().ok()?;
                Some(Self(format!("{}{}", $prefix, ulid)))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_impl!(RunId, "run_");
id_impl!(EffectId, "eff_");

/// A header as the client sent it. Values that are not UTF-8 are kept as bytes so that
/// release sends exactly what was staged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Lowercase header name.
    pub name: String,
    /// The value, byte for byte.
    pub value: HeaderText,
}

/// A header value: text when it is UTF-8, bytes otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderText {
    /// A UTF-8 value.
    Text(String),
    /// Any other value, as bytes.
    Bytes(Vec<u8>),
}

impl HeaderText {
    /// Wraps raw value bytes.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::Text(text.to_owned()),
            Err(_) => Self::Bytes(bytes.to_vec()),
        }
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Text(text) => text.as_bytes(),
            Self::Bytes(bytes) => bytes,
        }
    }
}

/// States of a run (docs/design.md, glossary): `open -> sealed -> committing -> committed | partially_committed`,
/// or `open | sealed -> aborted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Accepting requests.
    Open,
    /// No longer accepting effects; waiting for the commit decision.
    Sealed,
    /// A commit decision is written; approved effects are being released.
    Committing,
    /// Every approved effect was released.
    Committed,
    /// The commit finished, but some approved effect failed or its outcome is unknown.
    PartiallyCommitted,
    /// The run was aborted; its pending effects were discarded.
    Aborted,
}

impl RunState {
    /// The state's name as in the API (`open`, `sealed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Sealed => "sealed",
            Self::Committing => "committing",
            Self::Committed => "committed",
            Self::PartiallyCommitted => "partially_committed",
            Self::Aborted => "aborted",
        }
    }

    /// True for the states a run never leaves.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Committed | Self::PartiallyCommitted | Self::Aborted
        )
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// States of an effect (docs/design.md, glossary): `staged -> approved | rejected`; at commit
/// `approved -> releasing -> released | failed | unknown`; `skipped`, `discarded`. The
/// ways out of a doubtful or failed release (docs/design.md, "Outcomes of a release"):
/// `unknown -> released | failed` (a reviewer settles it), `failed | unknown -> approved`
/// (a retry, only when provably nothing was sent or the origin honours an idempotency
/// key) and `skipped -> approved` (its dependency was retried or settled delivered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectState {
    /// Recorded, waiting for a reviewer.
    Staged,
    /// Approved for release at commit.
    Approved,
    /// Rejected; never sent.
    Rejected,
    /// Marked durably just before it is sent.
    Releasing,
    /// Sent, and the origin answered.
    Released,
    /// The origin answered with an error status (or its adapter judged the answer a
    /// refusal), or provably nothing was sent ([`Effect::retriable`] then says so).
    Failed,
    /// Not sent because an effect it depends on was rejected, failed, skipped or unknown.
    Skipped,
    /// Not sent because the run was aborted.
    Discarded,
    /// It may or may not have reached the origin: airlock stopped while releasing it, or
    /// the origin closed the connection or did not answer in time after the request
    /// started. Never re-sent silently; a reviewer settles it.
    Unknown,
}

impl EffectState {
    /// The state's name as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Staged => "staged",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Releasing => "releasing",
            Self::Released => "released",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Discarded => "discarded",
            Self::Unknown => "unknown",
        }
    }

    /// True while a reviewer may still change the effect's verdict.
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Staged | Self::Approved | Self::Rejected)
    }

    /// Whether the state machine allows `self -> to`. The edges out of `failed`,
    /// `unknown` and `skipped` have conditions of their own ([`crate::rules::outcome`]):
    /// a reviewer's verdict never takes them.
    pub fn can_become(self, to: EffectState) -> bool {
        use EffectState::*;
        matches!(
            (self, to),
            (Staged | Approved | Rejected, Approved | Rejected)
                | (Staged | Approved, Discarded)
                | (Approved, Releasing | Skipped | Failed)
                | (Releasing, Released | Failed | Unknown)
                | (Unknown, Released | Failed)
                | (Failed | Unknown | Skipped, Approved)
        )
    }
}

impl fmt::Display for EffectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durable decision of the commit authority or a reviewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// `commit`, `abort`, `seal`, `approve`, `reject`, or one of
    /// [`crate::outcome::kinds`] (`retry`, `settle_delivered`, …).
    pub kind: String,
    /// Who decided (`admin`, a reviewer name, `recovery`).
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What the decider said or what it concerns (a settlement's note, the effect a
    /// requeue waited for); absent on older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl DecisionRecord {
    /// A decision of `kind` by `by` at `at_ms` (ms since the Unix epoch), without a note.
    pub fn new(kind: &str, by: &str, at_ms: u64) -> Self {
        Self {
            kind: kind.to_owned(),
            by: by.to_owned(),
            at_ms,
            note: None,
        }
    }
}

/// A run: one agent execution, one transaction.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The run's identifier.
    pub id: RunId,
    /// For a run recorded before tokens were derived ([`crate::tokens`]): the keyed hash
    /// of its random token, which it still authenticates with. `None` for every newer
    /// run, whose token is derived from its id and stored nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_hash: Option<String>,
    /// The plaintext token of a record written before tokens were derived (its JSON field
    /// `token`), until [`crate::RunStore::hash_plaintext_tokens`] rewrites it as
    /// `token_hash`; `None` once rewritten and for every newer run.
    #[serde(default, rename = "token", skip_serializing_if = "Option::is_none")]
    pub plaintext_token: Option<String>,
    /// The run's state.
    pub state: RunState,
    /// Policy profile the run was created with.
    #[serde(default)]
    pub profile: Option<String>,
    /// The source address or CIDR whose connections belong to the run without
    /// credentials (`airlock serve --transparent`; docs/containment.md), as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Decisions written for the run, oldest first.
    #[serde(default)]
    pub decisions: Vec<DecisionRecord>,
    /// Alerts raised about the run, oldest first (e.g. a credential placeholder sent to a
    /// host outside its bind); at most [`MAX_RUN_FLAGS`] are kept.
    #[serde(default)]
    pub flags: Vec<RunFlag>,
}

/// Most flags kept on one run: later ones are counted in metrics and logged, not stored.
pub const MAX_RUN_FLAGS: usize = 100;

/// An alert raised about a run, for its operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFlag {
    /// Stable code, e.g. `credential_placeholder_off_host`.
    pub code: String,
    /// What happened, for a human (never a secret value).
    pub detail: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("id", &self.id)
            .field("token_hash", &self.token_hash.as_ref().map(|_| "[hash]"))
            .field(
                "plaintext_token",
                &self.plaintext_token.as_ref().map(|_| "[redacted]"),
            )
            .field("state", &self.state)
            .field("profile", &self.profile)
            .field("source", &self.source)
            .field("created_at_ms", &self.created_at_ms)
            .field("flags", &self.flags)
            .finish()
    }
}

/// What the origin answered when an effect was released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    /// When the release started, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When the origin's answer was recorded (absent while releasing).
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    /// The origin's status code, when it answered.
    #[serde(default)]
    pub status: Option<u16>,
    /// The origin's response headers.
    #[serde(default)]
    pub headers: Vec<Header>,
    /// Digest of the stored response body (bodies are kept up to the release capture limit).
    #[serde(default)]
    pub body_digest: Option<Digest>,
    /// Bytes of response body received.
    #[serde(default)]
    pub body_len: u64,
    /// Why the release failed, when it did.
    #[serde(default)]
    pub error: Option<String>,
}

/// A staged side effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// The effect's identifier.
    pub id: EffectId,
    /// The run it belongs to.
    pub run_id: RunId,
    /// Staging order within the run, from 1.
    pub seq: u64,
    /// Request method.
    pub method: String,
    /// Absolute request URL (`https://host:port/path?query`).
    pub url: String,
    /// End-to-end request headers as the client sent them (hop-by-hop and proxy headers removed).
    pub headers: Vec<Header>,
    /// Digest of the request body (stored once by digest).
    pub body_digest: Digest,
    /// Request body length in bytes.
    pub body_len: u64,
    /// Id of the policy rule that staged it (`None` for the policy default).
    pub rule: Option<String>,
    /// Revision of the policy that decided it.
    pub policy_revision: String,
    /// Staging time, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// The effect's state.
    pub state: EffectState,
    /// Why it is in its state, when that needs saying (`skipped`, `failed`, `unknown`).
    #[serde(default)]
    pub state_reason: Option<String>,
    /// Decisions written for the effect, oldest first.
    #[serde(default)]
    pub decisions: Vec<DecisionRecord>,
    /// The release attempt, once one started.
    #[serde(default)]
    pub release: Option<ReleaseRecord>,
    /// Placeholders this effect's synthetic response handed out.
    #[serde(default)]
    pub placeholders: Vec<Placeholder>,
    /// Earlier effects whose placeholders this request carries (effect -> effect lineage).
    #[serde(default)]
    pub depends_on: Vec<Dependency>,
    /// The credential (`[credential.NAME]` of the policy) airlock adds when it releases the
    /// effect; only the name is stored, never the value.
    #[serde(default)]
    pub inject: Option<String>,
    /// The approval in force, bound to the body digest the reviewer saw (`None` unless the
    /// effect is approved, and for effects approved before approvals were recorded).
    #[serde(default)]
    pub approval: Option<crate::approval::Approval>,
    /// The adapter's one-line account of the effect for reviewers (absent for effects
    /// staged before adapters existed).
    #[serde(default)]
    pub summary: Option<String>,
    /// The adapter that answered the effect (`webhook`, `github`, …), when one did.
    #[serde(default)]
    pub adapter: Option<String>,
    /// The released effect this one compensates (an approximate inverse), when it is a
    /// compensation.
    #[serde(default)]
    pub compensates: Option<EffectId>,
    /// True on a `failed` effect of which provably nothing reached the origin (the dial
    /// was refused, TLS verification failed, a check before sending refused it), or that
    /// a reviewer settled not delivered: only such an effect may be retried. Cleared by
    /// the retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retriable: bool,
    /// The release attempts before the current one ([`Effect::release`]), oldest first:
    /// a retry keeps the earlier attempt's record here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_releases: Vec<ReleaseRecord>,
    /// The idempotency key every release attempt sends, when the effect's rule says its
    /// origin honours one (`idempotency_key = "Idempotency-Key"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<crate::outcome::Idempotency>,
    /// What the run's earlier traffic with the same origin told the effect's adapter, kept
    /// for review and release (MCP: the server's `serverInfo` and the client's
    /// `initialize` parameters, docs/adapters.md#mcp); `None` when nothing was learnt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
}

/// What an adapter adds to a staged effect, for [`crate::Ledger::stage_with`].
#[derive(Debug, Clone, Default)]
pub struct EffectNotes {
    /// One-line account for reviewers.
    pub summary: Option<String>,
    /// The adapter's name.
    pub adapter: Option<String>,
    /// The effect this one compensates.
    pub compensates: Option<EffectId>,
    /// The origin's idempotency key header, when the rule or adapter says it honours one.
    pub idempotency: Option<crate::outcome::IdempotencySpec>,
    /// What the run's earlier traffic told the adapter ([`Effect::context`]).
    pub context: Option<serde_json::Value>,
}

/// The type a placeholder imitates: each is shaped like the value it stands for, so that
/// an agent's follow-up logic (a regex on a Slack `ts`, a length check on a SHA) accepts
/// it, and lies in a reserved part of that shape that real values do not reach
/// (docs/adapters.md#placeholders; [`crate::rules::placeholder_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    /// A JSON number: the run's random 16-digit base plus a sequence number.
    Number,
    /// An opaque string: `ph_` and 24 random characters.
    String,
    /// A Slack message timestamp (`ts`, `SECONDS.MICROS`, a JSON string): `9` and 9
    /// random digits, `.`, 6 random digits, i.e. seconds after the year 2255, which no
    /// message posted today carries (<https://api.slack.com/messaging/retrieving#individual_messages>).
    SlackTs,
    /// A git object id (SHA-1, 40 lowercase hex digits, a JSON string): the reserved
    /// prefix `ffffffff` and 32 random hex digits.
    Sha1,
    /// A URL the origin assigns (GraphQL `url`, `permalink`): `https://airlock.invalid/p/`
    /// and 24 random characters; `.invalid` is reserved and never resolves (RFC 2606 §2).
    Url,
}

impl ValueKind {
    /// Whether the value stands in JSON as a string (every kind but [`ValueKind::Number`]).
    pub fn is_string(self) -> bool {
        self != ValueKind::Number
    }

    /// Whether `c` continues a value of this kind, so that a placeholder is found only
    /// where it is not part of a longer such value: digits for numbers and Slack
    /// timestamps, hex digits for SHA-1s, letters and digits for URLs (a path appended to a
    /// URL placeholder still finds it); nothing for opaque strings (`ph_` is unique).
    pub fn continues(self, c: char) -> bool {
        match self {
            ValueKind::String => false,
            ValueKind::Number | ValueKind::SlackTs => c.is_ascii_digit(),
            ValueKind::Sha1 => c.is_ascii_hexdigit(),
            ValueKind::Url => c.is_ascii_alphanumeric(),
        }
    }
}

/// A placeholder a staged effect's synthetic response carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// The stand-in value as the client saw it (digits for a number).
    pub value: String,
    /// Its type.
    pub kind: ValueKind,
    /// JSON pointer (RFC 6901) of the real value in the origin's response.
    pub pointer: String,
    /// The real value, once the effect was released and the origin answered.
    #[serde(default)]
    pub real: Option<String>,
}

/// A later request's dependency on an earlier effect through one placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// The effect that issued the placeholder.
    pub effect: EffectId,
    /// The placeholder value found in the request.
    pub value: String,
    /// Where it was found: `url`, `header:NAME` or `body`.
    pub found_in: String,
}

/// What a stage rule's synthetic response needs allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceholderSpec {
    /// JSON pointer of the real value.
    pub pointer: String,
    /// Its type.
    pub kind: ValueKind,
}

/// A placeholder issued in a run, for finding it in later requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedPlaceholder {
    /// The stand-in value.
    pub value: String,
    /// Its type.
    pub kind: ValueKind,
    /// The effect that issued it.
    pub effect: EffectId,
}

/// What the proxy hands the ledger to stage.
#[derive(Debug, Clone)]
pub struct NewEffect<'a> {
    /// The run the request came from.
    pub run_id: &'a RunId,
    /// Request method.
    pub method: &'a str,
    /// Absolute request URL.
    pub url: &'a str,
    /// End-to-end headers.
    pub headers: Vec<Header>,
    /// The whole (decoded from transfer framing) request body.
    pub body: &'a [u8],
    /// The rule that staged it.
    pub rule: Option<&'a str>,
    /// The policy revision that decided it.
    pub policy_revision: &'a str,
    /// Placeholders to allocate for the synthetic response.
    pub placeholders: Vec<PlaceholderSpec>,
    /// Placeholders of earlier effects the request carries.
    pub depends_on: Vec<Dependency>,
    /// The name of the credential to add at release (never its value).
    pub inject: Option<&'a str>,
}

/// A request the policy let pass, journaled for lineage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The run the request came from.
    pub run_id: RunId,
    /// Order among the run's reads, from 1.
    pub seq: u64,
    /// Request method.
    pub method: String,
    /// Absolute request URL.
    pub url: String,
    /// Origin status code (absent when the origin never answered).
    pub status: Option<u16>,
    /// Request body bytes sent upstream.
    pub request_bytes: u64,
    /// Response body bytes relayed toward the client: handed to its connection, which
    /// for h2 may still buffer some when the connection is cut.
    pub response_bytes: u64,
    /// Digest of the response body, when it was relayed to its end.
    pub response_digest: Option<Digest>,
    /// The rule that let it pass.
    pub rule: Option<String>,
    /// When it started, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Why it did not complete, when it did not.
    #[serde(default)]
    pub error: Option<String>,
    /// Audit matches on the way to the decision (rules in audit mode, or the denial a
    /// policy in audit mode turned into this pass), each `RULE would ACTION (CODE)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<String>,
    /// The labels of the rule that let it pass, as that rule had them when the read was
    /// made (`labels = [...]`), which `[[flow]]` rules name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

impl Effect {
    /// Checks that `body` (the body about to be released, before placeholder substitution)
    /// is the request the reviewer approved: its SHA-256 equals the effect's digest, and the
    /// effect's digest equals the approval's.
    ///
    /// Errors: [`crate::approval::ApprovalMismatch::Changed`] or [`crate::approval::ApprovalMismatch::Body`].
    pub fn check_approval(&self, body: &[u8]) -> Result<(), crate::approval::ApprovalMismatch> {
        let actual = Digest::sha256_of(body);
        if actual != self.body_digest {
            return Err(crate::approval::ApprovalMismatch::Body {
                expected: self.body_digest.clone(),
                actual,
            });
        }
        match &self.approval {
            Some(approval) if approval.body_digest != self.body_digest => {
                Err(crate::approval::ApprovalMismatch::Changed {
                    by: approval.by.clone(),
                    approved: approval.body_digest.clone(),
                    now: self.body_digest.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}
