//! `airlock run`: files and effects kept or rolled back together, savepoints, the git
//! driver, the residue check (docs/run.md); crash recovery in `run/crash.rs`, the client
//! matrix in `run/clients.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use airlock_tests::{airlock_bin, loopback_policy, ok_origin, Fixture};
use serde_json::{json, Value};

pub(crate) mod clients;
mod crash;

/// Every path under `root` (skipping `.git`) with its bytes (link target for symlinks) and mode.
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in std::fs::read_dir(&dir).expect("list") {
            let path = item.expect("entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).expect("link");
                out.insert(rel, (target.to_string_lossy().as_bytes().to_vec(), 0));
            } else if meta.is_dir() {
                out.insert(rel, (Vec::new(), mode));
                stack.push(path);
            } else {
                out.insert(rel, (std::fs::read(&path).expect("read"), mode));
            }
        }
    }
    out
}

/// A workspace with a few files, a directory, an executable and a symlink.
fn workspace(fx: &Fixture) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let ws = fx.dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).expect("mkdir");
    std::fs::write(ws.join("README"), "read me\n").expect("write");
    std::fs::write(ws.join("src/main.txt"), "fn main() {}\n").expect("write");
    std::fs::write(ws.join("delete-me"), "doomed\n").expect("write");
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\necho hi\n").expect("write");
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::os::unix::fs::symlink("README", ws.join("link")).expect("symlink");
    ws
}

fn write_policy(fx: &Fixture, policy: &str) -> PathBuf {
    let path = fx.dir.path().join("policy.toml");
    std::fs::write(&path, policy).expect("write policy");
    path
}

/// `airlock run` with an embedded server on the fixture's data directory.
fn run_command(fx: &Fixture, policy: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(airlock_bin());
    command
        .arg("run")
        .arg("--data")
        .arg(fx.data_dir())
        .arg("--policy")
        .arg(policy)
        .arg("--upstream-ca")
        .arg(fx.dir.path().join("origin-ca.pem"))
        .args(args)
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .env_remove("AIRLOCK_TEST_PAUSE_AT");
    command
}

async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("run airlock"))
        .await
        .expect("task")
}

fn json_report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The agent: modifies, creates and deletes files, and POSTs a webhook with curl.
fn agent_script(port: u16) -> String {
    format!(
        "echo changed >> README && echo new > added.txt && mkdir -p out/deep && echo x > out/deep/f \
         && rm delete-me && chmod 600 src/main.txt \
         && curl -sS --fail -X POST --data '{{\"status\":\"done\"}}' https://127.0.0.1:{port}/hook"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_verify_fails_files_byte_identical_effect_discarded_origin_untouched() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let before = tree(&ws);

    let script = agent_script(origin.addr().port());
    let mut command = run_command(&fx, &policy, &["--json", "--verify", "test -f never-there"]);
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script]);
    let out = output(command).await;
    assert!(!out.status.success(), "verify failed, so airlock run fails");
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["state"], "aborted");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");
    let changes = &report["decision"]["changes"];
    assert!(
        changes["added"].to_string().contains("added.txt"),
        "{changes}"
    );
    assert!(
        changes["modified"].to_string().contains("README"),
        "{changes}"
    );
    assert!(
        changes["modified"].to_string().contains("src/main.txt"),
        "{changes}"
    );
    assert_eq!(changes["deleted"], json!(["delete-me"]));
    let effects = report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{report:#}");
    assert_eq!(effects[0]["state"], "discarded");
    assert_eq!(effects[0]["method"], "POST");
    let steps = report["workspace"]["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["kind"], "command");
    assert_eq!(steps[0]["exit_code"], 0);
    assert!(
        steps[0]["output"]
            .as_str()
            .unwrap_or("")
            .contains("airlock staged this request"),
        "the command's output is recorded: {steps:?}"
    );
    assert_eq!(steps[1]["kind"], "verify");
    assert_eq!(steps[1]["exit_code"], 1);

    assert_eq!(tree(&ws), before, "files are byte-identical to before");
    assert!(origin.received().is_empty(), "the origin received nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_verify_passes_keeps_files_effect_pending_commit_releases_once() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy_text = loopback_policy(origin.addr().port());
    let policy = write_policy(&fx, &policy_text);
    let ws = workspace(&fx);

    let script = agent_script(origin.addr().port());
    let mut command = run_command(&fx, &policy, &["--verify", "grep -q changed README"]);
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script]);
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("decision  keep"), "{stdout}");
    assert!(stdout.contains("+ added.txt"), "{stdout}");
    assert!(stdout.contains("- delete-me"), "{stdout}");
    assert!(stdout.contains("airlock commit run_"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(ws.join("README")).expect("read"),
        "read me\nchanged\n"
    );
    assert!(ws.join("added.txt").exists() && !ws.join("delete-me").exists());
    assert!(origin.received().is_empty(), "held, not sent");

    // The run waits for review on the same data directory; commit releases it once.
    let airlock = fx.start(&policy_text, &[]);
    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    let run = runs["runs"][0]["id"].as_str().expect("run").to_owned();
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["state"], "staged");
    for _ in 0..2 {
        let report = airlock
            .post(
                &format!("/v1/runs/{run}/commit"),
                Some(json!({"approve_pending": true})),
            )
            .await
            .expect("commit");
        assert_eq!(report["state"], "committed");
    }
    let received = origin.received();
    assert_eq!(received.len(), 1, "released exactly once");
    assert_eq!(received[0].path, "/hook");
    assert_eq!(received[0].body, br#"{"status":"done"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_pass_commit_releases_only_with_approve_all() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    let script = format!("curl -sS --fail -X POST --data one {url}");

    // Without --approve-all nothing is approved, so nothing is committed.
    let mut command = run_command(&fx, &policy, &["--json", "--on-pass", "commit"]);
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script]);
    let out = output(command).await;
    let held = json_report(&out);
    assert!(out.status.success(), "{held:#}");
    assert_eq!(held["state"], "sealed", "{held:#}");
    assert!(origin.received().is_empty());

    let mut command = run_command(
        &fx,
        &policy,
        &["--json", "--on-pass", "commit", "--approve-all"],
    );
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script]);
    let out = output(command).await;
    let committed = json_report(&out);
    assert!(out.status.success(), "{committed:#}");
    assert_eq!(committed["state"], "committed", "{committed:#}");
    assert_eq!(committed["effects"][0]["state"], "released");
    assert_eq!(origin.received().len(), 1);
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@localhost")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@localhost")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_git_driver_restores_untracked_files_and_a_dirty_index_exactly() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let repo = fx.dir.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join(".gitignore"), "*.log\n").expect("write");
    std::fs::write(repo.join("tracked.txt"), "v1\n").expect("write");
    std::fs::write(repo.join("other.txt"), "other\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    // A dirty index: a staged change, then a further unstaged one; a staged new file;
    // an untracked file; an ignored file.
    std::fs::write(repo.join("tracked.txt"), "v2 staged\n").expect("write");
    git(&repo, &["add", "tracked.txt"]);
    std::fs::write(repo.join("tracked.txt"), "v3 in the work tree\n").expect("write");
    std::fs::write(repo.join("staged-new.txt"), "new and staged\n").expect("write");
    git(&repo, &["add", "staged-new.txt"]);
    std::fs::write(repo.join("untracked.txt"), "untracked\n").expect("write");
    std::fs::write(repo.join("build.log"), "ignored\n").expect("write");
    let index_path = repo.join(".git/index");
    let index_before = std::fs::read(&index_path).expect("index");
    let head_before = git(&repo, &["rev-parse", "HEAD"]);
    let files_before = tree(&repo);
    let status_before = git(&repo, &["status", "--porcelain=v1", "-uall"]);
    let diff_cached_before = git(&repo, &["diff", "--cached"]);

    // The agent edits, stages, commits, deletes an untracked file and creates new ones.
    let script = "echo agent >> tracked.txt && rm untracked.txt && echo more > fresh.txt \
                  && mkdir -p newdir && echo y > newdir/y && git add -A \
                  && git -c user.name=a -c user.email=a@localhost commit -qm agent \
                  && echo z > after-commit.txt";
    let mut command = run_command(
        &fx,
        &policy,
        &["--json", "--snapshot", "git", "--verify", "false"],
    );
    command
        .arg("--workspace")
        .arg(&repo)
        .args(["--", "sh", "-c", script]);
    let out = output(command).await;
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");

    assert_eq!(
        std::fs::read(&index_path).expect("index"),
        index_before,
        "the index file is restored byte for byte"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(
        git(&repo, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );
    assert_eq!(
        tree(&repo),
        files_before,
        "work tree restored, ignored file untouched"
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain=v1", "-uall"]),
        status_before
    );
    assert_eq!(git(&repo, &["diff", "--cached"]), diff_cached_before);
    let refs = git(&repo, &["for-each-ref", "refs/airlock/"]);
    assert!(refs.contains("refs/airlock/snapshots/run_"), "{refs}");
}

/// CLI command against a running server found through the data directory.
fn cli(fx: &Fixture, args: &[&str]) -> Output {
    Command::new(airlock_bin())
        .args(args)
        .arg("--data")
        .arg(fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock")
}

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

async fn unverifiable_rollback(damaged: &str) {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    // The agent damages airlock's snapshot store (it should never be able to reach it: the
    // data directory belongs outside the sandbox) and changes a file.
    let objects = fx.data_dir().join(damaged);
    let script = format!(
        "rm -rf '{}' && echo tampered > README && echo new > extra.txt",
        objects.display()
    );
    let mut command = run_command(&fx, &policy, &["--verify", "false"]);
    command
        .arg("--workspace")
        .arg(&ws)
        .args(["--", "sh", "-c", &script]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_a_running_server_exits_with_the_command_code_and_rolls_back() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let ws = workspace(&fx);
    let before = tree(&ws);
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    let elsewhere = fx.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join("config"), "v1\n").expect("write");
    let script = format!(
        "echo junk > junk.txt && echo leaked > '{0}/leak' && echo v2 > '{0}/config' \
         && curl -sS -o /dev/null -X POST --data x {url} \
         && (python3 -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); open(\"ready\", \"w\").close(); time.sleep(60)' &) \
         && while [ ! -f ready ]; do sleep 0.05; done && exit 7",
        elsewhere.display()
    );
    let out = Command::new(airlock_bin())
        .args(["run", "--admin", &airlock.admin_url, "--token"])
        .arg(
            std::fs::read_to_string(fx.data_dir().join("admin.token"))
                .expect("token")
                .trim(),
        )
        .arg("--workspace")
        .arg(&ws)
        .arg("--check-residue-outside")
        .arg(&elsewhere)
        .args(["--", "sh", "-c", &script])
        .env_remove("AIRLOCK_DATA")
        .output()
        .expect("airlock run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{text}");
    assert!(text.contains("the command failed (exit 7)"), "{text}");
    assert!(text.contains("+ junk.txt"), "{text}");
    assert!(text.contains("+ ready"), "{text}");
    assert!(
        text.contains(
            "2 path(s) changed outside the workspace: airlock did not and cannot restore them"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("+ {}/leak", elsewhere.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("~ {}/config", elsewhere.display())),
        "{text}"
    );
    // The listener the command left behind is named, with its address.
    let line = text
        .lines()
        .find(|l| l.contains(" -c import socket"))
        .unwrap_or_else(|| panic!("the leftover listener is reported: {text}"));
    let pid = line.split_whitespace().nth(1).expect("pid").to_owned();
    let _ = Command::new("kill").arg(&pid).status();
    assert!(
        text.contains("process(es) the command started are still running"),
        "{text}"
    );
    assert!(line.contains("listening on 127.0.0.1:"), "{line}");
    assert_eq!(tree(&ws), before);
    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    assert_eq!(runs["runs"][0]["state"], "aborted");
    let run = runs["runs"][0]["id"].as_str().expect("id");
    assert_eq!(airlock.effects(run).await[0]["state"], "discarded");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cmd_driver_runs_the_given_commands_and_the_residue_check_catches_a_bad_rollback() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let store = fx.dir.path().join("my-snapshots");
    let take = format!(
        "mkdir -p '{0}'/\"$AIRLOCK_SNAPSHOT\" && cp -a . '{0}'/\"$AIRLOCK_SNAPSHOT\"/",
        store.display()
    );
    let restore = format!(
        "find . -mindepth 1 -delete && cp -a '{0}'/\"$AIRLOCK_SNAPSHOT\"/. .",
        store.display()
    );
    let ws = workspace(&fx);
    let before = tree(&ws);
    let script = agent_script(origin.addr().port());

    // A rollback command that works: verified against the manifest.
    for (rollback, verified) in [(restore.as_str(), true), ("true", false)] {
        let mut command = run_command(
            &fx,
            &policy,
            &[
                "--json",
                "--snapshot",
                "cmd",
                "--snapshot-cmd",
                &take,
                "--rollback-cmd",
                rollback,
                "--verify",
                "false",
            ],
        );
        command
            .arg("--workspace")
            .arg(&ws)
            .args(["--", "sh", "-c", &script]);
        let report = json_report(&output(command).await);
        assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
        assert_eq!(report["workspace"]["driver"], "cmd");
        assert_eq!(report["rollback_unverified"], !verified, "{report:#}");
        if verified {
            assert_eq!(tree(&ws), before);
        } else {
            // The rollback command did nothing: the residue names every change.
            let residue = report["decision"]["residue"].to_string();
            assert!(residue.contains("left behind: added.txt"), "{residue}");
            assert!(residue.contains("differs: README"), "{residue}");
            assert!(residue.contains("missing: delete-me"), "{residue}");
        }
    }
    assert!(origin.received().is_empty());

    // A standalone server runs no snapshot commands unless told it may.
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let (run, _) = airlock.create_run().await;
    let refused = airlock
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": ws.display().to_string(), "driver": "cmd",
                        "snapshot_cmd": "true", "rollback_cmd": "true"})),
        )
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("danger-allow-snapshot-commands"),
        "{refused}"
    );
}
