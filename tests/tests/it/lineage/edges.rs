//! Lineage content edges: read rows, credential values and repeated headers seen in an effect.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{curl, poll_until, Airlock, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use serde_json::{json, Value};

use super::{items_origin, items_policy};

async fn analyzed(airlock: &Airlock, effect: &str) -> Value {
    poll_until(Duration::from_secs(10), || async {
        let shown = airlock
            .admin
            .get(&format!("/v1/effects/{effect}"))
            .await
            .expect("show");
        (shown["lineage"]["analyzed"] == true).then_some(shown)
    })
    .await
    .expect("the effect's content is analysed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_carrying_read_rows_has_a_content_edge_and_an_unrelated_one_has_none() {
    let fx = Fixture::new();
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 1}))).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");

    let read = curl(&env, &[&format!("{base}/contacts")]).await;
    assert_eq!(read.status, 200);
    let rows: Vec<Value> = serde_json::from_slice(&read.body).expect("rows");
    // The agent reformats: every other row, keys renamed order, pretty-printed, wrapped.
    let subset: Vec<Value> = rows
        .iter()
        .step_by(2)
        .map(|r| json!({"phone": r["phone"], "email": r["email"], "name": r["name"]}))
        .collect();
    let leak = serde_json::to_string_pretty(&json!({"text": "customer export", "rows": subset}))
        .expect("json");
    let leak_file = fx.dir.path().join("leak.json");
    std::fs::write(&leak_file, &leak).expect("write");
    let leaking = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            &format!("@{}", leak_file.display()),
            &format!("{base}/hooks/export"),
        ],
    )
    .await;
    assert_eq!(leaking.status, 202);
    let unrelated_text: String = (0..leak.len() / 12)
        .map(|i| format!("deploy{} ok{} ", i % 97, i % 13))
        .collect();
    let unrelated = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            &unrelated_text,
            &format!("{base}/hooks/status"),
        ],
    )
    .await;
    assert_eq!(unrelated.status, 202);
    // A base64 copy of a passage of the read: the first two rows' values as text.
    let passage: Vec<&str> = ["name", "email", "phone"]
        .iter()
        .flat_map(|key| {
            [
                rows[0][key].as_str().unwrap_or(""),
                rows[1][key].as_str().unwrap_or(""),
            ]
        })
        .collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(passage.join(" "));
    let encoded = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            &format!(r#"{{"attachment":"{b64}"}}"#),
            &format!("{base}/hooks/attach"),
        ],
    )
    .await;
    assert_eq!(encoded.status, 202);

    let leak_shown = analyzed(&airlock, &leaking.header("airlock-effect").expect("id")).await;
    let sources = leak_shown["lineage"]["sources"]
        .as_array()
        .expect("sources")
        .clone();
    let content = sources
        .iter()
        .find(|e| e["kind"] == "content")
        .unwrap_or_else(|| panic!("a content edge: {leak_shown}"));
    assert_eq!(
        content["source"]["url"],
        format!("{base}/contacts").as_str()
    );
    assert!(
        content["overlap_permille"].as_u64().unwrap_or(0) >= 500,
        "most of the webhook is read data: {content}"
    );
    assert!(
        content["overlap_bytes"].as_u64().unwrap_or(0) > 10_000,
        "{content}"
    );
    assert!(
        content["excerpt"]
            .as_str()
            .unwrap_or("")
            .contains("customers"),
        "{content}"
    );

    let unrelated_shown =
        analyzed(&airlock, &unrelated.header("airlock-effect").expect("id")).await;
    assert_eq!(
        unrelated_shown["lineage"]["sources"],
        json!([]),
        "no edge for unrelated content"
    );

    let encoded_shown = analyzed(&airlock, &encoded.header("airlock-effect").expect("id")).await;
    let edge = &encoded_shown["lineage"]["sources"][0];
    assert_eq!(edge["kind"], "content", "{encoded_shown}");
    assert!(
        edge["detail"].as_str().unwrap_or("").contains("base64"),
        "{edge}"
    );

    let lineage = airlock
        .admin
        .get(&format!("/v1/runs/{run}/lineage"))
        .await
        .expect("lineage");
    let nodes = lineage["nodes"].as_array().expect("nodes");
    assert!(nodes
        .iter()
        .any(|n| n["id"] == "read:1" && n["kind"] == "read"));
    assert_eq!(lineage["edges"].as_array().expect("edges").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_value_from_a_read_is_flagged_on_the_effect() {
    let fx = Fixture::new();
    let secret = "ghp_0123456789abcdefghijABCDEFGHIJklmnop";
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |_req: &Received| {
            let mut reply = Reply::json(200, &json!({"config": {"deploy_token": secret}}));
            reply
                .headers
                .push(("x-request-trace".into(), "trace-7f3a9c2e41b8d605".into()));
            reply
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, _run, env) = fx.start_run(&items_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    assert_eq!(curl(&env, &[&format!("{base}/config")]).await.status, 200);
    let post = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "x-trace: trace-7f3a9c2e41b8d605",
            "--data",
            &format!("token={secret}"),
            &format!("{base}/hooks/t"),
        ],
    )
    .await;
    let shown = analyzed(&airlock, &post.header("airlock-effect").expect("id")).await;
    let sources = shown["lineage"]["sources"].as_array().expect("sources");
    let credential = sources
        .iter()
        .find(|e| e["kind"] == "credential")
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        !shown["lineage"].to_string().contains(secret),
        "the secret itself is never shown in any edge: {shown}"
    );
    assert!(
        credential["excerpt"]
            .as_str()
            .unwrap_or("")
            .starts_with("ghp_"),
        "{credential}"
    );
    assert!(
        sources.iter().any(|e| e["kind"] == "header"
            && e["detail"]
                .as_str()
                .unwrap_or("")
                .contains("x-request-trace")),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_value_every_read_repeats_links_the_effect_to_its_first_read_once() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| {
            let mut reply = Reply::json(200, &json!({"path": req.path}));
            reply
                .headers
                .push(("x-deployment".into(), "deploy-5c1e0b7d93aa".into()));
            reply
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, _run, env) = fx.start_run(&items_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    for path in ["/config", "/contacts", "/config?again=1"] {
        assert_eq!(curl(&env, &[&format!("{base}{path}")]).await.status, 200);
    }
    let post = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "deployment=deploy-5c1e0b7d93aa",
            &format!("{base}/hooks/t"),
        ],
    )
    .await;
    let shown = analyzed(&airlock, &post.header("airlock-effect").expect("id")).await;
    let headers: Vec<&Value> = shown["lineage"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .filter(|e| e["kind"] == "header")
        .collect();
    assert_eq!(headers.len(), 1, "one edge, not one per read: {shown}");
    assert_eq!(
        headers[0]["from"], "read:1",
        "the first read that showed it: {shown}"
    );
}
