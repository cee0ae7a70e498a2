//! `policy replay`'s flows: each effect's stored lineage decided again under the policy in
//! force and under the candidate.

use airlock_dataplane::flows::host_port;
use airlock_policy::Policy;
use serde::Serialize;
use serde_json::{json, Value};

/// One effect whose flow verdicts change: `was` under the policy in force (`None` when it
/// could not be loaded), `now` under the candidate.
#[derive(Debug, Serialize)]
pub(super) struct FlowReplayed {
    pub(super) effect: String,
    pub(super) method: String,
    pub(super) url: String,
    pub(super) was: Option<Vec<FlowVerdictLine>>,
    pub(super) now: Vec<FlowVerdictLine>,
}

/// One flow an effect violates: `block "no-secrets-out"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct FlowVerdictLine {
    flow: String,
    action: airlock_policy::FlowAction,
}

/// `no flows`, or `block "a", review "b"`.
pub(super) fn show_verdicts(verdicts: &[FlowVerdictLine]) -> String {
    if verdicts.is_empty() {
        return "no flows".to_owned();
    }
    verdicts
        .iter()
        .map(|v| format!("{} \"{}\"", v.action.as_str(), v.flow))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the flow decision on one effect needs, from its full record
/// (`GET /v1/effects/{id}`: its lineage sources, placeholder edges included), the run's
/// reads (their rule and recorded labels) and effects (a source effect's URL and rule).
struct FlowInputs {
    host: String,
    port: u16,
    incomplete: Option<String>,
    edges: Vec<StoredEdge>,
}

/// One stored edge into an effect: (source host, port, rule, recorded labels, class,
/// overlap bytes).
type StoredEdge = (
    String,
    u16,
    Option<String>,
    Vec<String>,
    airlock_policy::EdgeClass,
    u64,
);

impl FlowInputs {
    fn of(full: &Value, reads: &[airlock_ledger::Read], effects: &[Value]) -> Self {
        use airlock_policy::EdgeClass;
        let (host, port) = host_port(full["url"].as_str().unwrap_or_default()).unwrap_or_default();
        let lineage = &full["lineage"];
        // As the data plane says it (airlock_dataplane::flows): why the lineage is incomplete.
        let incomplete = if lineage["analyzed"] != json!(true) {
            Some("not analysed".to_owned())
        } else if let Some(skipped) = lineage["skipped"].as_str() {
            Some(skipped.to_owned())
        } else if lineage["truncated"] == json!(true) {
            Some("the body was longer than the analysis bounds".to_owned())
        } else if lineage["incomplete_reads"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            Some("reads of the run were not fully analysed".to_owned())
        } else {
            None
        };
        let mut edges = Vec::new();
        for edge in lineage["sources"].as_array().into_iter().flatten() {
            let class = match edge["kind"].as_str() {
                Some("content") => EdgeClass::Content,
                Some("header") => EdgeClass::Header,
                Some("credential") => EdgeClass::Credential,
                Some("placeholder") => EdgeClass::Placeholder,
                _ => continue,
            };
            let source = &edge["source"];
            let (url, rule, labels) = match source["kind"].as_str() {
                Some("read") => {
                    let Some(read) = reads.iter().find(|r| Some(r.seq) == source["seq"].as_u64())
                    else {
                        continue;
                    };
                    (read.url.clone(), read.rule.clone(), read.labels.clone())
                }
                Some("effect") => {
                    let Some(effect) = effects.iter().find(|e| e["id"] == source["id"]) else {
                        continue;
                    };
                    (
                        effect["url"].as_str().unwrap_or_default().to_owned(),
                        effect["rule"].as_str().map(str::to_owned),
                        Vec::new(),
                    )
                }
                _ => continue,
            };
            let Some((source_host, source_port)) = host_port(&url) else {
                continue;
            };
            edges.push((
                source_host,
                source_port,
                rule,
                labels,
                class,
                edge["overlap_bytes"].as_u64().unwrap_or(0),
            ));
        }
        Self {
            host,
            port,
            incomplete,
            edges,
        }
    }

    /// The flows violated under `policy` (its rules' labels by the read's rule id, plus the
    /// labels recorded on the read), blocks first.
    fn verdicts(&self, policy: &Policy) -> Vec<FlowVerdictLine> {
        let edges: Vec<airlock_policy::FlowEdge<'_>> = self
            .edges
            .iter()
            .map(
                |(host, port, rule, labels, class, bytes)| airlock_policy::FlowEdge {
                    source: airlock_policy::FlowSource {
                        host,
                        port: *port,
                        rule: rule.as_deref(),
                        labels,
                    },
                    class: *class,
                    overlap_bytes: *bytes,
                },
            )
            .collect();
        let target = airlock_policy::FlowTarget {
            host: &self.host,
            port: self.port,
            unanalysed: self.incomplete.as_deref(),
        };
        policy
            .evaluate_flows(&target, &edges)
            .into_iter()
            .map(|v| FlowVerdictLine {
                flow: v.flow,
                action: v.action,
            })
            .collect()
    }
}

/// Each effect of the run whose flow verdicts differ between the policy in force
/// (`in_force`, `None` when it could not be loaded) and `candidate`: `fulls` are the
/// effects' full records, `reads` and `effects` the run's.
pub(super) fn changes(
    candidate: &Policy,
    in_force: Option<&Policy>,
    reads: &[airlock_ledger::Read],
    fulls: &[Value],
    effects: &[Value],
) -> Vec<FlowReplayed> {
    fulls
        .iter()
        .filter_map(|full| {
            let edges = FlowInputs::of(full, reads, effects);
            let now = edges.verdicts(candidate);
            let was = in_force.map(|p| edges.verdicts(p));
            (was.as_ref() != Some(&now)).then(|| FlowReplayed {
                effect: full["id"].as_str().unwrap_or_default().to_owned(),
                method: full["method"].as_str().unwrap_or_default().to_owned(),
                url: full["url"].as_str().unwrap_or_default().to_owned(),
                was,
                now,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
version = 1
[[rule]]
id = "vault"
host = "vault.example"
method = "read"
action = "pass"
[[rule]]
id = "hooks"
host = "hooks.example"
action = "stage"
"#;

    /// An effect whose lineage holds one content edge from a read of rule `vault`.
    fn inputs() -> FlowInputs {
        let full = json!({
            "id": "eff_1", "method": "POST", "url": "https://hooks.example/x",
            "lineage": { "analyzed": true, "skipped": null, "truncated": false, "incomplete_reads": [],
                "sources": [{ "from": "read:1", "source": { "kind": "read", "seq": 1 },
                              "kind": "content", "overlap_bytes": 40 }] },
        });
        let read: airlock_ledger::Read = serde_json::from_value(json!({
            "run_id": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV", "seq": 1, "method": "GET",
            "url": "https://vault.example/db", "status": 200, "request_bytes": 0,
            "response_bytes": 50, "response_digest": null, "rule": "vault", "created_at_ms": 1,
        }))
        .expect("a read");
        FlowInputs::of(&full, &[read], &[])
    }

    #[test]
    fn replay_decides_stored_lineage_under_the_candidates_labels_and_flows() {
        let inputs = inputs();
        assert_eq!(inputs.incomplete, None);
        let before = Policy::from_toml_str(POLICY, "old").expect("valid");
        assert!(inputs.verdicts(&before).is_empty());
        // The candidate labels the rule's reads and adds a flow naming the label.
        let candidate = POLICY.replacen(
            "action = \"pass\"\n",
            "action = \"pass\"\nlabels = [\"secret\"]\n",
            1,
        )
            + "[[flow]]\nid = \"no-secrets-out\"\nfrom = [\"secret\"]\naction = \"block\"\n";
        let after = Policy::from_toml_str(&candidate, "new").expect("valid");
        let now = inputs.verdicts(&after);
        assert_eq!(show_verdicts(&now), "block \"no-secrets-out\"");
        // A higher min_overlap_bytes lets the 40-byte edge through.
        let looser = candidate.replacen(
            "action = \"block\"",
            "min_overlap_bytes = 64\naction = \"block\"",
            1,
        );
        let looser = Policy::from_toml_str(&looser, "looser").expect("valid");
        assert!(inputs.verdicts(&looser).is_empty());
    }
}
