//! Human renderings of admin API answers for the CLI and the demo: counts, the effects
//! table, and one effect with its flow decision and lineage.

use serde_json::Value;

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
            effect["method"].as_str().unwrap_or(""),
            effect["url"].as_str().unwrap_or(""),
            status
        ));
        if let Some(summary) = effect.get("summary").and_then(Value::as_str) {
            out.push_str(&format!(
                "     {:<30} {summary}
",
                ""
            ));
        }
        if let Some(line) = flows_line(effect) {
            out.push_str(&format!("     {:<30} {line}\n", ""));
        }
        if let Some(reason) = effect
            .get("reason")
            .or_else(|| effect.get("state_reason"))
            .and_then(Value::as_str)
        {
            out.push_str(&format!("     {:<30} why: {reason}\n", ""));
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
            "summary  {summary} ({})\n",
            effect["adapter"].as_str().unwrap_or("webhook")
        ));
    }
    if let Some(compensates) = effect["compensates"].as_str() {
        out.push_str(&format!(
            "compensates {compensates} (approximate: the original effect already happened)\n"
        ));
    }
    if let Some(reason) = effect["state_reason"].as_str() {
        out.push_str(&format!("reason   {reason}\n"));
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
        effect["method"].as_str().unwrap_or(""),
        effect["url"].as_str().unwrap_or("")
    ));
    for header in effect["headers"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {}: {}\n",
            header["name"].as_str().unwrap_or(""),
            header["value"].as_str().unwrap_or("")
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
                out.push_str(&format!("  | {shown}{cut}\n"));
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
                source["method"].as_str().unwrap_or("?"),
                source["url"].as_str().unwrap_or("?")
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
            out.push_str(&format!("       \"{excerpt}\"\n"));
        }
    }
    for dependent in dependents {
        out.push_str(&format!(
            "  -> needed by {} {} {}\n",
            dependent["id"].as_str().unwrap_or("?"),
            dependent["method"].as_str().unwrap_or(""),
            dependent["url"].as_str().unwrap_or("")
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
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    }
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
            v["reason"].as_str().unwrap_or("")
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
                v["source"].as_str().unwrap_or("?")
            ));
            if let Some(excerpt) = edge["excerpt"].as_str() {
                out.push_str(&format!("           \"{excerpt}\"\n"));
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
