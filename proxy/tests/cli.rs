//! The `airlock` binary's command line, run as a user would. (Also makes `cargo test
//! --workspace` build the binary that the end-to-end tests in `tests/` drive.)

use std::process::Command;

fn airlock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
}

#[test]
fn help_lists_every_command() {
    let out = airlock().arg("--help").output().expect("run airlock");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for command in [
        "serve", "runs", "effects", "show", "approve", "reject", "commit", "abort", "env", "ca",
        "demo",
    ] {
        assert!(text.contains(command), "--help lacks {command}: {text}");
    }
}

#[test]
fn admin_command_without_a_server_is_one_error_line_and_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = airlock()
        .args([
            "effects",
            "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "--admin",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--data",
        ])
        .arg(dir.path())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "errors go to stderr only");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("error: cannot reach the admin API at http://127.0.0.1:9"),
        "{stderr}"
    );
    assert!(lines[1].starts_with("hint: "), "{stderr}");
}

#[test]
fn missing_token_names_where_it_looked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = airlock()
        .args(["runs", "list", "--data"])
        .arg(dir.path())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin.token"), "{stderr}");
}
