//! The admit phase: the request head within its limits, its body framed, its URL, and
//! its run still open. A request not admitted is answered at once, before any other
//! phase (and unjournaled).

use std::sync::Arc;

use airlock_ledger::RunId;
use http::request::Parts;
use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{RequestCtx, Target};
use crate::request::{has_body, FramedBody};
use crate::DataPlane;
use airlock_net::body::{BoxError, ProxyBody};
use airlock_net::respond::ProxyError;

/// Admits one request of `run` for `target`: its context, head and body for the phases.
pub(super) fn admit<'a>(
    shared: &'a Arc<DataPlane>,
    run: RunId,
    target: Target,
    req: Request<Incoming>,
    line: &Arc<super::line::RequestLine>,
) -> Result<(RequestCtx<'a>, Parts, ProxyBody), ProxyError> {
    airlock_net::headers::check_head_limits(req.headers(), req.uri())?;
    let (mut parts, body) = req.into_parts();
    // hyper knows from the framing (h2 END_STREAM, h1 length) whether a body follows.
    let framed = !http_body::Body::is_end_stream(&body);
    let body = airlock_net::body::Counted::new(body, line.bytes_in.clone())
        .map_err(|e| -> BoxError { Box::new(e) })
        .boxed();
    let body = if framed {
        parts.extensions.insert(FramedBody);
        airlock_net::limits::keepalive::hold_body(&parts, body)
    } else {
        body
    };
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = target.url(path_and_query);
    if shared.is_closed(&run) {
        // Committed or aborted: the run's credentials still authenticate, so the agent
        // learns why, but nothing passes and nothing is staged any more.
        return Err(ProxyError::RunNotOpen {
            reason: format!(
                "run {run} is closed (committed or aborted): it passes and stages no more \
                 requests, reads included"
            ),
            closed: true,
        });
    }
    let method = parts.method.to_string();
    let had_body = has_body(&parts);
    // Admission is where a request takes its one policy snapshot (RequestCtx::policy).
    #[allow(clippy::disallowed_methods)]
    let policy = shared.policy.current();
    let ctx = RequestCtx {
        plane: shared,
        run,
        target,
        url,
        method,
        had_body,
        line: line.clone(),
        policy,
    };
    Ok((ctx, parts, body))
}
