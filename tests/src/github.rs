//! A fake GitHub REST API for tests that stage a pull request and a comment on it under
//! the `github` adapter and release them: the policy, an origin that assigns PR 4242, and
//! the two requests an agent sends. Shared by the `it` tests (`airlock effects`, `airlock
//! show`, the review UI over HTTP) and the browser test of the review UI.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::{curl, Fixture, Origin, Reply};

/// The head commit the fake GitHub reports for PR 4242.
pub const REAL_HEAD: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

/// The pull request's page on the fake GitHub (its `html_url`).
pub const PR_LINK: &str = "https://github.example/acme/widgets/pull/4242";

/// Passes reads and stages writes under `/repos/**` on 127.0.0.1:`port`, answered like
/// GitHub (`respond = "github"`).
pub fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "github-reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "github-writes"
host = "127.0.0.1"
port = {port}
method = "write"
path = "/repos/**"
action = "stage"
respond = "github"
"#
    )
}

/// A fake GitHub (HTTPS, certificate from `fx`'s origin CA) that assigns PR 4242 in
/// `acme/widgets`, answers a comment on it and a commit status, and 404s the rest.
pub async fn origin(fx: &Fixture) -> Origin {
    Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req| match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/repos/acme/widgets/pulls") => Reply::json(
                201,
                &json!({"number": 4242, "id": 77001, "node_id": "PR_kwDOreal",
                        "html_url": PR_LINK,
                        "head": {"sha": REAL_HEAD}, "base": {"sha": "a".repeat(40)}}),
            ),
            ("POST", "/repos/acme/widgets/issues/4242/comments") => Reply::json(
                201,
                &json!({"id": 5001, "node_id": "IC_real", "html_url": format!("{PR_LINK}#issuecomment-5001")}),
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

/// Stages, through `env` (a run's environment), a PR on `api` (`https://HOST:PORT`) and a
/// comment on it that carries the PR's placeholder number; returns the PR as the client
/// saw it (its `number` is the placeholder).
pub async fn stage_pr_and_comment(env: &BTreeMap<String, String>, api: &str) -> Value {
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
