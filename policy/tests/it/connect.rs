use airlock_policy::{Action, ConnectDecision};

use crate::policy;

/// `("intercept" | "deny", rule id, reason code)`.
type Verdict<'a> = (&'static str, Option<&'a str>, &'static str);

fn verdict(decision: &ConnectDecision) -> Verdict<'_> {
    match decision {
        ConnectDecision::Intercept => ("intercept", None, ""),
        ConnectDecision::Deny(decision) => {
            assert_eq!(decision.action, Action::Deny);
            ("deny", decision.rule.as_deref(), decision.reason_code)
        }
        ConnectDecision::Tunnel(decision) => {
            assert_eq!(decision.action, Action::Tunnel);
            ("tunnel", decision.rule.as_deref(), decision.reason_code)
        }
    }
}

#[test]
fn table() {
    let policy = policy(
        r#"
version = 1

[[rule]]
id = "blocked"
host = "blocked.example.com"
action = "deny"
reason = "never"

[[rule]]
id = "blocked-later"
host = "blocked.example.com"
action = "pass"

[[rule]]
id = "hooks"
host = "api.github.com"
path = "/repos/*/*/hooks/**"
action = "deny"

[[rule]]
id = "gh-read"
host = "api.github.com"
method = "read"
action = "pass"

[[rule]]
id = "only-denies"
host = "deny.example.com"
method = "write"
action = "deny"

[[rule]]
id = "plain"
host = "plain.example.com"
scheme = "http"
action = "stage"

[[rule]]
id = "ports"
host = "*.ports.example.com"
port = [8443, 9443]
action = "pass"
"#,
    );
    #[rustfmt::skip]
    let cases: &[(&str, u16, Verdict<'_>)] = &[
        ("api.github.com", 443, ("intercept", None, "")),
        ("API.GITHUB.COM.", 443, ("intercept", None, "")),
        // a rule without port is https-only for CONNECT
        ("api.github.com", 80, ("deny", None, "default_deny")),
        ("api.github.com", 8443, ("deny", None, "default_deny")),
        // first host-level match is an unconditional deny
        ("blocked.example.com", 443, ("deny", Some("blocked"), "rule_deny")),
        // only a conditional deny matches: nothing can pass, default deny
        ("deny.example.com", 443, ("deny", None, "default_deny")),
        ("unknown.example.com", 443, ("deny", None, "default_deny")),
        // scheme = "http" without port means 80
        ("plain.example.com", 80, ("intercept", None, "")),
        ("plain.example.com", 443, ("deny", None, "default_deny")),
        ("a.ports.example.com", 9443, ("intercept", None, "")),
        ("a.ports.example.com", 443, ("deny", None, "default_deny")),
        ("not a host", 443, ("deny", None, "default_deny")),
    ];
    for (host, port, want) in cases {
        assert_eq!(
            verdict(&policy.decide_connect(host, *port)),
            *want,
            "{host}:{port}"
        );
    }
    match policy.decide_connect("unknown.example.com", 443) {
        ConnectDecision::Deny(decision) => assert_eq!(
            decision.reason,
            "no rule allows CONNECT unknown.example.com:443; default is deny"
        ),
        other => panic!("should deny: {other:?}"),
    }
    match policy.decide_connect("blocked.example.com", 443) {
        ConnectDecision::Deny(decision) => assert_eq!(decision.reason, "never"),
        other => panic!("should deny: {other:?}"),
    }
}

#[test]
fn non_deny_default_intercepts_unless_a_rule_denies_outright() {
    for default in ["pass", "stage"] {
        let policy = policy(&format!(
            "version = 1\ndefault = \"{default}\"\n[[rule]]\nid = \"no\"\nhost = \"no.example.com\"\naction = \"deny\"\n"
        ));
        assert_eq!(
            verdict(&policy.decide_connect("anything.example.com", 8443)),
            ("intercept", None, "")
        );
        assert_eq!(
            verdict(&policy.decide_connect("no.example.com", 443)),
            ("deny", Some("no"), "rule_deny")
        );
        // the deny rule has no port, so it only covers 443
        assert_eq!(
            verdict(&policy.decide_connect("no.example.com", 8443)),
            ("intercept", None, "")
        );
    }
}

#[test]
fn ipv6_connect_targets() {
    let policy =
        policy("version = 1\n[[rule]]\nid = \"v6\"\nhost = \"2001:db8::1\"\naction = \"pass\"\n");
    assert_eq!(
        verdict(&policy.decide_connect("[2001:db8::1]", 443)),
        ("intercept", None, "")
    );
    assert_eq!(
        verdict(&policy.decide_connect("2001:DB8:0::1", 443)),
        ("intercept", None, "")
    );
    assert_eq!(
        verdict(&policy.decide_connect("[2001:db8::2]", 443)),
        ("deny", None, "default_deny")
    );
}
