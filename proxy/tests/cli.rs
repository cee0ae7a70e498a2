//! The `airlock` binary's command line, run as a user would. (Also makes `cargo test
//! --workspace` build the binary that the end-to-end tests in `tests/` drive.)

mod common;

use common::airlock;

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

/// Runs `airlock serve FLAG VALUE --data DATA`, asserts that it refuses to start, and
/// returns its stderr.
fn serve_refuses(data: &std::path::Path, flag: &str, value: &str) -> String {
    let out = airlock()
        .args(["serve", flag, value, "--data"])
        .arg(data)
        .output()
        .expect("run airlock");
    assert!(!out.status.success(), "{flag} {value}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn timeouts_past_ten_years_are_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    for flag in [
        "--keep-alive-timeout",
        "--auth-timeout",
        "--header-read-timeout",
        "--idle-timeout",
    ] {
        let stderr = serve_refuses(dir.path(), flag, "9300000000000000000");
        assert!(
            stderr.contains(flag) && stderr.contains("315360000"),
            "{flag}: {stderr}"
        );
    }
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

#[test]
fn a_ledger_cache_outside_its_range_is_refused_with_the_flag_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    for value in ["0", "1048577", "lots"] {
        let stderr = serve_refuses(dir.path(), "--ledger-cache-mib", value);
        assert!(
            stderr.contains("invalid value") && stderr.contains("--ledger-cache-mib"),
            "{value}: {stderr}"
        );
    }
}
