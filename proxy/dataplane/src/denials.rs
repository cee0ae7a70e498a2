//! Journaling denied requests in the ledger (for `airlock policy replay` and reviewers),
//! and the answer to a host the policy denies outright.

use std::sync::Arc;

use airlock_ledger::{Denial, RunId};
use airlock_net::respond::ProxyError;
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
        crate::gaps::denial_dropped();
        warn!(run.id = %run, error = %error, "could not journal a denial");
    }
}

/// The answer to every request inside a tunnel (or fenced connection) to a host denied
/// outright by `decision` under policy revision `revision`: the 403 with the rule,
/// reason and a hint naming the rule or default that refused the whole host. Nothing is
/// dialed for such a host (docs/policy.md, "Denied hosts").
pub(crate) fn host_refusal(
    target: &airlock_net::authority::Target,
    decision: airlock_policy::Decision,
    revision: &str,
) -> Arc<dyn Fn() -> ProxyError + Send + Sync> {
    let authority = target.authority();
    let hint = match &decision.rule {
        Some(rule) => format!(
            "rule \"{rule}\" denies every request to {authority}: no method or path can pass; read the manifest, and if this host is needed ask the operator to change the policy"
        ),
        None => format!(
            "no rule names {authority}: a rule's host must match it, and a rule without `port` matches only 443 (https) or 80 (http); read the manifest, and if this host is needed ask the operator for a rule that passes or stages it"
        ),
    };
    let revision = revision.to_owned();
    Arc::new(move || ProxyError::Denied {
        rule: decision.rule.clone(),
        reason: decision.reason.clone(),
        reason_code: decision.reason_code.to_owned(),
        policy_revision: revision.clone(),
        hint: Some(hint.clone()),
    })
}
