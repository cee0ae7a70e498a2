//! After release the review shows what the world got: `airlock effects` and `airlock
//! show` print the real PR number, the real URLs and the origin's answer, not the
//! placeholders (issue 21, item 9); the placeholders an agent sees are shaped like the
//! values they stand for (item 11).

use airlock_tests::github::{origin as fake_github, stage_pr_and_comment, REAL_HEAD};
use airlock_tests::{curl, Fixture};
use serde_json::Value;

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
