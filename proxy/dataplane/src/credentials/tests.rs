//! Unit tests of credential placement, placeholders and the secret store.

use super::*;

const POLICY: &str = r#"version = 1
[credential.gh-bot]
source = { env = "UNUSED" }
bind = { hosts = ["api.github.com"] }
place = { header = "authorization", format = "Bearer {}" }
placeholder = true
[credential.q]
source = { env = "UNUSED" }
bind = { hosts = ["q.example.com"] }
place = { query = "api_key" }
[credential.b]
source = { env = "UNUSED" }
bind = { hosts = ["b.example.com"] }
place = { basic = "bot" }
"#;

fn store() -> (Policy, Credentials) {
    let policy = Policy::from_toml_str(POLICY, "<inline>").expect("policy");
    let secrets = [
        ("gh-bot", "gh-s3cret"),
        ("q", "q s3cret&"),
        ("b", "b-s3cret"),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), Secret::new(v.to_owned())))
    .collect();
    (
        policy,
        Credentials {
            secrets,
            placeholder_key: [7; 32],
        },
    )
}

fn facts<'a>(host: &'a str, path: &'a str) -> RequestFacts<'a> {
    RequestFacts::new(airlock_policy::Scheme::Https, host, 443, "GET", path, false)
}

fn run() -> RunId {
    RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap_or_else(RunId::generate)
}

#[test]
fn secrets_never_print() {
    let secret = Secret::new("hunter2".into());
    assert_eq!(format!("{secret} {secret:?}"), "<redacted> <redacted>");
    let (_, store) = store();
    assert!(!format!("{store:?}").contains("s3cret"));
}

#[test]
fn placeholders_are_per_run_stable_and_exported() {
    let (policy, store) = store();
    let run = run();
    let a = store.placeholder(&run, "gh-bot");
    assert!(a.starts_with("airlock-ph-gh-bot-"), "{a}");
    assert_eq!(a.len(), "airlock-ph-gh-bot-".len() + 32);
    assert_eq!(a, store.placeholder(&run, "gh-bot"));
    assert_ne!(a, store.placeholder(&RunId::generate(), "gh-bot"));
    let env = store.placeholder_env(&policy, &run);
    assert_eq!(env.len(), 1);
    assert_eq!(env.get("AIRLOCK_CREDENTIAL_GH_BOT"), Some(&a));
}

#[test]
fn a_header_credential_replaces_the_client_value_and_a_placeholder_is_swapped() {
    let (policy, store) = store();
    let run = run();
    let placeholder = store.placeholder(&run, "gh-bot");
    let plan = plan_with(
        &policy,
        &store,
        &run,
        &facts("api.github.com", "/user"),
        Some("gh-bot"),
    )
    .expect("plan")
    .expect("something to do");
    let mut url = format!("https://api.github.com/user?t={placeholder}");
    let mut headers = vec![
        ("authorization".to_owned(), b"Bearer client".to_vec()),
        (
            "x-token".to_owned(),
            format!("token {placeholder}").into_bytes(),
        ),
        ("accept-encoding".to_owned(), b"gzip".to_vec()),
    ];
    let scrubber = place(&plan, &mut url, &mut headers).expect("placed");
    assert_eq!(url, "https://api.github.com/user?t=gh-s3cret");
    let get = |name: &str| {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("authorization"), vec!["Bearer gh-s3cret"]);
    assert_eq!(get("x-token"), vec!["token gh-s3cret"]);
    assert_eq!(get("accept-encoding"), vec!["identity"]);
    let mut echo = b"you sent Bearer gh-s3cret".to_vec();
    assert!(scrubber.scrub(&mut echo));
    assert_eq!(echo, b"you sent Bearer *********".to_vec());
}

#[test]
fn query_and_basic_placements() {
    let (policy, store) = store();
    let run = run();
    let plan = plan_with(
        &policy,
        &store,
        &run,
        &facts("q.example.com", "/x"),
        Some("q"),
    )
    .expect("plan")
    .expect("plan");
    let mut url = "https://q.example.com/x?a=1&api_key=mine&b=2#frag".to_owned();
    let mut headers = Vec::new();
    let scrubber = place(&plan, &mut url, &mut headers).expect("placed");
    assert_eq!(
        url,
        "https://q.example.com/x?a=1&b=2&api_key=q%20s3cret%26#frag"
    );
    let mut echo = b"q%20s3cret%26".to_vec();
    assert!(scrubber.scrub(&mut echo));

    let plan = plan_with(
        &policy,
        &store,
        &run,
        &facts("b.example.com", "/"),
        Some("b"),
    )
    .expect("plan")
    .expect("plan");
    let mut url = "https://b.example.com/".to_owned();
    let mut headers = vec![("Authorization".to_owned(), b"Basic bWU6eW91".to_vec())];
    let scrubber = place(&plan, &mut url, &mut headers).expect("placed");
    let encoded = base64::engine::general_purpose::STANDARD.encode("bot:b-s3cret");
    assert_eq!(
        headers,
        vec![
            (
                "authorization".to_owned(),
                format!("Basic {encoded}").into_bytes()
            ),
            ("accept-encoding".to_owned(), b"identity".to_vec()),
        ]
    );
    let mut echo = format!("Basic {encoded}").into_bytes();
    assert!(scrubber.scrub(&mut echo));
    assert!(!String::from_utf8_lossy(&echo).contains(&encoded));
}

#[test]
fn nothing_is_placed_off_the_bind() {
    let (policy, store) = store();
    let run = run();
    // No rule injection and no bound placeholder: no plan.
    assert!(
        plan_with(&policy, &store, &run, &facts("evil.example", "/"), None)
            .expect("plan")
            .is_none()
    );
    // A rule injecting outside the bind (impossible after load) is refused at the door.
    let refused = plan_with(
        &policy,
        &store,
        &run,
        &facts("evil.example", "/"),
        Some("gh-bot"),
    );
    assert!(matches!(
        refused,
        Err(ProxyError::Denied { reason_code, .. }) if reason_code == "credential_outside_bind"
    ));
}

#[test]
fn values_are_read_from_file_and_command_with_newlines_trimmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("secret");
    std::fs::write(&file, "from-file\n").expect("write");
    let text = format!(
        r#"version = 1
[credential.f]
source = {{ file = "{}" }}
bind = {{ hosts = ["a.example.com"] }}
place = {{ query = "k" }}
[credential.c]
source = {{ command = ["printf", "from-command\n"] }}
bind = {{ hosts = ["a.example.com"] }}
place = {{ query = "k" }}
"#,
        file.display()
    );
    let policy = Policy::from_toml_str(&text, "<inline>").expect("policy");
    let store = Credentials::resolve(&policy, dir.path()).expect("resolved");
    assert_eq!(store.secret("f").map(Secret::expose), Some("from-file"));
    assert_eq!(store.secret("c").map(Secret::expose), Some("from-command"));
    // The key persists: the same placeholders after a restart.
    let again = Credentials::resolve(&policy, dir.path()).expect("resolved");
    let run = run();
    assert_eq!(store.placeholder(&run, "f"), again.placeholder(&run, "f"));

    let missing = text.replace(&file.display().to_string(), "/nonexistent/secret");
    let policy = Policy::from_toml_str(&missing, "<inline>").expect("policy");
    let error = Credentials::resolve(&policy, dir.path()).expect_err("missing file");
    assert_eq!(
        error.to_string(),
        "credential \"f\": cannot read file /nonexistent/secret"
    );
    let failing = text.replace("\"printf\", \"from-command\\n\"", "\"false\"");
    let policy = Policy::from_toml_str(&failing, "<inline>").expect("policy");
    let error = Credentials::resolve(&policy, dir.path()).expect_err("failing command");
    assert!(
        error
            .to_string()
            .starts_with("credential \"c\": command false failed"),
        "{error}"
    );
}
