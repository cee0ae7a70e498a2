//! `airlock run` killed with SIGKILL at the risky points — after the decision is written,
//! halfway through the rollback, during the commit — and finished afterwards by
//! `airlock run --resume`, a restarted server, or `airlock runs show`: the same decision,
//! never a different one, and effects never both released and rolled back.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{
    eventually, loopback_policy, ok_origin, Airlock, Fixture, Origin, Received, Reply,
};
use serde_json::json;

use super::{
    agent_script, cli, json_report, output, run_command, sh_command, tree, workspace, write_policy,
};

/// Spawns `airlock run` paused at `point` and waits until it says so; returns the child
/// and the run id.
async fn spawn_paused(mut command: Command, log: &Path, point: &str) -> (Child, String) {
    let file = std::fs::File::create(log).expect("log");
    command
        .env("AIRLOCK_TEST_PAUSE_AT", point)
        .stdout(Stdio::null())
        .stderr(file);
    let child = command.spawn().expect("spawn airlock run");
    let marker = format!("paused at {point}");
    let paused = eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(log).is_ok_and(|t| t.contains(&marker))
    })
    .await;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(paused, "airlock run never reached {point}: {text}");
    let run = text
        .split_whitespace()
        .find(|w| w.starts_with("run_"))
        .expect("run id on stderr")
        .trim_end_matches(';')
        .to_owned();
    (child, run)
}

fn sigkill(mut child: Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_after_decision_resume_finishes_the_same_rollback() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let before = tree(&ws);
    let script = agent_script(origin.addr().port());
    let command = sh_command(&fx, &policy, &["--verify", "false"], &ws, &script);
    let (child, run) =
        spawn_paused(command, &fx.dir.path().join("run.log"), "after_decision").await;
    sigkill(child);
    assert_ne!(tree(&ws), before, "killed before the rollback started");

    let mut resume = run_command(&fx, &policy, &["--json", "--resume", &run]);
    resume.arg("--workspace").arg(&ws);
    let out = output(resume).await;
    let report = json_report(&out);
    assert!(!out.status.success(), "the verify had failed");
    assert_eq!(report["already_decided"], true, "{report:#}");
    assert_eq!(report["decision"]["kind"], "rollback");
    assert_eq!(report["decision"]["reason"], "verify failed (exit 1)");
    assert_eq!(report["state"], "aborted");
    assert_eq!(report["effects"][0]["state"], "discarded");
    let decisions = report["workspace"]["decisions"]
        .as_array()
        .expect("decisions");
    assert_eq!(decisions.len(), 1, "never re-decided: {report:#}");
    assert_eq!(tree(&ws), before);

    // Resuming again changes nothing.
    let mut again = run_command(&fx, &policy, &["--json", "--resume", &run]);
    again.arg("--workspace").arg(&ws);
    let again = json_report(&output(again).await);
    assert_eq!(again["decision"], report["decision"]);
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_rollback_restart_and_runs_show_finish_it() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy_text = loopback_policy(origin.addr().port());
    let policy = write_policy(&fx, &policy_text);
    let ws = workspace(&fx);
    let before = tree(&ws);
    let script = agent_script(origin.addr().port());
    let command = sh_command(&fx, &policy, &["--verify", "false"], &ws, &script);
    let (child, run) =
        spawn_paused(command, &fx.dir.path().join("run.log"), "rollback_midway").await;
    sigkill(child);
    assert_ne!(tree(&ws), before, "killed halfway through the rollback");

    // `airlock serve` on the same data directory finishes it at start; `runs show` says so.
    let airlock: Airlock = fx.start(&policy_text, &[]);
    let out = cli(&fx, &["runs", "show", &run]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("state    aborted"), "{text}");
    assert!(text.contains("rollback verified"), "{text}");
    assert_eq!(tree(&ws), before);
    let effects = airlock.effects(&run).await;
    assert_eq!(effects[0]["state"], "discarded");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_commit_resume_never_sends_twice() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| {
            let mut reply = Reply::text(200, "ok");
            if req.path == "/second" {
                reply.delay = Some(Duration::from_secs(60));
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let script = format!(
        "curl -sS --fail -X POST --data 1 {base}/first && curl -sS --fail -X POST --data 2 {base}/second && echo kept > kept.txt"
    );
    let mut command = run_command(&fx, &policy, &["--on-pass", "commit", "--approve-all"]);
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = command.spawn().expect("spawn");
    let reached = eventually(Duration::from_secs(30), || {
        origin.received().iter().any(|r| r.path == "/second")
    })
    .await;
    assert!(reached, "the commit reached the second effect");
    sigkill(child);

    // Find the run through a server on the same data directory, then resume with
    // `airlock run --resume` (which starts its own embedded server).
    let run = {
        let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
        let runs = airlock.admin.get("/v1/runs").await.expect("runs");
        runs["runs"][0]["id"].as_str().expect("run").to_owned()
    };
    let mut resume = run_command(&fx, &policy, &["--json", "--resume", &run]);
    resume.arg("--workspace").arg(&ws);
    let out = output(resume).await;
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "keep", "{report:#}");
    assert_eq!(report["state"], "partially_committed", "{report:#}");
    let states: Vec<&str> = report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["released", "unknown"]);
    assert!(ws.join("kept.txt").exists(), "files kept");
    let received = origin.received();
    assert_eq!(received.iter().filter(|r| r.path == "/first").count(), 1);
    assert_eq!(received.iter().filter(|r| r.path == "/second").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_of_a_run_interrupted_before_any_decision_rolls_back() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let ws = workspace(&fx);
    let before = tree(&ws);
    let (run, env) = airlock.create_run().await;
    airlock
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": ws.display().to_string()})),
        )
        .await
        .expect("attach");
    // The agent ran partway, then `airlock run` died before deciding anything.
    std::fs::write(ws.join("half-done.txt"), "partial\n").expect("write");
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    let staged = airlock_tests::curl(&env, &["-X", "POST", "--data", "x", &url]).await;
    assert_eq!(staged.status, 202);

    // `runs show` finishes only a written decision: here there is none, so nothing moves.
    let shown = cli(&fx, &["runs", "show", &run]);
    assert!(shown.status.success());
    assert!(ws.join("half-done.txt").exists());

    let out = cli(&fx, &["run", "--json", "--resume", &run]);
    let report = json_report(&out);
    assert!(!out.status.success(), "a rollback is not a success");
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["decision"]["by"], "resume");
    assert_eq!(report["state"], "aborted");
    assert_eq!(report["effects"][0]["state"], "discarded");
    assert_eq!(tree(&ws), before);
    assert!(origin.received().is_empty());
}
