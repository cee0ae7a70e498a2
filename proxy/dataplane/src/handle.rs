//! One request, once its run and destination are known, as a sequence of named phases
//! (cloudflare/pingora's `ProxyHttp` is the model). The same path serves plain `http://`
//! requests and requests inside an intercepted CONNECT (docs/policy.md invariant 7: one
//! decision function).
//!
//! ```text
//! phase              what it does                                   can end the request with
//! admit              head limits, body framing, URL, run open       431, 409 (unjournaled)
//!   (the manifest host, airlock.invalid, is answered here)          the manifest
//! check_authority    the URI and Host name the target (invariant 2) 421, 400
//! decide             a placeholder headed off its host; the policy  403, 413
//!                    decision (the body read first when a body
//!                    matcher needs it); audit; credential plan;
//!                    the decision counted, logged and noted on the
//!                    request's line
//! apply_obligations  the rule's limits and strip                    413, 414, 429
//! act                upgrade | deny | stage | pass                  (always ends it)
//!   upgrade          relay when passed, else 403
//!   deny             403 naming the nearest miss
//!   stage            refuse_undialable, inspect_stage_body, stage, auto-approve
//!   pass             inspect_pass_body, then forward, stage or a staged read's answer
//! journal            always, for every admitted request: a denial is journaled, an
//!                    error becomes its response (logged at warn when a 5xx)
//! line               once the response's last byte has left: the canonical request
//!                    line and the duration histogram (`line`)
//! ```
//!
//! Each phase after `admit` can end the request early with a [`ProxyError`], the answers
//! above or an error of its own (a 500 when the ledger cannot be read, a 502 from the origin);
//! `journal` runs at the end whatever the outcome, and the request counts as in flight
//! until its response body has been sent. The order of the checks is part of the contract (the smuggling defences and
//! the field cases depend on it): authority before policy, the off-host placeholder
//! refusal before the decision, obligations before anything is passed or staged.

use std::sync::Arc;

use airlock_ledger::RunId;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

use airlock_net::authority::Target;

mod act;
mod admit;
mod authority;
mod decide;
mod inspect;
mod journal;
mod line;
pub(crate) use inspect::message_refusal;
pub use line::millis;
pub(crate) use line::{refused_inside, ConnectLine};
mod legacy_mcp;
mod near_miss;
mod obligations;
mod pass_flows;
mod request_body;

/// What the phases share about one admitted request (fixed once it is admitted).
struct RequestCtx<'a> {
    plane: &'a Arc<DataPlane>,
    run: RunId,
    target: Target,
    /// The absolute URL.
    url: String,
    /// The method, for the denial journal (the request's parts move on to `act`).
    method: String,
    /// Whether the framing carried a body, for the denial journal.
    had_body: bool,
    /// The request's canonical log line.
    line: Arc<line::RequestLine>,
    /// The one policy snapshot the request is decided, limited, acted on and journaled
    /// under, taken at admission: a reload while its body is read cannot split it between
    /// two policies. No phase calls `PolicyStore::current` (clippy's `disallowed-methods`,
    /// proxy/dataplane/clippy.toml).
    policy: Arc<Snapshot>,
}

/// Counts a request as in flight until dropped, which is when its response body has been
/// sent (graceful shutdown waits for zero).
struct InFlight(Arc<DataPlane>);

impl InFlight {
    fn new(shared: &Arc<DataPlane>) -> Self {
        shared
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Handles one request of `run` for `target`: the phase chart of the module docs.
pub async fn handle(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let in_flight = InFlight::new(&shared);
    let line = line::RequestLine::start(&shared, &run, &target, &req);
    let head_request = req.method() == http::Method::HEAD;
    let response = match admit::admit(&shared, run, target, req, &line) {
        Ok((ctx, parts, body)) => {
            let outcome = phases(&ctx, parts, body).await;
            journal::journal(ctx, outcome)
        }
        // Not admitted: answered at once, before any phase runs.
        Err(error) => error.into_response(),
    };
    line.answered(response.status());
    let (head, mut body) = response.into_parts();
    if head_request {
        // A response to HEAD has no content (RFC 9110 §9.3.2): airlock's own answers
        // (refusals, synthetic responses) keep their headers, content-length included,
        // and lose their body; sent over HTTP/2 a body would end the stream in
        // PROTOCOL_ERROR (RFC 9113 §8.1.1) and the client would see no status at all.
        body = airlock_net::body::full_body(bytes::Bytes::new());
    }
    let body = airlock_net::body::Counted::new(body, line.bytes_out.clone());
    // The line is written when the body is dropped: after its last byte, or when the
    // client went away; the request stops counting as in flight just after.
    Response::from_parts(
        head,
        airlock_net::body::Guarded::new(body, Box::new((line, in_flight))).boxed(),
    )
}

/// The phases of an admitted request from the manifest host to `act`.
async fn phases(
    ctx: &RequestCtx<'_>,
    mut parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    if ctx.target.host == crate::manifest::MANIFEST_HOST {
        let path = parts.uri.path();
        return Ok(crate::manifest::answer(&ctx.policy, ctx.run.as_str(), path));
    }
    authority::check_authority(&parts, &ctx.target)?;
    // The snapshot taken at admission, for the whole request.
    let policy = &ctx.policy;
    let (decision, body) = decide::decide(ctx, policy, &mut parts, body).await?;
    let (rule, body) =
        obligations::apply_obligations(ctx, policy, &decision, &mut parts, body).await?;
    act::act(ctx, policy, decision, rule, parts, body).await
}
