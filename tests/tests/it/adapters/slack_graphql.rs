//! The `slack` and `graphql` adapters: a message posted then edited by its returned `ts`,
//! and GitHub GraphQL mutations answered with `data` shaped from the selection set, each
//! released in order with the real values.

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Reply};
use serde::Deserialize;
use serde_json::{json, Value};

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "slack"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/api/**"
action = "stage"
respond = "slack"

[[rule]]
id = "graphql"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/graphql"
action = "stage"
respond = "graphql"
"#
    )
}

/// `chat.postMessage`'s documented answer (<https://api.slack.com/methods/chat.postMessage>).
#[derive(Debug, Deserialize)]
struct PostMessage {
    ok: bool,
    channel: String,
    ts: String,
    message: SlackMessage,
}

#[derive(Debug, Deserialize)]
struct SlackMessage {
    r#type: String,
    text: String,
    ts: String,
}

const REAL_TS: &str = "1503435956.000247";

fn fake_apis() -> airlock_tests::Handler {
    Arc::new(|req| {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match req.path.as_str() {
            "/api/chat.postMessage" => Reply::json(
                200,
                &json!({"ok": true, "channel": "C024BE91L", "ts": REAL_TS, "message": {"type": "message", "text": body["text"], "ts": REAL_TS}}),
            ),
            "/api/chat.update" if body["ts"] == REAL_TS => Reply::json(
                200,
                &json!({"ok": true, "channel": "C024BE91L", "ts": REAL_TS, "text": body["text"]}),
            ),
            "/api/chat.update" => {
                Reply::json(200, &json!({"ok": false, "error": "message_not_found"}))
            }
            "/graphql" => {
                let query = body["query"].as_str().unwrap_or("");
                if query.contains("createPullRequest") {
                    Reply::json(
                        200,
                        &json!({"data": {"createPullRequest": {"pullRequest": {"id": "PR_kwreal", "number": 55, "url": "https://github.com/acme/widgets/pull/55", "title": "Fix"}}}}),
                    )
                } else if query.contains("addComment")
                    && body["variables"]["subject"] == "PR_kwreal"
                {
                    Reply::json(
                        200,
                        &json!({"data": {"addComment": {"commentEdge": {"node": {"id": "IC_real"}}}}}),
                    )
                } else {
                    Reply::json(
                        200,
                        &json!({"data": null, "errors": [{"message": "Could not resolve to a node"}]}),
                    )
                }
            }
            _ => Reply::json(404, &json!({"ok": false, "error": "unknown_method"})),
        }
    })
}

async fn post_json(
    env: &std::collections::BTreeMap<String, String>,
    url: &str,
    body: &Value,
) -> Value {
    let out = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json; charset=utf-8",
            "-H",
            "authorization: Bearer xoxb-agent",
            "--data",
            &body.to_string(),
            url,
        ],
    )
    .await;
    assert!(
        out.success && out.status == 200,
        "{} {}",
        out.status,
        out.stderr
    );
    assert!(
        out.header("airlock-effect").is_some(),
        "the answer names its effect"
    );
    out.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_post_then_update_by_ts_is_released_with_the_real_ts() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), fake_apis())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    let api = format!("https://127.0.0.1:{port}/api");

    let posted = post_json(
        &env,
        &format!("{api}/chat.postMessage"),
        &json!({"channel": "C024BE91L", "text": "Deploy finished"}),
    )
    .await;
    let typed: PostMessage = serde_json::from_value(posted.clone()).expect("documented shape");
    assert!(typed.ok);
    assert_eq!(typed.channel, "C024BE91L");
    assert_eq!(typed.message.ts, typed.ts);
    // Shaped like Slack's own ts (`1712345678.123456`), so that follow-up logic accepts it.
    let (seconds, micros) = typed.ts.split_once('.').expect("SECONDS.MICROS");
    assert!(
        seconds.len() == 10
            && micros.len() == 6
            && (seconds.to_owned() + micros)
                .bytes()
                .all(|b| b.is_ascii_digit()),
        "the ts placeholder looks like a Slack ts: {}",
        typed.ts
    );
    assert_eq!(
        (typed.message.r#type.as_str(), typed.message.text.as_str()),
        ("message", "Deploy finished")
    );
    let updated = post_json(
        &env,
        &format!("{api}/chat.update"),
        &json!({"channel": "C024BE91L", "ts": typed.ts, "text": "Deploy finished (green)"}),
    )
    .await;
    assert_eq!(updated["ok"], true);
    assert_eq!(updated["ts"], typed.ts.as_str());

    let effects = airlock.effects(&run).await;
    assert_eq!(
        effects[0]["summary"],
        "post to C024BE91L: 'Deploy finished'"
    );
    assert!(effects[1]["summary"]
        .as_str()
        .unwrap_or("")
        .starts_with("edit message"));
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/api/chat.postMessage");
    assert_eq!(received[1].path, "/api/chat.update");
    let update: Value = serde_json::from_slice(&received[1].body).expect("json");
    assert_eq!(update["ts"], REAL_TS, "the real ts was substituted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_ok_false_at_release_is_a_failure() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), fake_apis())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    let url = format!("https://127.0.0.1:{port}/api/chat.update");
    post_json(
        &env,
        &url,
        &json!({"channel": "C1", "ts": "1.2", "text": "x"}),
    )
    .await;
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["effects"][0]["state"], "failed", "{report}");
    assert_eq!(
        report["effects"][0]["reason"],
        "slack answered ok: false: message_not_found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_mutations_are_answered_from_their_selection_and_released_with_real_ids() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), fake_apis())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    let url = format!("https://127.0.0.1:{port}/graphql");

    let created = post_json(
        &env,
        &url,
        &json!({
            "query": "mutation Open($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id number url title } } }",
            "variables": {"input": {"repositoryId": "R_1", "baseRefName": "main", "headRefName": "fix", "title": "Fix"}},
        }),
    )
    .await;
    let pr = &created["data"]["createPullRequest"]["pullRequest"];
    assert_eq!(pr["title"], "Fix");
    assert!(pr["number"].is_u64(), "{created}");
    assert!(pr["id"].is_string(), "{created}");
    let pr_url = pr["url"].as_str().expect("a url");
    assert!(
        pr_url.starts_with("https://airlock.invalid/p/"),
        "a URL placeholder is a URL, under the reserved .invalid domain: {created}"
    );
    assert!(created.get("errors").is_none());

    let comment = post_json(
        &env,
        &url,
        &json!({
            "query": "mutation($subject: ID!) { addComment(input: {subjectId: $subject, body: \"LGTM\"}) { commentEdge { node { id body } } subject { id } } }",
            "variables": {"subject": pr["id"]},
        }),
    )
    .await;
    assert_eq!(
        comment["data"]["addComment"]["commentEdge"]["node"]["body"],
        "LGTM"
    );
    assert_eq!(comment["data"]["addComment"]["subject"]["id"], pr["id"]);

    let unknown = post_json(
        &env,
        &url,
        &json!({"query": "mutation { mergePullRequest(input: {pullRequestId: \"PR_x\"}) { clientMutationId } }"}),
    )
    .await;
    assert_eq!(unknown["data"], Value::Null);
    assert_eq!(
        unknown["errors"][0]["extensions"]["code"], "AIRLOCK_STAGED",
        "{unknown}"
    );

    let effects = airlock.effects(&run).await;
    assert_eq!(
        effects[0]["summary"],
        "GraphQL mutation Open: createPullRequest 'Fix'"
    );
    assert_eq!(effects[1]["state"], "staged");
    // The unknown mutation is rejected; the other two are released in order.
    airlock
        .post(
            &format!(
                "/v1/effects/{}/reject",
                effects[2]["id"].as_str().expect("id")
            ),
            None,
        )
        .await
        .expect("reject");
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["effects"][0]["state"], "released", "{report}");
    assert_eq!(report["effects"][1]["state"], "released", "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 2);
    let second: Value = serde_json::from_slice(&received[1].body).expect("json");
    assert_eq!(
        second["variables"]["subject"], "PR_kwreal",
        "the real node id was substituted"
    );
}
