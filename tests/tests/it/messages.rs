//! Issue 40 item 5: the messages a new user meets first say what to do. Each test runs the
//! real binary and reads the text it printed.

use std::process::{Command, Output};

use airlock_tests::{airlock_bin, curl, loopback_policy, ok_origin, Fixture};

fn airlock(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(airlock_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("AIRLOCK_TOKEN")
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_DATA")
        .output()
        .expect("run airlock")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn airlock_run_without_a_server_suggests_an_embedded_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("ws")).expect("ws");
    // No data directory at all.
    let out = airlock(
        dir.path(),
        &[
            "run",
            "--data",
            "./data",
            "--workspace",
            "./ws",
            "--",
            "true",
        ],
    );
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("airlock run --policy FILE"), "{text}");
    // A data directory whose server is not running (port 9: nothing listens there).
    std::fs::create_dir(dir.path().join("data")).expect("data");
    std::fs::write(dir.path().join("data/admin.token"), "x".repeat(32)).expect("token");
    let out = airlock(
        dir.path(),
        &[
            "run",
            "--data",
            "./data",
            "--admin",
            "http://127.0.0.1:9",
            "--workspace",
            "./ws",
            "--",
            "true",
        ],
    );
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("cannot reach the admin API"), "{text}");
    assert!(text.contains("`airlock run --policy FILE …`"), "{text}");
}

#[test]
fn a_missing_policy_file_is_a_path_to_check_not_a_file_to_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = airlock(
        dir.path(),
        &["serve", "--data", "./data", "--policy", "policy.toml"],
    );
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("there is no file policy.toml"), "{text}");
    assert!(
        text.contains(&dir.path().display().to_string()),
        "names the directory: {text}"
    );
    assert!(text.contains("examples/policies/"), "{text}");
    assert!(!text.contains("fix the policy file"), "{text}");
    // A file that is there but wrong is still one to fix.
    std::fs::write(dir.path().join("policy.toml"), "version = 1\nrules = 3\n").expect("write");
    let out = airlock(
        dir.path(),
        &["serve", "--data", "./data", "--policy", "policy.toml"],
    );
    assert!(
        stderr(&out).contains("fix the policy file"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_released_effect_says_it_reached_its_origin() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock_server, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "hi",
            &format!("https://127.0.0.1:{port}/hook"),
        ],
    )
    .await;
    let effect = staged.header("airlock-effect").expect("staged");
    airlock_server.commit_pending(&run).await;
    assert_eq!(origin.received().len(), 1);
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let out = airlock(
        fx.dir.path(),
        &[
            "retry",
            &effect,
            "--admin",
            &airlock_server.admin_url,
            "--token",
            token.trim(),
        ],
    );
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("is released and cannot be retried"), "{text}");
    assert!(text.contains("its origin has it"), "{text}");
    assert!(!text.contains("cannot become approved"), "{text}");
    assert_eq!(origin.received().len(), 1, "nothing sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_head_over_http2_gets_its_status_and_headers_without_a_body() {
    // curl speaks HTTP/2 to airlock's intercepting leaf by default; a refusal's JSON
    // body on a HEAD ended that stream in PROTOCOL_ERROR (curl error 92).
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (_airlock, _run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let head = curl(
        &env,
        &["-I", &format!("https://127.0.0.1:{port}/forbidden/x")],
    )
    .await;
    assert_eq!(head.status, 403, "{} {}", head.headers, head.stderr);
    assert!(head.headers.contains("HTTP/2 403"), "{}", head.headers);
    assert!(head.header("airlock-error").is_some(), "{}", head.headers);
    assert!(origin.received().is_empty());
}
