//! Compiling `[[flow]]` tables ([`super::WireFlow`]) and rules' `labels` against the
//! compiled rules.

use std::collections::BTreeSet;

use super::{
    Flow, FlowAction, FlowTo, WireFlow, WireFlowAction, WireFlowTo, CREDENTIAL, PLACEHOLDER_OF,
    UNANALYSED,
};
use crate::error::FieldProblem;
use crate::matcher::HostPattern;
use crate::{valid_id, Action, Rule};

/// Checks a rule's `labels`: only pass rules label reads, each label is an id and not a
/// built-in.
pub(crate) fn compile_labels(
    raw: Option<Vec<String>>,
    action: Action,
) -> Result<Vec<String>, FieldProblem> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    if action != Action::Pass {
        return Err(FieldProblem::new(
            "labels",
            "only a pass rule labels the reads it passes; flows name these labels in `from`",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for label in raw {
        if label == CREDENTIAL || label == UNANALYSED || label.starts_with(PLACEHOLDER_OF) {
            return Err(FieldProblem::new(
                "labels",
                format!("\"{label}\" is a built-in label that lineage sets itself"),
            ));
        }
        if !valid_id(&label) {
            return Err(FieldProblem::new(
                "labels",
                format!(
                    "\"{label}\" is not a valid label: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
                ),
            ));
        }
        if !out.contains(&label) {
            out.push(label);
        }
    }
    Ok(out)
}

/// Compiles one `[[flow]]` against the compiled rules (labels, ids and hosts it names must
/// exist) and the flows before it (ids are unique).
pub(crate) fn compile_flow(
    wire: WireFlow,
    rules: &[Rule],
    earlier: &[Flow],
) -> Result<Flow, FieldProblem> {
    let id = wire.id.ok_or_else(|| FieldProblem::new("id", "required"))?;
    if !valid_id(&id) {
        return Err(FieldProblem::new(
            "id",
            format!("\"{id}\" is not a valid id: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"),
        ));
    }
    if let Some(first) = earlier.iter().position(|f| f.id == id) {
        return Err(FieldProblem::new(
            "id",
            format!("duplicate id; first used by flow #{}", first + 1),
        ));
    }
    let action = match wire.action {
        None => {
            return Err(FieldProblem::new(
                "action",
                "required: \"block\" or \"review\"",
            ))
        }
        Some(WireFlowAction::Block) => FlowAction::Block,
        Some(WireFlowAction::Review) => FlowAction::Review,
    };
    let declared: BTreeSet<&str> = rules
        .iter()
        .flat_map(|r| r.labels().iter().map(String::as_str))
        .collect();
    let from = wire.from.unwrap_or_default();
    for label in &from {
        if label == CREDENTIAL || label == UNANALYSED {
            continue;
        }
        if let Some(rule) = label.strip_prefix(PLACEHOLDER_OF) {
            match rules.iter().find(|r| r.id() == rule) {
                Some(r) if r.action() == Action::Stage => continue,
                Some(_) => {
                    return Err(FieldProblem::new(
                        "from",
                        format!("\"{label}\": rule \"{rule}\" is not a stage rule, so it hands out no placeholders"),
                    ))
                }
                None => {
                    return Err(FieldProblem::new(
                        "from",
                        format!("\"{label}\": no rule has id \"{rule}\""),
                    ))
                }
            }
        }
        if !declared.contains(label.as_str()) {
            let known: Vec<&str> = [CREDENTIAL, UNANALYSED]
                .into_iter()
                .chain(declared.iter().copied())
                .collect();
            return Err(FieldProblem::new(
                "from",
                format!(
                    "unknown label \"{label}\": no pass rule has it in `labels`; known labels: {}, or placeholder-of:RULE",
                    known.join(", ")
                ),
            ));
        }
    }
    let rule_ids = wire.rules.unwrap_or_default();
    for rule in &rule_ids {
        if !rules.iter().any(|r| r.id() == rule) {
            return Err(FieldProblem::new(
                "rules",
                format!("no rule has id \"{rule}\""),
            ));
        }
    }
    let mut hosts = Vec::new();
    for raw in wire.hosts.unwrap_or_default() {
        let pattern = HostPattern::parse(&raw).map_err(|p| FieldProblem::new("hosts", p))?;
        hosts.push((raw, pattern));
    }
    if from.is_empty() && rule_ids.is_empty() && hosts.is_empty() {
        return Err(FieldProblem::new(
            "from",
            "a flow must name what it guards: `from` labels, `rules` or `hosts`",
        ));
    }
    if from.iter().any(|l| l == UNANALYSED)
        && (from.len() > 1 || !rule_ids.is_empty() || !hosts.is_empty())
    {
        return Err(FieldProblem::new(
            "from",
            "\"unanalysed\" describes an effect, not a read: give it a flow of its own, without other labels, `rules` or `hosts`",
        ));
    }
    let (to, to_hosts) = match wire.to {
        None => (FlowTo::External, Vec::new()),
        Some(WireFlowTo::Keyword(word)) => match word.as_str() {
            "external" => (FlowTo::External, Vec::new()),
            "any" => (FlowTo::Any, Vec::new()),
            other => {
                return Err(FieldProblem::new(
                    "to",
                    format!(
                        "\"{other}\" is neither \"external\" nor \"any\"; host globs go in a list: to = [\"{other}\"]"
                    ),
                ))
            }
        },
        Some(WireFlowTo::Hosts(list)) => {
            if list.is_empty() {
                return Err(FieldProblem::new(
                    "to",
                    "empty list matches no host; use \"external\" or \"any\"",
                ));
            }
            let mut patterns = Vec::new();
            for raw in &list {
                patterns.push(HostPattern::parse(raw).map_err(|p| FieldProblem::new("to", p))?);
            }
            (FlowTo::Hosts(list), patterns)
        }
    };
    let mut except = Vec::new();
    for raw in wire.except.unwrap_or_default() {
        let pattern = HostPattern::parse(&raw).map_err(|p| FieldProblem::new("except", p))?;
        except.push((raw, pattern));
    }
    let min_overlap_bytes = match wire.min_overlap_bytes {
        None => 0,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(FieldProblem::new(
                "min_overlap_bytes",
                format!("{n} is negative; give a number of bytes, 0 or more"),
            ))
        }
    };
    Ok(Flow {
        id,
        from,
        rules: rule_ids,
        hosts,
        to,
        to_hosts,
        except,
        min_overlap_bytes,
        action,
        reason: wire.reason,
    })
}
