//! Staging: effects are held, answered at once, released exactly once on commit.

use std::time::Duration;

use airlock_tests::{curl, loopback_policy, ok_origin, Fixture};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_post_is_held_then_released_exactly_once_on_commit() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!(
        "https://127.0.0.1:{}/hooks/deploy?x=1",
        origin.addr().port()
    );
    let body = r#"{"text":"deploy finished","n":1}"#;

    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
            "x-trace: abc123",
            "--data",
            body,
            &url,
        ],
    )
    .await;
    assert!(out.success, "curl failed: {}", out.stderr);
    assert_eq!(
        out.status,
        202,
        "body: {}",
        String::from_utf8_lossy(&out.body)
    );
    let effect_id = out.header("airlock-effect").expect("airlock-effect header");
    let answer = out.json();
    assert_eq!(answer["effect"], effect_id.as_str());
    assert_eq!(answer["status"], "staged");
    assert!(origin.received().is_empty(), "nothing leaves before commit");

    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["state"], "staged");
    assert_eq!(effects[0]["method"], "POST");

    airlock.approve(&effect_id).await;
    let report = airlock.commit(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(report["effects"][0]["state"], "released");
    assert_eq!(report["effects"][0]["status"], 200);

    let received = origin.received();
    assert_eq!(received.len(), 1, "released exactly once");
    let got = &received[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, "/hooks/deploy?x=1");
    assert_eq!(got.body, body.as_bytes());
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(got.header("x-trace"), Some("abc123"));
    assert_eq!(
        got.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    for hop in [
        "proxy-authorization",
        "proxy-connection",
        "connection",
        "transfer-encoding",
    ] {
        assert_eq!(got.header(hop), None, "{hop} must not reach the origin");
    }

    // A second commit is a no-op reporting the same outcome.
    let again = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect("commit again");
    assert_eq!(again["state"], "committed");
    assert_eq!(again["effects"], report["effects"]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(origin.received().len(), 1, "a second commit sends nothing");

    // The released response is recorded on the effect.
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{effect_id}"))
        .await
        .expect("show");
    assert_eq!(shown["state"], "released");
    assert_eq!(shown["release"]["status"], 200);
    assert_eq!(shown["release"]["body"]["text"], r#"{"ok":true}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_discards_and_nothing_is_sent() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/hooks/a", origin.addr().port());
    for _ in 0..2 {
        let out = curl(&env, &["-X", "POST", "--data", "x=1", &url]).await;
        assert_eq!(out.status, 202, "{}", out.stderr);
    }
    let aborted = airlock
        .post(&format!("/v1/runs/{run}/abort"), None)
        .await
        .expect("abort");
    assert_eq!(aborted["state"], "aborted");
    for effect in airlock.effects(&run).await {
        assert_eq!(effect["state"], "discarded");
    }
    // A staged request after abort gets 409 with a JSON reason.
    let out = curl(&env, &["-X", "POST", "--data", "x=2", &url]).await;
    assert_eq!(out.status, 409);
    assert_eq!(out.json()["reason_code"], "run_not_open");
    // Reads no longer pass either: an aborted run accepts no requests.
    let out = curl(&env, &[&url]).await;
    assert_eq!(out.status, 409);
    assert_eq!(out.json()["reason_code"], "run_not_open");
    let err = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect_err("commit after abort");
    assert!(err.to_string().contains("aborted"), "{err}");
    assert!(origin.received().is_empty());
    assert_eq!(
        airlock.effects(&run).await.len(),
        2,
        "the 409 staged nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_refuses_undecided_and_rejected_effects_stay_unsent() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let mut ids = Vec::new();
    for path in ["/one", "/two", "/three"] {
        let out = curl(
            &env,
            &["-X", "PUT", "--data", path, &format!("{base}{path}")],
        )
        .await;
        assert_eq!(out.status, 202);
        ids.push(out.header("airlock-effect").expect("effect id"));
    }
    airlock
        .post(&format!("/v1/effects/{}/reject", ids[1]), None)
        .await
        .expect("reject");

    let err = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect_err("undecided");
    match err {
        airlock_tests::ClientError::Api {
            status,
            code,
            details,
            ..
        } => {
            assert_eq!(status, 409);
            assert_eq!(code, "undecided_effects");
            let undecided = details.expect("details")["undecided"].clone();
            assert_eq!(undecided, json!([ids[0], ids[2]]));
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(
        origin.received().is_empty(),
        "a refused commit sends nothing"
    );

    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(airlock.approve_pending_body(&run).await),
        )
        .await
        .expect("commit approve_pending");
    assert_eq!(report["state"], "committed");
    let states: Vec<_> = report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(
        states,
        vec![json!("released"), json!("rejected"), json!("released")]
    );
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        vec!["/one", "/three"],
        "released in staging order, rejected never sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_run_refuses_new_effects_with_409() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    airlock
        .post(&format!("/v1/runs/{run}/seal"), None)
        .await
        .expect("seal");
    let out = curl(&env, &["-X", "POST", "--data", "late", &url]).await;
    assert_eq!(out.status, 409);
    let body = out.json();
    assert_eq!(body["reason_code"], "run_not_open");
    assert!(
        body["reason"].as_str().unwrap_or("").contains("sealed"),
        "{body}"
    );
    assert!(airlock.effects(&run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_staging_limit_is_413_and_nothing_is_stored() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(
            &loopback_policy(origin.addr().port()),
            &["--stage-body-limit", "1024"],
        )
        .await;
    let url = format!("https://127.0.0.1:{}/upload", origin.addr().port());
    let big = fx.dir.path().join("big.bin");
    std::fs::write(&big, vec![b'a'; 4096]).expect("write");
    let data = format!("@{}", big.display());

    // Declared length over the limit: refused before reading.
    let out = curl(&env, &["-X", "POST", "--data-binary", &data, &url]).await;
    assert_eq!(out.status, 413, "{}", out.stderr);
    let body = out.json();
    assert_eq!(body["reason_code"], "body_too_large");
    assert_eq!(body["limit"], 1024);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("body_too_large")
    );

    // Chunked, no length: refused once the limit is passed.
    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "transfer-encoding: chunked",
            "--data-binary",
            &data,
            &url,
        ],
    )
    .await;
    assert_eq!(out.status, 413, "{}", out.stderr);

    // Exactly at the limit is fine.
    std::fs::write(&big, vec![b'b'; 1024]).expect("write");
    let out = curl(&env, &["-X", "POST", "--data-binary", &data, &url]).await;
    assert_eq!(out.status, 202);
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "only the body within the limit is staged");
    assert_eq!(effects[0]["body_len"], 1024);
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_release_is_reported_honestly() {
    let fx = Fixture::new();
    let origin = airlock_tests::Origin::start(
        Some(&fx.origin_ca),
        std::sync::Arc::new(|req: &airlock_tests::Received| {
            if req.path == "/broken" {
                airlock_tests::Reply::text(500, "boom")
            } else {
                airlock_tests::Reply::text(201, "created")
            }
        }),
    )
    .await
    .expect("origin");
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    for path in ["/broken", "/fine"] {
        assert_eq!(
            curl(
                &env,
                &["-X", "POST", "--data", "x", &format!("{base}{path}")]
            )
            .await
            .status,
            202
        );
    }
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "partially_committed");
    assert_eq!(report["effects"][0]["state"], "failed");
    assert_eq!(report["effects"][0]["status"], 500);
    assert_eq!(report["effects"][0]["reason"], "the origin answered 500");
    assert_eq!(report["effects"][1]["state"], "released");
    assert_eq!(report["counts"], json!({"failed": 1, "released": 1}));
    assert_eq!(
        origin.received().len(),
        2,
        "each sent once, the failure not retried"
    );
}
