use airlock_policy::{Policy, PolicyError};

fn error(text: &str) -> String {
    match Policy::from_toml_str(text, "policy.toml") {
        Ok(policy) => panic!("should be refused: {policy:?}"),
        Err(error) => error.to_string(),
    }
}

fn rule(body: &str) -> String {
    format!(
        "version = 1\n\n[[rule]]\nid = \"first\"\nhost = \"example.com\"\naction = \"pass\"\n\n[[rule]]\n{body}\n"
    )
}

#[test]
fn messages() {
    let cases: &[(String, &str)] = &[
        (
            rule("id = \"gh-pulls\"\nhost = \"*\"\naction = \"stage\""),
            "policy.toml: rule \"gh-pulls\" (#2): field \"host\": wildcard \"*\" alone matches every host",
        ),
        (
            rule("id = \"tld\"\nhost = \"*.com\"\naction = \"pass\""),
            "policy.toml: rule \"tld\" (#2): field \"host\": wildcard \"*.com\" covers a whole top-level domain",
        ),
        (
            rule("id = \"first\"\nhost = \"a.example.com\"\naction = \"pass\""),
            "policy.toml: rule \"first\" (#2): field \"id\": duplicate id; first used by rule #1",
        ),
        (
            rule("id = \"t\"\nhost = \"a.example.com\"\naction = \"tunnel\"\npath = \"/x\""),
            "policy.toml: rule \"t\" (#2): field \"path\": a tunnel rule is host level only: airlock does not see inside the tunnel, so it cannot match, stage, inject, strip, limit, redact or audit anything there; use action = \"pass\" (intercepted) instead",
        ),
        (
            rule("id = \"t\"\nhost = \"a.example.com\"\naction = \"tunnel\"\nstrip = [\"cookie\"]"),
            "policy.toml: rule \"t\" (#2): field \"strip\": a tunnel rule is host level only: airlock does not see inside the tunnel, so it cannot match, stage, inject, strip, limit, redact or audit anything there; use action = \"pass\" (intercepted) instead",
        ),
        (
            rule("id = \"j\"\nhost = \"a.example.com\"\naction = \"stage\"\njson = { action = \"x\" }"),
            "policy.toml: rule \"j\" (#2): field \"json\": \"action\" is not a JSON pointer (RFC 6901): write \"/action\"",
        ),
        (
            rule("id = \"r\"\nhost = \"a.example.com\"\naction = \"pass\"\nreview = \"auto\""),
            "policy.toml: rule \"r\" (#2): field \"review\": only a stage rule creates effects to review",
        ),
        (
            rule("id = \"i\"\nhost = \"a.example.com\"\naction = \"pass\"\nidempotency_key = \"Idempotency-Key\""),
            "policy.toml: rule \"i\" (#2): field \"idempotency_key\": only a stage rule's effects are released with an idempotency key",
        ),
        (
            rule("id = \"i\"\nhost = \"a.example.com\"\naction = \"stage\"\nretry_unknown = \"idempotent\""),
            "policy.toml: rule \"i\" (#2): field \"retry_unknown\": \"idempotent\" needs idempotency_key: without a key the origin cannot tell a re-sent request from a new one",
        ),
        (
            rule("id = \"i\"\nhost = \"a.example.com\"\naction = \"stage\"\nidempotency_key = \"Idempotency Key\""),
            "policy.toml: rule \"i\" (#2): field \"idempotency_key\": \"Idempotency Key\" is not a header name",
        ),
        (
            rule("id = \"l\"\nhost = \"a.example.com\"\naction = \"pass\"\nlimit = { requests_per_minute = 0 }"),
            "policy.toml: rule \"l\" (#2): field \"limit\": requests_per_minute = 0: must be a positive integer",
        ),
        (
            rule("id = \"g\"\nhost = \"a.example.com\"\naction = \"pass\"\ngraphql = { operation = \"write\" }"),
            "policy.toml: rule \"g\" (#2): field \"graphql\": operation \"write\" is not \"query\", \"mutation\" or \"subscription\"",
        ),
        (
            rule("id = \"p\"\nhost = \"a.example.com\"\naction = \"pass\"\nprofiles = []"),
            "policy.toml: rule \"p\" (#2): field \"profiles\": empty list matches no run; remove \"profiles\" to match every run",
        ),
        (
            rule("id = \"cidr\"\nhost = \"a.example.com\"\naction = \"pass\"\nallow_private = [\"10.0.0.0/33\"]"),
            "policy.toml: rule \"cidr\" (#2): field \"allow_private\": \"10.0.0.0/33\" is not a CIDR (like \"10.0.0.0/8\") or IP address",
        ),
        (
            rule("id = \"deny-private\"\nhost = \"a.example.com\"\naction = \"deny\"\nallow_private = [\"10.0.0.0/8\"]"),
            "policy.toml: rule \"deny-private\" (#2): field \"allow_private\": has no effect on a deny rule; put it on the pass or stage rule that needs it",
        ),
        (
            rule("host = \"a.example.com\"\naction = \"pass\""),
            "policy.toml: rule #2: field \"id\": required",
        ),
        (
            rule("id = \"Bad_Id\"\nhost = \"a.example.com\"\naction = \"pass\""),
            "policy.toml: rule #2: field \"id\": \"Bad_Id\" is not a valid id: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit",
        ),
        (
            rule("id = \"nohost\"\naction = \"pass\""),
            "policy.toml: rule \"nohost\" (#2): field \"host\": required",
        ),
        (
            rule("id = \"noaction\"\nhost = \"a.example.com\""),
            "policy.toml: rule \"noaction\" (#2): field \"action\": required: \"pass\", \"stage\", \"deny\" or \"tunnel\"",
        ),
        (
            rule("id = \"port\"\nhost = \"a.example.com\"\nport = 0\naction = \"pass\""),
            "policy.toml: rule \"port\" (#2): field \"port\": 0 is not a port (1 to 65535)",
        ),
        (
            rule("id = \"path\"\nhost = \"a.example.com\"\npath = \"/a/../b\"\naction = \"pass\""),
            "policy.toml: rule \"path\" (#2): field \"path\": pattern \"/a/../b\": path contains a \".\" or \"..\" segment, raw or encoded",
        ),
        (
            rule("id = \"method\"\nhost = \"a.example.com\"\nmethod = [\"GET\", \"read\"]\naction = \"pass\""),
            "policy.toml: rule \"method\" (#2): field \"method\": preset \"read\" must be written alone (method = \"read\"), not in a list",
        ),
        (
            "default = \"deny\"\n".to_owned(),
            "policy.toml: field \"version\": required; write `version = 1` at the top of the file",
        ),
        (
            "version = 2\n".to_owned(),
            "policy.toml: field \"version\": unsupported version 2; this airlock reads version 1",
        ),
        (
            "version = 1\ndefault = \"tunnel\"\n".to_owned(),
            "policy.toml: field \"default\": \"tunnel\" cannot be the default; use \"deny\", \"stage\" or \"pass\"",
        ),
        (
            "version = 1\nallow_private = [\"localhost\"]\n".to_owned(),
            "policy.toml: field \"allow_private\": \"localhost\" is not a CIDR (like \"10.0.0.0/8\") or IP address",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(error(text), *want, "policy:\n{text}");
    }
}

#[test]
fn toml_errors_carry_line_and_column() {
    let unknown_rule_key = error(&rule(
        "id = \"x\"\nhots = \"a.example.com\"\naction = \"pass\"",
    ));
    assert!(
        unknown_rule_key.starts_with("policy.toml: TOML parse error at line 10, column 1"),
        "{unknown_rule_key}"
    );
    assert!(
        unknown_rule_key.contains("unknown field `hots`"),
        "{unknown_rule_key}"
    );

    let unknown_top_key = error("version = 1\ncredentials = 3\n");
    assert!(unknown_top_key.contains("line 2"), "{unknown_top_key}");
    assert!(
        unknown_top_key.contains("unknown field `credentials`"),
        "{unknown_top_key}"
    );

    let bad_action = error(&rule(
        "id = \"x\"\nhost = \"a.example.com\"\naction = \"allow\"",
    ));
    assert!(
        bad_action.contains("unknown variant `allow`"),
        "{bad_action}"
    );

    let syntax = error("version = 1\n[[rule]\n");
    assert!(
        syntax.starts_with("policy.toml: TOML parse error at line 2"),
        "{syntax}"
    );

    let bad_port = error(&rule(
        "id = \"x\"\nhost = \"a.example.com\"\nport = \"443\"\naction = \"pass\"",
    ));
    assert!(bad_port.contains("line 11, column 8"), "{bad_port}");
    assert!(
        bad_port.ends_with("a port number or a list of port numbers"),
        "{bad_port}"
    );
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("airlock-policy-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("policy.toml");
    if let Err(error) = std::fs::write(
        &path,
        "version = 1\n[[rule]]\nid = \"a\"\nhost = \"**\"\naction = \"pass\"\n",
    ) {
        panic!("write test policy: {error}");
    }
    let message = match Policy::load(&path) {
        Ok(_) => panic!("should be refused"),
        Err(error) => error.to_string(),
    };
    assert_eq!(
        message,
        format!(
            "{}: rule \"a\" (#1): field \"host\": wildcard \"**\" alone matches every host",
            path.display()
        )
    );

    let missing = dir.join("missing.toml");
    match Policy::load(&missing) {
        Err(error @ PolicyError::Read { .. }) => {
            assert_eq!(
                error.to_string(),
                format!("{}: cannot read policy file", missing.display())
            );
            assert_eq!(error.origin(), missing.display().to_string());
        }
        other => panic!("expected a read error, got {other:?}"),
    }

    if let Err(error) = std::fs::write(&path, "version = 1\n") {
        panic!("write test policy: {error}");
    }
    assert!(Policy::load(&path).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn idempotency_keys_compile_on_stage_rules() {
    let policy = Policy::from_toml_str(
        &rule("id = \"charges\"\nhost = \"api.example.com\"\naction = \"stage\"\nidempotency_key = \"Idempotency-Key\"\nretry_unknown = \"idempotent\""),
        "policy.toml",
    )
    .expect("compiles");
    let key = policy
        .rule("charges")
        .and_then(|r| r.idempotency())
        .expect("idempotency");
    assert_eq!(
        (key.header.as_str(), key.retry_unknown),
        ("Idempotency-Key", true)
    );
    let plain = Policy::from_toml_str(
        &rule("id = \"hooks\"\nhost = \"api.example.com\"\naction = \"stage\""),
        "policy.toml",
    )
    .expect("compiles");
    assert!(plain.rule("hooks").and_then(|r| r.idempotency()).is_none());
}
