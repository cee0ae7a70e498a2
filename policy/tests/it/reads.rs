//! `method = "read"` knows the POSTs that are reads by protocol (git fetch, GraphQL
//! query), and `host` takes a list of hosts.

use airlock_policy::{Action, Policy, RequestBody, RequestFacts, Scheme};

use crate::policy;

fn forge() -> Policy {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/forge.toml");
    Policy::load(&path).expect("forge.toml loads")
}

/// A POST with a Content-Type and a body (read when `body` is `Some`).
fn post<'a>(
    host: &'a str,
    path: &'a str,
    headers: &'a [(&'a str, &'a str)],
    body: Option<&'a [u8]>,
) -> RequestFacts<'a> {
    RequestFacts {
        headers,
        body: body.map_or(RequestBody::NotRead, RequestBody::Read),
        ..RequestFacts::new(Scheme::Https, host, 443, "POST", path, true)
    }
}

#[test]
fn forge_example_lets_git_fetch_through_as_a_read() {
    let policy = forge();
    let fetch = [("content-type", "application/x-git-upload-pack-request")];
    let request = post("github.com", "/o/r.git/git-upload-pack", &fetch, None);
    assert_eq!(policy.body_limit(&request), None, "no body is needed");
    let decision = policy.decide(&request);
    assert_eq!(
        (decision.action, decision.rule.as_deref()),
        (Action::Pass, Some("github-reads"))
    );
    // The push is still staged, and a POST to upload-pack without git's content type is
    // not a read.
    let push = [("content-type", "application/x-git-receive-pack-request")];
    let decision = policy.decide(&post("github.com", "/o/r/git-receive-pack", &push, None));
    assert_eq!(
        (decision.action, decision.rule.as_deref()),
        (Action::Stage, Some("git-push"))
    );
    let decision = policy.decide(&post("github.com", "/o/r/git-upload-pack", &[], None));
    assert_eq!(decision.action, Action::Deny);
}

#[test]
fn forge_example_passes_graphql_queries_and_stages_mutations() {
    let policy = forge();
    let json = [("content-type", "application/json")];
    let unread = post("api.github.com", "/graphql", &json, None);
    assert_eq!(
        policy.body_limit(&unread),
        Some(airlock_policy::DEFAULT_BODY_MATCH_BYTES),
        "the body decides whether it is a query"
    );
    let cases: [(&[u8], Action, &str); 4] = [
        (br#"{"query":"{ viewer { login } }"}"#, Action::Pass, "api-reads"),
        (
            br#"{"query":"query Repo($o: String!) { repository(owner: $o, name: \"r\") { id } }","variables":{"o":"me"}}"#,
            Action::Pass,
            "api-reads",
        ),
        (
            br#"{"query":"mutation { addComment(input: {subjectId: \"1\", body: \"hi\"}) { clientMutationId } }"}"#,
            Action::Stage,
            "api-graphql",
        ),
        (
            br#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#,
            Action::Stage,
            "api-graphql",
        ),
    ];
    for (body, action, rule) in cases {
        let decision = policy.decide(&post("api.github.com", "/graphql", &json, Some(body)));
        assert_eq!(
            (decision.action, decision.rule.as_deref()),
            (action, Some(rule)),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn a_write_rule_does_not_take_a_graphql_query() {
    let policy = policy(
        r#"
version = 1
[[rule]]
id = "writes"
host = "api.example.com"
method = "write"
action = "stage"
"#,
    );
    let json = [("content-type", "application/json")];
    let query = post(
        "api.example.com",
        "/v1/graphql",
        &json,
        Some(br#"{"query":"{ a }"}"#),
    );
    assert_eq!(policy.decide(&query).action, Action::Deny);
    let mutation = post(
        "api.example.com",
        "/v1/graphql",
        &json,
        Some(br#"{"query":"mutation { a }"}"#),
    );
    assert_eq!(policy.decide(&mutation).action, Action::Stage);
    let other = post("api.example.com", "/v1/items", &json, None);
    assert_eq!(policy.body_limit(&other), None);
    assert_eq!(policy.decide(&other).action, Action::Stage);
}

const HOSTS: &str = r#"
version = 1
[[rule]]
id = "pypi"
host = ["pypi.org", "files.pythonhosted.org", "*.mirror.example"]
port = [443, 8443]
method = "read"
action = "pass"
"#;

#[test]
fn a_rule_with_a_host_list_matches_any_of_them() {
    let policy = policy(HOSTS);
    for (host, port, action) in [
        ("pypi.org", 443, Action::Pass),
        ("files.pythonhosted.org", 8443, Action::Pass),
        ("eu.mirror.example", 443, Action::Pass),
        ("mirror.example", 443, Action::Deny),
        ("upload.pypi.org", 443, Action::Deny),
        ("pypi.org", 80, Action::Deny),
    ] {
        let facts = RequestFacts::new(Scheme::Https, host, port, "GET", "/simple/", false);
        assert_eq!(policy.decide(&facts).action, action, "{host}:{port}");
    }
    assert!(matches!(
        policy.decide_connect("files.pythonhosted.org", 443),
        airlock_policy::ConnectDecision::Intercept
    ));
    assert!(matches!(
        policy.decide_connect("evil.example", 443),
        airlock_policy::ConnectDecision::Deny(_)
    ));
}

#[test]
fn a_host_list_refuses_empty_lists_duplicates_and_bad_globs() {
    for (hosts, problem) in [
        ("[]", "empty list"),
        ("[\"a.example\", \"A.example\"]", "listed twice"),
        ("[\"a.example\", \"*\"]", "alone matches every host"),
        ("[\"a.example\", 5]", "a host glob or a list of host globs"),
    ] {
        let text = format!(
            "version = 1\n[[rule]]\nid = \"r\"\nhost = {hosts}\naction = \"pass\"\nmethod = \"read\"\n"
        );
        let error = Policy::from_toml_str(&text, "<inline>")
            .expect_err("refused")
            .to_string();
        assert!(error.contains(problem), "{hosts}: {error}");
    }
}

#[test]
fn an_injecting_rule_with_a_host_list_stays_inside_the_bind() {
    let text = |hosts: &str| {
        format!(
            r#"
version = 1
[credential.tok]
source = {{ env = "TOK" }}
bind = {{ hosts = ["a.example", "b.example"] }}
place = {{ header = "authorization", format = "Bearer {{}}" }}
[[rule]]
id = "r"
host = {hosts}
scheme = "https"
method = "read"
action = "pass"
inject = "tok"
"#
        )
    };
    Policy::from_toml_str(&text(r#"["a.example", "b.example"]"#), "<inline>")
        .expect("inside the bind");
    let error = Policy::from_toml_str(&text(r#"["a.example", "c.example"]"#), "<inline>")
        .expect_err("c.example is outside")
        .to_string();
    assert!(error.contains("c.example"), "{error}");
}

#[test]
fn a_read_bind_takes_a_git_fetch_but_not_an_unread_graphql_body() {
    let policy = policy(
        r#"
version = 1
[credential.tok]
source = { env = "TOK" }
bind = { hosts = ["forge.example"], methods = "read" }
place = { header = "authorization", format = "Bearer {}" }
[[rule]]
id = "r"
host = "forge.example"
scheme = "https"
method = "read"
action = "pass"
inject = "tok"
"#,
    );
    let credential = policy.credential("tok").expect("credential");
    let fetch = [("content-type", "application/x-git-upload-pack-request")];
    assert!(credential.binds(&post("forge.example", "/o/r/git-upload-pack", &fetch, None)));
    let json = [("content-type", "application/json")];
    assert!(!credential.binds(&post("forge.example", "/graphql", &json, None)));
    assert!(credential.binds(&post(
        "forge.example",
        "/graphql",
        &json,
        Some(br#"{"query":"{ a }"}"#)
    )));
    assert!(!credential.binds(&post("forge.example", "/o/r/git-receive-pack", &[], None)));
}
