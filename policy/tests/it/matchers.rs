//! query, headers, body matchers, audit mode, tunnel, profiles and the baseline, through
//! the public API.

use airlock_policy::{
    reason_code, Action, ConnectDecision, Mode, Policy, Redaction, RequestBody, RequestFacts,
    Review, RuleOutcome, Scheme,
};

use crate::{policy, summary, Summary};

const GITHUB: &str = r#"
version = 1

[[rule]]
id = "gql-mutations"
host = "api.github.com"
method = ["POST"]
path = "/graphql"
graphql = { operation = "mutation" }
action = "stage"
review = "auto"
limit = { body_bytes = 4096 }

[[rule]]
id = "gql-queries"
host = "api.github.com"
method = ["POST"]
path = "/graphql"
graphql = { operation = "query" }
action = "pass"
limit = { body_bytes = 4096 }

[[rule]]
id = "open-issues"
host = "api.github.com"
method = "read"
path = "/repos/*/*/issues"
query = { state = "open", page = "*" }
action = "pass"

[[rule]]
id = "push-hooks"
host = "hooks.example.com"
method = ["POST"]
headers = { "X-GitHub-Event" = "push" }
json = { "/ref" = "refs/heads/main", "/forced" = false }
action = "stage"
strip = ["Cookie", "x-forwarded-for"]
redact = ["/password", "header:authorization"]

[[rule]]
id = "mcp-create"
host = "mcp.example.com"
method = ["POST"]
jsonrpc = { method = "tools/call", tool = "create_*" }
action = "stage"

[[rule]]
id = "mcp-other"
host = "mcp.example.com"
method = ["POST"]
action = "pass"
"#;

fn facts<'a>(method: &'a str, host: &'a str, path: &'a str) -> RequestFacts<'a> {
    RequestFacts::new(Scheme::Https, host, 443, method, path, method == "POST")
}

fn decide_body(policy: &Policy, host: &str, path: &str, body: &str) -> Summary<'static> {
    let request = RequestFacts {
        body: RequestBody::Read(body.as_bytes()),
        ..facts("POST", host, path)
    };
    leak(summary(&policy.decide(&request)))
}

/// Test helper: rule ids come from the static policy text, so leaking is fine.
fn leak(summary: Summary<'_>) -> Summary<'static> {
    let (action, rule, code) = summary;
    (
        action,
        rule.map(|r| &*Box::leak(r.to_owned().into_boxed_str())),
        code,
    )
}

#[test]
fn graphql_query_passes_and_mutation_stages() {
    let policy = policy(GITHUB);
    let table = [
        (
            r#"{"query":"query { viewer { login } }"}"#,
            (Action::Pass, Some("gql-queries"), reason_code::RULE_PASS),
        ),
        (
            r#"{"query":"mutation M { createIssue(input: {}) { issue { id } } }"}"#,
            (
                Action::Stage,
                Some("gql-mutations"),
                reason_code::RULE_STAGE,
            ),
        ),
        (
            r#"{"query":"subscription S { x }"}"#,
            (Action::Deny, None, reason_code::DEFAULT_DENY),
        ),
        (
            "not json",
            (
                Action::Deny,
                Some("gql-mutations"),
                reason_code::BODY_UNPARSEABLE,
            ),
        ),
    ];
    for (body, want) in table {
        assert_eq!(
            decide_body(&policy, "api.github.com", "/graphql", body),
            want,
            "{body}"
        );
    }
    let big = format!(
        r#"{{"query":"query {{ a }}", "pad": "{}"}}"#,
        "x".repeat(5000)
    );
    assert_eq!(
        decide_body(&policy, "api.github.com", "/graphql", &big),
        (
            Action::Deny,
            Some("gql-mutations"),
            reason_code::BODY_TOO_LARGE
        )
    );
    let too_large = RequestFacts {
        body: RequestBody::TooLarge,
        ..facts("POST", "api.github.com", "/graphql")
    };
    assert_eq!(
        policy.decide(&too_large).reason_code,
        reason_code::BODY_TOO_LARGE
    );
    let unread = facts("POST", "api.github.com", "/graphql");
    assert_eq!(
        policy.decide(&unread).reason_code,
        reason_code::BODY_UNPARSEABLE
    );
    assert_eq!(
        policy.rule("gql-mutations").map(|r| r.review()),
        Some(Review::Auto)
    );
}

#[test]
fn body_limit_says_when_and_how_much_to_read() {
    let policy = policy(GITHUB);
    assert_eq!(
        policy.body_limit(&facts("POST", "api.github.com", "/graphql")),
        Some(4096)
    );
    assert_eq!(
        policy.body_limit(&facts("GET", "api.github.com", "/graphql")),
        None
    );
    assert_eq!(
        policy.body_limit(&facts("POST", "api.github.com", "/other")),
        None
    );
    assert_eq!(
        policy.body_limit(&facts("POST", "mcp.example.com", "/mcp")),
        Some(airlock_policy::DEFAULT_BODY_MATCH_BYTES)
    );
}

#[test]
fn query_matcher_table() {
    let policy = policy(GITHUB);
    let table = [
        ("state=open&page=2", Action::Pass, reason_code::RULE_PASS),
        (
            "page=1&state=open&sort=x",
            Action::Pass,
            reason_code::RULE_PASS,
        ),
        ("state=open", Action::Deny, reason_code::DEFAULT_DENY),
        (
            "state=closed&page=1",
            Action::Deny,
            reason_code::DEFAULT_DENY,
        ),
        (
            "state=open&state=all&page=1",
            Action::Deny,
            reason_code::DEFAULT_DENY,
        ),
        ("st%61te=open&page=1", Action::Pass, reason_code::RULE_PASS),
        (
            "state=%zz&page=1",
            Action::Deny,
            reason_code::QUERY_UNPARSEABLE,
        ),
    ];
    for (query, action, code) in table {
        let request = RequestFacts {
            query,
            ..facts("GET", "api.github.com", "/repos/o/r/issues")
        };
        let decision = policy.decide(&request);
        assert_eq!(
            (decision.action, decision.reason_code),
            (action, code),
            "{query}"
        );
    }
}

#[test]
fn header_and_json_matchers_together() {
    let policy = policy(GITHUB);
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Action);
    let table: [Case<'_>; 5] = [
        (
            &[("x-github-event", "push")],
            r#"{"ref":"refs/heads/main","forced":false}"#,
            Action::Stage,
        ),
        (
            &[("X-GITHUB-EVENT", "push")],
            r#"{"ref":"refs/heads/main","forced":false,"x":1}"#,
            Action::Stage,
        ),
        (
            &[("x-github-event", "ping")],
            r#"{"ref":"refs/heads/main","forced":false}"#,
            Action::Deny,
        ),
        (
            &[],
            r#"{"ref":"refs/heads/main","forced":false}"#,
            Action::Deny,
        ),
        (
            &[("x-github-event", "push")],
            r#"{"ref":"refs/heads/dev","forced":false}"#,
            Action::Deny,
        ),
    ];
    for (headers, body, want) in table {
        let request = RequestFacts {
            headers,
            body: RequestBody::Read(body.as_bytes()),
            ..facts("POST", "hooks.example.com", "/deliver")
        };
        assert_eq!(policy.decide(&request).action, want, "{headers:?} {body}");
    }
    let rule = policy.rule("push-hooks").expect("rule");
    assert_eq!(rule.strip(), ["cookie", "x-forwarded-for"]);
    assert_eq!(
        rule.redact(),
        [
            Redaction::JsonPointer("/password".into()),
            Redaction::Header("authorization".into())
        ]
    );
}

#[test]
fn jsonrpc_tool_calls() {
    let policy = policy(GITHUB);
    let call = |tool: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#)
    };
    assert_eq!(
        decide_body(&policy, "mcp.example.com", "/mcp", &call("create_issue")).1,
        Some("mcp-create")
    );
    assert_eq!(
        decide_body(&policy, "mcp.example.com", "/mcp", &call("list_issues")).1,
        Some("mcp-other")
    );
}

#[test]
fn explain_says_why_new_matchers_did_not_match() {
    let policy = policy(GITHUB);
    let request = RequestFacts {
        body: RequestBody::Read(br#"{"query":"query { a }"}"#),
        ..facts("POST", "api.github.com", "/graphql")
    };
    let explanation = policy.explain(&request);
    assert_eq!(
        explanation.rules[0].outcome,
        RuleOutcome::Mismatch { field: "graphql" }
    );
    assert_eq!(
        explanation.rules[0].detail.as_deref(),
        Some("the operation is a query, not a mutation")
    );
    assert_eq!(explanation.rules[1].outcome, RuleOutcome::Matched);
    let request = RequestFacts {
        query: "state=closed&page=1",
        ..facts("GET", "api.github.com", "/repos/o/r/issues")
    };
    let explanation = policy.explain(&request);
    assert_eq!(
        explanation.rules[2].detail.as_deref(),
        Some("query parameter \"state\" is \"closed\", not \"open\"")
    );
    // A body matcher without a limit decides as written: a warning, not an error.
    let warnings = policy.warnings();
    assert!(warnings
        .iter()
        .any(|l| l.rule == "push-hooks" && l.message.contains("limit.body_bytes")));
    assert!(!warnings.iter().any(|l| l.rule == "gql-queries"));
    assert!(!policy.lints().iter().any(|l| l.rule == "push-hooks"));
}

#[test]
fn audit_rules_record_and_continue() {
    let policy = policy(
        r#"
version = 1
[[rule]]
id = "would-deny-deletes"
host = "api.example.com"
method = ["DELETE"]
action = "deny"
mode = "audit"
[[rule]]
id = "api"
host = "api.example.com"
action = "pass"
"#,
    );
    let decision = policy.decide(&facts("DELETE", "api.example.com", "/x"));
    assert_eq!(decision.action, Action::Pass);
    assert_eq!(decision.rule.as_deref(), Some("api"));
    assert_eq!(decision.audit.len(), 1);
    assert_eq!(
        decision.audit[0].rule.as_deref(),
        Some("would-deny-deletes")
    );
    assert_eq!(decision.audit[0].action, Action::Deny);
    assert!(policy
        .decide(&facts("GET", "api.example.com", "/x"))
        .audit
        .is_empty());
    let explanation = policy.explain(&facts("DELETE", "api.example.com", "/x"));
    assert_eq!(explanation.rules[0].outcome, RuleOutcome::Audited);
}

#[test]
fn global_audit_mode_passes_what_it_would_deny() {
    let policy = policy(
        "version = 1\nmode = \"audit\"\n[[rule]]\nid = \"no\"\nhost = \"no.example.com\"\naction = \"deny\"\n",
    );
    assert_eq!(policy.mode(), Mode::Audit);
    let decision = policy.decide(&facts("GET", "no.example.com", "/"));
    assert_eq!(decision.action, Action::Pass);
    assert_eq!(decision.reason_code, reason_code::AUDIT_PASS);
    assert!(decision.reason.contains("would have been denied"));
    assert_eq!(decision.audit[0].reason_code, reason_code::RULE_DENY);
    let default = policy.decide(&facts("GET", "other.example.com", "/"));
    assert_eq!(default.reason_code, reason_code::AUDIT_PASS);
    assert_eq!(default.audit[0].reason_code, reason_code::DEFAULT_DENY);
    assert_eq!(
        policy.decide_connect("no.example.com", 443),
        ConnectDecision::Intercept
    );
    // Invariants are not policy: a non-canonical path is still refused.
    let bad = policy.decide(&facts("GET", "no.example.com", "/a/../b"));
    assert_eq!(bad.action, Action::Deny);
}

#[test]
fn tunnel_rules_decide_connects_only() {
    let policy = policy(
        r#"
version = 1
[[rule]]
id = "pinned"
host = "pinned.example.com"
action = "tunnel"
reason = "certificate-pinned client"
[[rule]]
id = "ci-only"
host = "ci.example.com"
action = "tunnel"
profiles = ["ci"]
"#,
    );
    match policy.decide_connect("pinned.example.com", 443) {
        ConnectDecision::Tunnel(decision) => {
            assert_eq!(decision.rule.as_deref(), Some("pinned"));
            assert_eq!(decision.reason_code, reason_code::RULE_TUNNEL);
        }
        other => panic!("should tunnel: {other:?}"),
    }
    assert!(matches!(
        policy.decide_connect("pinned.example.com", 8443),
        ConnectDecision::Deny(_)
    ));
    // An inner or plain-http request never matches a tunnel rule.
    assert_eq!(
        policy
            .decide(&facts("GET", "pinned.example.com", "/"))
            .action,
        Action::Deny
    );
    assert!(matches!(
        policy.decide_connect_for("ci.example.com", 443, Some("ci")),
        ConnectDecision::Tunnel(_)
    ));
    assert!(matches!(
        policy.decide_connect_for("ci.example.com", 443, Some("dev")),
        ConnectDecision::Deny(_)
    ));
    assert!(matches!(
        policy.decide_connect("ci.example.com", 443),
        ConnectDecision::Deny(_)
    ));
}

#[test]
fn profiles_scope_rules() {
    let policy = policy(
        "version = 1\n[[rule]]\nid = \"ci\"\nhost = \"a.example.com\"\naction = \"pass\"\nprofiles = [\"ci\", \"nightly\"]\n",
    );
    let with = |profile: Option<&'static str>| {
        policy
            .decide(&RequestFacts {
                profile,
                ..facts("GET", "a.example.com", "/")
            })
            .action
    };
    assert_eq!(with(Some("ci")), Action::Pass);
    assert_eq!(with(Some("nightly")), Action::Pass);
    assert_eq!(with(Some("dev")), Action::Deny);
    assert_eq!(with(None), Action::Deny);
}

#[test]
fn baseline_denies_cannot_be_overridden() {
    let project = policy(
        r#"
version = 1
[[rule]]
id = "all"
host = "**.example.com"
action = "pass"
[[rule]]
id = "tun"
host = "tun.example.com"
action = "tunnel"
"#,
    );
    let baseline = policy(
        r#"
version = 1
[[rule]]
id = "no-metadata"
host = "metadata.example.com"
action = "deny"
reason = "operator: never"
[[rule]]
id = "no-deletes"
host = "**.example.com"
method = ["DELETE"]
action = "deny"
"#,
    );
    let policy = project
        .with_baseline(baseline, "baseline.toml")
        .expect("baseline applies");
    let decision = policy.decide(&facts("GET", "metadata.example.com", "/"));
    assert_eq!(
        (
            decision.action,
            decision.reason_code,
            decision.reason.as_str()
        ),
        (Action::Deny, reason_code::BASELINE_DENY, "operator: never")
    );
    assert_eq!(
        policy
            .decide(&facts("DELETE", "a.example.com", "/"))
            .rule
            .as_deref(),
        Some("no-deletes")
    );
    assert_eq!(
        policy.decide(&facts("GET", "a.example.com", "/")).action,
        Action::Pass
    );
    assert!(matches!(
        policy.decide_connect("metadata.example.com", 443),
        ConnectDecision::Deny(_)
    ));
    // A conditional baseline deny covers the tunnel host: it is intercepted instead.
    assert_eq!(
        policy.decide_connect("tun.example.com", 443),
        ConnectDecision::Intercept
    );
    let bad = crate::policy(
        "version = 1\n[[rule]]\nid = \"x\"\nhost = \"a.example.com\"\naction = \"pass\"\n",
    );
    let error = crate::policy("version = 1\n")
        .with_baseline(bad, "baseline.toml")
        .expect_err("a pass rule is refused");
    assert_eq!(
        error.to_string(),
        "baseline.toml: rule \"x\" (#1): field \"action\": a baseline holds only deny rules"
    );
}
