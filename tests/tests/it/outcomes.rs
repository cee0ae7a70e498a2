//! Outcomes of a release (issue #20, items 2 and 3): an effect the origin may have
//! received is `unknown`, never `failed`; only a provably unsent effect is `failed`, and
//! only it is retried (once per attempt, recorded); a reviewer settles `unknown` effects;
//! idempotency keys make re-sending an `unknown` effect safe where the origin honours them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{curl, loopback_policy, Fixture, Origin, OriginCa, Received, Reply};
use serde_json::{json, Value};

use crate::cli::cli;

mod settle;

/// An origin that hangs up on its first `hang_ups` requests (having read each whole) and
/// answers `201 {"id": 4242}` after.
async fn flaky_origin(ca: &OriginCa, hang_ups: usize) -> Origin {
    let seen = Arc::new(AtomicUsize::new(0));
    Origin::start(
        Some(ca),
        Arc::new(move |_: &Received| {
            if seen.fetch_add(1, Ordering::SeqCst) < hang_ups {
                Reply::hang_up()
            } else {
                Reply::json(201, &json!({"id": 4242}))
            }
        }),
    )
    .await
    .expect("origin")
}

/// Stages a POST of `body` to `url` through the run's environment; returns the effect.
async fn stage(env: &std::collections::BTreeMap<String, String>, url: &str, body: &str) -> String {
    let out = curl(env, &["-X", "POST", "--data", body, url]).await;
    assert_eq!(out.status, 202, "{}", String::from_utf8_lossy(&out.body));
    out.header("airlock-effect").expect("effect id")
}

/// `GET /v1/effects/{id}`.
async fn effect(airlock: &airlock_tests::Airlock, id: &str) -> Value {
    airlock
        .admin
        .get(&format!("/v1/effects/{id}"))
        .await
        .expect("effect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_an_origin_that_reads_the_request_and_closes_leaves_the_effect_unknown_not_failed() {
    let fx = Fixture::new();
    let origin = flaky_origin(&fx.origin_ca, usize::MAX).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let id = stage(
        &env,
        &format!("https://127.0.0.1:{port}/charge"),
        "amount=5",
    )
    .await;

    let report = airlock.commit_pending(&run).await;
    let received = origin.received();
    assert_eq!(received.len(), 1, "the origin got the effect once");
    assert_eq!(received[0].body, b"amount=5");
    assert_eq!(report["state"], "partially_committed");
    assert_eq!(report["effects"][0]["state"], "unknown", "{report}");
    let reason = report["effects"][0]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("may have reached"), "{reason}");
    assert!(
        report["effects"][0]["next"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("airlock settle {id}")),
        "{report}"
    );
    let shown = effect(&airlock, &id).await;
    assert_eq!(shown["retriable"], false);

    // Without an idempotency key an unknown effect is never re-sent, by any route.
    let (ok, _, err) = cli(&fx, &["retry", &id]);
    assert!(!ok);
    assert!(err.contains("cannot be retried"), "{err}");
    assert!(err.contains("airlock settle"), "{err}");
    let (ok, _, err) = cli(&fx, &["retry", &run]);
    assert!(!ok);
    assert!(err.contains("no effect that can be retried"), "{err}");
    let again = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect("commit again");
    assert_eq!(again["effects"][0]["state"], "unknown");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(origin.received().len(), 1, "never re-sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_the_release_timeout_leaves_the_effect_unknown_not_failed() {
    let fx = Fixture::new();
    let origin =
        airlock_tests::slow_text_origin(Some(&fx.origin_ca), 201, "late", Duration::from_secs(4))
            .await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(port), &["--release-timeout", "1"])
        .await;
    stage(&env, &format!("https://127.0.0.1:{port}/hook"), "x").await;
    let report = airlock.commit_pending(&run).await;
    assert_eq!(origin.received().len(), 1, "the origin got the effect");
    assert_eq!(report["effects"][0]["state"], "unknown", "{report}");
    assert!(
        report["effects"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("release timeout"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_a_refused_dial_is_failed_and_airlock_retry_sends_it_once() {
    let fx = Fixture::new();
    // A port with nothing listening: the dial is refused, so nothing was sent.
    let vacant = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = vacant.local_addr().expect("addr").port();
    drop(vacant);
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let id = stage(&env, &format!("https://127.0.0.1:{port}/hook"), "once").await;
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["effects"][0]["state"], "failed", "{report}");
    assert!(
        report["effects"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("nothing was sent"),
        "{report}"
    );
    let shown = effect(&airlock, &id).await;
    assert_eq!(shown["retriable"], true, "{shown}");

    // The origin comes up; the reviewer retries.
    let origin = Origin::start_on(
        format!("127.0.0.1:{port}").parse().expect("addr"),
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::text(201, "created")),
        &[b"http/1.1"],
    )
    .await
    .expect("origin on the vacant port");
    let (ok, out, err) = cli(&fx, &["retry", &id]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("retried {id}")), "{out}");
    assert!(out.contains("committed"), "{out}");
    let received = origin.received();
    assert_eq!(received.len(), 1, "sent once by the retry");
    assert_eq!(received[0].body, b"once");
    assert_eq!(
        received[0].header("idempotency-key"),
        None,
        "no key where the rule says the origin honours none"
    );

    // A second retry is refused: the effect is released.
    let (ok, _, err) = cli(&fx, &["retry", &id]);
    assert!(!ok, "a second retry must be refused");
    assert!(err.contains("released"), "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(origin.received().len(), 1, "still once");

    let shown = effect(&airlock, &id).await;
    assert_eq!(shown["state"], "released");
    assert_eq!(shown["attempts"], 2);
    assert_eq!(shown["earlier_releases"].as_array().map(Vec::len), Some(1));
    let retries: Vec<&Value> = shown["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"] == "retry")
        .collect();
    assert_eq!(retries.len(), 1, "{shown}");
    assert_eq!(retries[0]["by"], "admin");
    let run_record = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    assert_eq!(run_record["state"], "committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_a_tls_verification_failure_says_so_and_names_upstream_ca() {
    let fx = Fixture::new();
    // The origin's certificate comes from a CA airlock was not given.
    let stranger = OriginCa::new().expect("CA");
    let origin = Origin::start(
        Some(&stranger),
        Arc::new(|_: &Received| Reply::text(201, "created")),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (mut airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let id = stage(&env, &format!("https://127.0.0.1:{port}/hook"), "tls").await;
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["effects"][0]["state"], "failed", "{report}");
    let reason = report["effects"][0]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("TLS verification"), "{reason}");
    assert!(reason.contains("--upstream-ca"), "{reason}");
    assert!(reason.contains("nothing was sent"), "{reason}");
    assert!(origin.received().is_empty());

    // The operator gives airlock the origin's CA and retries the run's failures.
    std::fs::write(fx.dir.path().join("origin-ca.pem"), stranger.cert_pem()).expect("write CA");
    airlock.restart().expect("restart");
    let (ok, out, err) = cli(&fx, &["retry", &run]);
    assert!(ok, "{err}");
    assert!(out.contains(&id), "{out}");
    assert_eq!(origin.received().len(), 1, "sent once after the retry");
    assert_eq!(effect(&airlock, &id).await["state"], "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_an_idempotency_key_is_stable_across_the_recovered_unknown_resend() {
    let fx = Fixture::new();
    // The first request is held long enough for airlock to be killed mid-release.
    let seen = Arc::new(AtomicUsize::new(0));
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |_: &Received| {
            let mut reply = Reply::json(200, &json!({"id": "ch_1"}));
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                reply.delay = Some(Duration::from_secs(60));
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "charges"
host = "127.0.0.1"
port = {port}
method = "POST"
path = "/v1/charges"
action = "stage"
idempotency_key = "Idempotency-Key"
retry_unknown = "idempotent"
"#
    );
    let (mut airlock, run, env) = fx.start_run(&policy, &[]).await;
    let id = stage(
        &env,
        &format!("https://127.0.0.1:{port}/v1/charges"),
        "amount=500",
    )
    .await;
    assert_eq!(
        effect(&airlock, &id).await["idempotency"]["key"],
        format!("airlock-{id}").as_str()
    );
    let admin = airlock.admin.clone();
    let commit_path = format!("/v1/runs/{run}/commit");
    let body = airlock.approve_pending_body(&run).await;
    let committing = tokio::spawn(async move { admin.post(&commit_path, Some(body)).await });
    let reached =
        airlock_tests::eventually(Duration::from_secs(10), || !origin.received().is_empty()).await;
    assert!(reached, "the charge reached the origin");
    airlock.kill();
    let _ = committing.await;
    airlock.restart().expect("restart");
    let recovered = airlock_tests::poll_until(Duration::from_secs(10), || async {
        let shown = effect(&airlock, &id).await;
        (shown["state"] == "unknown").then_some(shown)
    })
    .await
    .expect("recovery marks the interrupted effect unknown");
    assert_eq!(recovered["retriable"], true, "{recovered}");

    let (ok, out, err) = cli(&fx, &["retry", &id]);
    assert!(ok, "{err}");
    assert!(out.contains("committed"), "{out}");
    let received = origin.received();
    assert_eq!(received.len(), 2, "re-sent once");
    let keys: Vec<Option<&str>> = received
        .iter()
        .map(|r| r.header("idempotency-key"))
        .collect();
    let expected = format!("airlock-{id}");
    assert_eq!(keys, vec![Some(expected.as_str()), Some(expected.as_str())]);
    assert_eq!(received[0].body, received[1].body);
    let shown = effect(&airlock, &id).await;
    assert_eq!(shown["state"], "released");
    assert_eq!(shown["release"]["status"], 200);
}
