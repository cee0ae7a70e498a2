//! Bidi, invisible and control characters an agent puts in what it sends (issue #20
//! item 7; "Trojan Source", CVE-2021-42574) are shown escaped as `<U+XXXX>` on the review
//! UI's pages and in the CLI, never passed raw to the reviewer's screen.

use airlock_tests::{curl, Fixture};

use super::{get, sign_in, text};

/// What the agent hides: a right-to-left override that makes `exe.png` read as `gnp.exe`,
/// a zero-width space, a first-strong isolate and an ESC that would clear a terminal.
const TITLE: &str = "Fix the flaky test \u{202E}gnp.exe\u{200B} and \u{2068}more\u{1B}[2J";
const HIDDEN: [char; 4] = ['\u{202E}', '\u{200B}', '\u{2068}', '\u{1B}'];

fn has_hidden(text: &str) -> bool {
    text.chars().any(|c| HIDDEN.contains(&c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_and_invisible_controls_from_agents_are_shown_escaped_in_the_ui_and_the_cli() {
    let fx = Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "pulls"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/repos/*/*/pulls"
action = "stage"
respond = "github"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let body = serde_json::json!({"title": TITLE, "head": "agent/fix", "base": "main"}).to_string();
    assert!(
        has_hidden(&body) || body.contains("\\u001b"),
        "the agent sends them raw"
    );
    let out = curl(
        &env,
        &[
            "-H",
            "content-type: application/json",
            "-d",
            &body,
            &format!("https://127.0.0.1:{port}/repos/acme/widgets/pulls"),
        ],
    )
    .await;
    assert_eq!(out.status, 201, "{}", out.stderr);
    let effects = airlock.effects(&run).await;
    let effect = effects[0]["id"].as_str().expect("id").to_owned();
    let summary = effects[0]["summary"].as_str().expect("a summary");
    assert!(
        summary.contains('\u{202E}'),
        "the ledger keeps what was sent: {summary}"
    );

    // The review UI: the run page (summary) and the effect page (summary, body).
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = sign_in(&airlock.admin_url, token.trim()).await;
    for path in [format!("/runs/{run}"), format!("/effects/{effect}")] {
        let page = text(&get(&format!("{}{path}", airlock.admin_url), Some(&cookie)).await);
        assert!(!has_hidden(&page), "{path} passes them raw");
        assert!(
            page.contains("<span class=\"ctl\"") && page.contains("&lt;U+202E&gt;</span>gnp.exe"),
            "{path}: {page}"
        );
        assert!(page.contains("&lt;U+200B&gt;"), "{path}");
        assert!(page.contains("&lt;U+2068&gt;</span>more"), "{path}");
    }

    // The CLI: the effects table, one effect, and JSON output (escaped as \uXXXX, the
    // same JSON value).
    let (ok, table, stderr) = crate::cli::cli(&fx, &["effects", &run]);
    assert!(ok, "{stderr}");
    assert!(!has_hidden(&table), "{table}");
    assert!(table.contains("<U+202E>gnp.exe<U+200B>"), "{table}");
    assert!(table.contains("<U+2068>more<U+001B>[2J"), "{table}");
    let (ok, shown, stderr) = crate::cli::cli(&fx, &["show", &effect]);
    assert!(ok, "{stderr}");
    assert!(!has_hidden(&shown), "{shown}");
    assert!(shown.contains("<U+202E>gnp.exe"), "{shown}");
    let (ok, json, stderr) = crate::cli::cli(&fx, &["show", &effect, "--json"]);
    assert!(ok, "{stderr}");
    assert!(!has_hidden(&json), "{json}");
    assert!(json.contains("\\u202e"), "{json}");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("still JSON");
    assert_eq!(parsed["summary"].as_str(), Some(summary));
    assert!(origin.received().is_empty());
}
