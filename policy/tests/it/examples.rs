//! The policies in `examples/policies/` load and decide as their comments say.

use airlock_policy::{Action, Policy, RequestFacts, Scheme};

fn facts<'a>(host: &'a str, method: &'a str, path: &'a str, has_body: bool) -> RequestFacts<'a> {
    RequestFacts::new(Scheme::Https, host, 443, method, path, has_body)
}

#[test]
fn webhooks_example_loads_and_decides() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/webhooks.toml");
    let policy = Policy::load(&path).expect("the example policy loads");
    let cases = [
        (
            facts("api.internal.example", "GET", "/admin/users", false),
            Action::Deny,
            Some("no-admin"),
        ),
        (
            facts("api.internal.example", "GET", "/customers", false),
            Action::Pass,
            Some("api-read"),
        ),
        (
            facts("api.internal.example", "GET", "/customers", true),
            Action::Stage,
            Some("api-write"),
        ),
        (
            facts("api.internal.example", "DELETE", "/customers/1", false),
            Action::Stage,
            Some("api-write"),
        ),
        (
            facts("ci.hooks.example.com", "POST", "/deliver/1", true),
            Action::Stage,
            Some("webhooks"),
        ),
        (
            facts("hooks.example.com", "POST", "/deliver/1", true),
            Action::Deny,
            None,
        ),
        (
            facts("elsewhere.example", "GET", "/", false),
            Action::Deny,
            None,
        ),
    ];
    for (request, action, rule) in cases {
        let decision = policy.decide(&request);
        assert_eq!(
            decision.action, action,
            "{} {} {}",
            request.method, request.host, request.path
        );
        assert_eq!(
            decision.rule.as_deref(),
            rule,
            "{} {} {}",
            request.method,
            request.host,
            request.path
        );
    }
}

#[test]
fn github_example_loads_without_lints() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/github.toml");
    let policy = Policy::load(&path).expect("the example policy loads");
    assert!(policy.lints().is_empty(), "{:?}", policy.lints());
    assert_eq!(
        policy
            .decide(&facts("GET", "api.github.com", "/repos/o/r/issues", false))
            .action,
        Action::Deny,
        "without state=open the issues rule does not match"
    );
}
