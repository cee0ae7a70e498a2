//! Semantic adapters with real clients: `git push` over smart HTTP, a GitHub-style Python
//! client, Slack and GraphQL calls — staged, answered like the real API, released in
//! order with real values; and compensations for a partial commit.

mod compensate;
mod git;
mod git_review;
mod github;
mod mcp;
mod mcp_flows;
mod mcp_legacy;
mod mcp_nested;
pub(crate) mod mcp_sdk;
mod released;
mod slack_graphql;

/// Passes reads and stages writes under `/repos/**` on 127.0.0.1:`port`, answered like
/// GitHub (`respond = "github"`).
pub(crate) fn github_policy(port: u16) -> String {
    airlock_tests::github::policy(port)
}
