//! Hot reload: a changed policy file, or one posted to the admin API, changes decisions on
//! connections already open; an invalid one keeps the last good policy.

use std::time::Duration;

use airlock_tests::{loopback_policy, ok_origin, poll_until, Fixture};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::Value;

/// One keep-alive HTTP/1.1 connection through a CONNECT tunnel.
struct Tunnel {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    authority: String,
}

impl Tunnel {
    async fn open(airlock: &airlock_tests::Airlock, run: &str, authority: &str) -> Tunnel {
        let token = airlock.run_token(run).await;
        let sender = airlock_tests::tunnel::h1_through(airlock, run, &token, authority).await;
        Tunnel {
            sender,
            authority: authority.to_owned(),
        }
    }

    /// GET `path` on this same connection: status, `airlock-error`, JSON body (or Null).
    async fn get(&mut self, path: &str) -> (u16, Option<String>, Value) {
        self.sender
            .ready()
            .await
            .expect("the connection is still open");
        let request = http::Request::get(format!("https://{}{path}", self.authority))
            .header("host", &self.authority)
            .body(Empty::new())
            .expect("request");
        let response = self.sender.send_request(request).await.expect("answered");
        let status = response.status().as_u16();
        let error = response
            .headers()
            .get("airlock-error")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            error,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        )
    }
}

fn deny_a_first(port: u16) -> String {
    loopback_policy(port).replacen(
        "[[rule]]",
        &format!(
            "[[rule]]\nid = \"no-a\"\nhost = \"127.0.0.1\"\nport = {port}\npath = \"/a\"\naction = \"deny\"\nreason = \"reloaded\"\n\n[[rule]]"
        ),
        1,
    )
}

async fn generation(airlock: &airlock_tests::Airlock) -> (u64, u64, String) {
    let policy = airlock
        .admin
        .get("/v1/policy")
        .await
        .expect("GET /v1/policy");
    (
        policy["generation"].as_u64().expect("generation"),
        policy["reload_failures"].as_u64().expect("reload_failures"),
        policy["revision"].as_str().expect("revision").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_changes_a_decision_without_dropping_connections() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, _env) = fx.start_run(&loopback_policy(port), &[]).await;
    let mut tunnel = Tunnel::open(&airlock, &run, &format!("127.0.0.1:{port}")).await;
    let (first, _, first_revision) = generation(&airlock).await;
    assert_eq!(first, 1);

    let (status, _, _) = tunnel.get("/a").await;
    assert_eq!(status, 200, "passes under the first policy");

    // 1. The file changes: the watcher swaps the policy; the open connection sees it.
    let policy_path = fx.dir.path().join("policy.toml");
    std::fs::write(&policy_path, deny_a_first(port)).expect("rewrite policy");
    let reloaded = poll_until(Duration::from_secs(20), || async {
        let (generation, _, revision) = generation(&airlock).await;
        (generation == 2).then_some(revision)
    })
    .await
    .expect("the file change is picked up");
    assert_ne!(reloaded, first_revision);
    let (status, error, body) = tunnel.get("/a").await;
    assert_eq!(
        status, 403,
        "denied on the same connection after the reload"
    );
    assert_eq!(error.as_deref(), Some("rule_deny"));
    assert_eq!(body["rule"], "no-a");
    assert_eq!(body["policy_revision"], reloaded.as_str());
    assert_eq!(tunnel.get("/b").await.0, 200, "other paths still pass");

    // 2. An invalid file keeps the last good policy.
    std::fs::write(
        &policy_path,
        "version = 1\n[[rule]]\nid = \"x\"\nhots = \"typo\"\n",
    )
    .expect("break policy");
    let failures = poll_until(Duration::from_secs(20), || async {
        let (_, failures, _) = generation(&airlock).await;
        (failures >= 1).then_some(failures)
    })
    .await
    .expect("the invalid file is seen and refused");
    assert_eq!(
        failures, 1,
        "an unchanged invalid file is refused once, not every poll"
    );
    let (generation_now, _, revision_now) = generation(&airlock).await;
    assert_eq!(
        (generation_now, revision_now.as_str()),
        (2, reloaded.as_str())
    );
    assert_eq!(
        tunnel.get("/a").await.0,
        403,
        "the last good policy still decides"
    );
    assert!(
        airlock.log().contains("policy reload refused"),
        "the refusal is logged:\n{}",
        airlock.log()
    );

    // 3. A policy posted to the admin API swaps in, on the same connection again.
    let posted = airlock
        .admin
        .post_text("/v1/policy", "application/toml", loopback_policy(port))
        .await
        .expect("POST /v1/policy");
    assert_eq!(posted["changed"], true);
    assert_eq!(posted["generation"], 3);
    assert_eq!(posted["revision"], first_revision.as_str());
    assert_eq!(tunnel.get("/a").await.0, 200, "passes again");

    // 4. An invalid post is refused with the reason and changes nothing.
    let refused = airlock
        .admin
        .post_text("/v1/policy", "application/toml", "version = 2\n".into())
        .await
        .expect_err("an invalid policy is refused");
    match refused {
        airlock_tests::ClientError::Api {
            status,
            code,
            message,
            details,
        } => {
            assert_eq!((status, code.as_str()), (422, "policy_invalid"));
            assert!(message.contains("version"), "{message}");
            assert_eq!(details.expect("details")["generation"], 3);
        }
        other => panic!("unexpected error {other}"),
    }
    assert_eq!(generation(&airlock).await.0, 3);
    assert_eq!(tunnel.get("/a").await.0, 200);

    // The origin saw exactly the requests that passed.
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/a", "/b", "/a", "/a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_replay_redecides_a_past_run_and_reload_swaps_the_servers_policy() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    assert_eq!(
        airlock_tests::curl(&env, &[&format!("{base}/a")])
            .await
            .status,
        200
    );
    let staged = airlock_tests::curl(&env, &["-d", "x=1", &format!("{base}/w")]).await;
    assert_eq!(staged.status, 202);
    let denied = airlock_tests::curl(&env, &[&format!("{base}/forbidden/x")]).await;
    assert_eq!(denied.status, 403);

    // The ledger holds the denial with its rule and revision.
    let denials = airlock
        .admin
        .get(&format!("/v1/runs/{run}/denials"))
        .await
        .expect("denials");
    let (_, _, revision) = generation(&airlock).await;
    assert_eq!(denials["denials"][0]["rule"], "forbidden");
    assert_eq!(denials["denials"][0]["url"], format!("{base}/forbidden/x"));
    assert_eq!(denials["denials"][0]["policy_revision"], revision.as_str());

    // A candidate that denies /a and passes everything else on the port.
    let candidate = fx.dir.path().join("candidate.toml");
    std::fs::write(
        &candidate,
        format!(
            "version = 1\nallow_private = [\"127.0.0.0/8\"]\n\n[[rule]]\nid = \"no-a\"\nhost = \"127.0.0.1\"\nport = {port}\npath = \"/a\"\naction = \"deny\"\n\n[[rule]]\nid = \"all\"\nhost = \"127.0.0.1\"\nport = {port}\naction = \"pass\"\n"
        ),
    )
    .expect("candidate");
    let candidate = candidate.to_str().expect("utf-8 path");
    let (ok, out, err) = crate::cli::cli(
        &fx,
        &["policy", "replay", candidate, "--run", &run, "--json"],
    );
    assert!(ok, "{err}");
    let replay: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(replay["requests"], 3);
    let changed: Vec<(String, String, String, String)> = replay["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or_default().to_owned(),
                c["url"].as_str().unwrap_or_default().to_owned(),
                c["was"].as_str().unwrap_or_default().to_owned(),
                c["now"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let row = |kind: &str, path: &str, was: &str, now: &str| {
        (
            kind.to_owned(),
            format!("{base}{path}"),
            was.to_owned(),
            now.to_owned(),
        )
    };
    assert_eq!(
        changed,
        [
            row("read", "/a", "pass", "deny"),
            row("effect", "/w", "stage", "pass"),
            row("denial", "/forbidden/x", "deny", "pass"),
        ]
    );

    // `policy diff` against the file in force says the candidate widens; the gate fails.
    let policy_file = fx.dir.path().join("policy.toml");
    let policy_file = policy_file.to_str().expect("utf-8 path");
    let diff = std::process::Command::new(airlock_tests::airlock_bin())
        .args(["policy", "diff", policy_file, candidate, "--fail-on-widen"])
        .output()
        .expect("run airlock");
    let out = String::from_utf8_lossy(&diff.stdout);
    let err = String::from_utf8_lossy(&diff.stderr);
    assert!(!diff.status.success(), "a widening fails the gate:\n{out}");
    assert!(err.contains("--fail-on-widen"), "{err}");
    assert!(out.contains("WIDENS"), "{out}");
    assert!(out.contains("rules added: all, no-a"), "{out}");

    // `policy reload` swaps it in on the running server; an invalid file is refused locally.
    let (ok, out, err) = crate::cli::cli(&fx, &["policy", "reload", candidate]);
    assert!(ok, "{err}");
    assert!(out.contains("generation 2"), "{out}");
    assert_eq!(
        airlock_tests::curl(&env, &[&format!("{base}/a")])
            .await
            .status,
        403
    );
    let broken = fx.dir.path().join("broken.toml");
    std::fs::write(&broken, "version = 1\ndefault = \"maybe\"\n").expect("broken");
    let (ok, _, err) = crate::cli::cli(&fx, &["policy", "reload", broken.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(err.contains("broken.toml"), "{err}");
    assert_eq!(generation(&airlock).await.0, 2);
}

/// `policy replay` re-decides effects from their full record (headers and body), so
/// `headers` and body matchers of the candidate decide them as the proxy would; it says
/// which requests (reads, denials) it could only re-decide without headers or body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_replay_redecides_effects_from_their_headers_and_body() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (_airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    assert_eq!(
        airlock_tests::curl(&env, &[&format!("{base}/a")])
            .await
            .status,
        200
    );
    for (kind, body) in [
        ("deploy", r#"{"action": "ship"}"#),
        ("docs", r#"{"action": "draft"}"#),
    ] {
        let staged = airlock_tests::curl(
            &env,
            &[
                "-H",
                &format!("x-kind: {kind}"),
                "-H",
                "content-type: application/json",
                "-d",
                body,
                &format!("{base}/w"),
            ],
        )
        .await;
        assert_eq!(staged.status, 202, "{kind}");
    }

    // A candidate whose header and body matchers tell the two staged writes apart.
    let candidate = fx.dir.path().join("candidate.toml");
    std::fs::write(
        &candidate,
        format!(
            r#"version = 1
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "no-deploys"
host = "127.0.0.1"
port = {port}
method = ["POST"]
headers = {{ "x-kind" = "deploy" }}
action = "deny"

[[rule]]
id = "drafts"
host = "127.0.0.1"
port = {port}
method = ["POST"]
json = {{ "/action" = "draft" }}
limit = {{ body_bytes = 4096 }}
action = "pass"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
"#
        ),
    )
    .expect("candidate");
    let candidate = candidate.to_str().expect("utf-8 path");
    let (ok, out, err) = crate::cli::cli(
        &fx,
        &["policy", "replay", candidate, "--run", &run, "--json"],
    );
    assert!(ok, "{err}");
    let replay: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(replay["requests"], 3, "{replay:#}");
    let changed: Vec<(String, String, String, Value)> = replay["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or_default().to_owned(),
                c["now"].as_str().unwrap_or_default().to_owned(),
                c["now_rule"].as_str().unwrap_or_default().to_owned(),
                c["approximate"].clone(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            (
                "effect".into(),
                "deny".into(),
                "no-deploys".into(),
                Value::Null
            ),
            ("effect".into(), "pass".into(), "drafts".into(), Value::Null),
        ],
        "{replay:#}"
    );
    let approximate = replay["approximate"].as_array().expect("approximate");
    assert_eq!(approximate.len(), 1, "{replay:#}");
    assert_eq!(approximate[0]["kind"], "read");
    assert_eq!(approximate[0]["url"], format!("{base}/a"));
    assert_eq!(
        approximate[0]["approximate"],
        "reads keep no headers or body"
    );

    // The text output says so too.
    let (ok, out, err) = crate::cli::cli(&fx, &["policy", "replay", candidate, "--run", &run]);
    assert!(ok, "{err}");
    assert!(out.contains("3 request(s) re-decided"), "{out}");
    assert!(
        out.contains("~ 1 request(s) re-decided approximately")
            && out.contains("reads keep no headers or body"),
        "{out}"
    );
}

/// `loopback_policy(port)` with a body rule first: a JSON POST to `/w` whose `/k` is `"v"`
/// passes under `id`, with a query limit of 8 bytes.
fn body_rule_first(port: u16, id: &str) -> String {
    loopback_policy(port).replacen(
        "[[rule]]",
        &format!(
            "[[rule]]\nid = \"{id}\"\nhost = \"127.0.0.1\"\nport = {port}\nmethod = \"POST\"\npath = \"/w\"\njson = {{ \"/k\" = \"v\" }}\nlimit = {{ body_bytes = 4096, query_bytes = 8 }}\naction = \"pass\"\n\n[[rule]]"
        ),
        1,
    )
}

/// Issue 41 item 1: a request is decided, limited and acted on under the one policy
/// snapshot taken when it was admitted. A body rule makes airlock read the body before it
/// decides; the policy is replaced while the body is still on its way by one where the same
/// rule has another id. Deciding by the new policy and looking the rule's limits up in the
/// old one found no rule, so the query limit was skipped and the request passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_while_the_body_is_read_does_not_skip_the_deciding_rules_limits() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&body_rule_first(port, "json-a"), &[]).await;
    let authority = format!("127.0.0.1:{port}");
    let token = airlock.run_token(&run).await;
    let stream =
        airlock_tests::tunnel::connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = airlock_tests::tunnel::tls_trusting(&ca, &[b"http/1.1"])
        .connect(name, stream)
        .await
        .expect("tls");

    let body = br#"{"k": "v", "note": "a body airlock reads whole before it decides"}"#;
    let (first, rest) = body.split_at(6);
    let head = format!(
        "POST /w?query=well-over-eight-bytes HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("head");
    tls.write_all(first).await.expect("first bytes");
    tls.flush().await.expect("flush");
    // The request is admitted (and its snapshot taken) as soon as its head arrives; it
    // then waits in the body read.
    poll_until(Duration::from_secs(10), || async {
        let metrics = airlock.admin.get_text("/metrics").await.ok()?;
        metrics
            .lines()
            .any(|line| line == "airlock_requests_in_flight 1")
            .then_some(())
    })
    .await
    .expect("the request is in flight, reading its body");
    let posted = airlock
        .admin
        .post_text(
            "/v1/policy",
            "application/toml",
            body_rule_first(port, "json-b"),
        )
        .await
        .expect("POST /v1/policy");
    assert_eq!(
        posted["generation"], 2,
        "the policy is replaced mid-request"
    );

    tls.write_all(rest).await.expect("the rest of the body");
    tls.flush().await.expect("flush");
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await.expect("answer");
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).unwrap_or_default();
    assert_eq!(
        status, "414",
        "the deciding rule's query limit applies:\n{answer}"
    );
    let json: Value = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    assert_eq!(
        json["rule"], "json-a",
        "decided by the policy the request was admitted under:\n{answer}"
    );
    assert!(
        origin.received().iter().all(|r| !r.path.starts_with("/w")),
        "nothing reached the origin"
    );

    // The next request is decided under the new policy, its rule's limits with it.
    let next = airlock_tests::curl(
        &env,
        &[
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"k": "v"}"#,
            &format!("https://{authority}/w?q=1"),
        ],
    )
    .await;
    assert_eq!(next.status, 200, "{}", String::from_utf8_lossy(&next.body));
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        ["/w?q=1"],
        "only the second request reached the origin"
    );
}
