//! The `airlock policy` tools run as a user would: `check`, `explain`, `test` and `diff` on the
//! example policies and their cases.

mod common;

use common::airlock;

fn example_policy() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/webhooks.toml")
}

#[test]
fn policy_check_passes_the_example_and_flags_a_shadowed_rule() {
    let out = airlock()
        .args(["policy", "check"])
        .arg(example_policy())
        .output()
        .expect("run airlock");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("4 rule(s)"));
    let strict = airlock()
        .args(["policy", "check", "--strict"])
        .arg(example_policy())
        .output()
        .expect("run airlock");
    assert!(
        strict.status.success(),
        "the example has no advisory warnings either: {}",
        String::from_utf8_lossy(&strict.stdout)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let shadowed = dir.path().join("shadowed.toml");
    std::fs::write(
        &shadowed,
        "version = 1\n[[rule]]\nid = \"everything\"\nhost = \"x.example\"\naction = \"pass\"\n[[rule]]\nid = \"posts\"\nhost = \"x.example\"\nmethod = [\"POST\"]\naction = \"stage\"\n",
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "check"])
        .arg(&shadowed)
        .output()
        .expect("run airlock");
    assert!(
        !out.status.success(),
        "a never-reached rule fails the check"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("rule \"posts\" (#2): never reached") && stdout.contains("\"everything\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: everything (#1): passes every method"),
        "advisory warnings are printed too: {stdout}"
    );
}

#[test]
fn policy_explain_shows_every_rule_and_the_decision() {
    let out = airlock()
        .args(["policy", "explain"])
        .arg(example_policy())
        .args(["--body", "POST", "https://ci.hooks.example.com/deliver/1"])
        .output()
        .expect("run airlock");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no-admin") && stdout.contains("no match: host"),
        "{stdout}"
    );
    assert!(
        stdout.contains("webhooks") && stdout.contains("MATCHED"),
        "{stdout}"
    );
    assert!(
        stdout.contains("decision: stage (rule_stage) by rule \"webhooks\""),
        "{stdout}"
    );
}

#[test]
fn policy_test_runs_the_examples_cases_with_full_coverage() {
    let cases = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/webhooks.cases.toml");
    let out = airlock()
        .args(["policy", "test"])
        .arg(example_policy())
        .arg(&cases)
        .arg("--require-coverage")
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("5 case(s), 0 failed; 4 of 4 rule(s) covered"),
        "{stdout}"
    );

    // A wrong expectation fails with what was expected and what happened.
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        "[[case]]\nname = \"wrong\"\nmethod = \"GET\"\nurl = \"https://api.internal.example/x\"\nexpect = { action = \"stage\" }\n",
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "test"])
        .arg(example_policy())
        .arg(&wrong)
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("FAIL case \"wrong\"") && stdout.contains("action pass (expected stage)"),
        "{stdout}"
    );
}

#[test]
fn policy_test_runs_the_github_example_with_content_matchers_and_explain_says_why() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let out = airlock()
        .args(["policy", "test"])
        .arg(examples.join("github.toml"))
        .arg(examples.join("github.cases.toml"))
        .arg("--require-coverage")
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("13 case(s), 0 failed; 9 of 9 rule(s) covered"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body.json");
    std::fs::write(&body, r#"{"query": "{ viewer { login } }"}"#).expect("write");
    let out = airlock()
        .args(["policy", "explain"])
        .arg(examples.join("github.toml"))
        .args(["--data"])
        .arg(&body)
        .args(["POST", "https://api.github.com/graphql"])
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("no match: graphql (the operation is a query, not a mutation)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("decision: pass (rule_pass) by rule \"gh-graphql-queries\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("limit body_bytes = 262144; limit requests_per_minute = 120"),
        "{stdout}"
    );
}

#[test]
fn policy_test_checks_obligations_and_names_what_differs() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = dir.path().join("obligations.toml");
    std::fs::write(
        &cases,
        r#"[[case]]
name = "right"
method = "GET"
url = "https://api.github.com/repos/o/r/issues?state=open"
expect = { action = "pass", obligations = { strip = ["cookie"], limit = { query_bytes = 256 } } }

[[case]]
name = "wrong"
method = "GET"
url = "https://api.github.com/repos/o/r/issues?state=open"
expect = { action = "pass", obligations = { strip = [], review = "auto", limit = { query_bytes = 128, body_bytes = 10 }, redact = ["/x"] } }
"#,
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "test"])
        .arg(examples.join("github.toml"))
        .arg(&cases)
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("case \"right\""), "{stdout}");
    for wrong in [
        r#"obligations.strip {"cookie"} (expected {})"#,
        r#"obligations.redact {} (expected {"/x"})"#,
        "obligations.review required (expected auto)",
        "obligations.limit.body_bytes none (expected 10)",
        "obligations.limit.query_bytes 256 (expected 128)",
    ] {
        assert!(
            stdout.contains("FAIL case \"wrong\"") && stdout.contains(wrong),
            "{wrong}: {stdout}"
        );
    }
}

#[test]
fn the_credentials_example_checks_clean_and_its_cases_cover_every_rule() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let policy = dir.join("github-token.toml");
    let out = airlock()
        .args(["policy", "check"])
        .arg(&policy)
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("0 lint(s)"), "{stdout}");

    let out = airlock()
        .args(["policy", "test"])
        .arg(&policy)
        .arg(dir.join("github-token.cases.toml"))
        .arg("--require-coverage")
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("6 case(s), 0 failed; 5 of 5 rule(s) covered"),
        "{stdout}"
    );

    // A wrong credential expectation fails and says what the rule injects.
    let scratch = tempfile::tempdir().expect("tempdir");
    let wrong = scratch.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        "[[case]]\nname = \"wrong\"\nmethod = \"GET\"\nurl = \"https://api.github.com/user\"\nexpect = { action = \"pass\", inject = \"\" }\n",
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "test"])
        .arg(&policy)
        .arg(&wrong)
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("inject \"gh-bot\" (expected \"\")"),
        "{stdout}"
    );

    // explain says which credential the decision adds, and when.
    let out = airlock()
        .args(["policy", "explain"])
        .arg(&policy)
        .args(["--body", "POST", "https://api.github.com/repos/o/r/pulls"])
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("inject:   credential \"gh-bot\" in header authorization, at release"),
        "{stdout}"
    );

    // An unused credential is a lint, named as such.
    let unused = scratch.path().join("unused.toml");
    std::fs::write(
        &unused,
        "version = 1\n[credential.spare]\nsource = { env = \"X\" }\nbind = { hosts = [\"a.example.com\"] }\nplace = { query = \"k\" }\n",
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "check"])
        .arg(&unused)
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("credential.spare: credential \"spare\" is never used"),
        "{stdout}"
    );
}

/// Every `examples/policies/X.toml` checks clean with `--strict`, and every one with an
/// `X.cases.toml` beside it passes its cases with every rule covered. New examples are
/// picked up without touching this test.
#[test]
fn every_example_policy_checks_strict_and_its_cases_cover_every_rule() {
    // Examples whose advisory warnings are deliberate: name => the warnings `check`
    // must print (exactly these). None today.
    let deliberate: &[(&str, &[&str])] = &[];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let mut policies: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("read examples/policies")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "toml")
                && !path.to_string_lossy().ends_with(".cases.toml")
        })
        .collect();
    policies.sort();
    let mut with_cases = Vec::new();
    for policy in &policies {
        let name = policy
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("utf-8 name");
        let warnings = deliberate
            .iter()
            .find(|(example, _)| *example == name)
            .map(|(_, warnings)| *warnings);
        let mut check = airlock();
        check.args(["policy", "check"]);
        if warnings.is_none() {
            check.arg("--strict");
        }
        let out = check.arg(policy).output().expect("run airlock");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        match warnings {
            None => assert!(
                stdout.contains("0 lint(s), 0 warning(s)"),
                "{name}: {stdout}"
            ),
            Some(expected) => {
                let printed: Vec<&str> = stdout
                    .lines()
                    .filter(|line| line.starts_with("warning: "))
                    .collect();
                assert_eq!(&printed, expected, "{name}: {stdout}");
            }
        }

        let cases = dir.join(format!("{name}.cases.toml"));
        if !cases.exists() {
            continue;
        }
        with_cases.push(name.to_owned());
        let out = airlock()
            .args(["policy", "test"])
            .arg(policy)
            .arg(&cases)
            .arg("--require-coverage")
            .output()
            .expect("run airlock");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = stdout
            .lines()
            .last()
            .unwrap_or_default()
            .split(": ")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let (ran, coverage) = summary
            .split_once("; ")
            .unwrap_or_else(|| panic!("{name}: {stdout}"));
        assert!(ran.ends_with(" case(s), 0 failed"), "{name}: {stdout}");
        let (covered, total) = coverage
            .trim_end_matches(" rule(s) covered")
            .split_once(" of ")
            .unwrap_or_else(|| panic!("{name}: {stdout}"));
        assert_eq!(covered, total, "{name}: every rule covered: {stdout}");
    }
    for expected in [
        "github",
        "github-token",
        "registries",
        "research",
        "slack",
        "webhooks",
    ] {
        assert!(
            with_cases.iter().any(|name| name == expected),
            "{expected}.toml has cases: {with_cases:?}"
        );
    }
}

/// `policy diff` reports new credential reach: here a copy of the credentials example
/// whose reads lose the token, against the example itself.
#[test]
fn policy_diff_reports_credential_reach_and_fails_the_gate_on_it() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let with_token = examples.join("github-token.toml");
    let text = std::fs::read_to_string(&with_token).expect("read example");
    let marker = "id = \"gh-read\"\nhost = \"api.github.com\"\nscheme = \"https\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"gh-bot\"\n";
    assert!(
        text.contains(marker),
        "the example still has its gh-read rule"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let without = dir.path().join("reads-without-token.toml");
    std::fs::write(
        &without,
        text.replace(marker, &marker.replace("inject = \"gh-bot\"\n", "")),
    )
    .expect("write");
    let out = airlock()
        .args(["policy", "diff"])
        .arg(&without)
        .arg(&with_token)
        .arg("--fail-on-widen")
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "new credential reach widens: {stdout}"
    );
    assert!(
        stdout.contains("CREDENTIAL REACH WIDENS (1):")
            && stdout.contains("gh-bot: rule \"gh-read\" now injects it"),
        "{stdout}"
    );
    assert!(
        stdout.contains("pass (gh-read) -> pass (gh-read) +inject gh-bot"),
        "{stdout}"
    );
    // The other way round only narrows: the gate passes.
    let out = airlock()
        .args(["policy", "diff"])
        .arg(&with_token)
        .arg(&without)
        .arg("--fail-on-widen")
        .output()
        .expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("credential reach narrows (1):")
            && stdout.contains("gh-bot: rule \"gh-read\" no longer injects it"),
        "{stdout}"
    );
}

/// Runs `airlock policy TOOL FILES... ARGS...`: whether it succeeded, and its stdout.
fn policy_tool(tool: &str, files: &[&std::path::Path], args: &[&str]) -> (bool, String) {
    let out = airlock()
        .args(["policy", tool])
        .args(files)
        .args(args)
        .output()
        .expect("run airlock");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The flow rules example through `check`, `explain`, `test` (a failing flow case names
/// what happened) and `diff` (a weakened flow fails the gate).
#[test]
fn policy_tools_know_the_flow_rules() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let policy = examples.join("no-secrets-out.toml");

    let (ok, stdout) = policy_tool("check", &[&policy], &[]);
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("flow \"no-secrets-out\" (#1): block")
            && stdout.contains("flow \"docs-to-chat\" (#3): review")
            && stdout.contains("4 rule(s), 3 flow(s)"),
        "{stdout}"
    );

    let (ok, stdout) = policy_tool(
        "explain",
        &[&policy],
        &["GET", "https://vault.internal.example/v1/db"],
    );
    assert!(ok, "{stdout}");
    assert!(stdout.contains("labels:   secret"), "{stdout}");
    assert!(
        stdout.contains("guarded:  flow \"no-secrets-out\" (block): from \"secret\""),
        "{stdout}"
    );
    let (ok, stdout) = policy_tool(
        "explain",
        &[&policy],
        &["--body", "POST", "https://chat.example.com/api/messages"],
    );
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("flows:    flow \"no-secrets-out\" (block): to \"external\"")
            && stdout
                .contains("flows:    flow \"docs-to-chat\" (review): to [\"chat.example.com\"]"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let cases = dir.path().join("wrong.cases.toml");
    std::fs::write(
        &cases,
        r#"
[[case]]
name = "a ticket quoting a secret"
read = { url = "https://vault.internal.example/v1/db", body = '{"database_password": "correct horse battery staple, never share"}' }
method = "POST"
url = "https://tickets.example.com/api/tickets"
data = '{"body": "the password is correct horse battery staple, never share"}'
expect_flows = []

[[case]]
name = "a read no rule passes"
read = { url = "https://elsewhere.example.org/", body = "nothing to see here, nothing at all" }
method = "POST"
url = "https://tickets.example.com/api/tickets"
data = '{}'
expect_flows = []
"#,
    )
    .expect("write");
    let (ok, stdout) = policy_tool("test", &[&policy, &cases], &[]);
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("flows [\"no-secrets-out\"] (expected []): block \"no-secrets-out\" via read 1: GET https://vault.internal.example/v1/db"),
        "{stdout}"
    );
    assert!(
        stdout.contains("read https://elsewhere.example.org/ is decided deny (default_deny), not passed by a rule"),
        "{stdout}"
    );

    let text = std::fs::read_to_string(&policy).expect("read example");
    let weaker = dir.path().join("weaker.toml");
    std::fs::write(
        &weaker,
        text.replacen(
            "to = \"external\"\naction = \"block\"",
            "to = \"external\"\naction = \"review\"",
            1,
        ),
    )
    .expect("write");
    let (ok, stdout) = policy_tool("diff", &[&policy, &weaker], &["--fail-on-widen"]);
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("FLOW RULES WIDEN (1):")
            && stdout.contains("no-secrets-out: action block -> review"),
        "{stdout}"
    );
    let (ok, stdout) = policy_tool("diff", &[&weaker, &policy], &["--fail-on-widen"]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("flow rules narrow (1):"), "{stdout}");
}
