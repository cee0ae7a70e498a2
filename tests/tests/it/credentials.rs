//! Credentials (docs/policy.md "Credentials"): airlock adds a secret the sandbox never holds —
//! on pass when forwarding, on stage only at release — swaps per-run placeholders on bound
//! hosts, refuses them elsewhere, and scrubs an origin's echo of the secret.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{airlock_bin, curl, Airlock, Fixture, Origin, Received, Reply};
use serde_json::{json, Value};

mod echo;
mod sources;

/// The secret handed to airlock through its own environment (never the test's).
const SECRET: &str = "ghs_e2eCredentialValue7f3a9c21d0b4";
/// The variable the policies read it from.
const SECRET_VAR: &str = "AIRLOCK_TEST_GH_TOKEN";

/// A GitHub-like policy on the loopback origin at `port`: reads pass and pull requests are
/// staged, both with the `gh-bot` token injected; `other_port` on 127.0.0.2 passes
/// anything (and is outside the credential's bind).
fn github_policy(port: u16, other_port: u16, placeholder: bool) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[credential.gh-bot]
source = {{ env = "{SECRET_VAR}" }}
bind = {{ hosts = ["127.0.0.1"] }}
place = {{ header = "authorization", format = "Bearer {{}}" }}
placeholder = {placeholder}

[[rule]]
id = "gh-pulls"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/repos/*/*/pulls"
action = "stage"
inject = "gh-bot"

[[rule]]
id = "gh-issues"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/repos/*/*/issues"
action = "stage"

[[rule]]
id = "gh-read"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
inject = "gh-bot"

[[rule]]
id = "elsewhere"
host = "127.0.0.2"
port = {other_port}
action = "pass"
"#
    )
}

/// An origin that echoes the `authorization` it received in a header and in its body.
async fn echo_origin(fx: &Fixture) -> Origin {
    let handler = Arc::new(|received: &Received| {
        let seen = received.header("authorization").unwrap_or("").to_owned();
        let mut reply = Reply::json(200, &json!({ "seen": seen, "ok": true }));
        reply.headers.push(("x-echo".into(), seen));
        reply
    });
    Origin::start(Some(&fx.origin_ca), handler)
        .await
        .expect("origin")
}

/// A plain-HTTP origin on 127.0.0.2, outside the credential's bind.
async fn other_origin() -> Origin {
    Origin::start_on(
        "127.0.0.2:0".parse().expect("addr"),
        None,
        Arc::new(|_: &Received| Reply::text(200, "collected")),
        &[b"http/1.1"],
    )
    .await
    .expect("origin on 127.0.0.2")
}

fn start(fx: &Fixture, policy: &str) -> Airlock {
    fx.start_with_env(policy, &[], &[(SECRET_VAR, SECRET)])
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read dir") {
                stack.push(entry.expect("entry").path());
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// Every admin API view of `run` and its effects, as one JSON text.
async fn admin_views(airlock: &Airlock, run: &str) -> String {
    let mut out = String::new();
    for path in [
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/effects"),
        format!("/v1/runs/{run}/reads"),
        format!("/v1/runs/{run}/env"),
        format!("/v1/runs/{run}/lineage"),
        "/v1/runs".to_owned(),
    ] {
        let view = airlock.admin.get(&path).await.expect("admin view");
        out.push_str(&view.to_string());
    }
    for effect in airlock.effects(run).await {
        let id = effect["id"].as_str().expect("effect id");
        let view = airlock
            .admin
            .get(&format!("/v1/effects/{id}"))
            .await
            .expect("effect view");
        out.push_str(&view.to_string());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_injected_on_pass_and_only_at_release_on_stage_and_never_stored() {
    let fx = Fixture::new();
    let origin = echo_origin(&fx).await;
    let other = other_origin().await;
    let port = origin.addr().port();
    let mut airlock = start(&fx, &github_policy(port, other.addr().port(), false));
    let (run, env) = airlock.create_run().await;
    assert!(
        env.values().all(|v| !v.contains(SECRET)),
        "the sandbox's environment never holds the value"
    );
    let base = format!("https://127.0.0.1:{port}");

    // A read passes with the token injected, replacing whatever the client sent; the echo
    // is scrubbed on its way back.
    let read = curl(
        &env,
        &[
            "-H",
            "authorization: Bearer sandbox-guess",
            &format!("{base}/repos/o/r"),
        ],
    )
    .await;
    assert_eq!(
        read.status,
        200,
        "{} {}",
        read.stderr,
        String::from_utf8_lossy(&read.body)
    );
    let received = origin.received();
    assert_eq!(received.len(), 1);
    let expected = format!("Bearer {SECRET}");
    assert_eq!(received[0].header("authorization"), Some(expected.as_str()));
    let masked = format!("Bearer {}", "*".repeat(SECRET.len()));
    assert_eq!(read.json()["seen"], masked.as_str());
    assert_eq!(read.header("x-echo").as_deref(), Some(masked.as_str()));
    assert!(!String::from_utf8_lossy(&read.body).contains(SECRET));
    assert!(!read.headers.contains(SECRET));

    // A pull request is staged: nothing leaves, and the ledger keeps only the name.
    let body = r#"{"title":"t","head":"h","base":"main"}"#;
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            body,
            &format!("{base}/repos/o/r/pulls"),
        ],
    )
    .await;
    assert_eq!(
        staged.status,
        202,
        "{}",
        String::from_utf8_lossy(&staged.body)
    );
    assert_eq!(origin.received().len(), 1, "nothing leaves before commit");
    let effect_id = staged.header("airlock-effect").expect("effect id");
    let effect = airlock
        .admin
        .get(&format!("/v1/effects/{effect_id}"))
        .await
        .expect("effect");
    assert!(!effect.to_string().contains(SECRET), "{effect}");

    airlock.approve(&effect_id).await;
    let report = airlock.commit(&run).await;
    assert_eq!(report["effects"][0]["state"], "released", "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 2, "released once");
    assert_eq!(received[1].method, "POST");
    assert_eq!(received[1].path, "/repos/o/r/pulls");
    assert_eq!(received[1].header("authorization"), Some(expected.as_str()));
    assert_eq!(received[1].body, body.as_bytes());

    // The admin API, the ledger's files and airlock's log never hold the value.
    let views = admin_views(&airlock, &run).await;
    assert!(
        !views.contains(SECRET),
        "an admin view holds the secret: {views}"
    );
    assert!(
        views.contains("gh-bot"),
        "the effect names its credential: {views}"
    );
    airlock.terminate(Duration::from_secs(15));
    assert_eq!(
        files_containing(&fx.data_dir(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
    assert!(!airlock.log().contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_is_swapped_on_bound_hosts_and_refused_and_flagged_elsewhere() {
    let fx = Fixture::new();
    let origin = echo_origin(&fx).await;
    let other = other_origin().await;
    let port = origin.addr().port();
    let other_url = format!("http://127.0.0.2:{}/collect", other.addr().port());
    let mut airlock = start(&fx, &github_policy(port, other.addr().port(), true));
    let (run, env) = airlock.create_run().await;
    let placeholder = env
        .get("AIRLOCK_CREDENTIAL_GH_BOT")
        .expect("the run's env holds the placeholder")
        .clone();
    assert!(
        placeholder.starts_with("airlock-ph-gh-bot-"),
        "{placeholder}"
    );
    assert!(env.values().all(|v| !v.contains(SECRET)));
    let base = format!("https://127.0.0.1:{port}");

    // On a bound host: the placeholder becomes the value, wherever the tool put it.
    let read = curl(
        &env,
        &[
            "-H",
            &format!("private-token: {placeholder}"),
            &format!("{base}/user?access_token={placeholder}"),
        ],
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.stderr);
    let got = &origin.received()[0];
    assert_eq!(got.header("private-token"), Some(SECRET));
    assert_eq!(got.path, format!("/user?access_token={SECRET}"));
    assert!(!String::from_utf8_lossy(&read.body).contains(SECRET));
    let expected = format!("token {SECRET}");

    // Staged with the placeholder, swapped only at release.
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            &format!("authorization: token {placeholder}"),
            "--data",
            "{}",
            &format!("{base}/repos/o/r/issues"),
        ],
    )
    .await;
    assert_eq!(staged.status, 202);
    let effect_id = staged.header("airlock-effect").expect("effect id");

    // Off the bind, in the query or only in the body, and in the spellings a tool might
    // use to smuggle it (Basic auth, fully percent-encoded, base64, upper case, a JSON
    // \u escape): refused, nothing leaves.
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let percent_all: String = placeholder.bytes().map(|b| format!("%{b:02X}")).collect();
    let json_escaped: String = placeholder
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let attempts = [
        vec![format!("{other_url}?t={placeholder}")],
        vec![
            "-X".into(),
            "POST".into(),
            "--data".into(),
            format!("x={placeholder}"),
            other_url.clone(),
        ],
        vec![
            "-H".into(),
            format!(
                "authorization: Basic {}",
                b64(&format!("bot:{placeholder}"))
            ),
            other_url.clone(),
        ],
        vec![format!("{other_url}?t={percent_all}")],
        vec![
            "-H".into(),
            format!("x-token: {}", b64(&placeholder)),
            other_url.clone(),
        ],
        vec![
            "-H".into(),
            format!("x-token: {}", placeholder.to_ascii_uppercase()),
            other_url.clone(),
        ],
        vec![
            "-H".into(),
            "content-type: application/json".into(),
            "--data".into(),
            format!("{{\"t\": \"{json_escaped}\"}}"),
            other_url.clone(),
        ],
    ];
    let attempted = attempts.len();
    for args in attempts {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let refused = curl(&env, &args).await;
        assert_eq!(
            refused.status,
            403,
            "{}",
            String::from_utf8_lossy(&refused.body)
        );
        assert_eq!(
            refused.header("airlock-error").as_deref(),
            Some("credential_placeholder_off_host")
        );
        let answer = refused.json();
        assert_eq!(answer["reason_code"], "credential_placeholder_off_host");
        assert!(
            answer["reason"].as_str().unwrap_or("").contains("gh-bot"),
            "{answer}"
        );
    }
    assert!(
        other.received().is_empty(),
        "nothing reached the other host"
    );
    // The same host without the placeholder is fine.
    let fine = curl(&env, &[&other_url]).await;
    assert_eq!(fine.status, 200);

    // Flagged on the run, counted, logged at warn without the value.
    let shown: Value = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    let flags = shown["flags"].as_array().expect("flags");
    assert_eq!(flags.len(), attempted, "{shown}");
    assert_eq!(flags[0]["code"], "credential_placeholder_off_host");
    assert!(flags[0]["detail"]
        .as_str()
        .unwrap_or("")
        .contains("127.0.0.2"));
    let out = Command::new(airlock_bin())
        .args(["runs", "show", &run, "--data"])
        .arg(fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("airlock runs show");
    let shown_text = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown_text.contains("flag     credential_placeholder_off_host"),
        "{shown_text}"
    );
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains(&format!(
            "airlock_credential_placeholder_off_host_total{{credential=\"gh-bot\"}} {attempted}"
        )),
        "{metrics}"
    );
    let log = airlock.log();
    assert!(
        log.contains("credential placeholder was sent to a host outside its bind"),
        "{log}"
    );
    assert!(log.contains("WARN"));

    // The manifest tells the agent where its placeholder works, never the value.
    let manifest = curl(&env, &["http://airlock.invalid/.well-known/airlock/policy"]).await;
    assert_eq!(manifest.status, 200);
    let manifest = manifest.json();
    assert_eq!(manifest["credentials"][0]["name"], "gh-bot");
    assert_eq!(
        manifest["credentials"][0]["placeholder_env"],
        "AIRLOCK_CREDENTIAL_GH_BOT"
    );
    assert_eq!(manifest["credentials"][0]["hosts"], json!(["127.0.0.1"]));
    assert!(!manifest.to_string().contains(SECRET));

    airlock.approve(&effect_id).await;
    let report = airlock.commit(&run).await;
    assert_eq!(report["effects"][0]["state"], "released", "{report}");
    let released = origin.received();
    assert_eq!(released.len(), 2);
    assert_eq!(released[1].header("authorization"), Some(expected.as_str()));

    let views = admin_views(&airlock, &run).await;
    assert!(!views.contains(SECRET));
    airlock.terminate(Duration::from_secs(15));
    assert_eq!(
        files_containing(&fx.data_dir(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
    assert!(!airlock.log().contains(SECRET));
}
