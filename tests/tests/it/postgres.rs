//! issue #19 items 1 and 4: two `airlock serve --store postgres://…` processes on one
//! PostgreSQL (a real server started by the test, loopback only) share runs, effects,
//! placeholders and run closure; a commit on one releases every approved effect once; and
//! `/healthz` follows the server's availability. `postgres/placeholders.rs`: a
//! placeholder issued through one proxy is held by the other at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_ledger::conformance::postgres::TestServer;
use airlock_tests::{curl, Airlock, Fixture, Origin, Received, Reply};
use serde_json::json;

mod placeholders;

/// Items are created with a placeholder id (staged), other writes staged, reads passed.
pub(super) fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "create-item"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/items"
action = "stage"
[rule.respond]
status = 201
body = '{{"id": "{{{{placeholder:number:/id}}}}", "state": "open"}}'

[[rule]]
id = "writes"
host = "127.0.0.1"
port = {port}
method = "write"
action = "stage"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
"#
    )
}

/// Starts the second server on its own data directory holding the first's CA and
/// placeholder key and run token key (what a fleet mounts into every instance), on the same
/// store.
fn start_second(fx: &Fixture, url: &str) -> Airlock {
    let first = fx.data_dir();
    let data = fx.dir.path().join("data-y");
    std::fs::create_dir_all(&data).expect("data dir");
    for file in ["ca.pem", "ca-key.pem", "placeholder.key", "run-token.key"] {
        if first.join(file).exists() {
            std::fs::copy(first.join(file), data.join(file)).expect("copy the CA");
        }
    }
    Airlock::spawn(
        &data,
        &fx.dir.path().join("policy.toml"),
        &fx.dir.path().join("origin-ca.pem"),
        &["--store", url],
    )
    .expect("the second airlock starts")
}

/// The run's environment with the proxy of `from` replaced by `to`'s.
pub(super) fn through(
    env: &BTreeMap<String, String>,
    from: &Airlock,
    to: &Airlock,
) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| (k.clone(), v.replace(&from.proxy, &to.proxy)))
        .collect()
}

/// How many requests with `method` and `path` the origin received.
pub(super) fn count(received: &[Received], method: &str, path: &str) -> usize {
    received
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .count()
}

/// An origin answering `POST /items` with id 4242 and anything else `{"ok": true}`.
async fn items_origin(fx: &Fixture) -> Origin {
    Origin::start(
        Some(&fx.origin_ca),
        Arc::new(
            |req: &Received| match (req.method.as_str(), req.path.as_str()) {
                ("POST", "/items") => Reply::json(201, &json!({"id": 4242, "state": "open"})),
                _ => Reply::json(200, &json!({"ok": true})),
            },
        ),
    )
    .await
    .expect("origin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_store_share_effects_placeholders_closure_and_commit() {
    let Some(pg) = TestServer::start() else {
        return;
    };
    let url = pg.database();
    let fx = Fixture::new();
    let origin = items_origin(&fx).await;
    let port = origin.addr().port();
    let base = format!("https://127.0.0.1:{port}");
    let x = fx.start(&policy(port), &["--store", &url]);
    let y = start_second(&fx, &url);
    let (run, env_x) = x.create_run().await;
    let env_y = through(&env_x, &x, &y);
    assert_ne!(env_x, env_y, "the environment names X's proxy");

    // Effects staged through both proxies, in one run.
    let hook_y = curl(
        &env_y,
        &["-X", "POST", "--data", "from y", &format!("{base}/hooks/y")],
    )
    .await;
    assert_eq!(
        hook_y.status,
        202,
        "{}",
        String::from_utf8_lossy(&hook_y.body)
    );
    let created = curl(
        &env_x,
        &[
            "-X",
            "POST",
            "--data",
            r#"{"title":"t"}"#,
            &format!("{base}/items"),
        ],
    )
    .await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let placeholder = created.json()["id"].as_u64().expect("a number placeholder");
    let parent = created.header("airlock-effect").expect("effect");
    // Y cached the run's placeholders (none) when it staged above. At once, without
    // waiting for X's notification: Y checks its cache against the store's count, so a
    // request carrying the placeholder issued through X depends on it.
    let comment = curl(
        &env_y,
        &[
            "-X",
            "POST",
            "--data",
            &format!(r#"{{"item":{placeholder}}}"#),
            &format!("{base}/items/{placeholder}/comments"),
        ],
    )
    .await;
    assert_eq!(
        comment.status,
        202,
        "{}",
        String::from_utf8_lossy(&comment.body)
    );
    let child = comment.header("airlock-effect").expect("effect");
    let read_back = curl(&env_y, &[&format!("{base}/items/{placeholder}")]).await;
    assert_eq!(
        read_back.status, 202,
        "a read through Y carrying X's placeholder is held, not passed"
    );
    let hook_x = curl(
        &env_x,
        &["-X", "POST", "--data", "from x", &format!("{base}/hooks/x")],
    )
    .await;
    assert_eq!(hook_x.status, 202);
    assert!(
        origin.received().is_empty(),
        "nothing reached the origin before commit"
    );

    let effects = x.effects(&run).await;
    let urls: Vec<&str> = effects.iter().filter_map(|e| e["url"].as_str()).collect();
    assert_eq!(
        effects.len(),
        5,
        "both proxies' effects are listed on X: {urls:?}"
    );
    let seqs: Vec<u64> = effects.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    let shown = x
        .admin
        .get(&format!("/v1/effects/{child}"))
        .await
        .expect("show");
    assert_eq!(shown["depends_on"][0]["effect"], parent.as_str(), "{shown}");

    // Closing a run through X refuses its requests through Y, within a bound.
    let (closing, env2_x) = x.create_run().await;
    let env2_y = through(&env2_x, &x, &y);
    let ok = curl(&env2_y, &[&format!("{base}/ok")]).await;
    assert_eq!(
        ok.status, 200,
        "a read passes through Y while the run is open"
    );
    x.post(&format!("/v1/runs/{closing}/abort"), None)
        .await
        .expect("abort through X");
    let aborted = Instant::now();
    let bound = Duration::from_secs(2);
    let mut refused_after = None;
    let mut probes = 0;
    while aborted.elapsed() < bound * 3 {
        probes += 1;
        let probe = curl(&env2_y, &[&format!("{base}/ok")]).await;
        if probe.status == 409 {
            refused_after = Some(aborted.elapsed());
            break;
        }
    }
    let refused_after = refused_after.expect("Y refuses requests of a run aborted through X");
    eprintln!(
        "figure: Y refused the run aborted through X {} ms after the abort returned ({probes} probe(s))",
        refused_after.as_millis()
    );
    assert!(
        refused_after <= bound,
        "took {refused_after:?}, bound {bound:?}"
    );
    let reads_before = count(&origin.received(), "GET", "/ok");

    // Commit on X releases every effect once (none through Y).
    let report = x.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    for (method, path) in [
        ("POST", "/hooks/y".to_owned()),
        ("POST", "/items".to_owned()),
        ("POST", "/items/4242/comments".to_owned()),
        ("GET", "/items/4242".to_owned()),
        ("POST", "/hooks/x".to_owned()),
    ] {
        assert_eq!(
            count(&received, method, &path),
            1,
            "{method} {path} released once"
        );
    }
    assert_eq!(
        received.len(),
        5 + reads_before,
        "nothing else reached the origin"
    );
    let comment_body = received
        .iter()
        .find(|r| r.path == "/items/4242/comments")
        .map(|r| String::from_utf8_lossy(&r.body).into_owned());
    assert_eq!(comment_body.as_deref(), Some(r#"{"item":4242}"#));
    // Y sees the outcome too.
    let on_y = y.effects(&run).await;
    assert!(on_y.iter().all(|e| e["state"] == "released"), "{on_y:?}");

    // PostgreSQL gone: /healthz answers 503 ledger_degraded, then 200 once it is back.
    let healthz = format!("{}/healthz", x.admin_url);
    assert_eq!(curl(&BTreeMap::new(), &[&healthz]).await.status, 200);
    pg.stop();
    let degraded = poll_status(&healthz, 503)
        .await
        .expect("503 while PostgreSQL is down");
    assert_eq!(
        degraded.json()["reason"],
        "ledger_degraded",
        "{}",
        String::from_utf8_lossy(&degraded.body)
    );
    pg.restart();
    poll_status(&healthz, 200)
        .await
        .expect("200 once PostgreSQL is back, without a restart");
    x.create_run().await;
}

/// Polls `url` (no proxy) for up to 15 s until it answers `status`.
async fn poll_status(url: &str, status: u16) -> Option<airlock_tests::CurlResult> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let answer = curl(&BTreeMap::new(), &[url]).await;
        if answer.status == status {
            return Some(answer);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_store_url_is_a_startup_error_naming_the_flag_without_the_password() {
    let fx = Fixture::new();
    std::fs::write(fx.dir.path().join("policy.toml"), policy(1)).expect("policy");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    for (url, expect) in [
        (
            format!("postgres://u:hunter2@127.0.0.1:{port}/db"),
            format!("u@127.0.0.1:{port}/db"),
        ),
        (
            "postgres://u:hunter2@127.0.0.1:x/db".to_owned(),
            "does not parse".to_owned(),
        ),
        (
            format!("postgres://u:hunter2@127.0.0.1:{port}/db?sslmode=require"),
            "sslmode=require needs sslrootcert".to_owned(),
        ),
    ] {
        let output = std::process::Command::new(airlock_tests::airlock_bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "127.0.0.1:0",
                "--data",
            ])
            .arg(fx.data_dir())
            .arg("--policy")
            .arg(fx.dir.path().join("policy.toml"))
            .env("AIRLOCK_STORE", &url)
            .output()
            .expect("run airlock");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains("--store"), "names the flag: {stderr}");
        assert!(stderr.contains(&expect), "names the problem: {stderr}");
        assert!(!stderr.contains("hunter2"), "no password: {stderr}");
        if url.contains("sslmode") {
            assert!(
                stderr.contains("sslmode=verify-full&sslrootcert=FILE"),
                "hints at the fix: {stderr}"
            );
        }
    }
}

/// issue #19: a fleet's store reached over verified TLS. The server refuses plain TCP, so
/// both instances' connections are TLS (`sslmode=verify-full`, the harness's CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_a_tls_only_postgres_store_with_verify_full() {
    let Some(pg) = TestServer::start_tls() else {
        return;
    };
    let url = pg.database();
    assert!(url.contains("sslmode=verify-full&sslrootcert="), "{url}");
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::json(200, &json!({"ok": true}))),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let x = fx.start(&policy(port), &["--store", &url]);
    let y = start_second(&fx, &url);
    let (run, env_x) = x.create_run().await;
    let hook = curl(
        &env_x,
        &[
            "-X",
            "POST",
            "--data",
            "over tls",
            &format!("https://127.0.0.1:{port}/hooks/t"),
        ],
    )
    .await;
    assert_eq!(hook.status, 202, "{}", String::from_utf8_lossy(&hook.body));
    let effects = y.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(
        count(&origin.received(), "POST", "/hooks/t"),
        0,
        "staged, not sent"
    );
}
