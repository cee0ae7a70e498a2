//! A staged git push for `airlock show`: its commits and diffstat, from the adapter's
//! `details` (docs/adapters.md#git-smart-http-push).

use serde_json::Value;

use super::line;

/// `M +2 -1` for a path of a push's `details` (`?` for a count not known).
fn stat(path: &Value) -> String {
    let count = |v: &Value| v.as_u64().map_or("?".to_owned(), |n| n.to_string());
    format!(
        "{} +{} -{}",
        line(&path["change"]),
        count(&path["added"]),
        count(&path["removed"])
    )
}

/// A git push's commits (id, author, message) and diffstat from the adapter's `details`
/// (`{commits, paths, notes}`); empty for other effects.
pub(super) fn render_push(details: &Value) -> String {
    let Some(commits) = details["commits"].as_array() else {
        return String::new();
    };
    let mut out = String::new();
    for commit in commits {
        out.push_str(&format!(
            "commit   {} {} — {}\n",
            commit["id"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(12)
                .collect::<String>(),
            line(&commit["author"]),
            line(&commit["subject"])
        ));
        let changed: Vec<String> = commit["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{} {}", line(&p["path"]), stat(p)))
            .collect();
        if !changed.is_empty() {
            out.push_str(&format!("           {}\n", changed.join(", ")));
        }
    }
    let paths = details["paths"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if !paths.is_empty() {
        out.push_str(&format!("paths    {} changed\n", paths.len()));
    }
    for path in paths.iter().take(50) {
        out.push_str(&format!(
            "  {:<4} {} | {}\n",
            line(&path["change"]),
            line(&path["path"]),
            stat(path).split_once(' ').map_or("", |(_, counts)| counts)
        ));
    }
    if paths.len() > 50 {
        out.push_str(&format!(
            "  … {} more (--json shows all)\n",
            paths.len() - 50
        ));
    }
    for note in details["notes"].as_array().into_iter().flatten() {
        out.push_str(&format!("  note: {}\n", line(note)));
    }
    out
}
