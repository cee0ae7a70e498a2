//! Journaling denied requests in the ledger (for `airlock policy replay` and reviewers).

use airlock_ledger::{Denial, RunId};
use tracing::warn;

use crate::DataPlane;

/// What was refused, as the request path knows it.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Request method (`CONNECT` for a refused tunnel).
    pub method: String,
    /// Absolute URL.
    pub url: String,
    /// Whether the framing carried a body.
    pub has_body: bool,
    /// The deciding rule, if one decided.
    pub rule: Option<String>,
    /// The stable reason code.
    pub reason_code: String,
    /// The deciding policy revision.
    pub policy_revision: String,
}

/// Journals the denial of a whole `target` (a `CONNECT`, or a fenced connection) by
/// `decision` under policy revision `revision`.
pub fn journal_connect(
    shared: &DataPlane,
    run: &RunId,
    target: &airlock_net::authority::Target,
    decision: &airlock_policy::Decision,
    revision: &str,
) {
    journal(
        shared,
        run,
        Refusal {
            method: "CONNECT".into(),
            url: format!("https://{}", target.authority()),
            has_body: false,
            rule: decision.rule.clone(),
            reason_code: decision.reason_code.to_owned(),
            policy_revision: revision.to_owned(),
        },
    );
}

/// Journals one denial of `run`; a ledger error is logged (the client already gets its
/// 403; failing it for a journal error would help nobody).
pub fn journal(shared: &DataPlane, run: &RunId, refusal: Refusal) {
    let denial = Denial {
        run_id: run.clone(),
        seq: 0,
        method: refusal.method,
        url: refusal.url,
        has_body: refusal.has_body,
        rule: refusal.rule,
        reason_code: refusal.reason_code,
        policy_revision: refusal.policy_revision,
        created_at_ms: airlock_ledger::now_ms(),
    };
    if let Err(error) = shared.ledger.journal_denial(denial) {
        warn!(run.id = %run, error = %error, "could not journal a denial");
    }
}
