//! `airlock audit`: the audit log from `GET /v1/audit`, page by page, as a table or JSON
//! (docs/admin-api.md#audit).

use serde_json::Value;

use super::admin_client::{connect, print_json};
use super::args::AdminArgs;

/// Prints up to `limit` entries of the audit log (of `run` only, when given), newest first
/// unless `oldest_first`.
///
/// Errors: the admin API's (403 `forbidden_for_role` for a runner's token), or an answer
/// that is not the expected JSON.
pub(super) async fn audit(
    run: Option<String>,
    limit: usize,
    oldest_first: bool,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let order = if oldest_first { "oldest" } else { "newest" };
    let mut entries: Vec<Value> = Vec::new();
    let mut after: Option<u64> = None;
    while entries.len() < limit {
        let page_size = (limit - entries.len()).min(1000);
        let mut path = format!("/v1/audit?limit={page_size}&order={order}");
        if let Some(run) = &run {
            path.push_str(&format!("&run={run}"));
        }
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        let page = client.get(&path).await?;
        entries.extend(page["entries"].as_array().cloned().unwrap_or_default());
        match page["next"].as_u64() {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    if admin.json {
        return print_json(&serde_json::json!({ "entries": entries }));
    }
    outln!(
        "{:<6} {:<20} {:<16} {:<9} {:<18} {:<9} SUBJECT",
        "SEQ",
        "TIME",
        "WHO",
        "ROLE",
        "ACTION",
        "OUTCOME"
    );
    for entry in &entries {
        let subject = match (entry["run"].as_str(), entry["effect"].as_str()) {
            (_, Some(effect)) => effect.to_owned(),
            (Some(run), None) => run.to_owned(),
            (None, None) => String::from("-"),
        };
        outln!(
            "{:<6} {:<20} {:<16} {:<9} {:<18} {:<9} {}",
            entry["seq"].as_u64().unwrap_or(0),
            utc(entry["at_ms"].as_u64().unwrap_or(0)),
            entry["who"].as_str().unwrap_or(""),
            entry["role"].as_str().unwrap_or(""),
            entry["action"].as_str().unwrap_or(""),
            entry["outcome"].as_str().unwrap_or(""),
            subject
        );
    }
    Ok(())
}

/// RFC 3339 time (UTC, whole seconds) of `ms` since the Unix epoch.
fn utc(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}
