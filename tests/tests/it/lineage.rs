//! Lineage: read -> effect edges from content, effect -> effect edges from placeholders,
//! and release in dependency order with real values substituted.

use std::sync::Arc;

use airlock_tests::{curl, effect_states, Fixture, Origin, Received, Reply};
use serde_json::{json, Value};

mod corpus;
mod corpus_pass;
mod edges;
mod encoded;
mod hidden;

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
    let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
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

    let report = airlock.commit_pending(&run).await;
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
        let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
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
        let report = airlock.commit_pending(&run).await;
        let states = effect_states(&report);
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
    let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    let (_, child, _) = stage_item_and_comment(&env, &base).await;
    let report = airlock.commit_pending(&run).await;
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
