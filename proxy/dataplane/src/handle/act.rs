//! The act phase: pass, stage, deny or upgrade, as decided.

use http::request::Parts;
use tracing::debug;

use super::{request_facts, Target};
use crate::DataPlane;
use airlock_net::respond::ProxyError;

/// For a request no rule allowed (`default_deny`): the first rule that matched its scheme,
/// host and port but not a later condition, e.g. ``rule "api" matches this host and port
/// but not its method`` — what the agent (or the operator reading the 403) most likely
/// needs to know. Evaluated with [`airlock_policy::Policy::explain`] on the request's
/// method and path only, and only on this (rare) path.
pub(super) fn nearest_miss(
    policy: &airlock_policy::Policy,
    target: &Target,
    parts: &Parts,
    decision: &airlock_policy::Decision,
) -> Option<String> {
    if decision.reason_code != airlock_policy::reason_code::DEFAULT_DENY {
        return None;
    }
    policy
        .explain(&request_facts(target, parts))
        .rules
        .into_iter()
        .find_map(|trace| match trace.outcome {
            airlock_policy::RuleOutcome::Mismatch { field }
                if !trace.baseline && !matches!(field, "scheme" | "host" | "port") =>
            {
                Some(format!(
                    "rule \"{}\" matches this host and port but not its {field}",
                    trace.id
                ))
            }
            _ => None,
        })
}

/// Refuses a destination the release could never dial: its name resolves only to private
/// or special-purpose addresses no `allow_private` names, or to airlock's own listeners
/// (POLICY.md invariant 1, checked at staging as it is on pass). A name that does not
/// resolve now is staged: the origin may be reachable at release.
pub(super) async fn refuse_undialable(
    shared: &DataPlane,
    target: &Target,
) -> Result<(), ProxyError> {
    match shared.dialer.resolve(&target.host, target.port).await {
        Err(dial) => match dial.refusal_code() {
            Some(code) => Err(ProxyError::DestinationRefused {
                code,
                reason: dial.to_string(),
            }),
            None => {
                debug!(origin.host = %target.host, error = %dial, "staging for a destination that does not resolve now");
                Ok(())
            }
        },
        Ok(_) => Ok(()),
    }
}
