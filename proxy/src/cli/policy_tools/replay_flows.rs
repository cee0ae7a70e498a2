//! `policy replay`'s flows: each effect of the run decided again by the server under the
//! policy in force and under the candidate (`POST /v1/runs/{id}/flows/replay`), with the
//! live decision's own inputs and commit rule; this module keeps those that change.

use serde::Serialize;
use serde_json::Value;

/// One effect whose flow verdicts, or what the commit would do with it, change: `was`
/// under the policy in force, `now` under the candidate.
#[derive(Debug, Serialize)]
pub(super) struct FlowReplayed {
    pub(super) effect: String,
    pub(super) method: String,
    pub(super) url: String,
    pub(super) was: Vec<FlowVerdictLine>,
    pub(super) now: Vec<FlowVerdictLine>,
    /// What the commit's final pass would do under the policy in force (`rejected`,
    /// `held`, `clear`; `null` for an effect already decided for good).
    pub(super) was_at_commit: Option<String>,
    /// The same under the candidate.
    pub(super) now_at_commit: Option<String>,
}

/// One flow an effect violates: `block "no-secrets-out"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct FlowVerdictLine {
    flow: String,
    action: String,
}

/// `no flows`, or `block "a", review "b"`, then the commit's outcome when there is one.
pub(super) fn show_verdicts(verdicts: &[FlowVerdictLine], at_commit: Option<&str>) -> String {
    let flows = if verdicts.is_empty() {
        "no flows".to_owned()
    } else {
        verdicts
            .iter()
            .map(|v| format!("{} \"{}\"", v.action, v.flow))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match at_commit {
        Some(outcome) => format!("{flows} (at commit: {outcome})"),
        None => flows,
    }
}

/// The effects of the server's replay answer (`{effects: [{changed, was, now…}]}`) whose
/// decision changes.
pub(super) fn changes(replay: &Value) -> Vec<FlowReplayed> {
    let lines = |decided: &Value| -> Vec<FlowVerdictLine> {
        decided["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| FlowVerdictLine {
                flow: v["flow"].as_str().unwrap_or_default().to_owned(),
                action: v["action"].as_str().unwrap_or_default().to_owned(),
            })
            .collect()
    };
    let outcome = |decided: &Value| decided["at_commit"]["outcome"].as_str().map(str::to_owned);
    replay["effects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["changed"].as_bool().unwrap_or(false))
        .map(|e| FlowReplayed {
            effect: e["effect"].as_str().unwrap_or_default().to_owned(),
            method: e["method"].as_str().unwrap_or_default().to_owned(),
            url: e["url"].as_str().unwrap_or_default().to_owned(),
            was: lines(&e["was"]),
            now: lines(&e["now"]),
            was_at_commit: outcome(&e["was"]),
            now_at_commit: outcome(&e["now"]),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_changed_effects_are_kept_and_shown_with_the_commits_outcome() {
        let replay = json!({ "effects": [
            { "effect": "eff_1", "method": "POST", "url": "https://hooks.example/x", "changed": true,
              "was": { "violations": [{ "flow": "f", "action": "review" }], "at_commit": { "outcome": "held", "why": ["flow \"f\""] } },
              "now": { "violations": [{ "flow": "f", "action": "block" }], "at_commit": { "outcome": "rejected", "detail": "…" } } },
            { "effect": "eff_2", "method": "POST", "url": "https://hooks.example/y", "changed": false,
              "was": { "violations": [], "at_commit": null }, "now": { "violations": [], "at_commit": null } },
        ]});
        let changed = changes(&replay);
        assert_eq!(changed.len(), 1);
        assert_eq!(
            show_verdicts(&changed[0].was, changed[0].was_at_commit.as_deref()),
            "review \"f\" (at commit: held)"
        );
        assert_eq!(
            show_verdicts(&changed[0].now, changed[0].now_at_commit.as_deref()),
            "block \"f\" (at commit: rejected)"
        );
        assert_eq!(show_verdicts(&[], None), "no flows");
    }
}
