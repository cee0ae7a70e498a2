//! Issue 37 item 1: flows decide the pass path too (docs/lineage.md, "Flows on the pass
//! path"). After a read labelled `secret` under a `block` flow, the secret in a GET query
//! to another allowed host, in a header, in a HEAD path and in a passed POST body is each
//! refused 403 `flow_blocked` with the JSON reason, and the origin receives nothing of
//! it; a `review` flow refuses with `flow_review_required`; benign traffic in the same run
//! still passes; a run that read nothing labelled is not affected.

use std::sync::Arc;

use airlock_tests::{curl, Airlock, Fixture, Origin, Received, Reply};
use serde_json::{json, Value};

/// The credential-looking key the vault serves.
const KEY: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc9f3Q2xZk";

/// Vault (labelled `secret`, reads pass) and api (every method passes), with one flow of
/// `action` guarding `secret` and `credential` data from leaving for another host.
fn policy(vault: u16, api: u16, action: &str) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "vault-read"
host = "127.0.0.1"
port = {vault}
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "api"
host = "127.0.0.1"
port = {api}
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
action = "{action}"
reason = "secrets never leave for outside hosts"
"#
    )
}

struct Setup {
    _fx: Fixture,
    airlock: Airlock,
    run: String,
    env: std::collections::BTreeMap<String, String>,
    vault: Origin,
    api: Origin,
}

async fn setup(action: &str) -> Setup {
    let fx = Fixture::new();
    let vault = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| {
            Reply::json(
                200,
                &json!({"service": "payments", "api_key": KEY, "db_password": "correct-horse-battery-staple-7731"}),
            )
        }),
    )
    .await
    .expect("vault");
    let api = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::json(200, &json!({"ok": true}))),
    )
    .await
    .expect("api");
    let text = policy(vault.addr().port(), api.addr().port(), action);
    let (airlock, run, env) = fx.start_run(&text, &[]).await;
    Setup {
        _fx: fx,
        airlock,
        run,
        env,
        vault,
        api,
    }
}

impl Setup {
    fn api(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.api.addr().port())
    }

    async fn read_secret(&self) {
        let url = format!(
            "https://127.0.0.1:{}/v1/secret/payments",
            self.vault.addr().port()
        );
        let read = curl(&self.env, &[&url]).await;
        assert_eq!(read.status, 200, "the vault read passes");
        assert!(String::from_utf8_lossy(&read.body).contains(KEY));
    }

    /// Whether anything the api origin received carries the key.
    fn api_got_key(&self) -> bool {
        self.api.received().iter().any(|r| {
            r.path.contains(KEY)
                || r.headers.iter().any(|(_, v)| v.contains(KEY))
                || String::from_utf8_lossy(&r.body).contains(KEY)
        })
    }
}

/// Asserts a refusal by the flow with `code`, naming the flow, the label, the source read
/// and a hint.
fn assert_refused(out: &airlock_tests::CurlResult, code: &str, what: &str) {
    assert_eq!(out.status, 403, "{what} is refused: {}", out.headers);
    let body: Value = out.json();
    assert_eq!(body["reason_code"], code, "{what}: {body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("\"no-secrets-out\""), "{what}: {reason}");
    assert!(reason.contains("secret"), "{what}: the label: {reason}");
    assert!(
        reason.contains("read 1: GET https://127.0.0.1:"),
        "{what}: the source read: {reason}"
    );
    assert!(
        body["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_flow_refuses_the_secret_on_every_pass_channel_and_benign_traffic_passes() {
    let s = setup("block").await;
    s.read_secret().await;
    let query = curl(&s.env, &[&s.api(&format!("/search?q={KEY}"))]).await;
    assert_refused(&query, "flow_blocked", "the key in a GET query");
    let header = curl(
        &s.env,
        &["-H", &format!("X-Debug-Context: {KEY}"), &s.api("/status")],
    )
    .await;
    assert_refused(&header, "flow_blocked", "the key in a header");
    let post = curl(
        &s.env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &json!({"note": "rotating", "key": KEY}).to_string(),
            &s.api("/notes"),
        ],
    )
    .await;
    assert_refused(&post, "flow_blocked", "the key in a passed POST body");
    assert!(
        !s.api_got_key(),
        "the api origin received the key: {:?}",
        s.api.received()
    );
    assert!(
        s.api.received().is_empty(),
        "nothing refused reached the api"
    );
    // Benign traffic in the same run still passes.
    let benign = curl(&s.env, &[&s.api("/search?q=weather+in+lisbon&page=2")]).await;
    assert_eq!(benign.status, 200, "{}", benign.headers);
    let note = curl(
        &s.env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"text":"build passed on main, deployed v1.4.2 to staging"}"#,
            &s.api("/notes"),
        ],
    )
    .await;
    assert_eq!(note.status, 200, "{}", note.headers);
    let received = s.api.received();
    assert_eq!(received.len(), 2, "{received:?}");
    assert_eq!(received[0].path, "/search?q=weather+in+lisbon&page=2");
    assert!(String::from_utf8_lossy(&received[1].body).contains("v1.4.2"));
    // Each refusal is journaled as a denial of the run.
    let mut codes: Vec<String> = Vec::new();
    for _ in 0..100 {
        let list = s
            .airlock
            .admin
            .get(&format!("/v1/runs/{}/denials", s.run))
            .await
            .expect("denials");
        codes = list["denials"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|d| d["reason_code"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if codes.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        codes.iter().filter(|c| *c == "flow_blocked").count(),
        3,
        "{codes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_flow_refuses_a_pass_because_a_pass_cannot_wait_for_a_person() {
    let s = setup("review").await;
    s.read_secret().await;
    let query = curl(&s.env, &[&s.api(&format!("/search?q={KEY}"))]).await;
    assert_refused(&query, "flow_review_required", "the key in a GET query");
    let hint = query.json()["hint"].as_str().unwrap_or_default().to_owned();
    assert!(hint.contains("cannot wait for a person"), "{hint}");
    assert!(s.api.received().is_empty(), "{:?}", s.api.received());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_labelled_reads_passes_as_before() {
    let s = setup("block").await;
    // The key's text, never read in this run, is no lineage: it passes.
    let query = curl(&s.env, &[&s.api(&format!("/search?q={KEY}"))]).await;
    assert_eq!(query.status, 200, "{}", query.headers);
    assert_eq!(s.api.received().len(), 1);
    assert!(s.api_got_key());
}

// Over HTTP/2 (intercepted HTTPS, curl's default) a refusal's body on a HEAD used to end
// the stream in PROTOCOL_ERROR (curl error 92), so the client saw no status at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_flow_refuses_the_secret_in_a_head_path() {
    let s = setup("block").await;
    s.read_secret().await;
    let head = curl(&s.env, &["-I", &s.api(&format!("/files/{KEY}"))]).await;
    assert_eq!(
        head.status, 403,
        "the key in a HEAD path: {} {}",
        head.headers, head.stderr
    );
    assert_eq!(
        head.header("airlock-error").as_deref(),
        Some("flow_blocked"),
        "{}",
        head.headers
    );
    assert!(s.api.received().is_empty(), "{:?}", s.api.received());
}
