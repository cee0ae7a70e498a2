//! `airlock settle EFFECT --delivered | --not-delivered` (issue #20, item 3): the way out
//! of `unknown` for a reviewer who checked the origin.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use airlock_tests::{curl, loopback_policy, Fixture, Origin, Received, Reply};
use serde_json::{json, Value};

use super::{effect, flaky_origin, stage};
use crate::cli::cli;
use crate::ui::{get, sign_in, text};

/// The decisions of `kind` on an effect, as `(by, note)`.
fn decisions(shown: &Value, kind: &str) -> Vec<(String, Option<String>)> {
    shown["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"] == kind)
        .map(|d| {
            (
                d["by"].as_str().unwrap_or("").to_owned(),
                d["note"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_settle_delivered_and_not_delivered_are_recorded_with_who_decided() {
    let fx = Fixture::new();
    // Both effects reach the origin, which hangs up on each; later requests are answered.
    let origin = flaky_origin(&fx.origin_ca, 2).await;
    let port = origin.addr().port();
    let alice = fx.dir.path().join("alice.token");
    std::fs::write(&alice, "alice-secret-token-0123456789\n").expect("write");
    let arg = format!("alice={}", alice.display());
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(port), &["--reviewer-token", &arg])
        .await;
    let base = format!("https://127.0.0.1:{port}");
    let kept = stage(&env, &format!("{base}/orders"), "kept").await;
    let lost = stage(&env, &format!("{base}/orders"), "lost").await;
    let report = airlock.commit_pending(&run).await;
    assert_eq!(
        airlock_tests::effect_states(&report),
        vec![json!("unknown"), json!("unknown")],
        "{report}"
    );
    assert_eq!(origin.received().len(), 2);

    // The review UI says how to settle them.
    let cookie = sign_in(&airlock.admin_url, "alice-secret-token-0123456789").await;
    let page = text(&get(&format!("{}/runs/{run}", airlock.admin_url), Some(&cookie)).await);
    assert!(
        page.contains(&format!("airlock settle {kept} --delivered")),
        "{page}"
    );

    // Not yet: settle needs one of the two findings.
    let (ok, _, err) = cli(&fx, &["settle", &kept]);
    assert!(!ok);
    assert!(err.contains("--delivered"), "{err}");

    // alice found the first order at the origin.
    let (ok, out, err) = cli(
        &fx,
        &[
            "settle",
            &kept,
            "--delivered",
            "--note",
            "order 4242 in the origin's admin",
            "--token",
            "alice-secret-token-0123456789",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(&format!("settled {kept} delivered")), "{out}");
    let shown = effect(&airlock, &kept).await;
    assert_eq!(shown["state"], "released");
    assert_eq!(
        decisions(&shown, "settle_delivered"),
        vec![(
            "alice".to_owned(),
            Some("order 4242 in the origin's admin".to_owned())
        )]
    );
    let page = text(
        &get(
            &format!("{}/effects/{kept}", airlock.admin_url),
            Some(&cookie),
        )
        .await,
    );
    assert!(
        page.contains("settle_delivered</strong> by alice: order 4242"),
        "{page}"
    );
    // Settling it again is refused: it is no longer unknown.
    let (ok, _, _) = cli(&fx, &["settle", &kept, "--not-delivered"]);
    assert!(!ok);

    // The admin found no trace of the second: it becomes failed and retriable.
    let (ok, _, err) = cli(
        &fx,
        &[
            "settle",
            &lost,
            "--not-delivered",
            "--note",
            "no such order",
        ],
    );
    assert!(ok, "{err}");
    let shown = effect(&airlock, &lost).await;
    assert_eq!(shown["state"], "failed");
    assert_eq!(shown["retriable"], true);
    assert_eq!(
        decisions(&shown, "settle_not_delivered"),
        vec![("admin".to_owned(), Some("no such order".to_owned()))]
    );
    let (ok, _, err) = cli(&fx, &["retry", &lost]);
    assert!(ok, "{err}");
    let received = origin.received();
    assert_eq!(
        received.len(),
        3,
        "only the not-delivered effect was sent again"
    );
    assert_eq!(received[2].body, b"lost");
    let run_record = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    assert_eq!(run_record["state"], "committed", "{run_record}");

    // A settled-delivered effect counts as released for compensate.
    let compensation = airlock
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await
        .expect("compensate");
    let considered: Vec<&str> = compensation["not_compensable"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["effect"].as_str())
        .collect();
    assert!(considered.contains(&kept.as_str()), "{compensation}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_dependents_of_a_settled_effect_wait_for_the_real_value_an_operator_supplies() {
    let fx = Fixture::new();
    // The item's creation reaches the origin, which hangs up; the comment is answered.
    let seen = Arc::new(AtomicUsize::new(0));
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| {
            if req.path == "/items" && seen.fetch_add(1, Ordering::SeqCst) == 0 {
                Reply::hang_up()
            } else {
                Reply::json(201, &json!({"ok": true}))
            }
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
id = "create-item"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/items"
action = "stage"
[rule.respond]
status = 201
body = '{{"id": "{{{{placeholder:number:/id}}}}"}}'

[[rule]]
id = "item-writes"
host = "127.0.0.1"
port = {port}
method = "write"
path = "/items/**"
action = "stage"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    let created = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"title":"x"}"#,
            &format!("{base}/items"),
        ],
    )
    .await;
    assert_eq!(created.status, 201);
    let parent = created.header("airlock-effect").expect("effect");
    let placeholder = created.json()["id"].as_u64().expect("number placeholder");
    let child = stage(
        &env,
        &format!("{base}/items/{placeholder}/comments"),
        &format!(r#"{{"item":{placeholder}}}"#),
    )
    .await;

    let report = airlock.commit_pending(&run).await;
    assert_eq!(
        airlock_tests::effect_states(&report),
        vec![json!("unknown"), json!("skipped")],
        "{report}"
    );

    // Delivered, but airlock never saw the origin's id: the comment is not released with
    // the placeholder; it says what it needs.
    let (ok, _, err) = cli(&fx, &["settle", &parent, "--delivered"]);
    assert!(ok, "{err}");
    let waiting = effect(&airlock, &child).await;
    assert_eq!(waiting["state"], "skipped", "{waiting}");
    let reason = waiting["state_reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(&format!(
            "airlock settle {parent} --delivered --value /id=VALUE"
        )),
        "{reason}"
    );
    assert_eq!(origin.received().len(), 1, "the comment was not sent");

    // A value that cannot stand for the number is refused and changes nothing.
    let (ok, _, err) = cli(
        &fx,
        &["settle", &parent, "--delivered", "--value", "/id=seven"],
    );
    assert!(!ok);
    assert!(err.contains("not an integer"), "{err}");

    // The operator looked the item up and supplies its id.
    let (ok, out, err) = cli(
        &fx,
        &["settle", &parent, "--delivered", "--value", "/id=777"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("committed"), "{out}");
    let received = origin.received();
    assert_eq!(received.len(), 2, "{received:?}");
    assert_eq!(received[1].path, "/items/777/comments");
    assert_eq!(received[1].body, br#"{"item":777}"#);
    let shown = effect(&airlock, &parent).await;
    assert_eq!(
        decisions(&shown, "supply_values"),
        vec![("admin".to_owned(), Some("/id=777".to_owned()))]
    );
    assert_eq!(effect(&airlock, &child).await["state"], "released");
}
