//! Integration tests of airlock-policy's public API (one test binary).

mod adapters;
mod connect;
mod credentials;
mod decide;
mod errors;
mod reads;

use airlock_policy::{Action, Decision, Policy, RequestFacts, Scheme};

/// Compiles inline policy text, panicking with the loader's message on failure.
pub(crate) fn policy(text: &str) -> Policy {
    match Policy::from_toml_str(text, "<inline>") {
        Ok(policy) => policy,
        Err(error) => panic!("test policy should load: {error}"),
    }
}

/// Decides `METHOD scheme://host:port/path` (no body unless `has_body`).
pub(crate) fn decide(
    policy: &Policy,
    method: &str,
    scheme: Scheme,
    host: &str,
    port: u16,
    path: &str,
    has_body: bool,
) -> Decision {
    policy.decide(&RequestFacts::new(
        scheme, host, port, method, path, has_body,
    ))
}

/// `(action, rule id, reason code)` of a decision, for compact table asserts.
pub(crate) type Summary<'a> = (Action, Option<&'a str>, &'static str);

/// The summary of `decision`.
pub(crate) fn summary(decision: &Decision) -> Summary<'_> {
    (
        decision.action,
        decision.rule.as_deref(),
        decision.reason_code,
    )
}
mod examples;
mod matchers;
