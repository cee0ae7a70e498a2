//! `airlock policy diff`: what a policy change widens and narrows.
//!
//! Both policies decide the same set of probe requests, built from every rule of either
//! file (one request per rule, scheme, port and method it names; its host and path
//! patterns instantiated with sample labels and segments; for a rule with `query`,
//! `headers`, `json`, `graphql` or `jsonrpc` conditions, also one carrying values that
//! satisfy them), plus requests to a host no rule names. A probe whose action becomes more
//! permissive (deny → stage → pass) *widens*; less permissive *narrows*; the same action
//! by a different rule is *rerouted* (its obligations may differ). A probe that keeps its
//! action but now gets a credential injected widens too (new credential reach), and one
//! that loses it narrows. Credentials are compared as well ([`CredentialChange`]): one
//! added, a bind widened (host, method or path), a rule that newly injects. Rules added,
//! removed or edited are listed by id. Flow rules are compared by id, key by key
//! ([`FlowChange`]): a flow removed or weakened widens. The probes cover every rule, so
//! every rule-level change shows; they are samples, not a proof about all possible
//! requests.

mod flows;
mod probe;
mod reach;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{Action, Policy, Rule};
pub use flows::FlowChange;
use probe::Probe;
pub use reach::CredentialChange;

/// The direction of one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// More permissive: deny → stage → pass → tunnel, or a credential reaches further.
    Widens,
    /// Less permissive.
    Narrows,
    /// The same action, decided by a different rule.
    Rerouted,
}

/// One probe request whose decision changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Widens, narrows or rerouted.
    pub kind: ChangeKind,
    /// The probe's method.
    pub method: String,
    /// The probe's URL (with the sample query, when the probe has one).
    pub url: String,
    /// The action under the old policy.
    pub old_action: Action,
    /// The deciding rule under the old policy (`None`: the default).
    pub old_rule: Option<String>,
    /// The action under the new policy.
    pub new_action: Action,
    /// The deciding rule under the new policy.
    pub new_rule: Option<String>,
    /// The probe's sample header lines (for rules with a `headers` matcher); empty
    /// otherwise.
    pub headers: Vec<(String, String)>,
    /// The probe's sample body (for rules with a body matcher), as text.
    pub body: Option<String>,
    /// The credential the old decision injects.
    pub old_inject: Option<String>,
    /// The credential the new decision injects.
    pub new_inject: Option<String>,
}

/// Everything `policy diff` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyDiff {
    /// Revision of the old policy.
    pub old_revision: String,
    /// Revision of the new policy.
    pub new_revision: String,
    /// `(old, new)` when the default action changed.
    pub default: Option<(Action, Action)>,
    /// Rule ids only in the new policy.
    pub rules_added: Vec<String>,
    /// Rule ids only in the old policy.
    pub rules_removed: Vec<String>,
    /// Rule ids in both whose conditions, action or obligations differ.
    pub rules_changed: Vec<String>,
    /// Rule ids in both at a different position relative to each other.
    pub rules_reordered: bool,
    /// Probe requests whose decision changed, widenings first.
    pub changes: Vec<Change>,
    /// How many probe requests were decided.
    pub probes: usize,
    /// Changes of credential reach: credentials and binds added or removed, rules that
    /// newly inject or no longer do. Widenings first.
    pub credentials: Vec<CredentialChange>,
    /// Changes of `allow_private` (top level and per rule): private ranges the policy lets
    /// destinations resolve to. Widenings first.
    pub private: Vec<PrivateChange>,
    /// Changes of the `[[flow]]` rules: flows removed or weakened (widens), added or made
    /// stricter (narrows), and rules that lost or gained labels flows name. Widenings first.
    pub flows: Vec<FlowChange>,
}

/// One `allow_private` network opened or closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrivateChange {
    /// Widens (newly allowed) or narrows (no longer allowed).
    pub kind: ChangeKind,
    /// `(top level)` or the rule's id.
    pub scope: String,
    /// The CIDR.
    pub network: String,
}

/// `allow_private` networks by scope, for [`PolicyDiff::private`].
fn private_reach(policy: &Policy) -> BTreeSet<(String, String)> {
    let mut reach: BTreeSet<(String, String)> = policy
        .allow_private
        .iter()
        .map(|net| ("(top level)".to_owned(), net.to_string()))
        .collect();
    for rule in &policy.rules {
        reach.extend(
            rule.allow_private
                .iter()
                .map(|net| (rule.id.clone(), net.to_string())),
        );
    }
    reach
}

fn compare_private(old: &Policy, new: &Policy) -> Vec<PrivateChange> {
    let (before, after) = (private_reach(old), private_reach(new));
    let opened = after
        .difference(&before)
        .map(|(scope, network)| PrivateChange {
            kind: ChangeKind::Widens,
            scope: scope.clone(),
            network: network.clone(),
        });
    let closed = before
        .difference(&after)
        .map(|(scope, network)| PrivateChange {
            kind: ChangeKind::Narrows,
            scope: scope.clone(),
            network: network.clone(),
        });
    opened.chain(closed).collect()
}

impl PolicyDiff {
    /// True when some probe is more permissive under the new policy, the default is, a
    /// credential reaches further, or a flow rule guards less.
    pub fn widens(&self) -> bool {
        self.changes.iter().any(|c| c.kind == ChangeKind::Widens)
            || self.private.iter().any(|c| c.kind == ChangeKind::Widens)
            || self.flows.iter().any(|c| c.kind == ChangeKind::Widens)
            || self
                .credentials
                .iter()
                .any(|c| c.kind == ChangeKind::Widens)
            || self
                .default
                .is_some_and(|(old, new)| permissiveness(new) > permissiveness(old))
    }
}

fn permissiveness(action: Action) -> u8 {
    match action {
        Action::Deny => 0,
        Action::Stage => 1,
        Action::Pass => 2,
        // Bytes pass uninspected: wider than any pass.
        Action::Tunnel => 3,
    }
}

/// The credential a decision's rule injects.
fn injected(policy: &Policy, rule: Option<&str>) -> Option<String> {
    rule.and_then(|id| policy.rule(id))
        .and_then(Rule::inject)
        .map(str::to_owned)
}

impl Policy {
    /// Compares this (old) policy with `new`; see the module docs for the method.
    pub fn diff(&self, new: &Policy) -> PolicyDiff {
        let mut probes = BTreeSet::new();
        for rule in self.rules.iter().chain(&new.rules) {
            probe::probes_of(rule, &mut probes);
        }
        for method in ["GET", "POST"] {
            probes.insert(Probe::line(
                "https",
                "unlisted.airlock-diff.example",
                443,
                method,
                "/",
            ));
        }
        let mut changes = Vec::new();
        for probe in &probes {
            let headers = probe.header_pairs();
            let facts = probe.facts(&headers);
            let old = self.decide(&facts);
            let new_decision = new.decide(&facts);
            let old_inject = injected(self, old.rule.as_deref());
            let new_inject = injected(new, new_decision.rule.as_deref());
            let kind = match permissiveness(new_decision.action).cmp(&permissiveness(old.action)) {
                std::cmp::Ordering::Greater => ChangeKind::Widens,
                std::cmp::Ordering::Less => ChangeKind::Narrows,
                // The same action, now with a credential it did not have (or another one).
                std::cmp::Ordering::Equal if new_inject.is_some() && new_inject != old_inject => {
                    ChangeKind::Widens
                }
                std::cmp::Ordering::Equal if old_inject.is_some() && new_inject.is_none() => {
                    ChangeKind::Narrows
                }
                std::cmp::Ordering::Equal if old.rule != new_decision.rule => ChangeKind::Rerouted,
                std::cmp::Ordering::Equal => continue,
            };
            changes.push(Change {
                kind,
                method: probe.method.clone(),
                url: probe.url(),
                old_action: old.action,
                old_rule: old.rule,
                new_action: new_decision.action,
                new_rule: new_decision.rule,
                headers: probe.headers.clone(),
                body: probe.body.clone(),
                old_inject,
                new_inject,
            });
        }
        changes.sort_by(|a, b| {
            a.kind
                .cmp(&b.kind)
                .then(a.url.cmp(&b.url))
                .then(a.method.cmp(&b.method))
        });
        let old_rules: BTreeMap<&str, &Rule> = self.rules.iter().map(|r| (r.id(), r)).collect();
        let new_rules: BTreeMap<&str, &Rule> = new.rules.iter().map(|r| (r.id(), r)).collect();
        let rules_added = new_rules
            .keys()
            .filter(|id| !old_rules.contains_key(*id))
            .map(|id| (*id).to_owned())
            .collect();
        let rules_removed = old_rules
            .keys()
            .filter(|id| !new_rules.contains_key(*id))
            .map(|id| (*id).to_owned())
            .collect();
        let rules_changed = old_rules
            .iter()
            .filter(|(id, old)| {
                new_rules
                    .get(*id)
                    .is_some_and(|new| format!("{old:?}") != format!("{new:?}"))
            })
            .map(|(id, _)| (*id).to_owned())
            .collect();
        let common_old: Vec<&str> = self
            .rules
            .iter()
            .map(Rule::id)
            .filter(|id| new_rules.contains_key(id))
            .collect();
        let common_new: Vec<&str> = new
            .rules
            .iter()
            .map(Rule::id)
            .filter(|id| old_rules.contains_key(id))
            .collect();
        PolicyDiff {
            old_revision: self.revision.clone(),
            new_revision: new.revision.clone(),
            default: (self.default != new.default).then_some((self.default, new.default)),
            rules_added,
            rules_removed,
            rules_changed,
            rules_reordered: common_old != common_new,
            changes,
            probes: probes.len(),
            credentials: reach::compare(self, new),
            private: compare_private(self, new),
            flows: flows::compare(self, new),
        }
    }
}
