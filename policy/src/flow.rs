//! Flow rules: policy over lineage. A `[[flow]]` names the data it guards (the labels of
//! the reads it came from, the rules that passed them or their hosts) and where that data
//! may not go without a human (`to`), and decides `block` or `review` for every lineage
//! edge that carries such data to such a host (docs/policy.md#flow-rules).
//!
//! Labels come from pass rules (`labels = ["secret"]`) and from lineage itself: the
//! built-in [`CREDENTIAL`] on credential edges, [`UNANALYSED`] on an effect whose lineage
//! is incomplete, and `placeholder-of:RULE` on an effect -> effect edge from an effect
//! that stage rule `RULE` staged. The evaluation is pure: the caller hands over the
//! edges ([`FlowEdge`]) and the effect's destination ([`FlowTarget`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::matcher::{Host, HostPattern};
use crate::Rule;

/// The built-in label of a credential edge: a credential-looking value, or the value of a
/// secret-bearing response header (`set-cookie`, `authorization`…), that arrived in a read.
pub const CREDENTIAL: &str = "credential";
/// The built-in label of an effect whose lineage is incomplete: not analysed yet or ever
/// (queue overflow), a truncated body, an opaque content type, or a read of its run whose
/// analysis was cut short.
pub const UNANALYSED: &str = "unanalysed";
/// Prefix of the built-in label `placeholder-of:RULE`: an effect -> effect edge whose
/// source effect stage rule `RULE` staged.
pub const PLACEHOLDER_OF: &str = "placeholder-of:";

/// One `[[flow]]` table as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Flow")]
pub(crate) struct WireFlow {
    /// Stable id shown with every violation; unique among flows; required.
    #[schemars(required)]
    pub(crate) id: Option<String>,
    /// Labels of the data guarded: labels of pass rules, `credential`, `unanalysed` or
    /// `placeholder-of:RULE`. Any one listed matches.
    pub(crate) from: Option<Vec<String>>,
    /// Ids of the rules whose reads (or staged effects) are guarded. Any one matches.
    pub(crate) rules: Option<Vec<String>>,
    /// Host globs of the reads guarded. Any one matches.
    pub(crate) hosts: Option<Vec<String>>,
    /// `"external"` (default: any host other than the source's own origin), `"any"`, or
    /// a list of host globs the effect's host must match.
    pub(crate) to: Option<WireFlowTo>,
    /// Host globs the flow never judges, whatever `to` says: the agent's own model API,
    /// which carries what the agent read by design (docs/policy.md#flow-rules).
    pub(crate) except: Option<Vec<String>>,
    /// Content and header edges must carry at least this many bytes (default 0: every
    /// recorded edge). Credential, placeholder and unanalysed edges always count.
    #[schemars(range(min = 0))]
    pub(crate) min_overlap_bytes: Option<i64>,
    /// `"block"`: never released; `"review"`: only a named reviewer's own approval of
    /// the effect releases it. Required.
    #[schemars(required)]
    pub(crate) action: Option<WireFlowAction>,
    /// A sentence shown with every violation and to the agent.
    pub(crate) reason: Option<String>,
}

/// `to = "external"`, `to = "any"` or `to = ["*.example.com", …]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum WireFlowTo {
    Keyword(String),
    Hosts(Vec<String>),
}

/// `action` of a flow.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireFlowAction {
    Block,
    Review,
}

/// What a flow does to an effect it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowAction {
    /// Only a reviewer's own approval of the effect, made while the violation was shown,
    /// releases it; bulk approvals and `review = "auto"` skip it.
    Review,
    /// The effect cannot be approved; commit rejects it and its dependents are skipped.
    Block,
}

impl FlowAction {
    /// `"review"` or `"block"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowAction::Review => "review",
            FlowAction::Block => "block",
        }
    }
}

/// Where guarded data may not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowTo {
    /// Any host other than the source's own (host and port compared).
    External,
    /// Every host.
    Any,
    /// Hosts matching one of these globs.
    Hosts(Vec<String>),
}

/// One compiled `[[flow]]`.
#[derive(Debug, Clone)]
pub struct Flow {
    id: String,
    from: Vec<String>,
    rules: Vec<String>,
    hosts: Vec<(String, HostPattern)>,
    to: FlowTo,
    to_hosts: Vec<HostPattern>,
    except: Vec<(String, HostPattern)>,
    min_overlap_bytes: u64,
    action: FlowAction,
    reason: Option<String>,
}

impl Flow {
    /// The flow's id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The labels it guards (empty: any).
    pub fn from(&self) -> &[String] {
        &self.from
    }
    /// The rule ids it guards (empty: any).
    pub fn rules(&self) -> &[String] {
        &self.rules
    }
    /// The source host globs it guards, as written (empty: any).
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|(raw, _)| raw.as_str())
    }
    /// Where the data may not go.
    pub fn to(&self) -> &FlowTo {
        &self.to
    }
    /// The host globs of `except`, as written: destinations the flow never judges.
    pub fn except(&self) -> impl Iterator<Item = &str> {
        self.except.iter().map(|(raw, _)| raw.as_str())
    }
    /// Whether `host` (a URL's host) is one of the flow's `except` destinations.
    pub fn excepts(&self, host: &str) -> bool {
        Host::parse(host).is_some_and(|h| self.excepts_host(&h))
    }
    fn excepts_host(&self, host: &Host) -> bool {
        self.except.iter().any(|(_, p)| p.matches(host))
    }
    /// The least overlap, in bytes of the effect's normalised body, of a content or
    /// header edge that counts.
    pub fn min_overlap_bytes(&self) -> u64 {
        self.min_overlap_bytes
    }
    /// `block` or `review`.
    pub fn action(&self) -> FlowAction {
        self.action
    }
    /// The reason shown with a violation: the flow's `reason`, else a sentence built
    /// from its keys.
    pub fn reason(&self) -> String {
        self.reason.clone().unwrap_or_else(|| {
            let what = if self.from.is_empty() {
                "guarded data".to_owned()
            } else {
                format!("data labelled {}", self.from.join(" or "))
            };
            let mut to = match &self.to {
                FlowTo::External => "a host other than its origin".to_owned(),
                FlowTo::Any => "any host".to_owned(),
                FlowTo::Hosts(hosts) => hosts.join(", "),
            };
            if !self.except.is_empty() {
                let except: Vec<&str> = self.except().collect();
                to.push_str(&format!(" (except {})", except.join(", ")));
            }
            match self.action {
                FlowAction::Block => format!("{what} never goes to {to}"),
                FlowAction::Review => {
                    format!("{what} goes to {to} only with a reviewer's own approval")
                }
            }
        })
    }
    /// Whether the flow guards effects with incomplete lineage.
    pub fn guards_unanalysed(&self) -> bool {
        self.from.iter().any(|l| l == UNANALYSED)
    }
}

/// What kind of lineage an edge is, as flows see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeClass {
    /// Shared passages of a read's body.
    Content,
    /// A response header value of a read.
    Header,
    /// A credential-looking value or secret header value of a read (label `credential`).
    Credential,
    /// A placeholder an earlier effect handed out (label `placeholder-of:RULE`).
    Placeholder,
}

/// Where an edge starts: a read, or an earlier effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSource<'a> {
    /// The source's host, as in its URL.
    pub host: &'a str,
    /// The source's port.
    pub port: u16,
    /// The rule that passed the read or staged the effect.
    pub rule: Option<&'a str>,
    /// Labels recorded on the read when it was journaled (the policy adds its rule's
    /// current labels).
    pub labels: &'a [String],
}

/// One lineage edge into the effect being decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEdge<'a> {
    /// Where it starts.
    pub source: FlowSource<'a>,
    /// What it carries.
    pub class: EdgeClass,
    /// Bytes of the effect's normalised body it carries (the value's length for value
    /// edges).
    pub overlap_bytes: u64,
}

/// The effect being decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowTarget<'a> {
    /// The effect's host, as in its URL.
    pub host: &'a str,
    /// The effect's port.
    pub port: u16,
    /// Why its lineage is incomplete, when it is (matched by `from = ["unanalysed"]`).
    pub unanalysed: Option<&'a str>,
}

/// One flow an effect violates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowVerdict {
    /// The flow's id.
    pub flow: String,
    /// What it decides.
    pub action: FlowAction,
    /// Why (the flow's reason).
    pub reason: String,
    /// The index, in the edges given, of the edge that carries the most (none for an
    /// `unanalysed` match).
    pub edge: Option<usize>,
    /// The labels that matched.
    pub labels: Vec<String>,
}

impl crate::Policy {
    /// The `[[flow]]` rules, in file order.
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    /// The labels a read passed by `rule` carries under this policy (empty for a rule
    /// this policy does not have).
    pub fn labels_of(&self, rule: &str) -> &[String] {
        self.rule(rule).map(Rule::labels).unwrap_or(&[])
    }

    /// The flows `edges` into an effect bound for `target` violate, one verdict per flow,
    /// blocks first. An edge matches a flow when each of its `from`, `rules` and `hosts`
    /// keys that is given matches (any entry of a list), `to` matches the effect's host
    /// and `except` does not, and a content or header edge carries at least
    /// `min_overlap_bytes`.
    pub fn evaluate_flows(
        &self,
        target: &FlowTarget<'_>,
        edges: &[FlowEdge<'_>],
    ) -> Vec<FlowVerdict> {
        let mut out = Vec::new();
        let target_host = Host::parse(target.host);
        for flow in &self.flows {
            if let Some(verdict) = self.evaluate_flow(flow, target, target_host.as_ref(), edges) {
                out.push(verdict);
            }
        }
        out.sort_by_key(|v| std::cmp::Reverse(v.action));
        out
    }

    fn evaluate_flow(
        &self,
        flow: &Flow,
        target: &FlowTarget<'_>,
        target_host: Option<&Host>,
        edges: &[FlowEdge<'_>],
    ) -> Option<FlowVerdict> {
        if target_host.is_some_and(|h| flow.excepts_host(h)) {
            return None;
        }
        let to_matches = |source: Option<(&str, u16)>| match &flow.to {
            FlowTo::Any => true,
            FlowTo::External => match source {
                None => true,
                Some((host, port)) => {
                    port != target.port || Host::parse(host).as_ref() != target_host
                }
            },
            FlowTo::Hosts(_) => {
                target_host.is_some_and(|h| flow.to_hosts.iter().any(|p| p.matches(h)))
            }
        };
        if let Some(why) = target.unanalysed {
            if flow.guards_unanalysed() && to_matches(None) {
                let _ = why;
                return Some(FlowVerdict {
                    flow: flow.id.clone(),
                    action: flow.action,
                    reason: flow.reason(),
                    edge: None,
                    labels: vec![UNANALYSED.to_owned()],
                });
            }
        }
        let mut best: Option<(usize, u64, Vec<String>)> = None;
        for (index, edge) in edges.iter().enumerate() {
            let labels = self.edge_labels(edge);
            let matched: Vec<String> = if flow.from.is_empty() {
                Vec::new()
            } else {
                let hit: Vec<String> = labels
                    .iter()
                    .filter(|l| flow.from.contains(l))
                    .cloned()
                    .collect();
                if hit.is_empty() {
                    continue;
                }
                hit
            };
            if !flow.rules.is_empty()
                && !edge
                    .source
                    .rule
                    .is_some_and(|r| flow.rules.iter().any(|f| f == r))
            {
                continue;
            }
            if !flow.hosts.is_empty() {
                let host = Host::parse(edge.source.host);
                if !host.is_some_and(|h| flow.hosts.iter().any(|(_, p)| p.matches(&h))) {
                    continue;
                }
            }
            if !to_matches(Some((edge.source.host, edge.source.port))) {
                continue;
            }
            if matches!(edge.class, EdgeClass::Content | EdgeClass::Header)
                && edge.overlap_bytes < flow.min_overlap_bytes
            {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|(_, bytes, _)| edge.overlap_bytes > *bytes)
            {
                best = Some((index, edge.overlap_bytes, matched));
            }
        }
        let (index, _, labels) = best?;
        Some(FlowVerdict {
            flow: flow.id.clone(),
            action: flow.action,
            reason: flow.reason(),
            edge: Some(index),
            labels,
        })
    }

    /// Every label an edge carries: its read's recorded labels, its rule's labels under
    /// this policy, and the built-in labels of its class.
    pub fn edge_labels(&self, edge: &FlowEdge<'_>) -> BTreeSet<String> {
        let mut labels: BTreeSet<String> = edge.source.labels.iter().cloned().collect();
        match edge.class {
            EdgeClass::Placeholder => {
                if let Some(rule) = edge.source.rule {
                    labels.insert(format!("{PLACEHOLDER_OF}{rule}"));
                }
            }
            EdgeClass::Credential => {
                labels.insert(CREDENTIAL.to_owned());
                if let Some(rule) = edge.source.rule {
                    labels.extend(self.labels_of(rule).iter().cloned());
                }
            }
            EdgeClass::Content | EdgeClass::Header => {
                if let Some(rule) = edge.source.rule {
                    labels.extend(self.labels_of(rule).iter().cloned());
                }
            }
        }
        labels
    }
}

mod compile;
pub(crate) use compile::{compile_flow, compile_labels};

#[cfg(test)]
mod tests;
