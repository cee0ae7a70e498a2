//! The summary `airlock run`, `airlock rollback-to` and `airlock runs show` print: exits,
//! the decision, files changed, residue, what was left outside, effects, what to do next.

use serde_json::Value;

use super::describe_exit;
use crate::render::effects_table;

/// Most lines of one list (files, notes, residue, paths outside) the summary prints; the
/// rest is counted in a last line, and the run record (`--json`, `airlock runs show
/// --json`) keeps them all.
pub const SHOWN: usize = 20;

/// Appends `lines` (each already indented), at most [`SHOWN`] of them, then how many
/// more there are.
fn push_capped(out: &mut String, lines: Vec<String>) {
    for line in lines.iter().take(SHOWN) {
        out.push_str(line);
        out.push('\n');
    }
    if lines.len() > SHOWN {
        out.push_str(&format!(
            "  … and {} more (--json lists them)\n",
            lines.len() - SHOWN
        ));
    }
}

/// `  MARK PATH` for each path of each `(mark, paths)` list, in order.
fn marked(lists: &[(&str, &Vec<Value>)]) -> Vec<String> {
    lists
        .iter()
        .flat_map(|(mark, paths)| {
            paths
                .iter()
                .map(move |p| format!("  {mark} {}", p.as_str().unwrap_or("")))
        })
        .collect()
}

/// The human summary of a decision report.
pub fn summary(report: &Value) -> String {
    let mut out = String::new();
    let run = report["run"].as_str().unwrap_or("");
    let decision = &report["decision"];
    let workspace = &report["workspace"];
    out.push_str(&format!(
        "run       {run} ({})\n",
        report["state"].as_str().unwrap_or("")
    ));
    out.push_str(&format!(
        "workspace {} ({} snapshot {})\n",
        workspace["path"].as_str().unwrap_or(""),
        workspace["driver"].as_str().unwrap_or(""),
        decision["snapshot"].as_str().unwrap_or("")
    ));
    for step in workspace["steps"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<9} `{}` {} in {:.1} s\n",
            step["kind"].as_str().unwrap_or(""),
            step["command"].as_str().unwrap_or(""),
            describe_exit(
                step["exit_code"].as_i64().map(|c| c as i32),
                step["note"].as_str()
            ),
            step["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0
        ));
    }
    if let Some(line) = containment_line(report) {
        out.push_str(&line);
    }
    out.push_str(&format!(
        "decision  {}{}: {}\n",
        decision["kind"].as_str().unwrap_or(""),
        decision["savepoint"]
            .as_str()
            .map(|s| format!(" to savepoint {s}"))
            .unwrap_or_default(),
        decision["reason"].as_str().unwrap_or("")
    ));
    out.push_str(&format!(
        "outcome   {}\n",
        decision["outcome"].as_str().unwrap_or("not finished")
    ));
    let changes = &decision["changes"];
    let list = |key: &str| changes[key].as_array().cloned().unwrap_or_default();
    let (added, modified, deleted) = (list("added"), list("modified"), list("deleted"));
    out.push_str(&format!(
        "files     {} added, {} modified, {} deleted by the run{}\n",
        added.len(),
        modified.len(),
        deleted.len(),
        if matches!(decision["kind"].as_str(), Some("rollback" | "rollback_to")) {
            " (now undone)"
        } else {
            ""
        }
    ));
    push_capped(
        &mut out,
        marked(&[("+", &added), ("~", &modified), ("-", &deleted)]),
    );
    let notes = decision["notes"].as_array().cloned().unwrap_or_default();
    if !notes.is_empty() {
        out.push_str(&format!(
            "NOTE      {} path(s) the snapshot or the diff could not capture whole (special or unreadable files):\n",
            notes.len()
        ));
        push_capped(&mut out, marked(&[("?", &notes)]));
    }
    if report["rollback_unverified"] == true {
        out.push_str("WARNING   the rollback could NOT be verified: the workspace still differs from the snapshot\n");
        let residue = decision["residue"].as_array().cloned().unwrap_or_default();
        push_capped(&mut out, marked(&[("!", &residue)]));
    }
    let kept_residue = decision["residue"].as_array().cloned().unwrap_or_default();
    if decision["kind"] == "keep" && !kept_residue.is_empty() {
        out.push_str(&format!(
            "RESIDUE   {} line(s): what the keep did not apply to the workspace (with --scope root, what the steps wrote outside it was dropped)\n",
            kept_residue.len()
        ));
        push_capped(&mut out, marked(&[("!", &kept_residue)]));
    }
    if let Some(outside) = report.get("outside").filter(|o| o.is_object()) {
        let list = |key: &str| outside[key].as_array().cloned().unwrap_or_default();
        let (added, modified, deleted) = (list("added"), list("modified"), list("deleted"));
        let total = added.len() + modified.len() + deleted.len();
        out.push_str(&format!(
            "outside   {total} path(s) changed outside the workspace{}\n",
            if total > 0 {
                ": airlock did not and cannot restore them"
            } else {
                ""
            }
        ));
        push_capped(
            &mut out,
            marked(&[("+", &added), ("~", &modified), ("-", &deleted)]),
        );
    }
    if let Some(written) = report.get("written_outside").filter(|w| w.is_object()) {
        for why in written["not_captured"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "outside   NOT captured in a step (what it wrote outside the workspace reached the host as your user): {}\n",
                why.as_str().unwrap_or("")
            ));
        }
        let paths = written["paths"].as_array().cloned().unwrap_or_default();
        let kept: Vec<&str> = written["kept"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "outside   {}{} path(s) written outside the workspace, in the run's layer: {}\n",
            paths.len(),
            if written["truncated"] == true {
                "+"
            } else {
                ""
            },
            if kept.is_empty() {
                "discarded, none reached the host".to_owned()
            } else {
                format!("{} kept (--keep-outside), the rest discarded", kept.len())
            }
        ));
        let lines = paths
            .iter()
            .map(|path| {
                let mark = if path["kind"] == "deleted" { "-" } else { "+" };
                format!("  {mark} {}", path["path"].as_str().unwrap_or(""))
            })
            .collect();
        push_capped(&mut out, lines);
        for error in written["keep_errors"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  ! --keep-outside {}\n",
                error.as_str().unwrap_or("")
            ));
        }
    }
    let left = report["left_running"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !left.is_empty() {
        out.push_str(&format!(
            "WARNING   {} process(es) the command started {}\n",
            left.len(),
            if report["left_running_killed"] == true {
                "were still running in the fence when it ended; all were killed"
            } else {
                "are still running"
            }
        ));
        for process in &left {
            let listening: Vec<&str> = process["listening"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            out.push_str(&format!(
                "  pid {} `{}`{}\n",
                process["pid"],
                process["command"].as_str().unwrap_or(""),
                if listening.is_empty() {
                    String::new()
                } else {
                    format!(", listening on {}", listening.join(", "))
                }
            ));
        }
    }
    let scheduled = report["residue"]["scheduled"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !scheduled.is_empty() {
        out.push_str(&format!(
            "RESIDUE   {} scheduled job(s) or unit(s) changed by the command (cron, at, systemd): they would run later, outside the run\n",
            scheduled.len()
        ));
        for path in &scheduled {
            out.push_str(&format!("  ! {}\n", path.as_str().unwrap_or("")));
        }
    }
    let effects = report["effects"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("effects   {} staged by the run\n", effects.len()));
    if !effects.is_empty() {
        for line in effects_table(&effects).lines() {
            out.push_str(&format!("  {line}\n"));
        }
        for effect in &effects {
            for parent in effect["depends_on"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "  {} depends on {}\n",
                    effect["id"].as_str().unwrap_or(""),
                    parent.as_str().unwrap_or("")
                ));
            }
        }
    }
    let pending = effects.iter().any(|e| {
        matches!(
            e["state"].as_str(),
            Some("staged" | "approved" | "rejected")
        )
    });
    let next = match decision["kind"].as_str() {
        Some("keep") if pending && report["state"] != "committed" => {
            match (report["review"]["serve"].as_str(), report["review"]["data"].as_str()) {
                // The embedded server has stopped: name the command that serves the run again.
                (Some(serve), Some(data)) => {
                    let data = if data.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:@,%".contains(c)) {
                        data.to_owned()
                    } else {
                        format!("'{}'", data.replace('\'', "'\\''"))
                    };
                    format!(
                        "the effects are held; airlock's embedded server has stopped, so start it again to review them:\n            {serve}\n          and in another shell\n            airlock ui --data {data}        (a sign-in link to the review UI)\n            airlock effects {run} --data {data}\n          approve or reject (in the UI, or `airlock approve EFFECT --data {data}`), then\n            airlock commit {run} --data {data}\n          (or `airlock abort {run} --data {data}`; the files stay as they are)"
                    )
                }
                _ => format!(
                    "review with `airlock effects {run}` and `airlock show EFFECT`, approve or reject, then `airlock commit {run}` (or `airlock abort {run}`; the files stay as they are)"
                ),
            }
        }
        Some("keep") if effects.is_empty() => {
            "nothing: files kept; the run staged no effects".to_owned()
        }
        Some("keep") => "nothing: files kept and effects settled".to_owned(),
        Some("rollback_to") => format!(
            "the run is still open; carry on from savepoint {}",
            decision["savepoint"].as_str().unwrap_or("")
        ),
        _ => "nothing left the machine through airlock; fix the cause and run again".to_owned(),
    };
    out.push_str(&format!("next      {next}\n"));
    out
}

/// `network   isolated: 3 connections captured, 1 refused; DNS 4 answered, 1 refused
/// (setup 9.2 ms)`, from the report's `containment`; `None` for a report without one.
fn containment_line(report: &Value) -> Option<String> {
    let containment = report.get("containment").filter(|c| c.is_object())?;
    let network = containment["network"].as_str().unwrap_or("");
    let count = |key: &str| containment[key].as_u64().unwrap_or(0);
    let mut line = match network {
        "env" => "network   env: proxy variables only; a client that ignores them was not stopped".to_owned(),
        "offline" => "network   offline: no route out; nothing could leave".to_owned(),
        _ => format!(
            "network   {network}: {} connection(s) captured, {} refused, {} through the proxy variables; DNS {} answered, {} refused",
            count("connections_captured"),
            count("connections_refused"),
            count("proxy_connections"),
            count("dns_answered"),
            count("dns_refused"),
        ),
    };
    if let Some(setup) = containment["setup_us"].as_u64() {
        line.push_str(&format!(
            " (fence set up in {:.1} ms)",
            setup as f64 / 1000.0
        ));
    }
    if count("relay_failures") > 0 {
        line.push_str(&format!(
            "; {} connection(s) failed closed: airlock could not be reached",
            count("relay_failures")
        ));
    }
    let limited = count("connections_limited") + count("dns_rate_limited") + count("relay_limited");
    if limited > 0 {
        line.push_str(&format!(
            "; {} connection(s) or quer(ies) refused at a limit ({} at --max-connections-per-run, {} DNS past --dns-queries-per-second, {} at the relay's own limits)",
            limited,
            count("connections_limited"),
            count("dns_rate_limited"),
            count("relay_limited"),
        ));
    }
    line.push('\n');
    if let Some(note) = containment["note"].as_str() {
        line.push_str(&format!("WARNING   {note}\n"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_files_is_cut_at_twenty_with_a_count_of_the_rest() {
        let added: Vec<String> = (0..234).map(|i| format!("profile/cache/{i}")).collect();
        let report = serde_json::json!({
            "run": "run_x", "state": "committed",
            "decision": {"outcome": "kept", "kind": "keep", "changes": {"added": added, "modified": ["a"], "deleted": []}},
        });
        let text = summary(&report);
        assert!(
            text.contains("files     234 added, 1 modified, 0 deleted"),
            "{text}"
        );
        let listed = text
            .lines()
            .filter(|l| l.starts_with("  + ") || l.starts_with("  ~ "))
            .count();
        assert_eq!(listed, SHOWN, "{text}");
        assert!(
            text.contains("  … and 215 more (--json lists them)"),
            "{text}"
        );
        assert!(!text.contains("profile/cache/20\n"), "{text}");
    }
}
