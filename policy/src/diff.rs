//! `airlock policy diff`: what a policy change widens and narrows.
//!
//! Both policies decide the same set of probe requests, built from every rule of either
//! file (one request per rule, scheme, port and method it names; its host and path
//! patterns instantiated with sample labels and segments), plus requests to a host no rule
//! names. A probe whose action becomes more permissive (deny → stage → pass) *widens*; less
//! permissive *narrows*; the same action by a different rule is *rerouted* (its
//! obligations may differ). Rules added, removed or edited are listed by id. The probes
//! cover every rule, so every rule-level change shows; they are samples, not a proof
//! about all possible requests.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::matcher::{HostPattern, MethodMatcher, PathPattern, PortMatcher};
use crate::{Action, Policy, RequestFacts, Rule, Scheme};

/// The direction of one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// More permissive: deny → stage → pass → tunnel.
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
    /// The probe's URL.
    pub url: String,
    /// The action under the old policy.
    pub old_action: Action,
    /// The deciding rule under the old policy (`None`: the default).
    pub old_rule: Option<String>,
    /// The action under the new policy.
    pub new_action: Action,
    /// The deciding rule under the new policy.
    pub new_rule: Option<String>,
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
}

impl PolicyDiff {
    /// True when some probe is more permissive under the new policy, or the default is.
    pub fn widens(&self) -> bool {
        self.changes.iter().any(|c| c.kind == ChangeKind::Widens)
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

/// A probe request (owned).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Probe {
    scheme: &'static str,
    host: String,
    port: u16,
    method: String,
    path: String,
}

impl Probe {
    fn facts(&self) -> RequestFacts<'_> {
        RequestFacts::new(
            if self.scheme == "https" {
                Scheme::Https
            } else {
                Scheme::Http
            },
            &self.host,
            self.port,
            &self.method,
            &self.path,
            matches!(self.method.as_str(), "POST" | "PUT" | "PATCH"),
        )
    }

    fn url(&self) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            format!("{}://{}{}", self.scheme, self.host, self.path)
        } else {
            format!("{}://{}:{}{}", self.scheme, self.host, self.port, self.path)
        }
    }
}

impl Policy {
    /// Compares this (old) policy with `new`; see the module docs for the method.
    pub fn diff(&self, new: &Policy) -> PolicyDiff {
        let mut probes = BTreeSet::new();
        for rule in self.rules.iter().chain(&new.rules) {
            probes_of(rule, &mut probes);
        }
        for method in ["GET", "POST"] {
            probes.insert(Probe {
                scheme: "https",
                host: "unlisted.airlock-diff.example".into(),
                port: 443,
                method: method.into(),
                path: "/".into(),
            });
        }
        let mut changes = Vec::new();
        for probe in &probes {
            let facts = probe.facts();
            let old = self.decide(&facts);
            let new_decision = new.decide(&facts);
            let kind = match permissiveness(new_decision.action).cmp(&permissiveness(old.action)) {
                std::cmp::Ordering::Greater => ChangeKind::Widens,
                std::cmp::Ordering::Less => ChangeKind::Narrows,
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
            });
        }
        changes.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.url.cmp(&b.url)));
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
        }
    }
}

/// The probes that exercise `rule`: each scheme and port it can match, each method it
/// names (GET and POST for presets or no method), its path pattern instantiated.
fn probes_of(rule: &Rule, out: &mut BTreeSet<Probe>) {
    let host = sample_host(&rule.host);
    let schemes: Vec<Scheme> = match rule.scheme {
        Some(scheme) => vec![scheme],
        None => vec![Scheme::Https, Scheme::Http],
    };
    let methods: Vec<String> = match &rule.method {
        Some(MethodMatcher::List(methods)) => methods.clone(),
        Some(MethodMatcher::Read) => vec!["GET".into()],
        Some(MethodMatcher::Write) => vec!["POST".into(), "DELETE".into()],
        None => vec!["GET".into(), "POST".into()],
    };
    let paths = match &rule.path {
        Some(pattern) => vec![sample_path(pattern)],
        None => vec!["/".to_owned()],
    };
    for scheme in schemes {
        let ports = match &rule.port {
            PortMatcher::SchemeDefault => vec![scheme.default_port()],
            PortMatcher::List(ports) => ports.clone(),
        };
        for port in ports {
            for method in &methods {
                for path in &paths {
                    out.insert(Probe {
                        scheme: scheme.as_str(),
                        host: host.clone(),
                        port,
                        method: method.clone(),
                        path: path.clone(),
                    });
                }
            }
        }
    }
}

fn sample_host(pattern: &HostPattern) -> String {
    match pattern {
        HostPattern::Exact(name) => name.clone(),
        HostPattern::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        HostPattern::Ip(ip) => ip.to_string(),
        HostPattern::OneLabel(suffix) => format!("sample.{suffix}"),
        HostPattern::AnyDepth(suffix) => format!("deep.sample.{suffix}"),
    }
}

fn sample_path(pattern: &PathPattern) -> String {
    pattern.sample()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::from_toml_str(text, "<test>").expect("valid policy")
    }

    const OLD: &str = r#"
version = 1
[[rule]]
id = "gh-read"
host = "api.github.com"
method = "read"
action = "pass"

[[rule]]
id = "gh-pulls"
host = "api.github.com"
method = ["POST"]
path = "/repos/*/*/pulls"
action = "stage"

[[rule]]
id = "hooks"
host = "*.hooks.example"
action = "stage"
"#;

    #[test]
    fn widening_a_stage_rule_to_pass_is_reported_as_a_widening() {
        let new = OLD.replacen(
            "path = \"/repos/*/*/pulls\"\naction = \"stage\"",
            "path = \"/repos/*/*/pulls\"\naction = \"pass\"",
            1,
        );
        let diff = policy(OLD).diff(&policy(&new));
        assert!(diff.widens());
        assert_eq!(diff.rules_changed, ["gh-pulls"]);
        let widened: Vec<_> = diff
            .changes
            .iter()
            .filter(|c| c.kind == ChangeKind::Widens)
            .map(|c| (c.method.as_str(), c.url.as_str()))
            .collect();
        // A rule without `scheme` matches plain http too.
        assert_eq!(
            widened,
            [
                ("POST", "http://api.github.com/repos/x/x/pulls"),
                ("POST", "https://api.github.com/repos/x/x/pulls")
            ]
        );
    }

    #[test]
    fn removing_a_rule_narrows_what_it_allowed_and_names_it() {
        let new = OLD.replacen(
            "[[rule]]\nid = \"hooks\"\nhost = \"*.hooks.example\"\naction = \"stage\"\n",
            "",
            1,
        );
        let diff = policy(OLD).diff(&policy(&new));
        assert!(!diff.widens());
        assert_eq!(diff.rules_removed, ["hooks"]);
        assert!(diff.changes.iter().all(|c| c.kind == ChangeKind::Narrows));
        assert!(diff
            .changes
            .iter()
            .any(|c| c.url == "https://sample.hooks.example/" && c.new_rule.is_none()));
    }

    #[test]
    fn a_default_change_shows_on_unlisted_hosts() {
        let new = format!(
            "default = \"stage\"\n{}",
            OLD.trim_start().replacen("version = 1\n", "", 1)
        );
        let new = format!("version = 1\n{new}");
        let diff = policy(OLD).diff(&policy(&new));
        assert_eq!(diff.default, Some((Action::Deny, Action::Stage)));
        assert!(diff.widens());
        assert!(diff
            .changes
            .iter()
            .any(|c| c.url.starts_with("https://unlisted.") && c.new_action == Action::Stage));
    }

    #[test]
    fn identical_policies_have_no_changes() {
        let diff = policy(OLD).diff(&policy(OLD));
        assert!(diff.changes.is_empty() && !diff.widens() && !diff.rules_reordered);
        assert!(diff.rules_added.is_empty() && diff.rules_removed.is_empty());
    }

    #[test]
    fn reordering_a_shadowing_rule_is_seen() {
        let text = r#"
version = 1
[[rule]]
id = "deny-admin"
host = "api.example.com"
path = "/admin/**"
action = "deny"

[[rule]]
id = "all"
host = "api.example.com"
action = "pass"
"#;
        let swapped = r#"
version = 1
[[rule]]
id = "all"
host = "api.example.com"
action = "pass"

[[rule]]
id = "deny-admin"
host = "api.example.com"
path = "/admin/**"
action = "deny"
"#;
        let diff = policy(text).diff(&policy(swapped));
        assert!(diff.rules_reordered);
        assert!(diff.widens(), "{diff:#?}");
        assert!(diff
            .changes
            .iter()
            .any(|c| c.url == "https://api.example.com/admin/x" && c.new_action == Action::Pass));
    }
}
