//! The effect page's account of what a staged effect carries beyond its summary line, as
//! its adapter gives it (`Adapter::details`): for a git push, the commits with their
//! authors and messages and the changed paths with a diffstat, read from the pack.

use maud::{html, Markup};
use serde_json::Value;

/// The "What the push carries" section for `details` (the git adapter's review JSON,
/// `{commits, paths, objects, notes}`); empty markup for other details.
pub(super) fn details_section(details: Option<&Value>) -> Markup {
    let Some(details) = details.filter(|d| d["commits"].is_array()) else {
        return html! {};
    };
    let list = |key: &str| details[key].as_array().cloned().unwrap_or_default();
    let (commits, paths, notes) = (list("commits"), list("paths"), list("notes"));
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let count = |v: &Value| v.as_u64().map_or("?".to_owned(), |n| n.to_string());
    let stat = |p: &Value| {
        format!(
            "{} +{} -{}",
            text(&p["change"]),
            count(&p["added"]),
            count(&p["removed"])
        )
    };
    html! {
        section #push {
            h2 { "What the push carries" }
            p.meta { (commits.len()) " commit(s), " (paths.len()) " path(s) changed, " (count(&details["objects"])) " object(s) in the pack" }
            @if !commits.is_empty() {
                table.kv {
                    thead { tr { th { "commit" } th { "author" } th { "message" } th { "paths" } } }
                    tbody { @for c in &commits {
                        tr { td { code { (text(&c["id"]).chars().take(12).collect::<String>()) } } td { (text(&c["author"])) } td { (text(&c["subject"])) }
                             td { @for (i, p) in c["paths"].as_array().into_iter().flatten().enumerate() { @if i > 0 { ", " } code { (text(&p["path"])) } " " (stat(p)) } } }
                    } }
                }
            }
            @if !paths.is_empty() {
                table.kv {
                    thead { tr { th { "path" } th { "change" } th { "added" } th { "removed" } } }
                    tbody { @for p in &paths {
                        tr { td { code { (text(&p["path"])) } } td { (text(&p["change"])) } td { (count(&p["added"])) } td { (count(&p["removed"])) } }
                    } }
                }
            }
            @for note in &notes { p.notice.warn { (text(note)) } }
        }
    }
}
