//! What the request path knows of a request before any phase decides on it: the facts a
//! policy decides on, whether a body follows (from framing, never the method: docs/policy.md
//! invariant 4), and how long a body airlock reads whole may pause.

use airlock_net::authority::Target;
use http::header;
use http::request::Parts;

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

/// The facts a policy decides on for a request to `target`: scheme, host, port, method,
/// path and whether a body follows (query, headers and profile left empty).
pub fn request_facts<'a>(target: &'a Target, parts: &'a Parts) -> airlock_policy::RequestFacts<'a> {
    airlock_policy::RequestFacts::new(
        target.scheme,
        &target.host,
        target.port,
        parts.method.as_str(),
        parts.uri.path(),
        has_body(parts),
    )
}
