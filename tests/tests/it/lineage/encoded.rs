//! Placeholders and real values inside encoded bodies: never leaked, encoded in place, decided again.

use airlock_tests::{curl, effect_states, Fixture, Reply};
use serde_json::{json, Value};

use super::{items_origin, items_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_hidden_in_encoded_bodies_never_reach_an_origin() {
    use std::io::Write as _;
    let fx = Fixture::new();
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 77, "node_id": "N_77"}))).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
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
    let report = airlock.commit_pending(&run).await;
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
    let (airlock, run, env) = fx.start_run(&items_policy(port), &[]).await;
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
    let report = airlock.commit_pending(&run).await;
    let states = effect_states(&report);
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
