//! The review UI in a real headless Chromium, driven over WebDriver (chromedriver) with
//! fantoccini: sign in, open the runs list and the run, reject the effect that leaks the
//! read, approve the rest, commit, and see the released states and the origin's answers.
//! Screenshots of the runs list, the run page and an effect page are saved in
//! `target/ui-screenshots/` (the test prints the folder).
//!
//! Needs Debian's `chromium` and `chromedriver` (package `chromium-driver`). Without
//! them the test is skipped with a message, except under CI (`CI` set), where it fails.

// Shared by the two browser binaries, outside `it` (which must not link fantoccini).
#[path = "shared/chromium.rs"]
mod chromium;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_tests::review::Scenario;
use fantoccini::{Client, Locator};
use serde_json::json;

/// `target/ui-screenshots` beside this test executable (`target/<profile>/deps/browser-…`).
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir")
        .to_owned();
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn shot(client: &Client, dir: &Path, name: &str) {
    client
        .execute("window.scrollTo(0, 0); return null;", vec![])
        .await
        .expect("scroll to the top");
    let png = client.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(dir.join(name), png).expect("write screenshot");
}

async fn find(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
}

/// Clicks what `css` finds, which loads a new page, and waits until the new page is
/// there (the old document carried a marker the new one lacks).
async fn click(client: &Client, css: &str) {
    client
        .execute("window.airlockOldPage = true; return null;", vec![])
        .await
        .expect("mark the page");
    let element = find(client, css).await;
    // Out of the fixed footer's way.
    client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'}); return null;",
            vec![json!(css)],
        )
        .await
        .expect("scroll to it");
    element
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let loaded = client
            .execute(
                "return window.airlockOldPage === undefined && document.readyState === 'complete';",
                vec![],
            )
            .await;
        if matches!(loaded, Ok(serde_json::Value::Bool(true))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "clicking {css} loaded no new page"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn text_of(client: &Client, css: &str) -> String {
    find(client, css).await.text().await.expect("text")
}

/// The state shown in an effect's row of the run page.
async fn row_state(client: &Client, effect: &str) -> String {
    text_of(client, &format!("tr[id='{effect}'] .badge")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviewer_rejects_the_leak_and_commits_the_rest_in_chromium() {
    let Some(tools) = chromium::Tools::find(
        "reviewer_rejects_the_leak_and_commits_the_rest_in_chromium",
        false,
    ) else {
        return;
    };
    let s = Scenario::start(&[]).await;
    let admin = s.admin_url().to_owned();
    // Two more runs, so the list shows more than one state.
    let other = s
        .airlock
        .post("/v1/runs", Some(json!({"profile": "docs-bot"})))
        .await
        .expect("a second run");
    s.airlock
        .post(
            &format!("/v1/runs/{}/abort", other["id"].as_str().expect("id")),
            None,
        )
        .await
        .expect("abort it");
    s.airlock
        .post("/v1/runs", Some(json!({"profile": "triage"})))
        .await
        .expect("a third run");
    let (client, driver) = tools
        .open(
            &[
                "--window-size=1280,1000".to_owned(),
                "--hide-scrollbars".to_owned(),
                "--no-proxy-server".to_owned(),
            ],
            None,
        )
        .await;
    let dir = screenshot_dir();
    println!("screenshots: {}", dir.display());

    // Sign in through the form the UI redirects to.
    client.goto(&format!("{admin}/")).await.expect("open");
    let token_field = find(&client, "input#token").await;
    token_field
        .send_keys(&s.token)
        .await
        .expect("type the token");
    click(&client, "section.login button[type=submit]").await;

    // The runs list.
    let runs = text_of(&client, "table#runs").await;
    assert!(runs.contains(&s.run), "{runs}");
    assert!(runs.contains("4 staged"), "{runs}");
    assert!(runs.contains("carry data from reads"), "{runs}");
    shot(&client, &dir, "runs-list.png").await;

    // The run, and the effect that leaks the read.
    click(&client, &format!("a[href='/runs/{}']", s.run)).await;
    find(&client, "svg.lineage").await;
    click(&client, &format!("tr[id='{}'] td a", s.export)).await;
    let marks = client
        .find_all(Locator::Css("pre.body mark"))
        .await
        .expect("marks");
    assert!(
        !marks.is_empty(),
        "the read's rows are highlighted in the body"
    );
    let lineage = text_of(&client, "section#lineage").await;
    assert!(lineage.contains("read #1"), "{lineage}");
    shot(&client, &dir, "effect-page.png").await;
    click(&client, "div.actions button.reject").await;
    let heading = text_of(&client, "h1").await;
    assert!(heading.contains("rejected"), "{heading}");

    // Back to the run: approve the rest, one by one.
    click(&client, &format!("p.crumbs a[href='/runs/{}']", s.run)).await;
    for effect in [&s.status, &s.item, &s.comment] {
        click(&client, &format!("tr[id='{effect}'] button.approve")).await;
        let state = row_state(&client, effect).await;
        assert_eq!(state, "approved", "{effect}");
    }
    assert_eq!(row_state(&client, &s.export).await, "rejected");
    shot(&client, &dir, "run-page.png").await;
    // The embedded script runs under the page's Content-Security-Policy: `?` shows the keys.
    find(&client, "body")
        .await
        .send_keys("?")
        .await
        .expect("press ?");
    let help = text_of(&client, "div.help").await;
    assert!(help.contains("approve"), "{help}");

    // Commit: the confirmation lists exactly what will be released, in order.
    click(&client, "a.button.primary").await;
    let plan = text_of(&client, "table#release-plan").await;
    let positions: Vec<usize> = ["/hooks/status", "/items:", "/comments"]
        .iter()
        .map(|p| {
            plan.find(p)
                .unwrap_or_else(|| panic!("{p} planned: {plan}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{plan}");
    assert!(!plan.contains("/hooks/export"), "{plan}");
    let not_sent = text_of(&client, "table#not-sent").await;
    assert!(not_sent.contains("/hooks/export"), "{not_sent}");
    shot(&client, &dir, "commit-confirm.png").await;
    click(&client, "form button.primary").await;

    // Released states and the origin's answers.
    let heading = text_of(&client, "h1").await;
    assert!(heading.contains("committed"), "{heading}");
    for effect in [&s.status, &s.item, &s.comment] {
        assert_eq!(row_state(&client, effect).await, "released", "{effect}");
        let origin = text_of(&client, &format!("tr[id='{effect}'] td.origin")).await;
        assert!(origin == "200" || origin == "201", "{effect}: {origin}");
    }
    assert_eq!(row_state(&client, &s.export).await, "rejected");
    shot(&client, &dir, "run-committed.png").await;
    click(&client, &format!("tr[id='{}'] td a", s.comment)).await;
    let origin = text_of(&client, "section#origin").await;
    assert!(origin.contains("HTTP 201"), "{origin}");
    assert!(origin.contains("\"ok\": true"), "{origin}");
    shot(&client, &dir, "effect-released.png").await;

    client.close().await.expect("close the session");
    drop(driver);
    assert_eq!(
        s.origin_requests(),
        vec![
            "GET /contacts",
            "POST /hooks/status",
            "POST /items",
            "POST /items/4242/comments"
        ],
        "the origin received exactly the approved effects"
    );
    println!("screenshots saved in {}", dir.display());
}

/// Reliability issue #20, item 1, in a real browser: the confirmation says "Approve 2",
/// the agent stages a third effect, the reviewer clicks the button as shown. The server
/// refuses (the origin gets nothing) with the run as it stands and a fresh button, and
/// that button releases all three, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_confirmation_is_tied_to_what_it_shows_in_chromium() {
    let Some(tools) = chromium::Tools::find(
        "the_commit_confirmation_is_tied_to_what_it_shows_in_chromium",
        false,
    ) else {
        return;
    };
    let fx = airlock_tests::Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&airlock_tests::loopback_policy(port), &[])
        .await;
    let stage = |path: &'static str| {
        let env = env.clone();
        async move {
            let url = format!("https://127.0.0.1:{port}{path}");
            let out = airlock_tests::curl(&env, &["-X", "POST", "--data", path, &url]).await;
            assert_eq!(out.status, 202, "{path}: {}", out.stderr);
        }
    };
    stage("/a").await;
    stage("/b").await;
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let (client, driver) = tools
        .open(
            &[
                "--window-size=1280,1000".to_owned(),
                "--no-proxy-server".to_owned(),
            ],
            None,
        )
        .await;
    let dir = screenshot_dir();
    // Sign in through the form (a GET with the token signs nobody in), then open the
    // run's commit page.
    client
        .goto(&format!("{}/", airlock.admin_url))
        .await
        .expect("open");
    find(&client, "input#token")
        .await
        .send_keys(token.trim())
        .await
        .expect("type the token");
    click(&client, "section.login button[type=submit]").await;
    find(&client, "table#runs").await;
    client
        .goto(&format!("{}/runs/{run}/commit", airlock.admin_url))
        .await
        .expect("the commit page");
    let button = text_of(&client, "form button.primary").await;
    assert_eq!(button, "Approve 2 undecided and commit");

    stage("/c").await;
    click(&client, "form button.primary").await;
    let notice = text_of(&client, "div.set-changed").await;
    assert!(
        notice
            .contains("Nothing was approved or released: the run changed since the page was shown"),
        "{notice}"
    );
    let added = text_of(&client, "table#changed-added").await;
    assert!(added.contains("/c"), "{added}");
    assert!(origin.received().is_empty(), "the origin got nothing");
    let button = text_of(&client, "form button.primary").await;
    assert_eq!(button, "Approve 3 undecided and commit");
    shot(&client, &dir, "commit-changed.png").await;

    click(&client, "form button.primary").await;
    let heading = text_of(&client, "h1").await;
    assert!(heading.contains("committed"), "{heading}");
    client.close().await.expect("close the session");
    drop(driver);
    let received: Vec<String> = origin
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(received, ["POST /a", "POST /b", "POST /c"]);
}

/// Issue 40, item 3, in a real browser: a run stages a GitHub pull request (whose number
/// the `github` adapter answers with a placeholder) and a comment on it; the reviewer
/// commits both from the confirmation; the fake GitHub assigns PR 4242. The run page,
/// the effect page and the commit page then show the real number and the origin's link,
/// not the placeholder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_release_the_pages_show_the_real_pr_number_in_chromium() {
    let Some(tools) = chromium::Tools::find(
        "after_release_the_pages_show_the_real_pr_number_in_chromium",
        false,
    ) else {
        return;
    };
    let fx = airlock_tests::Fixture::new();
    let origin = airlock_tests::github::origin(&fx).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&airlock_tests::github::policy(port), &[])
        .await;
    let pr =
        airlock_tests::github::stage_pr_and_comment(&env, &format!("https://127.0.0.1:{port}"))
            .await;
    let placeholder = pr["number"].as_u64().expect("number").to_string();
    let effects = airlock.effects(&run).await;
    let pr_effect = effects[0]["id"].as_str().expect("id").to_owned();
    let comment_effect = effects[1]["id"].as_str().expect("id").to_owned();
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let (client, driver) = tools
        .open(
            &[
                "--window-size=1280,1000".to_owned(),
                "--no-proxy-server".to_owned(),
            ],
            None,
        )
        .await;
    let dir = screenshot_dir();
    client
        .goto(&format!("{}/runs/{run}", airlock.admin_url))
        .await
        .expect("open");
    find(&client, "input#token")
        .await
        .send_keys(token.trim())
        .await
        .expect("type the token");
    click(&client, "section.login button[type=submit]").await;
    let summary = text_of(&client, &format!("tr[id='{pr_effect}'] td a")).await;
    assert!(summary.contains("open PR acme/widgets#?"), "{summary}");

    // Commit from the confirmation, approving both.
    click(&client, "a.button.primary").await;
    assert_eq!(
        text_of(&client, "form button.primary").await,
        "Approve 2 undecided and commit"
    );
    click(&client, "form button.primary").await;
    assert_eq!(origin.received().len(), 2, "both reached the origin once");

    // The run page: the real number in each summary, the origin's link.
    let pr_row = text_of(&client, &format!("tr[id='{pr_effect}']")).await;
    assert!(pr_row.contains("open PR acme/widgets#4242"), "{pr_row}");
    assert!(pr_row.contains(airlock_tests::github::PR_LINK), "{pr_row}");
    let comment_row = text_of(&client, &format!("tr[id='{comment_effect}']")).await;
    assert!(
        comment_row.contains("comment on acme/widgets#4242"),
        "{comment_row}"
    );
    for row in [&pr_row, &comment_row] {
        assert!(!row.contains(&placeholder) && !row.contains("#?"), "{row}");
    }
    shot(&client, &dir, "run-released.png").await;

    // The PR's page: the real number on top, the link the origin gave, its answer.
    click(&client, &format!("tr[id='{pr_effect}'] td a")).await;
    let heading = text_of(&client, "h1").await;
    assert!(heading.contains("open PR acme/widgets#4242"), "{heading}");
    let link = find(&client, "section#released a.origin-link").await;
    assert_eq!(
        link.attr("href").await.expect("href").as_deref(),
        Some(airlock_tests::github::PR_LINK)
    );
    let released = text_of(&client, "section#released").await;
    assert!(released.contains("HTTP 201"), "{released}");
    assert!(released.contains("\"number\":4242"), "{released}");
    shot(&client, &dir, "effect-released-values.png").await;

    // The commit page reports what the commit released.
    client
        .goto(&format!("{}/runs/{run}/commit", airlock.admin_url))
        .await
        .expect("the commit page");
    let list = text_of(&client, "table#released-list").await;
    assert!(list.contains("open PR acme/widgets#4242"), "{list}");
    assert!(list.contains("comment on acme/widgets#4242"), "{list}");
    assert!(
        list.contains("/repos/acme/widgets/issues/4242/comments"),
        "{list}"
    );
    assert!(!list.contains(&placeholder), "{list}");
    shot(&client, &dir, "commit-report.png").await;
    client.close().await.expect("close the session");
    drop(driver);
    assert_eq!(origin.received().len(), 2, "the pages sent nothing");
}
