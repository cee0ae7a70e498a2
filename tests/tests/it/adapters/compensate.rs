//! Compensations after a partial commit: `airlock compensate RUN` stages the inverses of
//! the released effects (close the PR, delete the comment) in a new sealed run, in
//! reverse order, each pending review; committing that run sends them.

use std::process::Command;
use std::sync::Arc;

use airlock_tests::{airlock_bin, curl, Fixture, Origin, Reply};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensate_stages_inverses_of_released_effects_in_reverse_order() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req| match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/repos/acme/widgets/pulls") => Reply::json(
                201,
                &json!({"number": 101, "id": 9001, "node_id": "PR_real", "head": {"sha": "a"}, "base": {"sha": "b"}}),
            ),
            ("POST", "/repos/acme/widgets/issues/101/comments") => {
                Reply::json(201, &json!({"id": 5001, "node_id": "IC_real"}))
            }
            ("PATCH", "/repos/acme/widgets/pulls/101") => Reply::json(200, &json!({"state": "closed"})),
            ("DELETE", "/repos/acme/widgets/issues/comments/5001") => Reply::text(204, ""),
            _ => Reply::json(500, &json!({"message": "Server Error"})),
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&super::github_policy(port), &[]).await;
    let repo = format!("https://127.0.0.1:{port}/repos/acme/widgets");
    let post = |url: String, body: Value| {
        let env = env.clone();
        async move {
            let out = curl(
                &env,
                &[
                    "-X",
                    "POST",
                    "-H",
                    "authorization: token ghp_agent",
                    "-H",
                    "content-type: application/json",
                    "--data",
                    &body.to_string(),
                    &url,
                ],
            )
            .await;
            assert!(out.success, "{}", out.stderr);
            out.json()
        }
    };
    let pr = post(
        format!("{repo}/pulls"),
        json!({"title": "Fix", "head": "fix", "base": "main"}),
    )
    .await;
    let number = pr["number"].as_u64().expect("number");
    post(
        format!("{repo}/issues/{number}/comments"),
        json!({"body": "done"}),
    )
    .await;
    post(format!("{repo}/releases"), json!({"tag_name": "v1"})).await;

    let refused = airlock
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await;
    assert!(
        format!("{refused:?}").contains("run_not_committed"),
        "{refused:?}"
    );

    let report = airlock.commit_pending(&run).await;
    assert_eq!(
        report["state"], "partially_committed",
        "the release fails: {report}"
    );

    for args in [
        vec!["runs", "show", run.as_str()],
        vec!["effects", run.as_str()],
    ] {
        let out = Command::new(airlock_bin())
            .args(&args)
            .arg("--data")
            .arg(fx.data_dir())
            .env_remove("AIRLOCK_ADMIN")
            .env_remove("AIRLOCK_TOKEN")
            .output()
            .expect("airlock");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            shown.contains("open PR acme/widgets#101 'Fix' from fix → main"),
            "{args:?} shows summaries, with the real number once released: {shown}"
        );
    }

    let out = Command::new(airlock_bin())
        .args(["compensate", &run, "--data"])
        .arg(fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("airlock compensate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("approximate"), "{stdout}");
    assert!(
        stdout.contains("delete comment 5001 on acme/widgets#101"),
        "{stdout}"
    );
    assert!(stdout.contains("close PR acme/widgets#101"), "{stdout}");

    let again = airlock
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await;
    assert!(
        format!("{again:?}").contains("already_compensated"),
        "{again:?}"
    );

    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    let target = runs["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["profile"] == format!("compensate:{run}"))
        .and_then(|r| r["id"].as_str())
        .expect("the compensation run")
        .to_owned();
    let effects = airlock.effects(&target).await;
    assert_eq!(effects.len(), 2);
    assert!(effects
        .iter()
        .all(|e| e["state"] == "staged" && e["compensates"].is_string()));
    assert_eq!(origin.received().len(), 3, "nothing sent before review");

    let report = airlock.commit_pending(&target).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let sent: Vec<(&str, &str)> = received[3..]
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        sent,
        [
            ("DELETE", "/repos/acme/widgets/issues/comments/5001"),
            ("PATCH", "/repos/acme/widgets/pulls/101")
        ],
        "reverse order, real ids"
    );
    assert_eq!(received[4].body, br#"{"state":"closed"}"#);
    assert_eq!(received[3].header("authorization"), Some("token ghp_agent"));
}
