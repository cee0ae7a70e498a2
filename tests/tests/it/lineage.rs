//! Lineage: read -> effect edges from content, effect -> effect edges from placeholders,
//! and release in dependency order with real values substituted.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{curl, poll_until, Airlock, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use serde_json::{json, Value};

fn items_policy(port: u16) -> String {
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
body = '{{"id": "{{{{placeholder:number:/id}}}}", "node_id": "{{{{placeholder:string:/node_id}}}}", "url": "https://127.0.0.1:{port}/items/{{{{placeholder:number:/id}}}}", "state": "open"}}'

[[rule]]
id = "item-writes"
host = "127.0.0.1"
port = {port}
method = "write"
path = "/items/**"
action = "stage"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "hooks"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks/**"
action = "stage"
"#
    )
}

/// An origin that creates items with id 4242 (or answers `create_status`), accepts
/// comments, and serves 412 contact rows at /contacts.
async fn items_origin(fx: &Fixture, create: Reply) -> Origin {
    Origin::start(
        Some(&fx.origin_ca),
        Arc::new(
            move |req: &Received| match (req.method.as_str(), req.path.as_str()) {
                ("POST", "/items") => create.clone(),
                ("GET", "/contacts") => Reply::json(200, &contacts()),
                _ => Reply::json(201, &json!({"ok": true})),
            },
        ),
    )
    .await
    .expect("origin")
}

fn contacts() -> Value {
    Value::Array(
        (0..412)
            .map(|i| {
                json!({
                    "id": i,
                    "name": format!("{} {}", ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken"][i % 6], format!("Surname{}", i * 37 % 1013)),
                    "email": format!("user{}.{}@customers{}.example", i, i * 53 % 997, i % 7),
                    "phone": format!("+1-555-{:04}", i * 7919 % 10000),
                })
            })
            .collect(),
    )
}

async fn stage_item_and_comment(
    env: &std::collections::BTreeMap<String, String>,
    base: &str,
) -> (String, String, u64) {
    let created = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"title":"flaky test"}"#,
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
    let body = created.json();
    let placeholder = body["id"]
        .as_u64()
        .expect("the placeholder id is a JSON number, typed like the real one");
    assert_eq!(body["url"], format!("{base}/items/{placeholder}").as_str());
    let parent = created.header("airlock-effect").expect("effect");
    let comment = curl(
        env,
        &[
            "-X",
            "POST",
            "--data",
            &format!(r#"{{"item":{placeholder},"text":"see item {placeholder}"}}"#),
            &format!("{base}/items/{placeholder}/comments"),
        ],
    )
    .await;
    assert_eq!(comment.status, 202);
    let child = comment.header("airlock-effect").expect("effect");
    (parent, child, placeholder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholder_dependency_is_released_after_its_parent_with_the_real_value() {
    let fx = Fixture::new();
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 4242, "state": "open"}))).await;
    let port = origin.addr().port();
    let airlock = fx.start(&items_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{port}");
    let (parent, child, placeholder) = stage_item_and_comment(&env, &base).await;

    // A read that carries the placeholder is staged too, never forwarded.
    let read_back = curl(&env, &[&format!("{base}/items/{placeholder}")]).await;
    assert_eq!(
        read_back.status, 202,
        "a GET carrying a placeholder is not passed"
    );
    assert!(
        origin.received().is_empty(),
        "nothing reached the origin before commit"
    );

    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{child}"))
        .await
        .expect("show");
    assert_eq!(shown["depends_on"][0]["effect"], parent.as_str());
    assert_eq!(shown["lineage"]["sources"][0]["kind"], "placeholder");
    let lineage = airlock
        .admin
        .get(&format!("/v1/runs/{run}/lineage"))
        .await
        .expect("lineage");
    assert!(lineage["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .any(|e| e["from"] == parent.as_str() && e["to"] == child.as_str()));

    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let seen: Vec<(String, String)> = received
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("POST".into(), "/items".into()),
            ("POST".into(), "/items/4242/comments".into()),
            ("GET".into(), "/items/4242".into()),
        ]
    );
    assert_eq!(
        String::from_utf8_lossy(&received[1].body),
        r#"{"item":4242,"text":"see item 4242"}"#
    );
    for r in &received {
        let all = format!(
            "{} {:?} {}",
            r.path,
            r.headers,
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            !all.contains(&placeholder.to_string()),
            "a placeholder reached the origin: {all}"
        );
    }
    let parent_shown = airlock
        .admin
        .get(&format!("/v1/effects/{parent}"))
        .await
        .expect("show");
    assert_eq!(parent_shown["placeholders"][0]["real"], "4242");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_or_failed_parent_skips_its_dependents() {
    for failing in [false, true] {
        let fx = Fixture::new();
        let create = if failing {
            Reply::text(500, "boom")
        } else {
            Reply::json(201, &json!({"id": 7}))
        };
        let origin = items_origin(&fx, create).await;
        let port = origin.addr().port();
        let airlock = fx.start(&items_policy(port), &[]);
        let (run, env) = airlock.create_run().await;
        let base = format!("https://127.0.0.1:{port}");
        let (parent, child, _) = stage_item_and_comment(&env, &base).await;
        let other = curl(
            &env,
            &[
                "-X",
                "POST",
                "--data",
                "independent",
                &format!("{base}/hooks/x"),
            ],
        )
        .await;
        assert_eq!(other.status, 202);
        if !failing {
            airlock
                .post(&format!("/v1/effects/{parent}/reject"), None)
                .await
                .expect("reject");
        }
        let report = airlock
            .post(
                &format!("/v1/runs/{run}/commit"),
                Some(json!({"approve_pending": true})),
            )
            .await
            .expect("commit");
        let states: Vec<Value> = report["effects"]
            .as_array()
            .expect("effects")
            .iter()
            .map(|e| e["state"].clone())
            .collect();
        let parent_state = if failing { "failed" } else { "rejected" };
        assert_eq!(
            states,
            vec![json!(parent_state), json!("skipped"), json!("released")],
            "{report}"
        );
        let reason = report["effects"][1]["reason"].as_str().unwrap_or("");
        assert!(
            reason.contains(&parent) && reason.contains(parent_state),
            "{reason}"
        );
        let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
        let expected: Vec<&str> = if failing {
            vec!["/items", "/hooks/x"]
        } else {
            vec!["/hooks/x"]
        };
        assert_eq!(paths, expected, "the dependent is never sent");
        assert_eq!(report["effects"][1]["id"], child.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_real_value_fails_the_child_without_sending_a_placeholder() {
    let fx = Fixture::new();
    // The origin's answer has no /id: the real value cannot be read back.
    let origin = items_origin(&fx, Reply::json(201, &json!({"created": true}))).await;
    let port = origin.addr().port();
    let airlock = fx.start(&items_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{port}");
    let (_, child, _) = stage_item_and_comment(&env, &base).await;
    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    assert_eq!(report["effects"][0]["state"], "released");
    assert_eq!(report["effects"][1]["state"], "failed");
    assert_eq!(report["effects"][1]["id"], child.as_str());
    assert!(
        report["effects"][1]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("has nothing at /id"),
        "{report}"
    );
    assert_eq!(origin.received().len(), 1, "only the parent was sent");
}

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
    let airlock = fx.start(&items_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
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
    let airlock = fx.start(&items_policy(port), &[]);
    let (_run, env) = airlock.create_run().await;
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
    let airlock = fx.start(&items_policy(port), &[]);
    let (_run, env) = airlock.create_run().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_hidden_in_encoded_bodies_never_reach_an_origin() {
    use std::io::Write as _;
    let fx = Fixture::new();
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 77, "node_id": "N_77"}))).await;
    let port = origin.addr().port();
    let airlock = fx.start(&items_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{port}");
    let created = curl(
        &env,
        &["-X", "POST", "--data", "{}", &format!("{base}/items")],
    )
    .await;
    let placeholder = created.json()["id"].as_u64().expect("id");
    // A gzip body carrying the placeholder: the dependency is found under the encoding.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(format!(r#"{{"item": {placeholder}}}"#).as_bytes())
        .expect("gzip");
    let gz = fx.dir.path().join("body.gz");
    std::fs::write(&gz, encoder.finish().expect("gzip")).expect("write");
    let hidden = curl(
        &env,
        &[
            "-X",
            "PUT",
            "-H",
            "content-encoding: gzip",
            "--data-binary",
            &format!("@{}", gz.display()),
            &format!("{base}/items/search"),
        ],
    )
    .await;
    assert_eq!(hidden.status, 202);
    let child = hidden.header("airlock-effect").expect("effect");
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{child}"))
        .await
        .expect("show");
    assert_eq!(shown["depends_on"][0]["found_in"], "body (encoded)");
    // At release airlock cannot substitute inside gzip: the child fails unsent.
    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    assert_eq!(report["effects"][0]["state"], "released");
    assert_eq!(report["effects"][1]["state"], "failed");
    assert!(
        report["effects"][1]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("cannot substitute"),
        "{report}"
    );
    assert_eq!(
        origin.received().len(),
        1,
        "only the parent reached the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_values_are_encoded_for_where_they_stand_and_the_result_is_decided_again() {
    let fx = Fixture::new();
    let hostile = r#"a"b/../../admin?q=1#"#;
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 5, "node_id": hostile}))).await;
    let port = origin.addr().port();
    let airlock = fx.start(&items_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{port}");
    let created = curl(
        &env,
        &["-X", "POST", "--data", "{}", &format!("{base}/items")],
    )
    .await;
    let node = created.json()["node_id"]
        .as_str()
        .expect("node id")
        .to_owned();
    assert!(node.starts_with("ph_"));
    let in_json = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &format!(r#"{{"n":"{node}"}}"#),
            &format!("{base}/items/notes"),
        ],
    )
    .await;
    assert_eq!(in_json.status, 202);
    let in_path = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("{base}/items/{node}/comments"),
        ],
    )
    .await;
    assert_eq!(in_path.status, 202);
    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    let states: Vec<Value> = report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(
        states,
        vec![json!("released"), json!("released"), json!("failed")],
        "{report}"
    );
    // In JSON the value is escaped: the origin gets valid JSON holding the real value.
    let received = origin.received();
    let note: Value =
        serde_json::from_slice(&received[1].body).expect("valid JSON after substitution");
    assert_eq!(note["n"], hostile);
    // In the path it is percent-encoded, which the policy then refuses (an encoded slash):
    // the reviewer approved /items/ph_…/comments, never /admin.
    assert!(
        report["effects"][2]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("denied"),
        "{report}"
    );
    assert_eq!(received.len(), 2);
}
