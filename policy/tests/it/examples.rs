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
            .decide(&facts("api.github.com", "GET", "/repos/o/r/issues", false))
            .action,
        Action::Deny,
        "without state=open the issues rule does not match"
    );
}

#[test]
fn github_token_example_loads_and_injects_only_inside_its_bind() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/github-token.toml");
    let policy = Policy::load(&path).expect("the example policy loads");
    assert!(policy.lints().is_empty(), "{:?}", policy.lints());
    let credential = policy.credential("gh-bot").expect("gh-bot");
    assert!(credential.placeholder());
    let cases = [
        (
            facts("api.github.com", "GET", "/user", false),
            Action::Pass,
            Some("gh-bot"),
        ),
        (
            facts("api.github.com", "POST", "/repos/o/r/pulls", true),
            Action::Stage,
            Some("gh-bot"),
        ),
        (
            facts("api.github.com", "GET", "/repos/o/r/hooks/1", false),
            Action::Deny,
            None,
        ),
        (
            facts("codeload.github.com", "GET", "/o/r/tar.gz/main", false),
            Action::Pass,
            None,
        ),
    ];
    for (request, action, inject) in cases {
        let decision = policy.decide(&request);
        assert_eq!(decision.action, action, "{request:?}");
        let injected = decision
            .rule
            .as_deref()
            .and_then(|id| policy.rule(id))
            .and_then(|rule| rule.inject());
        assert_eq!(injected, inject, "{request:?}");
        if let Some(name) = injected {
            assert!(policy.credential(name).is_some_and(|c| c.binds(&request)));
        }
    }
}
