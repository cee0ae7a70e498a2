//! Compiling a parsed policy file into a [`Policy`]: the version, the default, each rule and
//! its `respond` template, each flow, with the errors that name what is wrong.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::FieldProblem;
use crate::matcher::{HostSet, MethodMatcher, PathPattern, PortMatcher};
use crate::wire::{self, PolicyFile, WireAction, WireRule, WireScheme};
use crate::{credential, extra, flow, respond};
use crate::{Action, Flow, Mode, Policy, PolicyError, Respond, Rule, Scheme, ADAPTERS};

/// Checks the whole file and builds the policy (revision filled in by the caller).
pub(super) fn compile(mut file: PolicyFile, origin: &str) -> Result<Policy, PolicyError> {
    let field_error = |problem: FieldProblem| PolicyError::Field {
        origin: origin.to_owned(),
        field: problem.field,
        problem: problem.problem,
    };
    match file.version {
        Some(1) => {}
        Some(other) => {
            return Err(field_error(FieldProblem::new(
                "version",
                format!("unsupported version {other}; this airlock reads version 1"),
            )))
        }
        None => {
            return Err(field_error(FieldProblem::new(
                "version",
                "required; write `version = 1` at the top of the file",
            )))
        }
    }
    let default = match file.default {
        None | Some(WireAction::Deny) => Action::Deny,
        Some(WireAction::Pass) => Action::Pass,
        Some(WireAction::Stage) => Action::Stage,
        Some(WireAction::Tunnel) => {
            return Err(field_error(FieldProblem::new(
                "default",
                "\"tunnel\" cannot be the default; use \"deny\", \"stage\" or \"pass\"",
            )))
        }
    };
    let allow_private = parse_nets(&file.allow_private).map_err(field_error)?;
    let credentials = credential::compile_all(std::mem::take(&mut file.credential), origin)?;

    let mut rules: Vec<Rule> = Vec::with_capacity(file.rules.len());
    for (position, mut wire) in file.rules.into_iter().enumerate() {
        let index = position + 1;
        let raw_id = wire.id.clone();
        // Checked once the rule is compiled: its reach must stay inside the credential's bind.
        let inject = wire.inject.take();
        let rule_error = |problem: FieldProblem| PolicyError::Rule {
            origin: origin.to_owned(),
            index,
            id: raw_id.clone().filter(|id| valid_id(id)),
            field: problem.field,
            problem: problem.problem,
        };
        let mut rule = compile_rule(wire, &rules).map_err(rule_error)?;
        rule.inject = credential::check_inject(inject, &rule, &credentials).map_err(rule_error)?;
        rules.push(rule);
    }
    let mut flows: Vec<Flow> = Vec::with_capacity(file.flows.len());
    for (position, wire) in file.flows.into_iter().enumerate() {
        let raw_id = wire.id.clone();
        let flow =
            flow::compile_flow(wire, &rules, &flows).map_err(|problem| PolicyError::Flow {
                origin: origin.to_owned(),
                index: position + 1,
                id: raw_id.filter(|id| valid_id(id)),
                field: problem.field,
                problem: problem.problem,
            })?;
        flows.push(flow);
    }
    Ok(Policy {
        rules,
        default,
        allow_private,
        revision: String::new(),
        mode: Mode::from_wire(file.mode),
        baseline: Vec::new(),
        credentials,
        flows,
    })
}

fn compile_rule(mut wire: WireRule, earlier: &[Rule]) -> Result<Rule, FieldProblem> {
    let id = wire
        .id
        .take()
        .ok_or_else(|| FieldProblem::new("id", "required"))?;
    if !valid_id(&id) {
        return Err(FieldProblem::new(
            "id",
            format!(
                "\"{id}\" is not a valid id: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
            ),
        ));
    }
    if let Some(first) = earlier.iter().position(|rule| rule.id == id) {
        return Err(FieldProblem::new(
            "id",
            format!("duplicate id; first used by rule #{}", first + 1),
        ));
    }
    let action = match wire.action {
        None => {
            return Err(FieldProblem::new(
                "action",
                "required: \"pass\", \"stage\", \"deny\" or \"tunnel\"",
            ))
        }
        Some(WireAction::Pass) => Action::Pass,
        Some(WireAction::Stage) => Action::Stage,
        Some(WireAction::Deny) => Action::Deny,
        Some(WireAction::Tunnel) => Action::Tunnel,
    };
    if action == Action::Tunnel {
        extra::check_tunnel(&wire)?;
    }
    let extra = extra::compile_extra(&mut wire, action)?;
    let labels = flow::compile_labels(wire.labels.take(), action)?;
    let host = wire
        .host
        .ok_or_else(|| FieldProblem::new("host", "required"))
        .and_then(|host| {
            HostSet::parse(&host.into_vec()).map_err(|p| FieldProblem::new("host", p))
        })?;
    let port = PortMatcher::parse(wire.port.map(wire::WirePorts::into_vec))
        .map_err(|p| FieldProblem::new("port", p))?;
    let scheme = wire.scheme.map(|scheme| match scheme {
        WireScheme::Http => Scheme::Http,
        WireScheme::Https => Scheme::Https,
    });
    let method = wire
        .method
        .map(|method| MethodMatcher::parse(method.into_vec()))
        .transpose()
        .map_err(|p| FieldProblem::new("method", p))?;
    let path = wire
        .path
        .map(|path| PathPattern::parse(&path))
        .transpose()
        .map_err(|p| FieldProblem::new("path", p))?;
    let allow_private = match wire.allow_private {
        None => Vec::new(),
        Some(_) if action == Action::Deny => {
            return Err(FieldProblem::new(
                "allow_private",
                "has no effect on a deny rule; put it on the pass or stage rule that needs it",
            ))
        }
        Some(nets) => parse_nets(&nets)?,
    };
    let (respond, adapter) = match wire.respond {
        None => (None, None),
        Some(_) if action != Action::Stage => {
            return Err(FieldProblem::new(
                "respond",
                "only a stage rule answers with a synthetic response",
            ))
        }
        Some(wire::WireRespondField::Template(respond)) => (Some(compile_respond(respond)?), None),
        Some(wire::WireRespondField::Adapter(name)) => {
            if !ADAPTERS.contains(&name.as_str()) {
                return Err(FieldProblem::new(
                    "respond",
                    format!(
                        "unknown adapter \"{name}\"; known adapters: {}",
                        ADAPTERS.join(", ")
                    ),
                ));
            }
            (None, Some(name))
        }
    };
    Ok(Rule {
        query: extra.query,
        headers: extra.headers,
        body: extra.body,
        mode: extra.mode,
        strip: extra.strip,
        limits: extra.limits,
        redact: extra.redact,
        review: extra.review,
        profiles: extra.profiles,
        idempotency: extra.idempotency,
        respond,
        id,
        host,
        port,
        scheme,
        method,
        path,
        action,
        reason: wire.reason,
        allow_private,
        inject: None,
        adapter,
        labels,
    })
}

fn compile_respond(wire: wire::WireRespond) -> Result<Respond, FieldProblem> {
    let status = match wire.status {
        None => 202,
        Some(status @ 200..=299) => status as u16,
        Some(other) => {
            return Err(FieldProblem::new(
                "respond",
                format!(
                    "status {other} is not a 2xx status; a staged effect is answered as accepted"
                ),
            ))
        }
    };
    let mut headers = std::collections::BTreeMap::new();
    for (name, value) in wire.headers {
        let lower = name.to_ascii_lowercase();
        if lower.is_empty()
            || !lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        {
            return Err(FieldProblem::new(
                "respond",
                format!("\"{name}\" is not a header name"),
            ));
        }
        if lower.starts_with("airlock-")
            || matches!(
                lower.as_str(),
                "content-length" | "transfer-encoding" | "connection"
            )
        {
            return Err(FieldProblem::new(
                "respond",
                format!("header \"{name}\" is set by airlock itself"),
            ));
        }
        headers.insert(lower, value);
    }
    let body = wire
        .body
        .map(|text| respond::parse_template(&text))
        .transpose()
        .map_err(|problem| FieldProblem::new("respond", format!("body: {problem}")))?;
    Ok(Respond {
        status,
        content_type: wire
            .content_type
            .unwrap_or_else(|| "application/json".to_owned()),
        headers,
        body,
    })
}

/// `[a-z0-9][a-z0-9._-]*`
pub(crate) fn valid_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// CIDRs, or bare addresses meaning a single host.
fn parse_nets(raw: &[String]) -> Result<Vec<IpNet>, FieldProblem> {
    raw.iter()
        .map(|text| {
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    FieldProblem::new(
                        "allow_private",
                        format!("\"{text}\" is not a CIDR (like \"10.0.0.0/8\") or IP address"),
                    )
                })
        })
        .collect()
}
