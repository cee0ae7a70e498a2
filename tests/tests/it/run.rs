//! `airlock run`: files and effects kept or rolled back together, savepoints, the git
//! driver, the residue check (docs/run.md); crash recovery in `run/crash.rs`, the client
//! matrix in `run/clients.rs`, savepoints and rollback in `run/savepoints.rs`, the git and
//! cmd drivers in `run/drivers.rs`, the overlay driver in `run/overlay.rs`, special files
//! and step time limits in `run/special.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use airlock_tests::{airlock_bin, loopback_policy, ok_origin, Fixture};
use serde_json::{json, Value};

pub(crate) mod clients;
mod crash;
mod drivers;
mod overlay;
mod review_after;
mod savepoints;
mod special;

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

/// [`run_command`] on the workspace `ws`, running `sh -c script` there.
fn sh_command(fx: &Fixture, policy: &Path, args: &[&str], ws: &Path, script: &str) -> Command {
    let mut command = run_command(fx, policy, args);
    command
        .arg("--workspace")
        .arg(ws)
        .args(["--", "sh", "-c", script]);
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
    let command = sh_command(
        &fx,
        &policy,
        &["--json", "--verify", "test -f never-there"],
        &ws,
        &script,
    );
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
    let command = sh_command(
        &fx,
        &policy,
        &["--verify", "grep -q changed README"],
        &ws,
        &script,
    );
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
        let report = airlock.commit_pending(&run).await;
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
    let command = sh_command(
        &fx,
        &policy,
        &["--json", "--on-pass", "commit"],
        &ws,
        &script,
    );
    let out = output(command).await;
    let held = json_report(&out);
    assert!(out.status.success(), "{held:#}");
    assert_eq!(held["state"], "sealed", "{held:#}");
    assert!(origin.received().is_empty());

    let command = sh_command(
        &fx,
        &policy,
        &["--json", "--on-pass", "commit", "--approve-all"],
        &ws,
        &script,
    );
    let out = output(command).await;
    let committed = json_report(&out);
    assert!(out.status.success(), "{committed:#}");
    assert_eq!(committed["state"], "committed", "{committed:#}");
    assert_eq!(committed["effects"][0]["state"], "released");
    assert_eq!(origin.received().len(), 1);
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    // The test's own fixtures: they may belong to the user a fence suite runs as.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
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
        // Proxy variables only: what the command leaves running stays running and is
        // reported so (a fence kills it: containment.rs, case C22).
        .args(["--network", "env"])
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
