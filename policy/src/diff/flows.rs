//! `policy diff` over `[[flow]]` rules: a flow removed or weakened widens what data may
//! reach where without a human; a flow added or made stricter narrows it. Compared by flow
//! id, key by key (docs/policy.md#flow-rules), plus the labels of the rules that flows name.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::ChangeKind;
use crate::{Flow, FlowAction, FlowTo, Policy};

/// One change to the flow rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowChange {
    /// Widens (the flow guards less, or lets more through) or narrows.
    pub kind: ChangeKind,
    /// The flow's id, or `rule.ID` for a change of a rule's labels.
    pub flow: String,
    /// What changed, e.g. `action block -> review`.
    pub what: String,
}

/// How far `to` reaches: `any` guards every destination, `external` every other origin,
/// a list only the hosts it names.
fn reach(to: &FlowTo) -> u8 {
    match to {
        FlowTo::Any => 2,
        FlowTo::External => 1,
        FlowTo::Hosts(_) => 0,
    }
}

fn show_to(to: &FlowTo) -> String {
    match to {
        FlowTo::Any => "\"any\"".to_owned(),
        FlowTo::External => "\"external\"".to_owned(),
        FlowTo::Hosts(hosts) => format!("{hosts:?}"),
    }
}

/// The changes of one guard key (`from`, `rules`, `hosts`): an empty list guards
/// anything, entries of a list are alternatives.
fn guard_changes(key: &str, old: &[String], new: &[String], out: &mut Vec<(ChangeKind, String)>) {
    let before: BTreeSet<&String> = old.iter().collect();
    let after: BTreeSet<&String> = new.iter().collect();
    match (before.is_empty(), after.is_empty()) {
        (true, true) => {}
        (false, true) => out.push((
            ChangeKind::Narrows,
            format!("`{key}` removed: no longer limited to {old:?}"),
        )),
        (true, false) => out.push((
            ChangeKind::Widens,
            format!("`{key}` added: now limited to {new:?}"),
        )),
        (false, false) => {
            let lost: Vec<&String> = before.difference(&after).copied().collect();
            let gained: Vec<&String> = after.difference(&before).copied().collect();
            if !lost.is_empty() {
                out.push((ChangeKind::Widens, format!("`{key}` lost {lost:?}")));
            }
            if !gained.is_empty() {
                out.push((ChangeKind::Narrows, format!("`{key}` gained {gained:?}")));
            }
        }
    }
}

/// What changed between two versions of the same flow.
fn flow_changes(old: &Flow, new: &Flow) -> Vec<(ChangeKind, String)> {
    let mut out = Vec::new();
    match (old.action(), new.action()) {
        (FlowAction::Block, FlowAction::Review) => {
            out.push((ChangeKind::Widens, "action block -> review".to_owned()))
        }
        (FlowAction::Review, FlowAction::Block) => {
            out.push((ChangeKind::Narrows, "action review -> block".to_owned()))
        }
        _ => {}
    }
    guard_changes("from", old.from(), new.from(), &mut out);
    guard_changes("rules", old.rules(), new.rules(), &mut out);
    let (old_hosts, new_hosts): (Vec<String>, Vec<String>) = (
        old.hosts().map(str::to_owned).collect(),
        new.hosts().map(str::to_owned).collect(),
    );
    guard_changes("hosts", &old_hosts, &new_hosts, &mut out);
    match (old.to(), new.to()) {
        (FlowTo::Hosts(before), FlowTo::Hosts(after)) => {
            let (before, after): (BTreeSet<&String>, BTreeSet<&String>) =
                (before.iter().collect(), after.iter().collect());
            let lost: Vec<&String> = before.difference(&after).copied().collect();
            let gained: Vec<&String> = after.difference(&before).copied().collect();
            if !lost.is_empty() {
                out.push((ChangeKind::Widens, format!("`to` lost {lost:?}")));
            }
            if !gained.is_empty() {
                out.push((ChangeKind::Narrows, format!("`to` gained {gained:?}")));
            }
        }
        (before, after) if reach(before) != reach(after) => {
            let kind = if reach(after) < reach(before) {
                ChangeKind::Widens
            } else {
                ChangeKind::Narrows
            };
            out.push((
                kind,
                format!("`to` {} -> {}", show_to(before), show_to(after)),
            ));
        }
        _ => {}
    }
    // An `except` entry is a destination the flow stops judging: gaining one widens.
    let (before, after): (BTreeSet<&str>, BTreeSet<&str>) =
        (old.except().collect(), new.except().collect());
    let gained: Vec<&str> = after.difference(&before).copied().collect();
    let lost: Vec<&str> = before.difference(&after).copied().collect();
    if !gained.is_empty() {
        out.push((ChangeKind::Widens, format!("`except` gained {gained:?}")));
    }
    if !lost.is_empty() {
        out.push((ChangeKind::Narrows, format!("`except` lost {lost:?}")));
    }
    let (before, after) = (old.min_overlap_bytes(), new.min_overlap_bytes());
    if after != before {
        let kind = if after > before {
            ChangeKind::Widens
        } else {
            ChangeKind::Narrows
        };
        out.push((kind, format!("min_overlap_bytes {before} -> {after}")));
    }
    out
}

/// Compares the flow rules of `old` and `new`, widenings first.
pub(super) fn compare(old: &Policy, new: &Policy) -> Vec<FlowChange> {
    let mut out = Vec::new();
    let mut push = |kind, flow: &str, what: String| {
        out.push(FlowChange {
            kind,
            flow: flow.to_owned(),
            what,
        })
    };
    let old_flows: BTreeMap<&str, &Flow> = old.flows().iter().map(|f| (f.id(), f)).collect();
    let new_flows: BTreeMap<&str, &Flow> = new.flows().iter().map(|f| (f.id(), f)).collect();
    for (id, flow) in &old_flows {
        match new_flows.get(id) {
            None => push(
                ChangeKind::Widens,
                id,
                format!("flow removed (was {})", flow.action().as_str()),
            ),
            Some(now) => {
                for (kind, what) in flow_changes(flow, now) {
                    push(kind, id, what);
                }
            }
        }
    }
    for (id, flow) in &new_flows {
        if !old_flows.contains_key(id) {
            push(
                ChangeKind::Narrows,
                id,
                format!("flow added ({})", flow.action().as_str()),
            );
        }
    }
    // A rule's labels are what `from` matches: a label a flow names, lost by a rule,
    // takes that rule's reads out of the flow.
    let named: BTreeSet<&str> = new
        .flows()
        .iter()
        .flat_map(|f| f.from().iter().map(String::as_str))
        .collect();
    for rule in &old.rules {
        let Some(now) = new.rule(rule.id()) else {
            continue;
        };
        let lost: Vec<&str> = rule
            .labels()
            .iter()
            .map(String::as_str)
            .filter(|l| named.contains(l) && !now.labels().iter().any(|n| n == l))
            .collect();
        let gained: Vec<&str> = now
            .labels()
            .iter()
            .map(String::as_str)
            .filter(|l| named.contains(l) && !rule.labels().iter().any(|o| o == l))
            .collect();
        let scope = format!("rule.{}", rule.id());
        if !lost.is_empty() {
            push(
                ChangeKind::Widens,
                &scope,
                format!("lost label(s) {lost:?} that flows name: its reads are no longer guarded by them"),
            );
        }
        if !gained.is_empty() {
            push(
                ChangeKind::Narrows,
                &scope,
                format!("gained label(s) {gained:?} that flows name"),
            );
        }
    }
    out.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.flow.cmp(&b.flow)));
    out
}
