//! Credential sources and placements: a missing source stops airlock; file, command, query, basic.

use airlock_tests::{curl, Airlock, Fixture};

use super::{echo_origin, github_policy, SECRET_VAR};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_whose_source_is_missing_stops_airlock_with_its_name() {
    let fx = Fixture::new();
    let policy_path = fx.dir.path().join("policy.toml");
    std::fs::write(&policy_path, github_policy(1, 2, false)).expect("write policy");
    let error = match Airlock::spawn(
        &fx.data_dir(),
        &policy_path,
        &fx.dir.path().join("origin-ca.pem"),
        &[],
    ) {
        Ok(_) => panic!("airlock should refuse to start without the credential's value"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(&format!(
            "credential \"gh-bot\": environment variable {SECRET_VAR} is not set"
        )),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_and_basic_placements_from_a_file_and_a_command() {
    let fx = Fixture::new();
    let origin = echo_origin(&fx).await;
    let port = origin.addr().port();
    let secret_file = fx.dir.path().join("api-key");
    std::fs::write(&secret_file, "key with spaces&more\n").expect("write secret");
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]

[credential.api-key]
source = {{ file = "{}" }}
bind = {{ hosts = ["127.0.0.1"], paths = ["/q/**"] }}
place = {{ query = "api_key" }}

[credential.basic-bot]
source = {{ command = ["printf", "pa55word\n"] }}
bind = {{ hosts = ["127.0.0.1"], methods = "read" }}
place = {{ basic = "bot" }}

[[rule]]
id = "query"
host = "127.0.0.1"
port = {port}
method = "read"
path = "/q/**"
action = "pass"
inject = "api-key"

[[rule]]
id = "basic"
host = "127.0.0.1"
port = {port}
method = "read"
path = "/b/**"
action = "pass"
inject = "basic-bot"
"#,
        secret_file.display()
    );
    let (_airlock, _, env) = fx.start_run(&policy, &[]).await;
    let base = format!("https://127.0.0.1:{port}");

    let out = curl(&env, &[&format!("{base}/q/items?api_key=mine&page=2")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let out = curl(&env, &["-u", "me:guess", &format!("{base}/b/items")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let received = origin.received();
    assert_eq!(
        received[0].path,
        "/q/items?page=2&api_key=key%20with%20spaces%26more"
    );
    assert_eq!(
        received[1].header("authorization"),
        Some("Basic Ym90OnBhNTV3b3Jk")
    );
    // The Basic echo is masked in its encoded form.
    assert!(!String::from_utf8_lossy(&out.body).contains("Ym90OnBhNTV3b3Jk"));
    assert_eq!(
        out.header("x-echo").as_deref(),
        Some("Basic ****************")
    );
}
