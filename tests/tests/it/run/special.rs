//! `airlock run` with special files in the workspace and a step that never ends (issue
//! #20, item 6): the decision always completes. Each `airlock run` is awaited for at most
//! five minutes and killed after that, so a hang fails the test instead of the suite.
//! (The per-kind driver tests are in proxy/control/src/snapshot/tests.rs.)

use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use airlock_tests::{loopback_policy, ok_origin, Fixture};

use super::{json_report, sh_command, workspace, write_policy};

/// Runs `command`; panics when it has not ended within five minutes (and kills it).
async fn output_within(command: Command) -> Output {
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .expect("airlock run hung: no decision within 300 s")
        .expect("run airlock")
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item6_run_with_a_fifo_in_the_workspace_decides_and_restores_it() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    mkfifo(&ws.join("pipe"));

    // The command removes the FIFO, makes another and changes a file; verify fails.
    let script = "rm pipe && mkfifo made-pipe && echo changed >> README";
    let command = sh_command(&fx, &policy, &["--json", "--verify", "false"], &ws, script);
    let out = output_within(command).await;
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");
    let changes = &report["decision"]["changes"];
    assert_eq!(changes["deleted"], serde_json::json!(["pipe"]), "{changes}");
    assert_eq!(
        changes["added"],
        serde_json::json!(["made-pipe"]),
        "{changes}"
    );
    assert!(is_fifo(&ws.join("pipe")), "the FIFO is recreated");
    assert!(std::fs::symlink_metadata(ws.join("made-pipe")).is_err());
    assert_eq!(
        std::fs::read_to_string(ws.join("README")).expect("read"),
        "read me\n"
    );

    // A command that passes: the FIFO it made is kept.
    let command = sh_command(&fx, &policy, &["--json"], &ws, "mkfifo kept-pipe");
    let out = output_within(command).await;
    let report = json_report(&out);
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["decision"]["kind"], "keep", "{report:#}");
    assert_eq!(
        report["decision"]["changes"]["added"],
        serde_json::json!(["kept-pipe"])
    );
    assert!(is_fifo(&ws.join("kept-pipe")) && is_fifo(&ws.join("pipe")));
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item6_run_whose_rollback_never_ends_times_out_and_the_decision_completes() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let command = sh_command(
        &fx,
        &policy,
        &[
            "--json",
            "--workspace-step-timeout",
            "2",
            "--snapshot",
            "cmd",
            "--snapshot-cmd",
            "true",
            "--rollback-cmd",
            "sleep 120",
            "--verify",
            "false",
        ],
        &ws,
        "echo new > added.txt",
    );
    let out = output_within(command).await;
    assert!(!out.status.success());
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], true, "{report:#}");
    assert_eq!(
        report["decision"]["residue"],
        serde_json::json!([
            "restore failed: the workspace rollback step timed out after 2 s while processing \
             the rollback command `sleep 120` (the limit is --workspace-step-timeout)"
        ]),
        "{report:#}"
    );
    assert!(
        report["decision"]["finished_at_ms"].is_u64(),
        "the decision is finished: {report:#}"
    );
    let outcome = report["decision"]["outcome"].as_str().unwrap_or("");
    assert!(outcome.contains("could NOT be verified"), "{outcome}");
}
