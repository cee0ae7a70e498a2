//! `github-token.toml` with a Python `requests` client: create a PR, then comment on it
//! by the number airlock answered; and list reads (`GET …/pulls`, `…/issues`,
//! `…/issues/N/comments`) that show the run's staged objects in GitHub's order.

use std::sync::Arc;

use airlock_tests::{run_client_async, Fixture, Origin, Received, Reply, TEST_HOST};
use serde_json::{json, Value};

use super::{example, start};

const TOKEN: &str = "ghs_test_token";

/// A GitHub origin: PR #42 is what `POST …/pulls` creates; the lists hold PR #7 (open),
/// #3 (closed) and issue #7's one comment; page 2 is empty.
fn github_origin() -> airlock_tests::Handler {
    Arc::new(|req: &Received| {
        let (path, query) = req.path.split_once('?').unwrap_or((req.path.as_str(), ""));
        let older = json!({"number": 7, "title": "older", "state": "open", "created_at": "2020-01-01T00:00:00Z"});
        match (req.method.as_str(), path) {
            ("POST", "/repos/o/r/pulls") => Reply::json(
                201,
                &json!({"number": 42, "id": 4200, "node_id": "PR_kw42",
                        "head": {"sha": "a".repeat(40)}, "base": {"sha": "b".repeat(40)},
                        "html_url": "https://github.com/o/r/pull/42"}),
            ),
            ("POST", p) if p.ends_with("/comments") => {
                Reply::json(201, &json!({"id": 9001, "node_id": "IC_kw9001"}))
            }
            ("GET", "/repos/o/r/pulls" | "/repos/o/r/issues") => {
                let page = if query.contains("page=2") {
                    json!([])
                } else if query.contains("state=closed") {
                    json!([{"number": 3, "title": "closed", "state": "closed"}])
                } else {
                    json!([older])
                };
                Reply::json(200, &page)
            }
            ("GET", "/repos/o/r/issues/7/comments") => {
                Reply::json(200, &json!([{"id": 1, "body": "first"}]))
            }
            _ => Reply::json(404, &json!({"message": "Not Found"})),
        }
    })
}

const PR_THEN_COMMENT: &str = r#"
import json, sys, requests
base = sys.argv[1]
s = requests.Session()
s.headers["Accept"] = "application/vnd.github+json"
pr = s.post(f"{base}/repos/o/r/pulls", json={"title": "Fix the build", "head": "agent/fix", "base": "main"})
assert pr.status_code in (200, 201, 202), (pr.status_code, pr.text)
number = pr.json()["number"]
comment = s.post(f"{base}/repos/o/r/issues/{number}/comments", json={"body": "ready for review"})
assert comment.status_code in (200, 201, 202), (comment.status_code, comment.text)
print(json.dumps({"pr_status": pr.status_code, "pr": pr.json(), "comment": comment.json()}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_example_creates_a_pr_then_comments_on_it() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), github_origin())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let policy = example("github-token", &["api.github.com"], port);
    let (airlock, run, env) = start(&fx, &policy, &[("AIRLOCK_GH_TOKEN", TOKEN)]).await;
    let base = format!("https://{TEST_HOST}:{port}");
    let out = run_client_async("python3", &["-c", PR_THEN_COMMENT, &base], &env).await;
    assert!(
        out.status.success(),
        "the client creates a PR and comments on it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(seen["pr_status"], 201, "answered like GitHub: {seen}");
    assert!(seen["pr"]["html_url"].is_string(), "{seen}");
    assert!(origin.received().is_empty(), "both are staged");

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let lines: Vec<String> = received
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        lines,
        [
            "POST /repos/o/r/pulls",
            "POST /repos/o/r/issues/42/comments"
        ],
        "the comment is released on the number GitHub assigned"
    );
    for request in &received {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str()),
            "the bot's token is added at release"
        );
    }
}

const LISTS: &str = r#"
import json, sys, requests
base = sys.argv[1]
s = requests.Session()
first = s.post(f"{base}/repos/o/r/pulls", json={"title": "first", "head": "agent/a", "base": "main"}).json()
second = s.post(f"{base}/repos/o/r/pulls", json={"title": "second", "head": "agent/b", "base": "main"}).json()
s.post(f"{base}/repos/o/r/issues/7/comments", json={"body": "staged on an old issue"}).raise_for_status()
def get(path, **params):
    r = s.get(f"{base}{path}", params=params)
    r.raise_for_status()
    return r
pulls = get("/repos/o/r/pulls")
print(json.dumps({
    "first": first["number"], "second": second["number"],
    "pulls": [p["title"] for p in pulls.json()],
    "pulls_added": pulls.headers.get("airlock-staged-list"),
    "per_page": [p["title"] for p in get("/repos/o/r/pulls", per_page=30).json()],
    "head": [p["title"] for p in get("/repos/o/r/pulls", head="o:agent/a").json()],
    "closed": [p["title"] for p in get("/repos/o/r/pulls", state="closed").json()],
    "page2": [p["title"] for p in get("/repos/o/r/pulls", page=2).json()],
    "issues": [[i["title"], "pull_request" in i] for i in get("/repos/o/r/issues").json()],
    "comments": [c["body"] for c in get("/repos/o/r/issues/7/comments").json()],
}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_prs_issues_and_comments_appear_in_list_reads() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), github_origin())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let policy = example("github-token", &["api.github.com"], port);
    let (_airlock, _run, env) = start(&fx, &policy, &[("AIRLOCK_GH_TOKEN", TOKEN)]).await;
    let base = format!("https://{TEST_HOST}:{port}");
    let out = run_client_async("python3", &["-c", LISTS, &base], &env).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("json");
    // GitHub lists pulls and issues newest first: the staged PRs go on top of page 1.
    assert_eq!(seen["pulls"], json!(["second", "first", "older"]), "{seen}");
    assert_eq!(seen["pulls_added"], "2", "{seen}");
    assert_eq!(
        seen["per_page"],
        json!(["second", "first", "older"]),
        "{seen}"
    );
    assert_eq!(seen["head"], json!(["first", "older"]), "{seen}");
    assert_eq!(
        seen["closed"],
        json!(["closed"]),
        "staged PRs are open: {seen}"
    );
    assert_eq!(seen["page2"], json!([]), "{seen}");
    assert_eq!(
        seen["issues"],
        json!([["second", true], ["first", true], ["older", false]]),
        "every pull request is an issue: {seen}"
    );
    // Comments are listed oldest first: the staged one goes last.
    assert_eq!(
        seen["comments"],
        json!(["first", "staged on an old issue"]),
        "{seen}"
    );
    let lists = origin
        .received()
        .iter()
        .filter(|r| r.method == "GET")
        .count();
    assert_eq!(lists, 7, "every list read still went to the origin");
}
