//! `airlock run` savepoints and rollback: `rollback --to` restores files, unverifiable rollbacks.

use airlock_tests::{loopback_policy, ok_origin, Fixture};
use serde_json::json;

use super::{cli, output, sh_command, tree, workspace, write_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_rollback_to_restores_files_and_discards_later_effects_only() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let ws = workspace(&fx);
    let (run, env) = airlock.create_run().await;
    airlock
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": ws.display().to_string(), "driver": "dir"})),
        )
        .await
        .expect("attach workspace");
    let url = format!("https://127.0.0.1:{}/step", origin.addr().port());
    let mut effects = Vec::new();
    for step in 1..=3 {
        std::fs::write(ws.join(format!("step{step}.txt")), format!("step {step}\n"))
            .expect("write");
        let out = airlock_tests::curl(
            &env,
            &["-X", "POST", "--data", &format!("step {step}"), &url],
        )
        .await;
        assert_eq!(out.status, 202, "{}", out.stderr);
        effects.push(out.header("airlock-effect").expect("effect id"));
        if step == 1 {
            let taken = cli(&fx, &["savepoint", &run, "after-step-1"]);
            assert!(
                taken.status.success(),
                "{}",
                String::from_utf8_lossy(&taken.stderr)
            );
        }
    }
    let files_after_step_1 = {
        let mut t = tree(&ws);
        t.remove("step2.txt");
        t.remove("step3.txt");
        t
    };

    let out = cli(&fx, &["rollback-to", &run, "after-step-1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("rollback_to to savepoint after-step-1"),
        "{text}"
    );
    assert_eq!(tree(&ws), files_after_step_1);
    assert!(ws.join("step1.txt").exists() && !ws.join("step2.txt").exists());

    let states: Vec<(String, String)> = airlock
        .effects(&run)
        .await
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap_or("").to_owned(),
                e["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            (effects[0].clone(), "staged".to_owned()),
            (effects[1].clone(), "discarded".to_owned()),
            (effects[2].clone(), "discarded".to_owned()),
        ]
    );
    // The run is still open: the agent carries on from the savepoint.
    let out = airlock_tests::curl(&env, &["-X", "POST", "--data", "step 2 again", &url]).await;
    assert_eq!(out.status, 202);
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_that_cannot_be_verified_marks_the_run_and_says_so() {
    // The snapshot objects are gone: the restore fails halfway.
    unverifiable_rollback("snapshots/objects").await;
    // The whole snapshot store is gone: the decision is still written and reported.
    unverifiable_rollback("snapshots").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_command_cannot_reach_the_snapshot_store_so_its_rollback_is_verified() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let before = tree(&ws);
    let objects = fx.data_dir().join("snapshots");
    let script = format!(
        "rm -rf '{0}'; ls -A '{0}' 2>&1 | wc -l > seen.txt; echo tampered > README",
        objects.display()
    );
    let command = sh_command(
        &fx,
        &policy,
        &["--verify", "false", "--network", "isolated"],
        &ws,
        &script,
    );
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("none can be made here") {
        assert!(!airlock_tests::in_ci(), "a fence is needed in CI: {stderr}");
        eprintln!("SKIPPED: no fence can be made here: {stderr}");
        return;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "verify failed, so the run rolls back"
    );
    assert!(
        text.contains("rollback verified against the snapshot manifest"),
        "the data directory is hidden in the fence, so the snapshot survived: {text}\n{stderr}"
    );
    assert!(
        fx.data_dir().join("snapshots").is_dir(),
        "the snapshot store is intact"
    );
    assert_eq!(tree(&ws), before, "the workspace is restored");
}

async fn unverifiable_rollback(damaged: &str) {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    // The agent damages airlock's snapshot store and changes a file. A fence hides the data
    // directory from the command, so this agent runs with proxy variables only
    // (`--network env`), as one whose sandbox can reach the data directory would.
    let objects = fx.data_dir().join(damaged);
    let script = format!(
        "rm -rf '{}' && echo tampered > README && echo new > extra.txt",
        objects.display()
    );
    let command = sh_command(
        &fx,
        &policy,
        &["--verify", "false", "--network", "env"],
        &ws,
        &script,
    );
    let out = output(command).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("the rollback could NOT be verified"),
        "{text}"
    );
    assert!(text.contains("restore failed"), "{text}");

    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    let run = runs["runs"][0]["id"].as_str().expect("run").to_owned();
    let workspace = airlock
        .admin
        .get(&format!("/v1/runs/{run}/workspace"))
        .await
        .expect("workspace");
    assert_eq!(workspace["rollback_unverified"], true, "{workspace:#}");
    assert_eq!(runs["runs"][0]["state"], "aborted");
}
