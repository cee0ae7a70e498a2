//! Issue #21, the new user's nits: what a first-time user is told when a default port is
//! taken, a start fails, an id or endpoint is unknown, a run is closed, a settle or an
//! `--expect` does not fit, a run staged nothing, and what the log claims of a commit.

use std::process::Command;
use std::time::Duration;

use airlock_tests::{airlock_bin, curl, in_ci, loopback_policy, ok_origin, Fixture};
use serde_json::Value;

/// `curl` the admin API with the admin token: `(status, JSON body)`.
async fn admin(fx: &Fixture, url: &str, method: &str, body: Option<&str>) -> (u16, Value) {
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let mut args = vec![
        "-sS".to_owned(),
        "--noproxy".to_owned(),
        "*".to_owned(),
        "-X".to_owned(),
        method.to_owned(),
        "-H".to_owned(),
        format!("Authorization: Bearer {}", token.trim()),
        "-w".to_owned(),
        "\n%{http_code}".to_owned(),
    ];
    if let Some(body) = body {
        args.extend([
            "-H".to_owned(),
            "content-type: application/json".to_owned(),
            "--data".to_owned(),
            body.to_owned(),
        ]);
    }
    args.push(url.to_owned());
    let out = tokio::process::Command::new("curl")
        .args(&args)
        .output()
        .await
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("status line");
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    (status.trim().parse().expect("status"), body)
}

/// Runs `script` with `sh` in a new user and network namespace (its own loopback, so the
/// default ports are free whatever runs on this machine); `None` where none can be made.
fn in_netns(script: &str, env: &[(&str, &std::path::Path)]) -> Option<std::process::Output> {
    let probe = Command::new("unshare")
        .args(["-rn", "true"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    if probe.is_none() {
        assert!(!in_ci(), "unshare -rn is needed in CI");
        eprintln!("SKIPPED: no user and network namespaces here");
        return None;
    }
    let mut command = Command::new("unshare");
    command.args(["-rn", "sh", "-c", script]);
    for (name, value) in env {
        command.env(name, value);
    }
    Some(command.output().expect("run unshare"))
}

#[test]
fn nit_a_taken_default_port_is_named_as_the_default_and_a_failed_start_leaves_no_data_dir() {
    let fx = Fixture::new();
    let policy = fx.dir.path().join("policy.toml");
    std::fs::write(&policy, loopback_policy(1)).expect("policy");
    let fresh = fx.dir.path().join("fresh/data");
    let existing = fx.dir.path().join("existing");
    std::fs::create_dir_all(&existing).expect("mkdir");
    std::fs::write(existing.join("mine.txt"), "the user's").expect("write");
    // 127.0.0.1:8080 is held in the namespace; airlock is started without --listen, once
    // on a data directory that does not exist and once on one that does.
    let script = r#"
        ip link set lo up
        python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 8080)); s.listen()
open("'"$DIR"'/held", "w").close(); time.sleep(30)' &
        holder=$!
        while [ ! -e "$DIR/held" ]; do sleep 0.05; done
        "$AIRLOCK" serve --data "$FRESH" --policy "$POLICY" --admin 127.0.0.1:0 2>"$DIR/fresh.err"
        "$AIRLOCK" serve --data "$EXISTING" --policy "$POLICY" --admin 127.0.0.1:0 2>"$DIR/existing.err"
        kill $holder
    "#;
    let bin = airlock_bin();
    let Some(out) = in_netns(
        script,
        &[
            ("AIRLOCK", &bin),
            ("DIR", fx.dir.path()),
            ("FRESH", &fresh),
            ("EXISTING", &existing),
            ("POLICY", &policy),
        ],
    ) else {
        return;
    };
    let stderr = std::fs::read_to_string(fx.dir.path().join("fresh.err")).unwrap_or_default();
    assert!(
        stderr.contains("cannot listen on the default proxy address 127.0.0.1:8080 (--listen)"),
        "{stderr}\n{out:?}"
    );
    assert!(stderr.contains("pass --listen another address"), "{stderr}");
    assert!(
        !fx.dir.path().join("fresh").exists(),
        "the failed start removes the directories it created (CA, tokens, ledger)"
    );
    let stderr = std::fs::read_to_string(fx.dir.path().join("existing.err")).unwrap_or_default();
    assert!(stderr.contains("(--listen)"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(existing.join("mine.txt")).expect("still there"),
        "the user's",
        "a data directory that existed is never removed"
    );
}

#[test]
fn nit_an_airlock_run_start_error_hints_at_airlock_run() {
    let fx = Fixture::new();
    let policy = fx.dir.path().join("policy.toml");
    std::fs::write(&policy, loopback_policy(1)).expect("policy");
    let file = fx.dir.path().join("a-file");
    std::fs::write(&file, "not a directory").expect("write");
    let out = Command::new(airlock_bin())
        .arg("run")
        .arg("--data")
        .arg(&file)
        .arg("--policy")
        .arg(&policy)
        .args(["--network", "env", "--", "true"])
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("hint: check the paths and addresses given to `airlock run`"),
        "{stderr}"
    );
}

/// `id` with its last character changed: well formed, and no record's.
fn unknown_like(id: &str) -> String {
    let mut unknown = id.to_owned();
    let last = unknown.pop().expect("an id");
    unknown.push(if last == 'Z' { 'Y' } else { 'Z' });
    unknown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_admin_404_hints_say_what_was_not_found_and_how_to_list_them() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = fx.start(&loopback_policy(port), &[]);
    let (run, env) = airlock.create_run().await;
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("https://127.0.0.1:{port}/hook"),
        ],
    )
    .await;
    let effect = staged.header("airlock-effect").expect("airlock-effect");
    let base = &airlock.admin_url;

    let (status, body) = admin(&fx, &format!("{base}/v1/no-such-thing"), "GET", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("GET /v1/no-such-thing")),
        "{body}"
    );
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("no endpoint has that method and path")
                && !h.contains("check the id")),
        "{body}"
    );
    let (status, body) = admin(
        &fx,
        &format!("{base}/v1/runs/{}", unknown_like(&run)),
        "GET",
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("no run has that id") && h.contains("GET /v1/runs")),
        "{body}"
    );
    let (status, body) = admin(
        &fx,
        &format!("{base}/v1/effects/{}", unknown_like(&effect)),
        "GET",
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("no effect has that id") && h.contains("/effects")),
        "{body}"
    );
    let (status, body) = admin(&fx, &format!("{base}/v1/runs/{run}/workspace"), "GET", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("that run has no workspace")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_a_read_through_a_committed_run_is_told_the_run_is_closed() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let report = airlock.commit(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let read = curl(&env, &[&format!("https://127.0.0.1:{port}/status")]).await;
    assert_eq!(read.status, 409, "{}", read.stderr);
    let body = read.json();
    assert_eq!(body["reason_code"], "run_not_open", "{body}");
    assert_eq!(
        body["error"], "run is closed",
        "a GET is a read, not an effect: {body}"
    );
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("is closed (committed or aborted)")),
        "{body}"
    );
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("reads included")),
        "{body}"
    );
    // A sealed run still passes reads and refuses only effects, and says so.
    let (sealed, env) = airlock.create_run().await;
    airlock
        .post(&format!("/v1/runs/{sealed}/seal"), None)
        .await
        .expect("seal");
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("https://127.0.0.1:{port}/hook"),
        ],
    )
    .await;
    assert_eq!(staged.status, 409, "{}", staged.stderr);
    assert_eq!(staged.json()["error"], "run does not accept effects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_settling_a_staged_effect_says_settle_is_for_unknown_outcomes() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, _run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("https://127.0.0.1:{port}/hook"),
        ],
    )
    .await;
    let effect = staged.header("airlock-effect").expect("airlock-effect");
    let (status, body) = admin(
        &fx,
        &format!("{}/v1/effects/{effect}/settle", airlock.admin_url),
        "POST",
        Some(r#"{"delivered": true}"#),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("is staged")
            && reason.contains("settle is only for an effect whose release outcome is unknown")
            && reason.contains("approve or reject it, then commit the run"),
        "{body}"
    );
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.contains("what you found at the origin")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_a_stale_expect_is_told_the_new_expectation_not_what_is_covered() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let hook = format!("https://127.0.0.1:{port}/hook");
    curl(&env, &["-X", "POST", "--data", "one", &hook]).await;
    let listed = airlock
        .admin
        .get(&format!("/v1/runs/{run}/effects"))
        .await
        .expect("effects");
    let shown = listed["expect"].clone();
    curl(&env, &["-X", "POST", "--data", "two", &hook]).await;
    let (status, body) = admin(
        &fx,
        &format!("{}/v1/runs/{run}/commit", airlock.admin_url),
        "POST",
        Some(&serde_json::json!({ "approve_pending": true, "expect": shown }).to_string()),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason_code"], "set_changed", "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    let now = format!(
        "{}:{}",
        body["details"]["now"]["through_seq"],
        body["details"]["now"]["digest"]
            .as_str()
            .unwrap_or_default()
    );
    assert!(
        reason.contains("would now act on 2 effect(s)") && reason.contains(&now),
        "the reason names the set now and its expectation ({now}): {reason}"
    );
    assert!(!reason.contains("covered"), "{reason}");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_a_kept_run_that_staged_nothing_is_committed_and_says_so() {
    let fx = Fixture::new();
    let policy_text = loopback_policy(1);
    let policy = fx.dir.path().join("policy.toml");
    std::fs::write(&policy, &policy_text).expect("policy");
    let ws = fx.dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    std::fs::write(ws.join("README"), "read me\n").expect("write");
    let mut command = Command::new(airlock_bin());
    command
        .arg("run")
        .arg("--data")
        .arg(fx.data_dir())
        .arg("--policy")
        .arg(&policy)
        .arg("--workspace")
        .arg(&ws)
        .args(["--network", "env", "--", "sh", "-c", "echo more >> README"])
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN");
    let out = tokio::task::spawn_blocking(move || command.output().expect("run airlock run"))
        .await
        .expect("task");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("decision  keep"), "{stdout}");
    assert!(
        stdout.contains("the run staged no effects") && !stdout.contains("held for review"),
        "{stdout}"
    );
    let airlock = fx.start(&policy_text, &[]);
    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    assert_eq!(
        runs["runs"][0]["state"], "committed",
        "nothing to review, so it does not wait sealed: {runs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nit_a_retry_on_an_open_run_is_not_logged_as_a_finished_commit() {
    let fx = Fixture::new();
    let (airlock, run, _env) = fx.start_run(&loopback_policy(1), &[]).await;
    // Nothing to retry: refused, and no commit ran.
    let refused = airlock
        .post(&format!("/v1/runs/{run}/retry"), None)
        .await
        .expect_err("nothing to retry");
    assert!(
        refused.to_string().contains("nothing_to_retry"),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = airlock.log();
    assert!(
        !log.contains("commit finished"),
        "no commit ran, so none finished:\n{log}"
    );
    // A real commit still says it finished.
    airlock.commit(&run).await;
    let logged = airlock_tests::eventually(Duration::from_secs(5), || {
        airlock.log().contains("commit finished")
    })
    .await;
    assert!(logged, "{}", airlock.log());
}
