//! The `github` adapter with a Python `requests` client written like a GitHub client:
//! create a PR, read it back by number, comment, label, open an issue — all staged, no
//! client error, answers typed like GitHub's documented objects; commit releases them in
//! order with the numbers the (fake) GitHub assigned.

use std::sync::{Arc, Mutex};

use airlock_tests::{run_client_async, Fixture, Origin, Reply};
use serde::Deserialize;
use serde_json::{json, Value};

/// A GitHub user as the REST API documents it (the fields the client here reads).
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct User {
    login: String,
    id: u64,
    node_id: String,
    url: String,
    r#type: String,
    site_admin: bool,
}

/// One side of a pull request.
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct Branch {
    label: String,
    r#ref: String,
    sha: String,
    user: User,
}

/// `POST /repos/{owner}/{repo}/pulls` (201): required fields of the documented object.
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct PullRequest {
    url: String,
    id: u64,
    node_id: String,
    html_url: String,
    diff_url: String,
    patch_url: String,
    issue_url: String,
    commits_url: String,
    review_comments_url: String,
    comments_url: String,
    statuses_url: String,
    number: u64,
    state: String,
    locked: bool,
    title: String,
    user: User,
    body: Option<String>,
    labels: Vec<Value>,
    created_at: String,
    updated_at: String,
    closed_at: Option<String>,
    merged_at: Option<String>,
    assignees: Vec<Value>,
    requested_reviewers: Vec<Value>,
    head: Branch,
    base: Branch,
    _links: Value,
    author_association: String,
    draft: bool,
    merged: bool,
    comments: u64,
    commits: u64,
    additions: u64,
    deletions: u64,
    changed_files: u64,
}

/// An issue (`POST /repos/{owner}/{repo}/issues`, 201).
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct Issue {
    id: u64,
    node_id: String,
    url: String,
    repository_url: String,
    labels_url: String,
    comments_url: String,
    events_url: String,
    html_url: String,
    number: u64,
    state: String,
    title: String,
    body: Option<String>,
    user: User,
    labels: Vec<Label>,
    assignees: Vec<Value>,
    locked: bool,
    comments: u64,
    created_at: String,
    updated_at: String,
    author_association: String,
}

/// An issue comment (`POST /repos/{owner}/{repo}/issues/{n}/comments`, 201).
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct Comment {
    id: u64,
    node_id: String,
    url: String,
    html_url: String,
    issue_url: String,
    body: String,
    user: User,
    created_at: String,
    updated_at: String,
    author_association: String,
}

/// A label (`POST /repos/{owner}/{repo}/issues/{n}/labels`, 200, a list).
#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "the fields are the schema check")]
struct Label {
    id: u64,
    node_id: String,
    url: String,
    name: String,
    color: String,
    default: bool,
}

const CLIENT: &str = r#"
import json, sys, requests
api = sys.argv[1]
s = requests.Session()
s.headers.update({"Authorization": "token ghp_agent", "Accept": "application/vnd.github+json"})
def ok(r):
    r.raise_for_status()
    return r.json()
repo = f"{api}/repos/acme/widgets"
pr = ok(s.post(f"{repo}/pulls", json={"title": "Fix flaky test", "head": "agent/cleanup", "base": "main", "body": "Retries the network call."}))
n = pr["number"]
again = ok(s.get(f"{repo}/pulls/{n}"))
assert again["number"] == n and again["title"] == "Fix flaky test", again
head = s.head(f"{repo}/pulls/{n}")
assert head.status_code == 200 and int(head.headers["content-length"]) > 0 and not head.content, head.headers
assert head.headers["airlock-staged-read"] == "github", head.headers
comment = ok(s.post(f"{repo}/issues/{n}/comments", json={"body": "CI is green now"}))
labels = ok(s.post(f"{repo}/issues/{n}/labels", json={"labels": ["bug"]}))
comments = ok(s.get(f"{repo}/issues/{n}/comments"))
assert [c["body"] for c in comments] == ["CI is green now"], comments
issue = ok(s.post(f"{repo}/issues", json={"title": "Flaky test", "labels": ["ci"]}))
print(json.dumps({"pr": pr, "again": again, "comment": comment, "labels": labels, "issue": issue}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_client_works_on_staged_objects_and_commit_substitutes_real_numbers() {
    let fx = Fixture::new();
    let next = Arc::new(Mutex::new(0u64));
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req| {
            let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            match (req.method.as_str(), req.path.as_str()) {
                ("POST", "/repos/acme/widgets/pulls") => Reply::json(
                    201,
                    &json!({"number": 101, "id": 9001, "node_id": "PR_real", "head": {"sha": "aaaa"}, "base": {"sha": "bbbb"}}),
                ),
                ("POST", "/repos/acme/widgets/issues") => Reply::json(
                    201,
                    &json!({"number": 102, "id": 9002, "node_id": "I_real", "labels": [{"id": 1, "node_id": "LA_1"}]}),
                ),
                ("POST", "/repos/acme/widgets/issues/101/comments") => {
                    Reply::json(201, &json!({"id": 5001, "node_id": "IC_real"}))
                }
                ("POST", "/repos/acme/widgets/issues/101/labels") => {
                    Reply::json(200, &json!([{"id": 77, "node_id": "LA_real", "name": "bug"}]))
                }
                _ => Reply::json(404, &json!({"message": "Not Found"})),
            }
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&super::github_policy(port), &[]).await;

    let api = format!("https://127.0.0.1:{port}");
    let out = run_client_async("python3", &["-c", CLIENT, &api], &env).await;
    assert!(
        out.status.success(),
        "the client sees no error: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("client output");
    assert!(
        origin.received().is_empty(),
        "nothing reached GitHub: {:?}",
        origin.received()
    );

    // Schema: each synthetic object deserialises into the documented shape.
    let pr: PullRequest = serde_json::from_value(seen["pr"].clone()).expect("a pull request");
    let again: PullRequest = serde_json::from_value(seen["again"].clone()).expect("read back");
    let comment: Comment = serde_json::from_value(seen["comment"].clone()).expect("a comment");
    let labels: Vec<Label> = serde_json::from_value(seen["labels"].clone()).expect("labels");
    let issue: Issue = serde_json::from_value(seen["issue"].clone()).expect("an issue");
    assert_eq!(pr.number, again.number);
    assert_eq!(pr.state, "open");
    assert_eq!(pr.head.r#ref, "agent/cleanup");
    assert_eq!(pr.base.r#ref, "main");
    assert!(pr
        .url
        .ends_with(&format!("/repos/acme/widgets/pulls/{}", pr.number)));
    assert!(comment
        .issue_url
        .ends_with(&format!("/issues/{}", pr.number)));
    assert_eq!(labels[0].name, "bug");
    assert_eq!(issue.labels[0].name, "ci");

    let effects = airlock.effects(&run).await;
    let summaries: Vec<&str> = effects
        .iter()
        .filter_map(|e| e["summary"].as_str())
        .collect();
    assert_eq!(effects.len(), 4, "{summaries:?}");
    assert_eq!(
        summaries[0],
        "open PR acme/widgets#? 'Fix flaky test' from agent/cleanup → main"
    );
    assert!(summaries[1].starts_with(&format!("comment on acme/widgets#{}", pr.number)));

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let paths: Vec<(&str, &str)> = received
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    let position = |path: &str| paths.iter().position(|p| p.1 == path).expect(path);
    assert_eq!(received.len(), 4, "{paths:?}");
    assert!(
        position("/repos/acme/widgets/pulls") < position("/repos/acme/widgets/issues/101/comments")
    );
    assert!(
        position("/repos/acme/widgets/issues/101/comments")
            < position("/repos/acme/widgets/issues/101/labels")
    );
    assert!(
        paths.iter().all(|p| p.0 == "POST"),
        "reads never reached GitHub: {paths:?}"
    );
    let placeholder = pr.number.to_string();
    assert!(
        received.iter().all(|r| !r.path.contains(&placeholder)
            && !String::from_utf8_lossy(&r.body).contains(&placeholder)),
        "no placeholder reached GitHub"
    );
    assert_eq!(
        received[position("/repos/acme/widgets/issues/101/comments")].header("authorization"),
        Some("token ghp_agent")
    );
}
