//! A call a rule stages on MCP's deprecated HTTP+SSE transport is refused, never staged:
//! airlock could not release it (crate::sessions::legacy). With the client's event
//! stream open, the POST gets `202 Accepted` (the transport's answer to every message)
//! carrying the denial's JSON, and each request in it gets a JSON-RPC error response in
//! the stream, so the client's call ends at once; without it (closed, or never seen), a
//! 403. Either way the
//! refusal is journaled as a denial (`mcp_legacy_transport`).

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode};

use super::RequestCtx;
use crate::denials::Refusal;
use crate::policy_store::Snapshot;
use crate::sessions::legacy;
use airlock_net::body::ProxyBody;
use airlock_net::respond::{json_response, ProxyError};

/// The reason code of the refusal.
pub(super) const REASON_CODE: &str = "mcp_legacy_transport";

/// The refusal of a staged request to a legacy message URL, `None` for any other request
/// (not JSON-RPC, or no sign of the deprecated transport).
pub(super) fn refuse(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    rule: Option<&str>,
    parts: &Parts,
    body: &Bytes,
) -> Option<Result<Response<ProxyBody>, ProxyError>> {
    let streams = &ctx.plane.sessions.legacy;
    let injector = streams.injector(&ctx.run, &ctx.url);
    if injector.is_none()
        && !streams.was_named(&ctx.run, &ctx.url)
        && !legacy::looks_legacy(&ctx.url, &parts.headers)
    {
        return None;
    }
    if !legacy::is_jsonrpc(body) {
        return None;
    }
    let reason = "this MCP server speaks the deprecated HTTP+SSE transport (MCP 2024-11-05), whose results arrive on the event stream: airlock stages MCP calls only over streamable HTTP, where it can answer them and release them in a session of its own, so this call was refused and not sent".to_owned();
    let refusal = ProxyError::Denied {
        rule: rule.map(str::to_owned),
        reason: reason.clone(),
        reason_code: REASON_CODE.to_owned(),
        policy_revision: policy.revision().to_owned(),
        hint: Some(
            "connect to the server's streamable HTTP endpoint (MCP 2025-03-26 or later, often /mcp) so the call can be staged, or ask the operator for a rule that passes it; read the manifest".into(),
        ),
    };
    let Some(injector) = injector else {
        return Some(Err(refusal));
    };
    let denial = refusal.body();
    let answers = legacy::refusals(body, &reason, &denial);
    if !answers.iter().all(|answer| injector.send(answer)) {
        // The stream closed or its queue is full: the client learns it from the POST.
        return Some(Err(refusal));
    }
    tracing::info!(run.id = %ctx.run, url = %ctx.url, answers = answers.len(), "staged MCP call on the HTTP+SSE transport refused in its stream");
    crate::denials::journal(
        ctx.plane,
        &ctx.run,
        Refusal {
            method: ctx.method.clone(),
            url: ctx.url.clone(),
            has_body: ctx.had_body,
            rule: rule.map(str::to_owned),
            reason_code: REASON_CODE.to_owned(),
            policy_revision: policy.revision().to_owned(),
        },
    );
    Some(Ok(json_response(StatusCode::ACCEPTED, &denial)))
}
