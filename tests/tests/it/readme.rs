//! Issue #21, "The README quick start": its commands, copied verbatim from README.md
//! (step 0 to the end of step 3), work first time against the local origin they make,
//! and the staged POST reaches that origin with the content type it means only after
//! `airlock commit`.

use std::process::Command;

use airlock_tests::{airlock_bin, in_ci};

/// The ports the quick start names: proxy, admin, origin.
const PORTS: [u16; 3] = [8080, 8081, 8443];

/// The quick start's shell block from step 0 up to `airlock env` (which needs a run id).
fn quick_start() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let start = readme
        .find("```sh\n# 0.")
        .expect("README's quick start begins with step 0");
    let block = &readme[start + "```sh\n".len()..];
    let end = block
        .find("#    Or a sandbox")
        .expect("step 3 ends before the `airlock env` alternative");
    block[..end].to_owned()
}

#[test]
fn readme_quick_start_works_first_time_against_a_local_origin() {
    let test = "readme_quick_start_works_first_time_against_a_local_origin";
    let taken: Vec<u16> = PORTS
        .into_iter()
        .filter(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_err())
        .collect();
    if !taken.is_empty() {
        assert!(!in_ci(), "{test}: ports {taken:?} are taken");
        eprintln!("SKIPPED {test}: ports {taken:?} are taken");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = airlock_bin();
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // After the README's commands: commit the newest run (the staged POST), then stop
    // the server and the origin the block started in the background.
    let script = format!(
        "{}\n\
         echo '== commit'\n\
         run=$(curl -s -H \"authorization: Bearer $(cat airlock-data/admin.token)\" \
           http://127.0.0.1:8081/v1/runs | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"runs\"][0][\"id\"])')\n\
         airlock commit \"$run\" --approve-pending\n\
         kill $(jobs -p); wait\n",
        quick_start()
    );
    // `timeout` signals its whole process group, so a step that never ends takes the
    // background server and origin down with it (nothing is left holding the pipes).
    let out = Command::new("timeout")
        .args(["-k", "5", "300", "bash", "-c", &script])
        .env("PATH", path)
        .env_remove("AIRLOCK_TOKEN")
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_DATA")
        .current_dir(dir.path())
        .output()
        .expect("run the quick start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(r#"{"ok":true}"#), "the GET passed: {shown}");
    assert!(
        stdout.contains(r#""status": "staged""#),
        "the POST was staged: {shown}"
    );
    let commit = stdout
        .find("== commit")
        .expect("the script reached the commit");
    let posted = r#"origin got: POST /deliver application/json {"text":"hi"}"#;
    let at = stdout
        .find(posted)
        .unwrap_or_else(|| panic!("the origin got the JSON POST: {shown}"));
    assert!(
        at > commit,
        "the origin got the POST only after commit: {shown}"
    );
    assert_eq!(
        stdout.matches("origin got: POST").count(),
        1,
        "once: {shown}"
    );
    assert!(stdout.contains("origin got: GET /status"), "{shown}");
}
