//! The pass path's flow check (`crate::flows::pass`), between the inspection of a passed
//! request and its forwarding: the request's URL, headers and (read whole) body are
//! compared with its run's guarded reads under the request's own policy snapshot.

use http::request::Parts;

use super::request_body::read_bounded;
use super::RequestCtx;
use crate::flows::pass::{check_pass, PassRequest};
use crate::policy_store::Snapshot;
use crate::request::has_body;
use airlock_net::body::{full_body, ProxyBody};
use airlock_net::respond::ProxyError;

/// Checks a request about to pass (`rule` passed it) against its run's guarded reads;
/// returns the body to forward (read whole when the check needed it). A run none of whose
/// guarded reads ended, or a policy without flows, costs one map lookup and leaves the
/// body streaming.
///
/// Errors: 403 `flow_blocked`, `flow_review_required` or `flow_unchecked`
/// ([`check_pass`]); the body's read errors (413 over the staging limit, 408).
pub(super) async fn check_pass_flows(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    rule: Option<&str>,
    parts: &Parts,
    body: ProxyBody,
) -> Result<ProxyBody, ProxyError> {
    if policy.flows().is_empty() || !ctx.plane.pass_index.watches(&ctx.run) {
        return Ok(body);
    }
    let (bytes, body) = if has_body(parts) {
        let bytes = read_bounded(ctx.plane, parts, body).await?;
        (Some(bytes.clone()), full_body(bytes))
    } else {
        (None, body)
    };
    let target = parts.uri.to_string();
    let request = PassRequest {
        url: &ctx.url,
        target: &target,
        host: &ctx.target.host,
        port: ctx.target.port,
        headers: &parts.headers,
        body: bytes.as_deref(),
    };
    check_pass(
        ctx.plane,
        policy,
        policy.revision(),
        &ctx.run,
        rule,
        &request,
    )
    .await?;
    Ok(body)
}
