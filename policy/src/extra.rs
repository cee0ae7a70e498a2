//! Compiling the rule keys beyond the request line: `query`, `headers`, body matchers,
//! `mode`, obligations (`strip`, `limit`, `redact`, `review`) and `profiles`, and the
//! host-level-only check of `tunnel` rules (docs/policy.md invariant 3).

use crate::body::BodyMatcher;
use crate::content::{HeaderMatcher, QueryMatcher};
use crate::error::FieldProblem;
use crate::obligation::{parse_strip, Idempotency, Limits, Mode, Redaction, Review};
use crate::wire::WireRule;
use crate::Action;

/// The rule keys compiled here, handed back to `compile_rule`.
pub(crate) struct Extra {
    pub(crate) query: Option<QueryMatcher>,
    pub(crate) headers: Option<HeaderMatcher>,
    pub(crate) body: Option<BodyMatcher>,
    pub(crate) mode: Mode,
    pub(crate) strip: Vec<String>,
    pub(crate) limits: Limits,
    pub(crate) redact: Vec<Redaction>,
    pub(crate) review: Review,
    pub(crate) profiles: Option<Vec<String>>,
    pub(crate) idempotency: Option<Idempotency>,
}

/// A tunnel rule is host level only (invariant 3): nothing that needs interception.
pub(crate) fn check_tunnel(wire: &WireRule) -> Result<(), FieldProblem> {
    let refused: [(&'static str, bool); 15] = [
        ("method", wire.method.is_some()),
        ("path", wire.path.is_some()),
        ("query", wire.query.is_some()),
        ("headers", wire.headers.is_some()),
        ("json", wire.json.is_some()),
        ("graphql", wire.graphql.is_some()),
        ("jsonrpc", wire.jsonrpc.is_some()),
        ("respond", wire.respond.is_some()),
        ("strip", wire.strip.is_some()),
        ("limit", wire.limit.is_some()),
        ("redact", wire.redact.is_some()),
        ("review", wire.review.is_some()),
        ("mode", wire.mode.is_some()),
        ("idempotency_key", wire.idempotency_key.is_some()),
        ("retry_unknown", wire.retry_unknown.is_some()),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, present)| *present) {
        return Err(FieldProblem::new(
            field,
            "a tunnel rule is host level only: airlock does not see inside the tunnel, so it \
             cannot match, stage, inject, strip, limit, redact or audit anything there; \
             use action = \"pass\" (intercepted) instead",
        ));
    }
    if wire.scheme == Some(crate::wire::WireScheme::Http) {
        return Err(FieldProblem::new(
            "scheme",
            "a tunnel is a CONNECT; remove \"scheme\"",
        ));
    }
    Ok(())
}

/// Compiles the keys beyond the request line, taking them out of `wire`.
pub(crate) fn compile_extra(wire: &mut WireRule, action: Action) -> Result<Extra, FieldProblem> {
    let query = wire
        .query
        .take()
        .map(QueryMatcher::parse)
        .transpose()
        .map_err(|p| FieldProblem::new("query", p))?;
    let headers = wire
        .headers
        .take()
        .map(HeaderMatcher::parse)
        .transpose()
        .map_err(|p| FieldProblem::new("headers", p))?;
    let body = BodyMatcher::parse(wire.json.take(), wire.graphql.take(), wire.jsonrpc.take())
        .map_err(|(field, p)| FieldProblem::new(field, p))?;
    let mode = Mode::from_wire(wire.mode);
    let strip = match wire.strip.take() {
        None => Vec::new(),
        Some(_) if action == Action::Deny => {
            return Err(FieldProblem::new(
                "strip",
                "has no effect on a deny rule: nothing is forwarded",
            ))
        }
        Some(names) => parse_strip(names).map_err(|p| FieldProblem::new("strip", p))?,
    };
    let limits = Limits::parse(wire.limit.take()).map_err(|p| FieldProblem::new("limit", p))?;
    if action == Action::Deny {
        let only_body = Limits {
            body_bytes: limits.body_bytes,
            ..Limits::default()
        };
        if limits != only_body || (limits.body_bytes.is_some() && body.is_none()) {
            return Err(FieldProblem::new(
                "limit",
                "a deny rule takes only limit.body_bytes, and only with a body matcher (json, graphql, jsonrpc)",
            ));
        }
    }
    let redact = match wire.redact.take() {
        None => Vec::new(),
        Some(_) if action == Action::Deny => {
            return Err(FieldProblem::new(
                "redact",
                "has no effect on a deny rule: nothing is journaled",
            ))
        }
        Some(entries) => entries
            .iter()
            .map(|raw| Redaction::parse(raw))
            .collect::<Result<_, _>>()
            .map_err(|p| FieldProblem::new("redact", p))?,
    };
    let review = match wire.review {
        Some(_) if action != Action::Stage => {
            return Err(FieldProblem::new(
                "review",
                "only a stage rule creates effects to review",
            ))
        }
        other => Review::from_wire(other),
    };
    let profiles = match wire.profiles.take() {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(FieldProblem::new(
                "profiles",
                "empty list matches no run; remove \"profiles\" to match every run",
            ))
        }
        Some(list) => Some(list),
    };
    let idempotency = Idempotency::parse(wire.idempotency_key.take(), wire.retry_unknown, action)
        .map_err(|(field, p)| FieldProblem::new(field, p))?;
    Ok(Extra {
        idempotency,
        query,
        headers,
        body,
        mode,
        strip,
        limits,
        redact,
        review,
        profiles,
    })
}
