//! After release the review shows what the world got: `airlock effects` and `airlock
//! show` print the real PR number, the real URLs and the origin's answer, not the
//! placeholders (issue 21, item 9); the placeholders an agent sees are shaped like the
//! values they stand for (item 11).

use airlock_tests::{curl, Fixture, Origin, Reply};
use serde_json::{json, Value};

const REAL_HEAD: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

/// A fake GitHub that assigns PR 4242 and answers a comment on it.
async fn fake_github(fx: &Fixture) -> Origin {
    Origin::start(
        Some(&fx.origin_ca),
        std::sync::Arc::new(|req| match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/repos/acme/widgets/pulls") => Reply::json(
                201,
                &json!({"number": 4242, "id": 77001, "node_id": "PR_kwDOreal",
                        "html_url": "https://github.example/acme/widgets/pull/4242",
                        "head": {"sha": REAL_HEAD}, "base": {"sha": "a".repeat(40)}}),
            ),
            ("POST", "/repos/acme/widgets/issues/4242/comments") => Reply::json(
                201,
                &json!({"id": 5001, "node_id": "IC_real", "html_url": "https://github.example/acme/widgets/pull/4242#issuecomment-5001"}),
            ),
            ("POST", path) if path.starts_with("/repos/acme/widgets/statuses/") => {
                Reply::json(201, &json!({"id": 9, "state": "success"}))
            }
            _ => Reply::json(404, &json!({"message": "Not Found"})),
        }),
    )
    .await
    .expect("origin")
}

/// Stages a PR and a comment on it through `env`; returns the PR as the client saw it.
async fn stage_pr_and_comment(
    env: &std::collections::BTreeMap<String, String>,
    api: &str,
) -> Value {
    let pr = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"title":"Fix flaky test","head":"agent/fix","base":"main"}"#,
            &format!("{api}/repos/acme/widgets/pulls"),
        ],
    )
    .await;
    assert_eq!(pr.status, 201, "{}", String::from_utf8_lossy(&pr.body));
    let pr = pr.json();
    let number = pr["number"].as_u64().expect("a number");
    let comment = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"body":"CI is green"}"#,
            &format!("{api}/repos/acme/widgets/issues/{number}/comments"),
        ],
    )
    .await;
    assert_eq!(comment.status, 201);
    pr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_release_effects_and_show_print_the_real_pr_number_url_and_answer() {
    let fx = Fixture::new();
    let origin = fake_github(&fx).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&super::github_policy(port), &[]).await;
    let api = format!("https://127.0.0.1:{port}");
    let pr = stage_pr_and_comment(&env, &api).await;
    let placeholder = pr["number"].as_u64().expect("number").to_string();

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].path, "/repos/acme/widgets/issues/4242/comments");

    let (ok, listed, err) = crate::cli::cli(&fx, &["effects", &run]);
    assert!(ok, "{err}");
    assert!(
        listed.contains("open PR acme/widgets#4242 'Fix flaky test'"),
        "{listed}"
    );
    assert!(
        listed.contains("/repos/acme/widgets/issues/4242/comments"),
        "{listed}"
    );
    assert!(listed.contains("comment on acme/widgets#4242"), "{listed}");
    assert!(
        listed.contains("https://github.example/acme/widgets/pull/4242"),
        "{listed}"
    );
    assert!(
        !listed.contains(&placeholder),
        "no placeholder is printed: {listed}"
    );

    let effects = airlock.effects(&run).await;
    let pr_effect = effects[0]["id"].as_str().expect("id");
    let comment_effect = effects[1]["id"].as_str().expect("id");
    assert_eq!(effects[0]["released"]["values"]["/number"], "4242");
    assert_eq!(effects[0]["released"]["values"]["/head/sha"], REAL_HEAD);
    let (ok, shown, err) = crate::cli::cli(&fx, &["show", pr_effect]);
    assert!(ok, "{err}");
    assert!(
        shown.contains("now      open PR acme/widgets#4242"),
        "{shown}"
    );
    assert!(shown.contains("real /number = 4242"), "{shown}");
    assert!(
        shown.contains(&format!("real /head/sha = {REAL_HEAD}")),
        "{shown}"
    );
    assert!(
        shown.contains("link     https://github.example/acme/widgets/pull/4242"),
        "{shown}"
    );
    assert!(shown.contains("release  status 201"), "{shown}");
    assert!(
        shown.contains(r#"answer   {"base":"#),
        "the origin's answer: {shown}"
    );
    let (ok, shown, err) = crate::cli::cli(&fx, &["show", comment_effect]);
    assert!(ok, "{err}");
    assert!(
        shown.contains(&format!(
            "sent as  POST {api}/repos/acme/widgets/issues/4242/comments"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("now      comment on acme/widgets#4242"),
        "{shown}"
    );
    assert!(shown.contains("#issuecomment-5001"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_head_sha_placeholder_is_40_hex_and_substituted_at_release() {
    let fx = Fixture::new();
    let origin = fake_github(&fx).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&super::github_policy(port), &[]).await;
    let api = format!("https://127.0.0.1:{port}");
    let pr = stage_pr_and_comment(&env, &api).await;
    let sha = pr["head"]["sha"].as_str().expect("a sha");
    assert!(
        sha.len() == 40 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "head.sha looks like GitHub's: {sha}"
    );
    // A follow-up that names the sha (a commit status) carries the placeholder, and gets
    // the real sha at release.
    let status = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &format!(r#"{{"state":"success","context":"ci","sha":"{sha}"}}"#),
            &format!("{api}/repos/acme/widgets/statuses/{sha}"),
        ],
    )
    .await;
    assert!(
        status.status < 300,
        "{}",
        String::from_utf8_lossy(&status.body)
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 3);
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let sent = received
        .iter()
        .find(|r| r.path.contains("/statuses/"))
        .expect("the status");
    assert_eq!(
        sent.path,
        format!("/repos/acme/widgets/statuses/{REAL_HEAD}")
    );
    let body: Value = serde_json::from_slice(&sent.body).expect("json");
    assert_eq!(body["sha"], REAL_HEAD);
}
