//! Credential reach in `policy diff`: where each credential may go, and which rules add it.
//!
//! A credential added, a bind that reaches a host, method or path it did not, and a rule
//! that injects a credential it did not are **widenings** ("new credential reach"): the
//! secret can now leave on requests it could not before. The reverse narrows.

use serde::Serialize;

use super::ChangeKind;
use crate::credential::Bind;
use crate::matcher::MethodMatcher;
use crate::{Policy, Rule};

/// One change of credential reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialChange {
    /// Widens (new reach) or narrows.
    pub kind: ChangeKind,
    /// The credential's name.
    pub credential: String,
    /// What changed, e.g. `bind host "*.github.com" added` or `rule "gh-read" injects it`.
    pub what: String,
}

/// Credential reach of `old` against `new`, widenings first.
pub(super) fn compare(old: &Policy, new: &Policy) -> Vec<CredentialChange> {
    let mut out = Vec::new();
    let mut push = |kind, credential: &str, what: String| {
        out.push(CredentialChange {
            kind,
            credential: credential.to_owned(),
            what,
        });
    };
    for credential in new.credentials() {
        match old.credential(credential.name()) {
            None => push(
                ChangeKind::Widens,
                credential.name(),
                format!(
                    "credential added (bind hosts {:?})",
                    credential.bind_hosts()
                ),
            ),
            Some(before) => {
                for (kind, what) in bind_changes(before.bind(), credential.bind()) {
                    push(kind, credential.name(), what);
                }
                if before.place() != credential.place() {
                    push(
                        ChangeKind::Rerouted,
                        credential.name(),
                        format!(
                            "placed differently: {:?} -> {:?}",
                            before.place(),
                            credential.place()
                        ),
                    );
                }
            }
        }
    }
    for credential in old.credentials() {
        if new.credential(credential.name()).is_none() {
            push(
                ChangeKind::Narrows,
                credential.name(),
                "credential removed".into(),
            );
        }
    }
    let injects =
        |policy: &Policy, id: &str| policy.rule(id).and_then(Rule::inject).map(str::to_owned);
    for rule in new.rules() {
        let before = injects(old, rule.id());
        let now = rule.inject().map(str::to_owned);
        if before == now {
            continue;
        }
        let existed = old.rule(rule.id()).is_some();
        if let Some(name) = &now {
            push(
                ChangeKind::Widens,
                name,
                if existed {
                    format!("rule \"{}\" now injects it", rule.id())
                } else {
                    format!("new rule \"{}\" injects it", rule.id())
                },
            );
        }
        if let Some(name) = &before {
            push(
                ChangeKind::Narrows,
                name,
                format!("rule \"{}\" no longer injects it", rule.id()),
            );
        }
    }
    for rule in old.rules() {
        if let (Some(name), None) = (rule.inject(), new.rule(rule.id())) {
            push(
                ChangeKind::Narrows,
                name,
                format!("rule \"{}\" (which injected it) removed", rule.id()),
            );
        }
    }
    out.sort_by(|a, b| {
        a.kind
            .cmp(&b.kind)
            .then(a.credential.cmp(&b.credential))
            .then(a.what.cmp(&b.what))
    });
    out
}

/// Hosts, methods and paths a bind gained (widens) or lost (narrows). A pattern counts
/// as gained when no pattern of the old bind covers it.
fn bind_changes(old: &Bind, new: &Bind) -> Vec<(ChangeKind, String)> {
    let mut out = Vec::new();
    for host in &new.hosts {
        if !old.hosts.iter().any(|before| before.covers(host)) {
            out.push((ChangeKind::Widens, format!("bind host \"{host}\" added")));
        }
    }
    for host in &old.hosts {
        if !new.hosts.iter().any(|now| now.covers(host)) {
            out.push((ChangeKind::Narrows, format!("bind host \"{host}\" removed")));
        }
    }
    match (&old.methods, &new.methods) {
        (None, None) => {}
        (Some(before), None) => out.push((
            ChangeKind::Widens,
            format!(
                "bind methods {} removed: any method",
                describe_methods(before)
            ),
        )),
        (None, Some(now)) => out.push((
            ChangeKind::Narrows,
            format!("bind methods limited to {}", describe_methods(now)),
        )),
        (Some(before), Some(now)) => {
            if !before.covers(now) {
                out.push((
                    ChangeKind::Widens,
                    format!(
                        "bind methods {} -> {}",
                        describe_methods(before),
                        describe_methods(now)
                    ),
                ));
            }
            if !now.covers(before) {
                out.push((
                    ChangeKind::Narrows,
                    format!(
                        "bind methods {} -> {}",
                        describe_methods(before),
                        describe_methods(now)
                    ),
                ));
            }
        }
    }
    match (old.paths.is_empty(), new.paths.is_empty()) {
        (true, true) => {}
        (false, true) => out.push((
            ChangeKind::Widens,
            "bind paths removed: any path".to_owned(),
        )),
        (true, false) => out.push((
            ChangeKind::Narrows,
            format!(
                "bind paths limited to {}",
                new.paths
                    .iter()
                    .map(|p| format!("\"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        (false, false) => {
            for path in &new.paths {
                if !old.paths.iter().any(|before| before.covers(path)) {
                    out.push((ChangeKind::Widens, format!("bind path \"{path}\" added")));
                }
            }
            for path in &old.paths {
                if !new.paths.iter().any(|now| now.covers(path)) {
                    out.push((ChangeKind::Narrows, format!("bind path \"{path}\" removed")));
                }
            }
        }
    }
    out
}

fn describe_methods(methods: &MethodMatcher) -> String {
    match methods {
        MethodMatcher::Read => "read".into(),
        MethodMatcher::Write => "write".into(),
        MethodMatcher::List(list) => format!("[{}]", list.join(", ")),
    }
}
