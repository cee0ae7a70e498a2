//! Why no rule allowed a request (`default_deny`): the rule that came nearest, and the
//! condition it missed, so the 403's reason and hint name the actual mismatch (a wrong
//! method is told about the method, not about `port` or `allow_private`).

use http::request::Parts;

use super::Target;
use crate::request::request_facts;
use airlock_policy::{Policy, RuleOutcome};

/// The nearest rule's miss, in the agent's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NearMiss {
    /// Appended to the decision's reason, e.g. ``rule "api" matches this host and port
    /// but not its method (POST)``.
    pub(super) reason: String,
    /// What to change, naming the condition that failed.
    pub(super) hint: String,
}

/// How far the rule checks got before `field` failed, in [`Rule::check`]'s order
/// (scheme, host, port, profiles, method, path, query, headers, body); `None` for a rule
/// that cannot decide a request (a tunnel rule).
///
/// [`Rule::check`]: airlock_policy::Rule
fn progress(field: &str) -> Option<u8> {
    Some(match field {
        "scheme" => 0,
        "host" => 1,
        "port" => 2,
        "profiles" => 3,
        "method" => 4,
        "path" => 5,
        "query" => 6,
        "headers" => 7,
        "action" => return None,
        _ => 8, // json, graphql, jsonrpc, form: the body matchers
    })
}

/// For a `default_deny` of the request (`target`, `parts`): the rule that got furthest
/// through its conditions (the first such rule on a tie) and the one it missed, from
/// [`Policy::explain`] (evaluated only on this rare path). Baseline rules are left out:
/// they only deny.
pub(super) fn near_miss(policy: &Policy, target: &Target, parts: &Parts) -> NearMiss {
    let explained = policy.explain(&request_facts(target, parts));
    let nearest = explained
        .rules
        .iter()
        .filter(|trace| !trace.baseline)
        .filter_map(|trace| match trace.outcome {
            RuleOutcome::Mismatch { field } => progress(field).map(|p| (p, field, trace)),
            _ => None,
        })
        .fold(None, |best: Option<(u8, &str, _)>, next| match best {
            Some(best) if best.0 >= next.0 => Some(best),
            _ => Some(next),
        });
    let authority = target.authority();
    let ask = "read the manifest for this run's rules; if the request is needed, ask the operator for a rule that passes or stages it";
    let Some((_, field, trace)) = nearest.filter(|(p, _, _)| *p > 1) else {
        return NearMiss {
            reason: format!("no rule names host {}", target.host),
            hint: format!("no rule's host matches {}; {ask}", target.host),
        };
    };
    let id = &trace.id;
    let detail = trace
        .detail
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    let (what, hint) = match field {
        "scheme" => (
            format!("its scheme ({})", target.scheme),
            format!("rule \"{id}\" is for another scheme than {}; {ask}", target.scheme),
        ),
        "port" => (
            format!("its port ({})", target.port),
            format!(
                "rule \"{id}\" names host {} but not port {}: a rule without `port` matches only 443 (https) or 80 (http); {ask}",
                target.host, target.port
            ),
        ),
        "profiles" => (
            format!("its profiles{detail}"),
            format!("rule \"{id}\" applies to other profiles than this run's{detail}; {ask}"),
        ),
        "method" => (
            format!("its method ({})", parts.method),
            format!(
                "rule \"{id}\" matches {authority} but not method {}: send a method the rule allows, or {ask}",
                parts.method
            ),
        ),
        "path" => (
            format!("its path ({})", parts.uri.path()),
            format!(
                "rule \"{id}\" matches {authority} and method {} but not path {}: use a path the rule names, or {ask}",
                parts.method,
                parts.uri.path()
            ),
        ),
        other => (
            format!("its {other}{detail}"),
            format!("rule \"{id}\" matches the method and path but not the request's {other}{detail}; {ask}"),
        ),
    };
    let matched = if matches!(field, "scheme" | "port") {
        "this host"
    } else {
        "this host and port"
    };
    NearMiss {
        reason: format!("rule \"{id}\" matches {matched} but not {what}"),
        hint,
    }
}
