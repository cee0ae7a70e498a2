//! Semantic adapters with real clients: `git push` over smart HTTP, a GitHub-style Python
//! client, Slack and GraphQL calls — staged, answered like the real API, released in
//! order with real values; and compensations for a partial commit.

mod compensate;
mod git;
mod github;
mod slack_graphql;

use airlock_tests::Airlock;
use serde_json::Value;

/// Approves every staged effect of `run` and commits it; returns the commit report.
pub(crate) async fn approve_all_and_commit(airlock: &Airlock, run: &str) -> Value {
    airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(serde_json::json!({"approve_pending": true})),
        )
        .await
        .expect("commit")
}
