//! The journal phase, run at the end of every admitted request whatever its outcome: a
//! denial is journaled in the ledger (for `airlock policy replay` and reviewers), and an
//! error becomes its response, logged at warn when it is a 5xx.

use http::Response;
use tracing::warn;

use super::RequestCtx;
use crate::denials::Refusal;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// Journals the outcome of the request; returns the response to send.
pub(super) fn journal(
    ctx: RequestCtx<'_>,
    outcome: Result<Response<ProxyBody>, ProxyError>,
) -> Response<ProxyBody> {
    if let Err(ProxyError::Denied {
        rule,
        reason_code,
        policy_revision,
        ..
    }) = &outcome
    {
        crate::denials::journal(
            ctx.plane,
            &ctx.run,
            Refusal {
                method: ctx.method,
                url: ctx.url.clone(),
                has_body: ctx.had_body,
                rule: rule.clone(),
                reason_code: reason_code.clone(),
                policy_revision: policy_revision.clone(),
            },
        );
    }
    outcome.unwrap_or_else(|error| {
        if error.side().is_failure() {
            warn!(run.id = %ctx.run, url = %ctx.url, error = %error, error.side = error.side().as_str(), reason = %error.body()["reason"], "request failed");
        }
        error.into_response()
    })
}
