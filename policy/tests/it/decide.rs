use airlock_policy::{Action, Scheme};

use crate::{decide, policy, summary, Summary};

/// method, scheme, host, port, path, has_body, expected summary
type Case<'a> = (&'a str, Scheme, &'a str, u16, &'a str, bool, Summary<'a>);

const GITHUB: &str = r#"
version = 1

[[rule]]
id = "gh-no-hooks"
host = "api.github.com"
path = "/repos/*/*/hooks/**"
action = "deny"
reason = "webhook changes are never made from a sandbox"

[[rule]]
id = "gh-pulls"
host = "api.github.com"
method = ["POST"]
path = "/repos/*/*/pulls"
action = "stage"

[[rule]]
id = "gh-read"
host = "api.github.com"
method = "read"
action = "pass"

[[rule]]
id = "uploads"
host = "**.githubusercontent.com"
method = "write"
action = "stage"

[[rule]]
id = "cdn"
host = "*.cdn.example.com"
scheme = "https"
port = [443, 8443]
action = "pass"

[[rule]]
id = "plain"
host = "plain.example.com"
scheme = "http"
action = "pass"

[[rule]]
id = "local"
host = "127.0.0.1"
port = 8080
action = "pass"

[[rule]]
id = "v6"
host = "[::1]"
action = "pass"

[[rule]]
id = "json"
host = "files.example.com"
path = "/v1/*.json"
action = "pass"
"#;

#[test]
fn table() {
    use Action::{Deny, Pass, Stage};
    use Scheme::{Http, Https};
    let policy = policy(GITHUB);
    #[rustfmt::skip]
    let cases: &[Case<'_>] = &[
        // first match wins: the hooks deny precedes the read pass
        ("GET", Https, "api.github.com", 443, "/repos/o/r/hooks", false, (Deny, Some("gh-no-hooks"), "rule_deny")),
        ("GET", Https, "api.github.com", 443, "/repos/o/r/hooks/1", false, (Deny, Some("gh-no-hooks"), "rule_deny")),
        ("POST", Https, "api.github.com", 443, "/repos/o/r/pulls", true, (Stage, Some("gh-pulls"), "rule_stage")),
        ("post", Https, "API.GitHub.com.", 443, "/repos/o/r/pulls", true, (Stage, Some("gh-pulls"), "rule_stage")),
        ("GET", Https, "api.github.com", 443, "/repos/o/r/pulls", false, (Pass, Some("gh-read"), "rule_pass")),
        ("HEAD", Https, "api.github.com", 443, "/", false, (Pass, Some("gh-read"), "rule_pass")),
        // a GET with a body is a write
        ("GET", Https, "api.github.com", 443, "/search", true, (Deny, None, "default_deny")),
        ("PATCH", Https, "api.github.com", 443, "/repos/o/r/pulls", true, (Deny, None, "default_deny")),
        // port defaults: no `port` means 443 for https, 80 for http
        ("GET", Https, "api.github.com", 8443, "/", false, (Deny, None, "default_deny")),
        ("GET", Http, "api.github.com", 80, "/", false, (Pass, Some("gh-read"), "rule_pass")),
        ("GET", Http, "api.github.com", 443, "/", false, (Deny, None, "default_deny")),
        // ** any depth, write preset
        ("PUT", Https, "a.b.githubusercontent.com", 443, "/x", true, (Stage, Some("uploads"), "rule_stage")),
        ("GET", Https, "objects.githubusercontent.com", 443, "/x", true, (Stage, Some("uploads"), "rule_stage")),
        ("GET", Https, "objects.githubusercontent.com", 443, "/x", false, (Deny, None, "default_deny")),
        ("PUT", Https, "githubusercontent.com", 443, "/x", true, (Deny, None, "default_deny")),
        // * one label, explicit ports, scheme
        ("GET", Https, "img.cdn.example.com", 8443, "/", false, (Pass, Some("cdn"), "rule_pass")),
        ("GET", Https, "a.img.cdn.example.com", 443, "/", false, (Deny, None, "default_deny")),
        ("GET", Http, "img.cdn.example.com", 443, "/", false, (Deny, None, "default_deny")),
        ("GET", Http, "plain.example.com", 80, "/", false, (Pass, Some("plain"), "rule_pass")),
        ("GET", Https, "plain.example.com", 443, "/", false, (Deny, None, "default_deny")),
        // IP literals
        ("GET", Http, "127.0.0.1", 8080, "/", false, (Pass, Some("local"), "rule_pass")),
        ("GET", Https, "127.0.0.1", 8080, "/", false, (Pass, Some("local"), "rule_pass")),
        ("GET", Http, "127.0.0.2", 8080, "/", false, (Deny, None, "default_deny")),
        ("GET", Https, "[::1]", 443, "/", false, (Pass, Some("v6"), "rule_pass")),
        ("GET", Https, "::1", 443, "/", false, (Pass, Some("v6"), "rule_pass")),
        // within-segment glob
        ("GET", Https, "files.example.com", 443, "/v1/a.json", false, (Pass, Some("json"), "rule_pass")),
        ("GET", Https, "files.example.com", 443, "/v1/a.jsonl", false, (Deny, None, "default_deny")),
        // canonical paths: refused before any rule
        ("GET", Https, "api.github.com", 443, "/repos/o/r%2Fhooks", false, (Deny, None, "non_canonical_path")),
        ("GET", Https, "api.github.com", 443, "/repos/o/r/x/../hooks", false, (Deny, None, "non_canonical_path")),
        ("GET", Https, "api.github.com", 443, "/repos/o/r/%2e%2E/hooks", false, (Deny, None, "non_canonical_path")),
        ("GET", Https, "api.github.com", 443, "/repos/./o", false, (Deny, None, "non_canonical_path")),
        ("GET", Https, "api.github.com", 443, "/a%2fb", false, (Deny, None, "non_canonical_path")),
        // percent-encoded letters are decoded before matching
        ("GET", Https, "api.github.com", 443, "/repos/o/r/%68ooks/1", false, (Deny, Some("gh-no-hooks"), "rule_deny")),
        // hosts that are not hosts match nothing
        ("GET", Https, "api.github.com:443", 443, "/", false, (Deny, None, "default_deny")),
    ];
    for (method, scheme, host, port, path, has_body, want) in cases {
        let decision = decide(&policy, method, *scheme, host, *port, path, *has_body);
        assert_eq!(
            summary(&decision),
            *want,
            "{method} {scheme}://{host}:{port}{path} body={has_body}: {decision:?}"
        );
    }
}

#[test]
fn reasons() {
    let policy = policy(GITHUB);
    let denied = decide(
        &policy,
        "GET",
        Scheme::Https,
        "api.github.com",
        443,
        "/repos/o/r/hooks",
        false,
    );
    assert_eq!(
        denied.reason,
        "webhook changes are never made from a sandbox"
    );
    let passed = decide(
        &policy,
        "GET",
        Scheme::Https,
        "api.github.com",
        443,
        "/",
        false,
    );
    assert_eq!(passed.reason, "allowed by rule \"gh-read\"");
    let default = decide(
        &policy,
        "post",
        Scheme::Https,
        "X.example.com.",
        443,
        "/y",
        true,
    );
    assert_eq!(
        default.reason,
        "no rule allows POST https://x.example.com:443/y; default is deny"
    );
    let canonical = decide(
        &policy,
        "GET",
        Scheme::Https,
        "api.github.com",
        443,
        "/a/../b",
        false,
    );
    assert!(canonical.reason.contains("\"..\""), "{}", canonical.reason);
}

#[test]
fn defaults() {
    let text = |default: &str| format!("version = 1\ndefault = \"{default}\"\n");
    let cases = [
        ("deny", Action::Deny, "default_deny"),
        ("pass", Action::Pass, "default_pass"),
        ("stage", Action::Stage, "default_stage"),
    ];
    for (default, action, code) in cases {
        let policy = policy(&text(default));
        let decision = decide(
            &policy,
            "PUT",
            Scheme::Https,
            "example.com",
            443,
            "/y",
            true,
        );
        assert_eq!(summary(&decision), (action, None, code), "{default}");
        assert_eq!(policy.default_action(), action);
    }
    let implicit = policy("version = 1");
    assert_eq!(implicit.default_action(), Action::Deny);
    assert!(implicit.rules().is_empty());
    let passing = policy(&text("pass"));
    let reason = decide(&passing, "GET", Scheme::Http, "example.com", 80, "/", false).reason;
    assert_eq!(
        reason,
        "no rule matches GET http://example.com:80/; default is pass"
    );
    // A non-canonical path is denied whatever the default.
    let decision = decide(
        &passing,
        "GET",
        Scheme::Http,
        "example.com",
        80,
        "/a//b",
        false,
    );
    assert_eq!(
        summary(&decision),
        (Action::Deny, None, "non_canonical_path")
    );
}

#[test]
fn rules_and_revision() {
    let policy = policy(GITHUB);
    let ids: Vec<(&str, Action)> = policy
        .rules()
        .iter()
        .map(|r| (r.id(), r.action()))
        .collect();
    assert_eq!(
        ids[..3],
        [
            ("gh-no-hooks", Action::Deny),
            ("gh-pulls", Action::Stage),
            ("gh-read", Action::Pass)
        ]
    );
    assert_eq!(policy.revision().len(), 12);
    assert!(policy
        .revision()
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    // sha256("version = 1") = 4eab33c0b9ba…
    assert_eq!(crate::policy("version = 1").revision(), "4eab33c0b9ba");
    assert_ne!(
        crate::policy("version = 1\n").revision(),
        crate::policy("version = 1").revision()
    );
}

#[test]
fn decision_serialises_snake_case() {
    let policy = policy(GITHUB);
    let decision = decide(
        &policy,
        "POST",
        Scheme::Https,
        "api.github.com",
        443,
        "/repos/o/r/pulls",
        true,
    );
    let json = match serde_json::to_string(&decision) {
        Ok(json) => json,
        Err(error) => panic!("decision should serialise: {error}"),
    };
    assert_eq!(
        json,
        r#"{"action":"stage","rule":"gh-pulls","reason":"staged by rule \"gh-pulls\"","reason_code":"rule_stage"}"#
    );
}

#[test]
fn allow_private() {
    let policy = policy(
        r#"
version = 1
allow_private = ["100.64.0.0/10"]

[[rule]]
id = "dev"
host = "dev.internal.example.com"
port = 8080
action = "pass"
allow_private = ["10.0.0.0/8", "fd00::/8"]

[[rule]]
id = "meta"
host = "**.corp.example.com"
action = "stage"
allow_private = ["192.168.1.7"]

[[rule]]
id = "web"
host = "web.example.com"
scheme = "http"
action = "pass"
allow_private = ["172.16.0.0/12"]
"#,
    );
    let ip = |s: &str| match s.parse() {
        Ok(ip) => ip,
        Err(error) => panic!("{s}: {error}"),
    };
    let cases: &[(&str, u16, &str, bool)] = &[
        // top level applies to every destination
        ("anything.example.org", 443, "100.64.1.1", true),
        ("anything.example.org", 443, "10.1.2.3", false),
        // rule-level needs the rule's host and port
        ("dev.internal.example.com", 8080, "10.1.2.3", true),
        ("DEV.internal.example.com.", 8080, "fd12::1", true),
        ("dev.internal.example.com", 443, "10.1.2.3", false),
        ("other.example.com", 8080, "10.1.2.3", false),
        ("dev.internal.example.com", 8080, "192.168.1.7", false),
        // no port, no scheme: 443 or 80
        ("a.b.corp.example.com", 443, "192.168.1.7", true),
        ("a.b.corp.example.com", 80, "192.168.1.7", true),
        ("a.b.corp.example.com", 8443, "192.168.1.7", false),
        ("a.b.corp.example.com", 443, "192.168.1.8", false),
        // scheme = "http" without port: 80 only
        ("web.example.com", 80, "172.16.5.5", true),
        ("web.example.com", 443, "172.16.5.5", false),
    ];
    for (host, port, address, want) in cases {
        assert_eq!(
            policy.allows_private(host, *port, ip(address)),
            *want,
            "{host}:{port} -> {address}"
        );
    }
}
