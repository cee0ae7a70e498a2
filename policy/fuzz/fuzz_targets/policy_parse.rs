//! Fuzz target: any text into the policy parser; whatever compiles is then asked to decide,
//! explain, lint and diff requests whose host, path, query, header and body come from the
//! same input. Nothing
//! may panic, and explain must agree with decide.
#![no_main]

use airlock_policy::{Policy, RequestBody, RequestFacts, Scheme};
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
    // "host path?query header-name:value"
    let mut words = probe.splitn(3, ' ');
    let host = words.next().unwrap_or_default();
    let target = words.next().unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let header = words.next().and_then(|h| h.split_once(':'));
    let headers: Vec<(&str, &str)> = header.into_iter().collect();
    for (method, has_body) in [("GET", false), ("POST", true), ("GET", true)] {
        let mut facts = RequestFacts::new(Scheme::Https, host, 443, method, path, has_body);
        facts.query = query;
        facts.headers = &headers;
        facts.profile = Some("fuzz");
        if has_body {
            // The policy text doubles as a body: JSON, GraphQL and JSON-RPC matchers see
            // arbitrary bytes too.
            facts.body = RequestBody::Read(policy_text.as_bytes());
        }
        let decision = policy.decide(&facts);
        assert_eq!(policy.explain(&facts).decision, decision);
    }
    let _ = policy.decide_connect(host, 443);
    let _ = policy.lints();
    assert!(policy.diff(&policy).changes.is_empty());
});
