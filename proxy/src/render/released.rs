//! What a release made of an effect, for `airlock effects` and `airlock show`: the
//! admin API's `released` view (docs/admin-api.md#effects).

use airlock_control::visible::escape_line;
use serde_json::Value;

use super::line;

/// `/number=42 /id=9001 https://…/pull/42`: the real values of an effect's placeholders
/// and the link the origin gave, from its `released` view; `None` when neither is known.
pub(super) fn released_values(released: &Value) -> Option<String> {
    let mut parts: Vec<String> = released["values"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(pointer, value)| format!("{}={}", escape_line(pointer), line(value)))
        .collect();
    if let Some(link) = released["link"].as_str() {
        parts.push(escape_line(link).into_owned());
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// What the release made of an effect (its `released` view): the URL and summary with
/// real values, the real values it handed out, the origin's link and a bounded excerpt of
/// its answer.
pub(super) fn render_released(effect: &Value) -> String {
    let released = &effect["released"];
    if released.is_null() {
        return String::new();
    }
    let mut out = String::new();
    if let Some(url) = released["url"]
        .as_str()
        .filter(|u| Some(*u) != effect["url"].as_str())
    {
        out.push_str(&format!(
            "sent as  {} {}\n",
            line(&effect["method"]),
            escape_line(url)
        ));
    }
    if let Some(summary) = released["summary"]
        .as_str()
        .filter(|s| Some(*s) != effect["summary"].as_str())
    {
        out.push_str(&format!("now      {}\n", escape_line(summary)));
    }
    for (pointer, value) in released["values"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "  real {} = {}\n",
            escape_line(pointer),
            line(value)
        ));
    }
    if let Some(link) = released["link"].as_str() {
        out.push_str(&format!("link     {}\n", escape_line(link)));
    }
    let answer = &released["answer"];
    if let Some(excerpt) = answer["excerpt"].as_str().filter(|e| !e.is_empty()) {
        let cut = if answer["truncated"].as_bool() == Some(true) {
            format!(" … ({} bytes)", answer["body_len"])
        } else {
            String::new()
        };
        out.push_str(&format!("answer   {}{cut}\n", escape_line(excerpt)));
    }
    out
}
