//! `policy explain` over `[[flow]]` rules: which flows could apply to a request — as a
//! source (the labels its reads carry and the flows that guard them) and as a destination
//! (the flows whose `to` covers its host). Flows decide on lineage, which a single request
//! does not have, so this says what *could* apply (docs/policy.md#flow-rules).

use serde::Serialize;

use crate::matcher::{Host, HostPattern};
use crate::{Action, Decision, Flow, FlowAction, FlowTo, Policy, CREDENTIAL, PLACEHOLDER_OF};

/// One flow that could apply, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowMatch {
    /// The flow's id.
    pub flow: String,
    /// `block` or `review`.
    pub action: FlowAction,
    /// Which of its keys match, e.g. `from "secret"`, `to "any"`.
    pub why: String,
}

/// The flows that could apply to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlowExplanation {
    /// The labels a read passed by the deciding rule carries (pass decisions only).
    pub labels: Vec<String>,
    /// Flows that guard what this request brings in (a pass) or the placeholders it hands
    /// out (a stage), when that data later reaches a destination their `to` covers.
    pub sources: Vec<FlowMatch>,
    /// Flows whose `to` covers this request's host (stage decisions only: flows decide
    /// staged effects): data they guard, carried by this request, makes them decide.
    pub destinations: Vec<FlowMatch>,
}

fn host_matches(globs: impl IntoIterator<Item = impl AsRef<str>>, host: Option<&Host>) -> bool {
    let Some(host) = host else {
        return false;
    };
    globs
        .into_iter()
        .any(|raw| HostPattern::parse(raw.as_ref()).is_ok_and(|p| p.matches(host)))
}

/// Whether `flow` guards a read passed by `rule` (with `labels`) from `host`: each of its
/// `from`, `rules` and `hosts` keys that is given matches. `Some(why)` when it does.
fn guards_read(flow: &Flow, rule: &str, labels: &[String], host: Option<&Host>) -> Option<String> {
    let mut why = Vec::new();
    if !flow.from().is_empty() {
        let hit: Vec<&String> = flow.from().iter().filter(|l| labels.contains(l)).collect();
        if !hit.is_empty() {
            why.push(format!(
                "from {}",
                hit.iter()
                    .map(|l| format!("\"{l}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else if flow.from().iter().any(|l| l == CREDENTIAL) {
            why.push(
                "from \"credential\" (if its response carries a credential-looking value)"
                    .to_owned(),
            );
        } else {
            return None;
        }
    }
    if !flow.rules().is_empty() {
        if !flow.rules().iter().any(|r| r == rule) {
            return None;
        }
        why.push(format!("rules \"{rule}\""));
    }
    if flow.hosts().next().is_some() {
        if !host_matches(flow.hosts(), host) {
            return None;
        }
        why.push("hosts".to_owned());
    }
    Some(why.join(", "))
}

impl Policy {
    /// The flows that could apply to a request to `host` that `decision` decided: for a
    /// pass, the labels its read carries and the flows guarding it; for a stage, the flows
    /// guarding its placeholders and the flows whose `to` covers `host` (`external` covers
    /// it for data from any other origin).
    pub fn explain_flows(&self, decision: &Decision, host: &str) -> FlowExplanation {
        let mut out = FlowExplanation::default();
        if self.flows.is_empty() {
            return out;
        }
        let parsed = Host::parse(host);
        let rule = decision.rule.as_deref();
        match (decision.action, rule) {
            (Action::Pass, Some(rule)) => {
                out.labels = self.labels_of(rule).to_vec();
                for flow in &self.flows {
                    if flow.guards_unanalysed() {
                        continue;
                    }
                    if let Some(why) = guards_read(flow, rule, &out.labels, parsed.as_ref()) {
                        out.sources.push(FlowMatch {
                            flow: flow.id().to_owned(),
                            action: flow.action(),
                            why,
                        });
                    }
                }
            }
            (Action::Stage, Some(rule)) => {
                let label = format!("{PLACEHOLDER_OF}{rule}");
                for flow in &self.flows {
                    let by_label = flow.from().contains(&label);
                    let by_rule = flow.from().is_empty() && flow.rules().iter().any(|r| r == rule);
                    if by_label || by_rule {
                        out.sources.push(FlowMatch {
                            flow: flow.id().to_owned(),
                            action: flow.action(),
                            why: if by_label {
                                format!("from \"{label}\": the placeholders it hands out")
                            } else {
                                format!("rules \"{rule}\": the placeholders it hands out")
                            },
                        });
                    }
                }
            }
            _ => {}
        }
        // Flows decide staged effects only: what a pass request carries leaves at once.
        if decision.action == Action::Stage {
            for flow in &self.flows {
                let why = match flow.to() {
                    FlowTo::Any => "to \"any\"".to_owned(),
                    FlowTo::External => "to \"external\" (for data from another origin)".to_owned(),
                    FlowTo::Hosts(globs) => {
                        if !host_matches(globs, parsed.as_ref()) {
                            continue;
                        }
                        format!("to {globs:?}")
                    }
                };
                out.destinations.push(FlowMatch {
                    flow: flow.id().to_owned(),
                    action: flow.action(),
                    why,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestFacts, Scheme};

    const POLICY: &str = r#"
version = 1
[[rule]]
id = "vault"
host = "vault.example"
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "docs"
host = "docs.example"
method = "read"
action = "pass"

[[rule]]
id = "hooks"
host = "*.hooks.example"
action = "stage"

[[rule]]
id = "chat"
host = "chat.example"
action = "stage"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "any"
action = "block"

[[flow]]
id = "creds-to-hooks"
from = ["credential"]
to = ["*.hooks.example"]
action = "review"

[[flow]]
id = "hook-ids"
from = ["placeholder-of:hooks"]
to = ["chat.example"]
action = "review"
"#;

    fn explain(method: &str, host: &str) -> FlowExplanation {
        let policy = Policy::from_toml_str(POLICY, "<test>").expect("valid");
        let facts = RequestFacts::new(Scheme::Https, host, 443, method, "/", method == "POST");
        let decision = policy.decide(&facts);
        policy.explain_flows(&decision, host)
    }

    fn ids(matches: &[FlowMatch]) -> Vec<&str> {
        matches.iter().map(|m| m.flow.as_str()).collect()
    }

    #[test]
    fn a_labelled_read_names_its_labels_and_the_flows_guarding_them() {
        let out = explain("GET", "vault.example");
        assert_eq!(out.labels, ["secret"]);
        assert_eq!(ids(&out.sources), ["no-secrets-out", "creds-to-hooks"]);
        assert_eq!(out.sources[0].why, "from \"secret\"");
        assert!(out.sources[1].why.contains("credential-looking"));
        // Flows decide staged effects only: a read is no destination.
        assert!(out.destinations.is_empty());
    }

    #[test]
    fn an_unlabelled_read_is_guarded_only_by_credential_flows() {
        let out = explain("GET", "docs.example");
        assert!(out.labels.is_empty());
        assert_eq!(ids(&out.sources), ["creds-to-hooks"]);
    }

    #[test]
    fn a_stage_destination_lists_the_flows_whose_to_matches_its_host() {
        let out = explain("POST", "a.hooks.example");
        assert_eq!(ids(&out.destinations), ["no-secrets-out", "creds-to-hooks"]);
        assert_eq!(ids(&out.sources), ["hook-ids"]);
        let out = explain("POST", "chat.example");
        assert_eq!(ids(&out.destinations), ["no-secrets-out", "hook-ids"]);
    }

    #[test]
    fn a_denied_request_has_no_flows() {
        let out = explain("GET", "elsewhere.example");
        assert_eq!(out, FlowExplanation::default());
    }
}
