//! JSON renderings of ledger records for the admin API: runs with counts, effect
//! summaries, bodies and headers for reviewers (credentials redacted), lineage edges.

use std::collections::HashMap;

use airlock_dataplane::flows::FlowCheck;
use airlock_ledger::{Effect, EffectId, Run};
use base64::Engine as _;
use serde_json::{json, Value};

use crate::Control;
use airlock_net::headers::is_credential;

/// A run with its effect counts by state.
pub(super) fn run_json(shared: &Control, run: &Run, effects: &[Effect]) -> Value {
    let mut counts = serde_json::Map::new();
    for effect in effects {
        let entry = counts.entry(effect.state.as_str()).or_insert(json!(0));
        *entry = json!(entry.as_u64().unwrap_or(0) + 1);
    }
    json!({
        "id": run.id,
        "state": run.state,
        "profile": run.profile,
        "source": run.source,
        "created_at_ms": run.created_at_ms,
        "effects": counts,
        "decisions": run.decisions,
        "flags": run.flags,
        "proxy": crate::env::reachable(shared.data.proxy_addr()).to_string(),
    })
}

/// The summary of an effect used in lists.
pub(super) fn effect_summary(effect: &Effect) -> Value {
    json!({
        "id": effect.id,
        "run": effect.run_id,
        "seq": effect.seq,
        "method": effect.method,
        "url": effect.url,
        "rule": effect.rule,
        "state": effect.state,
        "state_reason": effect.state_reason,
        "body_len": effect.body_len,
        "created_at_ms": effect.created_at_ms,
        "release_status": effect.release.as_ref().and_then(|r| r.status),
        "summary": airlock_adapters::summary_of(effect),
        "adapter": effect.adapter.as_deref().unwrap_or("webhook"),
        "compensates": effect.compensates,
        // The ways out of a doubtful or failed release (docs/admin-api.md).
        "retriable": airlock_ledger::rules::outcome::is_retriable(effect),
        "attempts": effect.earlier_releases.len() + usize::from(effect.release.is_some()),
        "idempotency": effect.idempotency,
        "next": crate::outcomes::next_step(effect),
    })
}

/// Renders a body for reviewers: UTF-8 text as `text`, anything else as `base64`.
pub(super) fn body_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(bytes) }),
    }
}

/// Headers for reviewers, credential values as `[redacted]`.
pub(super) fn headers_json(headers: &[airlock_ledger::Header]) -> Value {
    Value::Array(
        headers
            .iter()
            .map(|h| {
                let value = if is_credential(&h.name) {
                    "[redacted]".to_owned()
                } else {
                    String::from_utf8_lossy(h.value.as_bytes()).into_owned()
                };
                json!({ "name": h.name, "value": value })
            })
            .collect(),
    )
}

/// A lineage edge for the API: `from` is `read:SEQ` or an effect id; reads carry their
/// method and URL so a reviewer can read the edge on its own.
pub(super) fn edge_json(edge: &airlock_ledger::Edge, reads: &[airlock_ledger::Read]) -> Value {
    let (from, source) = match &edge.from {
        airlock_ledger::EdgeSource::Read { seq } => {
            let read = reads.iter().find(|r| r.seq == *seq);
            (
                format!("read:{seq}"),
                json!({ "kind": "read", "seq": seq, "method": read.map(|r| r.method.clone()), "url": read.map(|r| r.url.clone()) }),
            )
        }
        airlock_ledger::EdgeSource::Effect { id } => {
            (id.to_string(), json!({ "kind": "effect", "id": id }))
        }
    };
    json!({
        "from": from,
        "source": source,
        "to": edge.to,
        "kind": edge.kind,
        "overlap_bytes": edge.overlap_bytes,
        "overlap_permille": edge.overlap_permille,
        "excerpt": edge.excerpt,
        "detail": edge.detail,
    })
}

/// An effect's approval with `explicit` and `flows` always present: whether a reviewer
/// approved this effect by itself, and the `review` flows it violated then (shown to
/// them). `null` when it is not approved.
pub(super) fn approval_json(effect: &Effect) -> Value {
    match &effect.approval {
        None => Value::Null,
        Some(a) => json!({
            "by": a.by,
            "at_ms": a.at_ms,
            "body_digest": a.body_digest,
            "explicit": a.explicit,
            "flows": a.flows,
        }),
    }
}

/// The violations of an effect in a list, kept short (`[{flow, action}]`), and whether
/// flow rules hold it now (`flow_hold`: `"held"`, `"blocked"` or `null`).
pub(super) fn flows_brief(out: &mut Value, effect: &Effect, check: Option<&FlowCheck>) {
    let brief: Vec<Value> = check
        .map(|c| {
            c.violations
                .iter()
                .map(|v| json!({ "flow": v.flow, "action": v.action }))
                .collect()
        })
        .unwrap_or_default();
    out["flows"] = json!(brief);
    out["flow_hold"] = json!(check.and_then(|c| crate::flows::hold(effect, c)));
}

/// A run's effects that flow rules hold now: `{held: [ID…], blocked: [ID…]}`.
pub(super) fn run_flows(effects: &[Effect], checks: &HashMap<EffectId, FlowCheck>) -> Value {
    let (mut held, mut blocked) = (Vec::new(), Vec::new());
    for effect in effects {
        match checks
            .get(&effect.id)
            .and_then(|c| crate::flows::hold(effect, c))
        {
            Some("blocked") => blocked.push(&effect.id),
            Some(_) => held.push(&effect.id),
            None => {}
        }
    }
    json!({ "held": held, "blocked": blocked })
}
