//! Pass: reads reach the origin byte for byte and are journaled as reads.

use std::sync::Arc;

use airlock_tests::{curl, loopback_policy, text_origin, Fixture, Origin, Received, Reply};

fn payload() -> Vec<u8> {
    // 300 KiB of every byte value, so any re-encoding or truncation shows.
    (0..300 * 1024).map(|i| (i * 7 % 256) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passed_get_returns_the_origin_body_byte_for_byte_and_is_journaled() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| {
            let mut reply = Reply::text(200, "");
            reply.body = payload();
            reply.headers = vec![
                ("content-type".into(), "application/octet-stream".into()),
                ("x-origin".into(), "yes".into()),
                ("airlock-effect".into(), "eff_forged".into()),
            ];
            if req.path == "/missing" {
                reply.status = 404;
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/data.bin?v=2", origin.addr().port());

    let out = curl(&env, &["-H", "x-client: 1", &url]).await;
    assert!(out.success, "{}", out.stderr);
    assert_eq!(out.status, 200);
    assert_eq!(out.body, payload(), "body byte for byte");
    assert_eq!(out.header("x-origin").as_deref(), Some("yes"));
    assert_eq!(
        out.header("airlock-effect"),
        None,
        "origins cannot forge airlock headers"
    );

    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/data.bin?v=2");
    assert_eq!(received[0].header("x-client"), Some("1"));
    assert_eq!(received[0].header("proxy-authorization"), None);

    // The origin's own status passes through too.
    let out = curl(
        &env,
        &[&format!(
            "https://127.0.0.1:{}/missing",
            origin.addr().port()
        )],
    )
    .await;
    assert_eq!(out.status, 404);

    let reads = airlock_tests::poll_until(std::time::Duration::from_secs(5), || async {
        let list = airlock
            .admin
            .get(&format!("/v1/runs/{run}/reads"))
            .await
            .expect("reads");
        let reads = list["reads"].as_array().cloned().unwrap_or_default();
        (reads.len() == 2).then_some(reads)
    })
    .await
    .expect("two reads journaled");
    let first = &reads[0];
    assert_eq!(first["method"], "GET");
    assert_eq!(first["url"], url.as_str());
    assert_eq!(first["status"], 200);
    assert_eq!(first["response_bytes"], payload().len());
    // BLAKE3, as `b3sum` prints it (docs/admin-api.md).
    let digest = format!("blake3:{}", blake3::hash(&payload()).to_hex());
    assert_eq!(first["response_digest"], digest.as_str());
    assert_eq!(first["rule"], "reads");
    assert_eq!(reads[1]["status"], 404);
    assert!(
        airlock.effects(&run).await.is_empty(),
        "reads are not effects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_absolute_form_follows_the_same_path() {
    let fx = Fixture::new();
    let origin = text_origin(None, 200, "plain hello").await;
    let policy =
        loopback_policy(origin.addr().port()).replace("[[rule]]", "[[rule]]\nscheme = \"http\"");
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let url = format!("http://127.0.0.1:{}/hello", origin.addr().port());
    let out = curl(&env, &[&url]).await;
    assert_eq!(
        out.status,
        200,
        "{} {}",
        out.stderr,
        String::from_utf8_lossy(&out.body)
    );
    assert_eq!(out.body, b"plain hello");
    let out = curl(&env, &["-X", "POST", "--data", "x", &url]).await;
    assert_eq!(out.status, 202);
    assert_eq!(airlock.effects(&run).await.len(), 1);
    let out = curl(
        &env,
        &[&format!(
            "http://127.0.0.1:{}/forbidden/x",
            origin.addr().port()
        )],
    )
    .await;
    assert_eq!(out.status, 403);
    assert_eq!(out.json()["rule"], "forbidden");
    assert_eq!(
        origin.received().len(),
        1,
        "only the GET reached the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_can_read_its_policy_manifest_through_the_proxy() {
    let fx = Fixture::new();
    let origin = text_origin(Some(&fx.origin_ca), 200, "ok").await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    for url in [
        "http://airlock.invalid/.well-known/airlock/policy",
        "https://airlock.invalid/.well-known/airlock/policy",
    ] {
        let out = curl(&env, &[url]).await;
        assert_eq!(out.status, 200, "{url}: {}", out.stderr);
        let manifest = out.json();
        assert_eq!(manifest["run"], run.as_str());
        let ids: Vec<&str> = manifest["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter_map(|r| r["id"].as_str())
            .collect();
        assert_eq!(ids, vec!["forbidden", "reads", "writes"], "{url}");
        assert_eq!(
            manifest["rules"][0]["reason"],
            "nothing under /forbidden leaves"
        );
        assert!(manifest["policy_revision"].is_string());
    }
    let missing = curl(&env, &["http://airlock.invalid/other"]).await;
    assert_eq!(missing.status, 404);
    assert!(origin.received().is_empty());
    assert!(airlock.effects(&run).await.is_empty());
}

/// A request no rule allows gets a 403 whose reason names the nearest rule: the first one
/// that matched its host and port, and the condition that failed (here the method), so an
/// agent or an operator sees at once what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_deny_names_the_rule_that_matched_host_and_port_but_not_the_method() {
    let fx = Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n\n\
         [[rule]]\nid = \"other-port\"\nhost = \"127.0.0.1\"\nport = {}\naction = \"pass\"\n\n\
         [[rule]]\nid = \"api-reads\"\nhost = \"127.0.0.1\"\nport = {port}\nmethod = \"read\"\naction = \"pass\"\n",
        port.wrapping_add(1)
    );
    let (_airlock, _run, env) = fx.start_run(&policy, &[]).await;
    let url = format!("https://127.0.0.1:{port}/items/1");
    let out = curl(&env, &["-X", "DELETE", &url]).await;
    assert_eq!(out.status, 403, "{}", out.stderr);
    let body: serde_json::Value = serde_json::from_slice(&out.body).expect("JSON");
    assert_eq!(body["reason_code"], "default_deny", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or("")
            .contains("rule \"api-reads\" matches this host and port but not its method"),
        "{body}"
    );
    assert!(origin.received().is_empty(), "nothing reached the origin");
}
