//! `[credential.NAME]` tables and rules' `inject`: what loads, what is refused and why.

use airlock_policy::{CredentialSource, Placement, Policy, RequestFacts, Scheme};

const GH: &str = r#"
[credential.gh-bot]
source = { env = "AIRLOCK_GH_TOKEN" }
bind = { hosts = ["api.github.com", "**.githubusercontent.com"], methods = ["GET", "HEAD", "OPTIONS", "TRACE", "POST"], paths = ["/repos/**", "/user"] }
place = { header = "authorization", format = "Bearer {}" }
placeholder = true
"#;

fn with_rule(credentials: &str, rule: &str) -> String {
    format!("version = 1\n{credentials}\n[[rule]]\n{rule}\n")
}

fn error(text: &str) -> String {
    match Policy::from_toml_str(text, "policy.toml") {
        Ok(policy) => panic!("should be refused: {policy:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_credential_compiles_into_a_spec_without_its_value() {
    let policy = crate::policy(&with_rule(
        GH,
        "id = \"gh-read\"\nhost = \"api.github.com\"\nmethod = \"read\"\npath = \"/repos/*/*\"\naction = \"pass\"\ninject = \"gh-bot\"",
    ));
    let credential = policy.credential("gh-bot").expect("credential");
    assert_eq!(
        credential.source(),
        &CredentialSource::Env("AIRLOCK_GH_TOKEN".into())
    );
    assert_eq!(
        credential.place(),
        &Placement::Header {
            name: "authorization".into(),
            format: "Bearer {}".into()
        }
    );
    assert!(credential.placeholder());
    assert_eq!(
        policy.rule("gh-read").and_then(|r| r.inject()),
        Some("gh-bot")
    );
    assert!(credential.binds_host("API.GitHub.com."));
    assert!(credential.binds_host("raw.githubusercontent.com"));
    assert!(!credential.binds_host("github.com"));
    let facts =
        |method, path| RequestFacts::new(Scheme::Https, "api.github.com", 443, method, path, false);
    assert!(credential.binds(&facts("GET", "/repos/a/b")));
    assert!(!credential.binds(&facts("DELETE", "/repos/a/b")));
    assert!(!credential.binds(&facts("GET", "/orgs/a")));
    assert!(!credential.binds(&facts("GET", "/repos/../orgs")));
    assert!(policy.lints().is_empty());
}

#[test]
fn placements_and_sources() {
    let text = r#"version = 1
[credential.a]
source = { file = "/run/secrets/a" }
bind = { hosts = ["a.example.com"] }
place = { basic = "bot" }
[credential.b]
source = { command = ["pass", "show", "b"] }
bind = { hosts = ["b.example.com"] }
place = { query = "api_key" }
[credential.c]
source = { env = "C" }
bind = { hosts = ["c.example.com"] }
place = { header = "X-Api-Key" }
"#;
    let policy = crate::policy(text);
    let get = |name| policy.credential(name).expect("credential");
    assert_eq!(
        get("a").place(),
        &Placement::Basic {
            username: "bot".into()
        }
    );
    assert_eq!(
        get("a").source(),
        &CredentialSource::File("/run/secrets/a".into())
    );
    assert_eq!(
        get("b").place(),
        &Placement::Query {
            param: "api_key".into()
        }
    );
    assert_eq!(
        get("b").source(),
        &CredentialSource::Command(vec!["pass".into(), "show".into(), "b".into()])
    );
    assert_eq!(
        get("c").place(),
        &Placement::Header {
            name: "x-api-key".into(),
            format: "{}".into()
        }
    );
    assert!(!get("c").placeholder());
    // None is used by a rule: each is linted.
    let lints = policy.lints();
    assert_eq!(lints.len(), 3, "{lints:?}");
    assert_eq!(lints[0].rule, "credential.a");
    assert!(
        lints[0].message.contains("never used"),
        "{}",
        lints[0].message
    );
}

#[test]
fn load_errors_name_the_credential_or_rule_and_say_why() {
    let cred = |body: &str| format!("version = 1\n[credential.k]\n{body}\n");
    let cases: Vec<(String, &str)> = vec![
        (
            cred("bind = { hosts = [\"a.example.com\"] }\nplace = { header = \"authorization\" }"),
            "policy.toml: credential \"k\": field \"source\": required",
        ),
        (
            cred("source = { env = \"A\", file = \"/x\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"source\": give exactly one of env, file or command",
        ),
        (
            cred("source = { command = [] }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"source\": command must name a program",
        ),
        (
            cred("source = { env = \"A\" }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"bind\": required",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [] }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"bind\": hosts is required and may not be empty",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"*\"] }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"bind\": hosts: wildcard \"*\" alone matches every host",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"], paths = [\"/a/../b\"] }\nplace = { query = \"k\" }"),
            "policy.toml: credential \"k\": field \"bind\": paths: pattern \"/a/../b\"",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }"),
            "policy.toml: credential \"k\": field \"place\": required",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { header = \"authorization\", format = \"Bearer\" }"),
            "policy.toml: credential \"k\": field \"place\": format \"Bearer\" must hold exactly one \"{}\"",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { header = \"host\" }"),
            "policy.toml: credential \"k\": field \"place\": header \"host\" cannot carry a credential",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { basic = \"a:b\" }"),
            "policy.toml: credential \"k\": field \"place\": basic: the user name may not hold ':'",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\", basic = \"u\" }"),
            "policy.toml: credential \"k\": field \"place\": give exactly one of header",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\", format = \"{}\" }"),
            "policy.toml: credential \"k\": field \"place\": format only goes with header",
        ),
        (
            cred("source = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\" }\nsecret = \"oops\""),
            "unknown field `secret`",
        ),
        (
            "version = 1\n[credential.Bad]\nsource = { env = \"A\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\" }\n".to_owned(),
            "policy.toml: credential \"Bad\": field \"name\": not a valid name",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\nmethod = \"read\"\npath = \"/repos/**\"\naction = \"pass\"\ninject = \"gh\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": unknown credential \"gh\"; the file defines [\"gh-bot\"]",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\npath = \"/repos/**\"\naction = \"deny\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": a deny rule sends nothing, so it injects nothing",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"*.github.com\"\nmethod = \"read\"\npath = \"/repos/**\"\naction = \"pass\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": the rule's host \"*.github.com\" reaches beyond credential \"gh-bot\"'s bind hosts [\"api.github.com\", \"**.githubusercontent.com\"]",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\npath = \"/repos/**\"\naction = \"pass\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": the rule's methods reach beyond credential \"gh-bot\"'s bind.methods",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\nmethod = [\"DELETE\"]\npath = \"/repos/**\"\naction = \"stage\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": the rule's methods reach beyond",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": the rule's path (any) reaches beyond credential \"gh-bot\"'s bind.paths [\"/repos/**\", \"/user\"]",
        ),
        (
            with_rule(GH, "id = \"r\"\nhost = \"api.github.com\"\nmethod = \"read\"\npath = \"/orgs/**\"\naction = \"pass\"\ninject = \"gh-bot\""),
            "policy.toml: rule \"r\" (#1): field \"inject\": the rule's path \"/orgs/**\" reaches beyond",
        ),
    ];
    for (text, expected) in cases {
        let message = error(&text);
        assert!(
            message.contains(expected),
            "for\n{text}\nexpected a message containing\n  {expected}\ngot\n  {message}"
        );
    }
}

#[test]
fn rules_inside_the_bind_load() {
    for rule in [
        "id = \"r\"\nhost = \"api.github.com\"\nmethod = [\"POST\"]\npath = \"/repos/*/*/pulls\"\naction = \"stage\"\ninject = \"gh-bot\"",
        "id = \"r\"\nhost = \"*.githubusercontent.com\"\nmethod = [\"GET\"]\npath = \"/user\"\naction = \"pass\"\ninject = \"gh-bot\"",
        "id = \"r\"\nhost = \"**.a.githubusercontent.com\"\nmethod = \"read\"\npath = \"/repos/**\"\naction = \"pass\"\ninject = \"gh-bot\"",
    ] {
        crate::policy(&with_rule(GH, rule));
    }
}
