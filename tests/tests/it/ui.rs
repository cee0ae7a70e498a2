//! The review UI over plain HTTP (curl): access control, the review flow, reviewer
//! identities bound to approvals, and the notification webhook. The same flow in a real
//! browser is in tests/tests/browser.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::review::Scenario;
use airlock_tests::{curl, poll_until, CurlResult, Origin, Received, Reply};
use serde_json::{json, Value};

mod flows;
mod invisible;
mod login;
mod released;

/// curl against the admin listener directly (no proxy environment).
pub(crate) async fn get(url: &str, cookie: Option<&str>) -> CurlResult {
    let mut args = vec![url.to_owned()];
    if let Some(cookie) = cookie {
        args.extend(["-H".to_owned(), format!("Cookie: {cookie}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&BTreeMap::new(), &args).await
}

/// curl GET against the admin listener with extra request headers.
async fn get_with(url: &str, headers: &[&str]) -> CurlResult {
    let mut args = vec![url.to_owned()];
    for header in headers {
        args.extend(["-H".to_owned(), (*header).to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&BTreeMap::new(), &args).await
}

/// A form posted as the UI's own page posts it: `Sec-Fetch-Site: same-origin`.
async fn csrf_free_form(url: &str, fields: &[(&str, &str)]) -> CurlResult {
    let mut args = vec![
        "-H".to_owned(),
        "Sec-Fetch-Site: same-origin".to_owned(),
        url.to_owned(),
    ];
    for (name, value) in fields {
        args.extend(["--data-urlencode".to_owned(), format!("{name}={value}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&BTreeMap::new(), &args).await
}

pub(crate) async fn post_form(
    url: &str,
    cookie: Option<&str>,
    fields: &[(&str, &str)],
) -> CurlResult {
    let mut args = vec!["-X".to_owned(), "POST".to_owned(), url.to_owned()];
    if let Some(cookie) = cookie {
        args.extend(["-H".to_owned(), format!("Cookie: {cookie}")]);
    }
    for (name, value) in fields {
        args.extend(["--data-urlencode".to_owned(), format!("{name}={value}")]);
    }
    if fields.is_empty() {
        args.extend(["--data".to_owned(), String::new()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&BTreeMap::new(), &args).await
}

/// Signs in with `token` through the sign-in form; returns the `name=value` of the session
/// cookie.
pub(crate) async fn sign_in(admin: &str, token: &str) -> String {
    let out = post_form(&format!("{admin}/login"), None, &[("token", token)]).await;
    assert_eq!(out.status, 303, "sign-in redirects: {}", out.headers);
    let cookie = out.header("set-cookie").expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    cookie.split(';').next().expect("name=value").to_owned()
}

pub(crate) fn text(out: &CurlResult) -> String {
    String::from_utf8_lossy(&out.body).into_owned()
}

/// The CSRF token in a page's forms.
pub(crate) fn csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

/// The fields a browser sends when it submits the form of `page` that posts to `action`
/// and whose HTML contains `marker` (a label, a field name): its inputs' names and values.
pub(crate) fn form_fields(page: &str, action: &str, marker: &str) -> Vec<(String, String)> {
    let target = format!("action=\"{action}\"");
    let form = page
        .match_indices("<form")
        .map(|(at, _)| &page[at..])
        .map(|rest| &rest[..rest.find("</form>").unwrap_or(rest.len())])
        .find(|form| form.contains(&target) && form.contains(marker))
        .unwrap_or_else(|| panic!("no form to {action} with {marker:?} in {page}"));
    let attr = |tag: &str, name: &str| {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let value = tag[at..].split('"').next()?;
        Some(
            value
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        )
    };
    form.split("<input")
        .skip(1)
        .filter_map(|tag| {
            let tag = tag.split('>').next()?;
            Some((attr(tag, "name")?, attr(tag, "value").unwrap_or_default()))
        })
        .collect()
}

/// Posts `fields` (from [`form_fields`]) to `url`.
pub(crate) async fn submit(url: &str, cookie: &str, fields: &[(String, String)]) -> CurlResult {
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    post_form(url, Some(cookie), &fields).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_every_page_and_action_is_refused_and_the_proxy_never_serves_the_ui() {
    let s = Scenario::start(&[]).await;
    let admin = s.admin_url();
    for path in [
        "/".to_owned(),
        format!("/runs/{}", s.run),
        format!("/runs/{}/commit", s.run),
        format!("/effects/{}", s.export),
    ] {
        let out = get(&format!("{admin}{path}"), None).await;
        assert_eq!(out.status, 303, "{path} without a session");
        let location = out.header("location").expect("to the sign-in page");
        assert!(location.starts_with("/login?next="), "{location}");
        assert!(!text(&out).contains(&s.run), "{path} shows nothing");
    }
    // Forged or absent sessions cannot act.
    for cookie in [None, Some("airlock_session=admin.99999999999999.00ff")] {
        let out = post_form(
            &format!("{admin}/effects/{}/approve", s.export),
            cookie,
            &[("csrf", "x")],
        )
        .await;
        assert_eq!(out.status, 401, "approve without a session");
        let out = post_form(&format!("{admin}/runs/{}/commit", s.run), cookie, &[]).await;
        assert_eq!(out.status, 401, "commit without a session");
    }
    // A wrong token gets no session.
    let out = post_form(
        &format!("{admin}/login"),
        None,
        &[("token", "not-the-token")],
    )
    .await;
    assert_eq!(out.status, 401);
    assert!(out.header("set-cookie").is_none());
    // The JSON API still needs the bearer token; a session cookie is not enough.
    let cookie = sign_in(admin, &s.token).await;
    let out = get(&format!("{admin}/v1/runs"), Some(&cookie)).await;
    assert_eq!(out.status, 401, "the API wants the bearer token");
    // The proxy listener never serves the UI: not directly…
    let proxy = format!("http://{}", s.airlock.proxy);
    let out = get(&format!("{proxy}/login?token={}", s.token), None).await;
    assert_ne!(out.status, 200, "{}", text(&out));
    assert!(out.header("set-cookie").is_none());
    assert!(!text(&out).contains("Sign in"), "{}", text(&out));
    // …nor as a proxied request to the admin address.
    let (_, env) = s.airlock.create_run().await;
    let out = curl(&env, &[&format!("{admin}/login?token={}", s.token)]).await;
    assert_ne!(out.status, 200, "{}", text(&out));
    assert!(out.header("set-cookie").is_none());
    assert!(s.origin_requests().iter().all(|r| r == "GET /contacts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_flow_over_http_rejects_the_leak_and_releases_the_rest() {
    let s = Scenario::start(&[]).await;
    let admin = s.admin_url();
    let cookie = sign_in(admin, &s.token).await;

    let list = get(&format!("{admin}/"), Some(&cookie)).await;
    assert_eq!(list.status, 200);
    assert!(list.header("content-security-policy").is_some());
    let page = text(&list);
    assert!(page.contains(&s.run) && page.contains("4 staged"), "{page}");
    assert!(
        page.contains("carry data from reads"),
        "the leak is flagged"
    );
    let sealed_only = text(&get(&format!("{admin}/?state=sealed"), Some(&cookie)).await);
    assert!(!sealed_only.contains(&s.run), "the state filter applies");

    let run_page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    for effect in [&s.status, &s.export, &s.item, &s.comment] {
        assert!(run_page.contains(effect.as_str()), "{effect} listed");
    }
    assert!(run_page.contains("<svg"), "lineage graph");
    assert!(
        run_page.contains("read #1 GET /contacts"),
        "the read feeds an effect"
    );

    let effect_page = text(&get(&format!("{admin}/effects/{}", s.export), Some(&cookie)).await);
    let api = s
        .airlock
        .admin
        .get(&format!("/v1/effects/{}", s.export))
        .await
        .expect("effect");
    assert!(
        effect_page.contains("<mark>"),
        "the shared passage is highlighted: {}",
        api["lineage"]
    );
    assert!(effect_page.contains("synthetic response"));
    assert!(effect_page.contains("JSON"), "the body is recognised");

    // A form without the session's CSRF token changes nothing.
    let token = csrf(&run_page);
    let forged = post_form(
        &format!("{admin}/effects/{}/reject", s.export),
        Some(&cookie),
        &[("csrf", "0000")],
    )
    .await;
    assert_eq!(forged.status, 403);
    let reject = post_form(
        &format!("{admin}/effects/{}/reject", s.export),
        Some(&cookie),
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(reject.status, 303, "{}", text(&reject));
    // Each approve-all form as the run page shows it now (the reject changed the hooks').
    let run_page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    let approve_rule = format!("/runs/{}/approve-rule", s.run);
    for rule in ["hooks", "create-item", "item-writes"] {
        let fields = form_fields(&run_page, &approve_rule, &format!("value=\"{rule}\""));
        let out = submit(&format!("{admin}{approve_rule}"), &cookie, &fields).await;
        assert_eq!(out.status, 303, "{}", text(&out));
    }
    let confirm = text(&get(&format!("{admin}/runs/{}/commit", s.run), Some(&cookie)).await);
    let plan = confirm
        .split("id=\"release-plan\"")
        .nth(1)
        .expect("a release plan");
    let plan = plan.split("</table>").next().expect("table");
    let order: Vec<usize> = [&s.status, &s.item, &s.comment]
        .iter()
        .map(|id| plan.find(id.as_str()).expect("planned"))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "parents first, staging order"
    );
    assert!(
        !plan.contains(s.export.as_str()),
        "the rejected export is not planned"
    );
    let action = format!("/runs/{}/commit", s.run);
    let fields = form_fields(&confirm, &action, "Commit: release 3 effect(s)");
    let commit = submit(&format!("{admin}{action}"), &cookie, &fields).await;
    assert_eq!(commit.status, 303, "{}", text(&commit));

    let after = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    assert!(after.contains("state-committed"), "{after}");
    let comment_page = text(&get(&format!("{admin}/effects/{}", s.comment), Some(&cookie)).await);
    assert!(
        comment_page.contains("Origin&#39;s response")
            || comment_page.contains("Origin's response")
    );
    assert!(
        comment_page.contains("HTTP <strong>201</strong>"),
        "{comment_page}"
    );
    assert_eq!(
        s.origin_requests(),
        vec![
            "GET /contacts",
            "POST /hooks/status",
            "POST /items",
            "POST /items/4242/comments"
        ],
        "the origin got exactly the approved effects"
    );
    // Decisions carry the reviewer's name and the approved body's digest.
    let effect = s
        .airlock
        .admin
        .get(&format!("/v1/effects/{}", s.status))
        .await
        .expect("effect");
    assert_eq!(effect["approval"]["by"], "admin");
    assert_eq!(effect["approval"]["body_digest"], effect["body_digest"]);
}

/// The scenario with a second reviewer, `alice` (token `alice-secret-token-0123456789`);
/// keep the directory holding her token file alive.
async fn with_reviewer_alice() -> (tempfile::TempDir, Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let alice = dir.path().join("alice.token");
    std::fs::write(&alice, "alice-secret-token-0123456789\n").expect("write");
    let arg = format!("alice={}", alice.display());
    let s = Scenario::start(&["--reviewer-token", &arg]).await;
    (dir, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_reviewer_tokens_sign_decisions() {
    let (_dir, s) = with_reviewer_alice().await;
    let admin = s.admin_url();
    // In the UI…
    let cookie = sign_in(admin, "alice-secret-token-0123456789").await;
    let page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    assert!(
        page.contains("signed in as <strong>alice</strong>"),
        "{page}"
    );
    let out = post_form(
        &format!("{admin}/effects/{}/approve", s.status),
        Some(&cookie),
        &[("csrf", &csrf(&page))],
    )
    .await;
    assert_eq!(out.status, 303);
    // …and in the API, with the bearer token.
    let bob_style = airlock_tests::AdminClient::new(admin, "alice-secret-token-0123456789");
    bob_style
        .post(&format!("/v1/effects/{}/reject", s.export), None)
        .await
        .expect("alice rejects through the API");
    let status = s
        .airlock
        .admin
        .get(&format!("/v1/effects/{}", s.status))
        .await
        .expect("effect");
    assert_eq!(status["approval"]["by"], "alice");
    assert_eq!(status["decisions"][0]["by"], "alice");
    let export = s
        .airlock
        .admin
        .get(&format!("/v1/effects/{}", s.export))
        .await
        .expect("effect");
    assert_eq!(export["decisions"][0]["by"], "alice");
    assert_eq!(export["approval"], Value::Null);
}

/// The run actions exist once (the control plane's runs service): seal and abort through
/// the API record the signed-in reviewer, as the UI always did (the API used to record
/// `admin` whoever asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_records_the_signed_in_reviewer_for_seal_and_abort_as_the_ui_does() {
    let (_dir, s) = with_reviewer_alice().await;
    let admin = s.admin_url();
    let alice = airlock_tests::AdminClient::new(admin, "alice-secret-token-0123456789");
    alice
        .post(&format!("/v1/runs/{}/seal", s.run), None)
        .await
        .expect("alice seals through the API");
    alice
        .post(&format!("/v1/runs/{}/abort", s.run), None)
        .await
        .expect("alice aborts through the API");
    let run = s
        .airlock
        .admin
        .get(&format!("/v1/runs/{}", s.run))
        .await
        .expect("run");
    let decisions = run["decisions"].as_array().expect("decisions");
    let by: Vec<(&str, &str)> = decisions
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default(),
                d["by"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert!(by.contains(&("seal", "alice")), "{run}");
    assert!(by.contains(&("abort", "alice")), "{run}");
    assert!(
        s.origin.received().iter().all(|r| r.method == "GET"),
        "nothing was released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_is_told_when_a_run_is_sealed_with_pending_effects() {
    let hook = Origin::start(
        None,
        Arc::new(|_: &Received| Reply::json(200, &json!({"ok": true}))),
    )
    .await
    .expect("webhook receiver");
    let url = format!("http://127.0.0.1:{}/chat/hook", hook.addr().port());
    let s = Scenario::start(&[
        "--notify-webhook",
        &url,
        "--ui-base-url",
        "https://review.example.test/",
    ])
    .await;
    assert!(hook.received().is_empty(), "nothing before the seal");
    s.airlock
        .post(&format!("/v1/runs/{}/seal", s.run), None)
        .await
        .expect("seal");
    let got = poll_until(Duration::from_secs(20), || {
        let received = hook.received();
        async move { received.first().cloned() }
    })
    .await
    .expect("the webhook is called");
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, "/chat/hook");
    let body: Value = serde_json::from_slice(&got.body).expect("JSON");
    assert_eq!(body["run"], s.run.as_str());
    assert_eq!(body["pending"], 4);
    assert_eq!(
        body["link"],
        format!("https://review.example.test/runs/{}", s.run).as_str()
    );
    // Sent directly: not journaled as a read of any run, and the origin saw only the read.
    let reads = s
        .airlock
        .admin
        .get(&format!("/v1/runs/{}/reads", s.run))
        .await
        .expect("reads");
    assert_eq!(reads["reads"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effect_page_shows_the_adapters_answer_the_client_got() {
    let fx = airlock_tests::Fixture::new();
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
    let out = curl(
        &env,
        &[
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"title":"Fix the flaky test","head":"agent/fix","base":"main"}"#,
            &format!("https://127.0.0.1:{port}/repos/acme/widgets/pulls"),
        ],
    )
    .await;
    assert_eq!(out.status, 201, "{}", out.stderr);
    let number = out.json()["number"].as_u64().expect("a PR number");
    let effects = airlock.effects(&run).await;
    let effect = effects[0]["id"].as_str().expect("id").to_owned();

    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = sign_in(&airlock.admin_url, token.trim()).await;
    let page = text(
        &get(
            &format!("{}/effects/{effect}", airlock.admin_url),
            Some(&cookie),
        )
        .await,
    );
    assert!(page.contains("the github adapter"), "{page}");
    assert!(
        page.contains(&format!("&quot;number&quot;: {number}"))
            || page.contains(&format!("\"number\": {number}"))
            || page.contains(&format!("&quot;number&quot;:{number}")),
        "the page shows the number the client was given ({number})"
    );
    assert!(origin.received().is_empty(), "nothing left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_requests_are_shown_on_the_run_page_and_by_runs_show() {
    let fx = airlock_tests::Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&airlock_tests::loopback_policy(port), &[])
        .await;
    let denied = format!("https://127.0.0.1:{port}/forbidden/secrets");
    assert_eq!(curl(&env, &[&denied]).await.status, 403);

    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = sign_in(&airlock.admin_url, token.trim()).await;
    let page = text(&get(&format!("{}/runs/{run}", airlock.admin_url), Some(&cookie)).await);
    assert!(page.contains("Denied (1)"), "{page}");
    assert!(
        page.contains(&denied) && page.contains("forbidden"),
        "{page}"
    );

    let (_, stdout, _) = crate::cli::cli(&fx, &["runs", "show", &run]);
    assert!(stdout.contains("denied   1 request(s)"), "{stdout}");
    assert!(
        stdout.contains(&format!("GET {denied} (forbidden, rule_deny)")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_form_posted_from_another_site_is_refused() {
    let fx = airlock_tests::Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&airlock_tests::loopback_policy(origin.addr().port()), &[]);
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let login = format!("{}/login", airlock.admin_url);
    for header in ["Origin: http://evil.example", "Sec-Fetch-Site: cross-site"] {
        let out = curl(
            &BTreeMap::new(),
            &[
                "-H",
                header,
                "--data-urlencode",
                &format!("token={}", token.trim()),
                &login,
            ],
        )
        .await;
        assert_eq!(out.status, 403, "{header}");
        assert_eq!(out.header("set-cookie"), None, "{header}: no session");
    }
    // The same form from the UI itself signs in.
    let host = airlock.admin_url.trim_start_matches("http://");
    let out = curl(
        &BTreeMap::new(),
        &[
            "-H",
            &format!("Origin: http://{host}"),
            "-H",
            "Sec-Fetch-Site: same-origin",
            "--data-urlencode",
            &format!("token={}", token.trim()),
            &login,
        ],
    )
    .await;
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").is_some());
}
