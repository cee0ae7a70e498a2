//! Human renderings of admin API answers for the CLI and the demo: counts, the effects
//! table, and one effect with its flow decision and lineage. Every value an agent could
//! have chosen (URLs, summaries, headers, bodies, excerpts, reasons) is shown with its
//! bidi, invisible and control characters and line breaks as `<U+XXXX>`
//! (`airlock_control::visible`), and JSON output writes them as `\uXXXX` escapes.

use std::borrow::Cow;

use airlock_control::visible::{escape_line, pieces, Piece};

mod push;
mod released;
mod tool_call;

use push::render_push;
use released::{released_values, render_released};
use serde::Serialize as _;
use serde_json::ser::{Formatter, PrettyFormatter};
use serde_json::Value;
use tool_call::render_tool_calls;

/// A one-line string field of an admin API answer, shown escaped (`""` when absent).
fn line(value: &Value) -> Cow<'_, str> {
    escape_line(value.as_str().unwrap_or(""))
}

/// `value` as pretty JSON (two-space indent, as `serde_json::to_string_pretty`), with
/// every bidi, invisible or control character in a string written as a `\uXXXX` escape
/// (RFC 8259 §7): the same JSON value, but one a terminal shows as it is.
pub fn json_pretty(value: &Value) -> String {
    let mut out = Vec::new();
    let mut serializer =
        serde_json::Serializer::with_formatter(&mut out, Visible(PrettyFormatter::new()));
    if value.serialize(&mut serializer).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// serde_json's pretty formatter, escaping hidden characters in strings.
struct Visible<'a>(PrettyFormatter<'a>);

impl Formatter for Visible<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        for piece in pieces(fragment, false) {
            match piece {
                Piece::Text(text) => w.write_all(text.as_bytes())?,
                Piece::Hidden(c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        write!(w, "\\u{unit:04x}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `released=1 staged=2`, or `-` when empty.
pub fn counts(value: &Value) -> String {
    let Some(map) = value.as_object().filter(|m| !m.is_empty()) else {
        return "-".into();
    };
    map.iter()
        .map(|(k, v)| format!("{k}={}", v.as_u64().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders effects as a table: seq, id, state, method, URL, status.
pub fn effects_table(effects: &[Value]) -> String {
    let mut out = format!(
        "{:>3}  {:<30} {:<10} {:<6} {:<48} ORIGIN STATUS\n",
        "SEQ", "EFFECT", "STATE", "METHOD", "URL"
    );
    for effect in effects {
        let released = &effect["released"];
        let status = effect
            .get("release_status")
            .or_else(|| effect.get("status"))
            .and_then(Value::as_u64)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:>3}  {:<30} {:<10} {:<6} {:<48} {}\n",
            effect["seq"].as_u64().unwrap_or(0),
            effect["id"].as_str().unwrap_or(""),
            effect["state"].as_str().unwrap_or(""),
            line(&effect["method"]),
            line(released.get("url").unwrap_or(&effect["url"])),
            status
        ));
        if let Some(summary) = released
            .get("summary")
            .or_else(|| effect.get("summary"))
            .and_then(Value::as_str)
        {
            out.push_str(&format!("     {:<30} {}\n", "", escape_line(summary)));
        }
        if let Some(values) = released_values(released) {
            out.push_str(&format!("     {:<30} released: {values}\n", ""));
        }
        if let Some(line) = flows_line(effect) {
            out.push_str(&format!("     {:<30} {line}\n", ""));
        }
        if let Some(reason) = effect
            .get("reason")
            .or_else(|| effect.get("state_reason"))
            .and_then(Value::as_str)
        {
            out.push_str(&format!("     {:<30} why: {}\n", "", escape_line(reason)));
        }
        if let Some(next) = effect.get("next").and_then(Value::as_str) {
            out.push_str(&format!("     {:<30} next: {next}\n", ""));
        }
    }
    out
}

/// Renders one effect (from `GET /v1/effects/{id}`) for a reviewer.
pub fn render_effect(effect: &Value) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "effect   {}\n",
        effect["id"].as_str().unwrap_or("")
    ));
    out.push_str(&format!(
        "run      {} (#{})\n",
        effect["run"].as_str().unwrap_or(""),
        effect["seq"]
    ));
    out.push_str(&format!(
        "state    {}\n",
        effect["state"].as_str().unwrap_or("")
    ));
    if let Some(summary) = effect["summary"].as_str() {
        out.push_str(&format!(
            "summary  {} ({})\n",
            escape_line(summary),
            effect["adapter"].as_str().unwrap_or("webhook")
        ));
    }
    out.push_str(&render_push(&effect["details"]));
    out.push_str(&render_tool_calls(&effect["details"]));
    if let Some(compensates) = effect["compensates"].as_str() {
        out.push_str(&format!(
            "compensates {compensates} (approximate: the original effect already happened)\n"
        ));
    }
    if let Some(reason) = effect["state_reason"].as_str() {
        out.push_str(&format!("reason   {}\n", escape_line(reason)));
    }
    out.push_str(&render_flows(effect));
    if let Some(approval) = effect.get("approval").filter(|a| a.is_object()) {
        out.push_str(&approval_line(approval));
    }
    out.push_str(&format!(
        "rule     {}\n",
        effect["rule"].as_str().unwrap_or("<default>")
    ));
    out.push_str(&format!(
        "request  {} {}\n",
        line(&effect["method"]),
        line(&effect["url"])
    ));
    for header in effect["headers"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {}: {}\n",
            line(&header["name"]),
            line(&header["value"])
        ));
    }
    out.push_str(&format!("body     {} bytes\n", effect["body_len"]));
    match (
        effect["body"]["text"].as_str(),
        effect["body"]["base64"].as_str(),
    ) {
        (Some(text), _) => {
            let pretty = serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|json| serde_json::to_string_pretty(&json).ok())
                .unwrap_or_else(|| text.to_owned());
            let lines: Vec<&str> = pretty.lines().collect();
            for line in lines.iter().take(24) {
                let shown: String = line.chars().take(118).collect();
                let cut = if line.chars().count() > 118 {
                    "…"
                } else {
                    ""
                };
                out.push_str(&format!("  | {}{cut}\n", escape_line(&shown)));
            }
            if lines.len() > 24 {
                out.push_str(&format!(
                    "  | … {} more lines (--json shows all)\n",
                    lines.len() - 24
                ));
            }
        }
        (None, Some(b64)) => out.push_str(&format!(
            "  (binary, base64) {}\n",
            &b64[..b64.len().min(120)]
        )),
        _ => {}
    }
    let lineage = &effect["lineage"];
    let sources = lineage["sources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let dependents = lineage["dependents"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if !lineage.is_null() {
        out.push_str(&format!(
            "lineage  {}\n",
            if lineage["analyzed"].as_bool() == Some(true) {
                format!(
                    "{} source(s), {} dependent(s)",
                    sources.len(),
                    dependents.len()
                )
            } else {
                "content analysis pending".to_owned()
            }
        ));
    }
    if let Some(incomplete) = lineage["incomplete_reads"]
        .as_array()
        .filter(|a| !a.is_empty())
    {
        let seqs: Vec<String> = incomplete.iter().map(|s| format!("#{s}")).collect();
        out.push_str(&format!(
            "  ! {} read(s) of this run were not fully analysed ({}): edges from them may be missing\n",
            seqs.len(),
            seqs.join(", ")
        ));
    }
    for edge in sources {
        let source = &edge["source"];
        let from = match source["kind"].as_str() {
            Some("read") => format!(
                "read #{} ({} {})",
                source["seq"],
                line(&source["method"]),
                line(&source["url"])
            ),
            _ => format!("effect {}", source["id"].as_str().unwrap_or("?")),
        };
        let size = match edge["kind"].as_str() {
            Some("content") => format!(
                ": {} bytes, {:.1}% of this body",
                edge["overlap_bytes"],
                edge["overlap_permille"].as_f64().unwrap_or(0.0) / 10.0
            ),
            _ => String::new(),
        };
        let what = match edge["kind"].as_str() {
            Some("content") => "content from",
            Some("credential") => "a credential-looking value from",
            Some("header") => "a response header value from",
            Some("placeholder") => "a placeholder of",
            _ => "data from",
        };
        out.push_str(&format!("  <- carries {what} {from}{size}\n"));
        if let Some(excerpt) = edge["excerpt"].as_str() {
            out.push_str(&format!("       \"{}\"\n", escape_line(excerpt)));
        }
    }
    for dependent in dependents {
        out.push_str(&format!(
            "  -> needed by {} {} {}\n",
            dependent["id"].as_str().unwrap_or("?"),
            line(&dependent["method"]),
            line(&dependent["url"])
        ));
    }
    if let Some(release) = effect.get("release").filter(|r| !r.is_null()) {
        out.push_str(&format!(
            "release  status {}{}\n",
            release["status"]
                .as_u64()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            release["error"]
                .as_str()
                .map(|e| format!(" ({})", escape_line(e)))
                .unwrap_or_default()
        ));
    }
    out.push_str(&render_released(effect));
    out.push_str(&render_outcome(effect));
    out
}

/// The ways out of a doubtful or failed release, for one effect: earlier attempts, the
/// idempotency key, retries and settlements with who decided, and what to do next.
fn render_outcome(effect: &Value) -> String {
    let mut out = String::new();
    for (i, earlier) in effect["earlier_releases"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out.push_str(&format!(
            "attempt  #{}: status {}{}\n",
            i + 1,
            earlier["status"]
                .as_u64()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            earlier["error"]
                .as_str()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    }
    if let Some(key) = effect.get("idempotency").filter(|k| k.is_object()) {
        out.push_str(&format!(
            "idempotency  {}: {}{}\n",
            key["header"].as_str().unwrap_or(""),
            key["key"].as_str().unwrap_or(""),
            if key["retry_unknown"].as_bool() == Some(true) {
                " (an unknown outcome may be re-sent)"
            } else {
                ""
            }
        ));
    }
    for decision in effect["decisions"].as_array().into_iter().flatten() {
        let kind = decision["kind"].as_str().unwrap_or("");
        if matches!(
            kind,
            "retry" | "settle_delivered" | "settle_not_delivered" | "supply_values" | "requeue"
        ) {
            out.push_str(&format!(
                "decision {kind} by {}{}\n",
                decision["by"].as_str().unwrap_or("?"),
                decision["note"]
                    .as_str()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(next) = effect["next"].as_str() {
        out.push_str(&format!("next     {next}\n"));
    }
    out
}

/// The flow mark of an effect in a list: `HELD by review flow "ID"` (or `BLOCKED by block
/// flow "ID"`) while flow rules hold it, else the flows it violated (`flows: review
/// "ID"`); `None` when it violates none.
pub fn flows_line(effect: &Value) -> Option<String> {
    let flows = effect.get("flows")?;
    let violations = flows
        .get("violations")
        .or(Some(flows))
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())?;
    let named: Vec<String> = violations
        .iter()
        .map(|v| {
            format!(
                "{} \"{}\"",
                v["action"].as_str().unwrap_or("?"),
                v["flow"].as_str().unwrap_or("?")
            )
        })
        .collect();
    Some(match effect["flow_hold"].as_str() {
        Some("blocked") => format!(
            "BLOCKED by flow rules ({}): cannot be approved; commit rejects it",
            named.join(", ")
        ),
        Some("held") => format!(
            "HELD by flow rules ({}): needs a reviewer's own approval (`airlock approve {}`)",
            named.join(", "),
            effect["id"].as_str().unwrap_or("EFFECT")
        ),
        _ => format!("flows: {}", named.join(", ")),
    })
}

/// The `flows` object of `GET /v1/effects/{id}` for a reviewer: every violation with its
/// reason, labels, the edge (kind, bytes, the read it starts at) and the excerpt.
pub fn render_flows(effect: &Value) -> String {
    let flows = &effect["flows"];
    if !flows.is_object() {
        return String::new();
    }
    let violations = flows["violations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut out = String::new();
    let status = match effect["flow_hold"].as_str() {
        Some("blocked") => " (BLOCKED: cannot be approved; commit rejects it)",
        Some("held") => " (HELD: only a reviewer's own approval of this effect releases it)",
        _ => "",
    };
    if violations.is_empty() {
        if flows["analysed"].as_bool() == Some(false) {
            out.push_str("flows    none so far (lineage not analysed yet)\n");
        }
    } else {
        out.push_str(&format!(
            "flows    {} violation(s){status}\n",
            violations.len()
        ));
    }
    for v in violations {
        out.push_str(&format!(
            "  ! {:<6} flow \"{}\": {}\n",
            v["action"].as_str().unwrap_or("?"),
            v["flow"].as_str().unwrap_or("?"),
            line(&v["reason"])
        ));
        let labels: Vec<&str> = v["labels"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !labels.is_empty() {
            out.push_str(&format!("           labels: {}\n", labels.join(", ")));
        }
        let edge = &v["edge"];
        if edge.is_object() {
            let size = match edge["kind"].as_str() {
                Some("content" | "header") => format!(", {} bytes", edge["overlap_bytes"]),
                _ => String::new(),
            };
            out.push_str(&format!(
                "           edge: {}{size} from {}\n",
                edge["kind"].as_str().unwrap_or("?"),
                line(&v["source"])
            ));
            if let Some(excerpt) = edge["excerpt"].as_str() {
                out.push_str(&format!("           \"{}\"\n", escape_line(excerpt)));
            }
        }
    }
    if let Some(incomplete) = flows["incomplete"].as_str() {
        out.push_str(&format!(
            "  ! analysis incomplete: {incomplete} (flows may miss edges)\n"
        ));
    }
    out
}

/// `approved by NAME (its own approval; acknowledges review flows "ID")`.
fn approval_line(approval: &Value) -> String {
    let flows: Vec<String> = approval["flows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|f| format!("\"{f}\""))
        .collect();
    let how = if approval["explicit"].as_bool() == Some(true) {
        "a reviewer's own approval of this effect"
    } else {
        "bulk or automatic: it does not release an effect a review flow holds"
    };
    let acknowledged = if flows.is_empty() {
        String::new()
    } else {
        format!("; acknowledges review flow(s) {}", flows.join(", "))
    };
    format!(
        "approval by {} ({how}{acknowledged})\n",
        approval["by"].as_str().unwrap_or("?")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_escapes_hidden_characters_and_stays_the_same_value() {
        let value = serde_json::json!({"summary": "pay\u{202E}gpj.exe \u{1F600}\u{E0041}", "n": [1, "a\u{200B}"]});
        let shown = json_pretty(&value);
        assert!(
            shown.contains("pay\\u202egpj.exe \u{1F600}\\udb40\\udc41"),
            "{shown}"
        );
        assert!(shown.contains("a\\u200b"), "{shown}");
        assert!(
            !shown.chars().any(airlock_control::visible::is_hidden),
            "{shown}"
        );
        let back: Value = serde_json::from_str(&shown).expect("valid JSON");
        assert_eq!(back, value);
        let plain = serde_json::json!({"a": [1, {"b": "c"}]});
        assert_eq!(
            json_pretty(&plain),
            serde_json::to_string_pretty(&plain).expect("json")
        );
    }

    #[test]
    fn one_line_fields_cannot_forge_lines_or_reorder_text() {
        let effect = serde_json::json!({
            "seq": 1, "id": "eff_1", "state": "staged", "method": "POST",
            "url": "https://example.com/\u{202E}txt.exe",
            "summary": "ok\n  2  eff_2  approved",
        });
        let table = effects_table(&[effect]);
        assert!(
            table.contains("https://example.com/<U+202E>txt.exe"),
            "{table}"
        );
        assert!(table.contains("ok<U+000A>  2  eff_2  approved"), "{table}");
        assert_eq!(table.lines().count(), 3, "{table}");
    }
}
