//! What is known about whether a released effect reached its origin, and the records of
//! the ways out of a doubtful or failed release: a retry, a reviewer's settlement, and the
//! idempotency key that makes re-sending an `unknown` effect safe (docs/design.md,
//! "Outcomes of a release").

use serde::{Deserialize, Serialize};

/// How far a release got, which decides between `failed` and `unknown`
/// ([`crate::EffectStore::record_release`]).
///
/// Rule: once any byte of the request may have reached the origin, an answer that did not
/// come (a closed connection, a timeout, a cut response) is `unknown`, never `failed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The origin answered with a status: `released`, or `failed` when the outcome carries
    /// an error (a status of 400 or more, an adapter's judgement). Not retriable: the
    /// origin received the request.
    #[default]
    Answered,
    /// Provably nothing of the request was sent: resolving or dialing failed, the TLS
    /// handshake (certificate verification included) failed, or a check before sending
    /// refused it. `failed`, and retriable.
    NotSent,
    /// Some of the request may have reached the origin and no complete answer came back
    /// (the origin closed the connection, the release timeout passed, the response was
    /// cut): `unknown`.
    Unanswered,
}

/// A reviewer's finding about an `unknown` effect after checking the origin
/// (`airlock settle EFFECT --delivered | --not-delivered`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    /// `true`: the origin has the effect, which counts as `released`. `false`: it does
    /// not, and the effect becomes `failed` and retriable.
    pub delivered: bool,
    /// What the reviewer checked, kept on the decision.
    #[serde(default)]
    pub note: Option<String>,
    /// Real values of the effect's placeholders that the origin assigned, as
    /// `(NAME, VALUE)`: NAME is the placeholder's JSON pointer (`/number`) or its
    /// stand-in value. Only with `delivered`; dependents carrying those placeholders are
    /// then released with the values substituted.
    #[serde(default)]
    pub values: Vec<(String, String)>,
}

/// What a stage rule (or adapter) says about the origin's idempotency keys, handed to
/// staging in [`crate::EffectNotes::idempotency`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencySpec {
    /// The request header the origin reads the key from (`Idempotency-Key`), any case.
    pub header: String,
    /// Whether an `unknown` effect may be re-sent with the same key (the rule's
    /// `retry_unknown = "idempotent"`): the origin then answers the second request with
    /// the first one's outcome instead of acting twice.
    pub retry_unknown: bool,
}

/// The idempotency key an effect is released with, fixed when it is staged so that every
/// attempt sends the same one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotency {
    /// The header's name, lower case.
    pub header: String,
    /// The key: the client's own value when its request carried the header, else
    /// `airlock-` followed by the effect's id.
    pub key: String,
    /// Whether an `unknown` effect may be re-sent (see [`IdempotencySpec::retry_unknown`]).
    #[serde(default)]
    pub retry_unknown: bool,
}

/// Decision kinds recorded by retries and settlements (on [`crate::DecisionRecord::kind`]).
pub mod kinds {
    /// A reviewer asked for another release attempt of an effect (`airlock retry`).
    pub const RETRY: &str = "retry";
    /// A reviewer found the origin has the effect.
    pub const SETTLE_DELIVERED: &str = "settle_delivered";
    /// A reviewer found the origin does not have the effect.
    pub const SETTLE_NOT_DELIVERED: &str = "settle_not_delivered";
    /// A reviewer supplied real values of an effect's placeholders (the note lists them).
    pub const SUPPLY_VALUES: &str = "supply_values";
    /// A skipped dependent was put back for release because the effect it waited for was
    /// retried or settled delivered (the note names it).
    pub const REQUEUE: &str = "requeue";
    /// A finished commit was resumed to release retried or requeued effects (on the run;
    /// the note names the effect).
    pub const RESUME: &str = "resume";
}
