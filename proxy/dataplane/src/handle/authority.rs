//! The authority phase: the request names the destination it was sent to.

use http::request::Parts;

use super::Target;
use airlock_net::respond::ProxyError;

/// Checks that the request's URI authority and `Host` header name `target` (invariant 2).
pub(super) fn check_authority(parts: &Parts, target: &Target) -> Result<(), ProxyError> {
    use airlock_net::authority::AuthorityProblem;
    airlock_net::authority::check_authority(&parts.uri, &parts.headers, target).map_err(|problem| {
        match problem {
            AuthorityProblem::UriMismatch(reason) | AuthorityProblem::HostMismatch(reason) => {
                ProxyError::AuthorityMismatch { reason }
            }
            AuthorityProblem::DuplicateHost => ProxyError::BadRequest {
                code: "duplicate_host",
                reason: "the request has more than one Host header".into(),
            },
        }
    })
}
