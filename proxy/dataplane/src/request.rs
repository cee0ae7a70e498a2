//! What the request path knows of a request before any phase decides on it: the facts a
//! policy decides on, whether a body follows (from framing, never the method: docs/policy.md
//! invariant 4), and how long a body airlock reads whole may pause and take in all.

use std::time::{Duration, Instant};

use airlock_net::authority::Target;
use airlock_net::body::ProxyBody;
use airlock_net::respond::{BodyDeadline, ProxyError};
use bytes::Bytes;
use http::header;
use http::request::Parts;
use http_body_util::BodyExt as _;

/// The error of a [`ProxyBody`]'s frames.
type ProxyBodyError = <ProxyBody as http_body::Body>::Error;

/// Whether the request carries a body, from its framing (invariant 4), not its method.
pub fn has_body(parts: &Parts) -> bool {
    if parts.headers.contains_key(header::TRANSFER_ENCODING)
        || parts.extensions.get::<FramedBody>().is_some()
    {
        return true;
    }
    parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

/// Marks a request whose framing carries a body that its headers do not declare: an h2
/// request whose HEADERS frame did not end the stream (DATA frames follow, with no
/// `content-length`). docs/policy.md invariant 4: body presence comes from framing, so such a
/// GET is a write.
#[derive(Debug, Clone, Copy)]
pub struct FramedBody;

/// How long a client may pause while sending a body airlock reads whole (staging).
pub const BODY_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a client may take, in all, to send a body airlock reads whole (staging, a
/// body matcher, the placeholder search): 120 s by default (`airlock serve
/// --body-read-timeout`). Without it a body trickled a byte every 29 s would hold its
/// connection for ever under [`BODY_IDLE_TIMEOUT`] alone.
pub const DEFAULT_BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The next frame of a body airlock reads whole, within both deadlines: at most
/// [`BODY_IDLE_TIMEOUT`] after the last frame, and at most `total` after `started` (when
/// reading began).
///
/// # Errors
/// [`ProxyError::BodyTimeout`] naming the deadline that passed first
/// ([`BodyDeadline::Idle`] or [`BodyDeadline::Total`]).
pub(crate) async fn next_frame(
    body: &mut ProxyBody,
    started: Instant,
    total: Duration,
) -> Result<Option<Result<http_body::Frame<Bytes>, ProxyBodyError>>, ProxyError> {
    let left = total.saturating_sub(started.elapsed());
    let (wait, deadline) = if left < BODY_IDLE_TIMEOUT {
        (left, BodyDeadline::Total)
    } else {
        (BODY_IDLE_TIMEOUT, BodyDeadline::Idle)
    };
    let seconds = match deadline {
        BodyDeadline::Total => total.as_secs(),
        _ => BODY_IDLE_TIMEOUT.as_secs(),
    };
    tokio::time::timeout(wait, body.frame())
        .await
        .map_err(|_| ProxyError::BodyTimeout { deadline, seconds })
}

/// The facts a policy decides on for a request to `target`: scheme, host, port, method,
/// path and whether a body follows (query, headers and profile left empty). The method is
/// the one rules and flows judge the request by ([`airlock_policy::effective_method`]): a
/// `GET` whose `X-HTTP-Method-Override` (or `X-HTTP-Method`, `X-Method-Override`, a
/// `_method` query field) asks to be a `POST` is decided as a `POST`.
pub fn request_facts<'a>(target: &'a Target, parts: &'a Parts) -> airlock_policy::RequestFacts<'a> {
    let headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    let method = airlock_policy::effective_method(
        parts.method.as_str(),
        headers,
        parts.uri.query().unwrap_or(""),
    );
    airlock_policy::RequestFacts::new(
        target.scheme,
        &target.host,
        target.port,
        method,
        parts.uri.path(),
        has_body(parts),
    )
}
