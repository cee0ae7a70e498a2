//! Fuzz target: any text into the policy parser; whatever compiles is then asked to decide,
//! explain, lint and diff requests whose host and path come from the same input. Nothing
//! may panic, and explain must agree with decide.
#![no_main]

use airlock_policy::{Policy, RequestFacts, Scheme};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line, when it is not TOML, doubles as the request's "host path".
    let (probe, policy_text) = text.split_once('\n').unwrap_or(("", text));
    let Ok(policy) = Policy::from_toml_str(policy_text, "<fuzz>") else {
        return;
    };
    let (host, path) = probe.split_once(' ').unwrap_or((probe, "/"));
    for (method, has_body) in [("GET", false), ("POST", true), ("GET", true)] {
        let facts = RequestFacts {
            scheme: Scheme::Https,
            host,
            port: 443,
            method,
            path,
            has_body,
        };
        let decision = policy.decide(&facts);
        assert_eq!(policy.explain(&facts).decision, decision);
    }
    let _ = policy.decide_connect(host, 443);
    let _ = policy.lints();
    assert!(policy.diff(&policy).changes.is_empty());
});
