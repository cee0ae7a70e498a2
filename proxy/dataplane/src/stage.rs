//! Staging: record the effect durably, then answer with its synthetic response.

use std::sync::Arc;

use airlock_ledger::{
    Dependency, Effect, EffectNotes, Header, IdempotencySpec, NewEffect, PlaceholderSpec, RunId,
};
use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderValue, Response};
use tracing::info;

use crate::lineage::Job;
use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_adapters::{self as adapters, Call};
use airlock_net::body::ProxyBody;
use airlock_net::headers::{strip_hop_by_hop, to_records};
use airlock_net::respond::{ProxyError, EFFECT_HEADER};

/// Records the effect (flushed to disk), then answers with the synthetic response of the
/// rule's adapter (`respond = "NAME"`; by default `webhook`: the rule's `[rule.respond]`
/// template with placeholders filled in, or `202 Accepted` with a JSON body naming the
/// effect). The `airlock-effect` header always names the effect. `policy` is the staging
/// request's snapshot (the rule's template, adapter and idempotency come from it).
#[allow(clippy::too_many_arguments)]
pub async fn stage(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    url: &str,
    rule: Option<&str>,
    parts: Parts,
    body: Bytes,
    depends_on: Vec<Dependency>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    let records = to_records(&headers);
    let template = rule
        .and_then(|id| policy.rule(id))
        .and_then(|rule| rule.respond())
        .cloned();
    // What the run's passed traffic told about this origin (an MCP `initialize`, the
    // tools' output schemas).
    let context = shared.sessions.context(run, url);
    let call = Call {
        method: parts.method.as_str(),
        url,
        headers: call_headers(&records),
        body: &body,
        template: template.as_ref(),
        context: context.as_ref(),
    };
    let mut adapter = adapters::for_rule(policy, rule);
    if let Some(answer) = adapter.answer_without_effect(&call) {
        info!(run.id = %run, url = %url, adapter = adapter.name(), "a probe that changes nothing was answered without staging");
        return Ok(answer.into_response(None));
    }
    let mut plan = adapter.plan(&call);
    if plan.endpoint.is_none() {
        // An endpoint the rule's adapter does not know is answered like a webhook.
        adapter = &adapters::webhook::Webhook;
        plan = adapter.plan(&call);
    }
    // The origin honours an idempotency key when the rule says so (or the adapter knows
    // it does): every release attempt then sends the effect's stable key.
    let idempotency = match rule
        .and_then(|id| policy.rule(id))
        .and_then(|rule| rule.idempotency())
    {
        Some(key) => Some(IdempotencySpec {
            header: key.header.clone(),
            retry_unknown: key.retry_unknown,
        }),
        None => adapter
            .idempotency_header(&call)
            .map(|header| IdempotencySpec {
                header: header.to_owned(),
                retry_unknown: false,
            }),
    };
    let notes = EffectNotes {
        summary: Some(plan.summary.clone()),
        adapter: Some(adapter.name().to_owned()),
        compensates: None,
        idempotency,
        // Kept for the effect's adapter only: another adapter learnt nothing from it.
        context: (adapter.name() == "mcp")
            .then(|| {
                context
                    .as_ref()
                    .map(|c| adapters::mcp::session::kept_context(c, &body))
            })
            .flatten(),
    };
    let pending = Pending {
        run_id: run.clone(),
        method: parts.method.to_string(),
        url: url.to_owned(),
        headers: records,
        body: body.clone(),
        rule: rule.map(str::to_owned),
        revision: policy.revision().to_owned(),
        placeholders: plan.placeholders.clone(),
        depends_on,
        // Only the credential's name is stored; its value is added at release.
        inject: rule
            .and_then(|id| policy.rule(id))
            .and_then(|rule| rule.inject())
            .map(str::to_owned),
    };
    let effect = record(shared, pending, notes).await?;
    note_staged(shared, run, url, adapter.name(), &effect);
    let synthetic = adapter.respond(&call, &effect);
    let mut response = synthetic.into_response(None);
    if let Ok(value) = HeaderValue::from_str(effect.id.as_str()) {
        response.headers_mut().insert(EFFECT_HEADER, value);
    }
    Ok(response)
}

/// The request's headers as the adapter sees them (values decoded lossily).
fn call_headers(records: &[Header]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|h| {
            (
                h.name.clone(),
                String::from_utf8_lossy(h.value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// An effect about to be recorded, owned for the blocking task that records it.
struct Pending {
    run_id: RunId,
    method: String,
    url: String,
    headers: Vec<Header>,
    body: Bytes,
    rule: Option<String>,
    revision: String,
    placeholders: Vec<PlaceholderSpec>,
    depends_on: Vec<Dependency>,
    inject: Option<String>,
}

/// Records the effect in the ledger, flushed to disk (on a blocking thread); a run that
/// no longer accepts effects is refused.
async fn record(
    shared: &DataPlane,
    pending: Pending,
    notes: EffectNotes,
) -> Result<Effect, ProxyError> {
    let ledger = shared.ledger.clone();
    let staged = tokio::task::spawn_blocking(move || {
        let pending = pending;
        ledger.stage_with(
            NewEffect {
                run_id: &pending.run_id,
                method: &pending.method,
                url: &pending.url,
                headers: pending.headers,
                body: &pending.body,
                rule: pending.rule.as_deref(),
                policy_revision: &pending.revision,
                placeholders: pending.placeholders,
                depends_on: pending.depends_on,
                inject: pending.inject.as_deref(),
            },
            notes,
        )
    })
    .await
    .map_err(|e| ProxyError::Internal {
        reason: format!("staging task failed: {e}"),
    })?;
    match staged {
        Ok(effect) => Ok(effect),
        Err(airlock_ledger::LedgerError::Refused(refused)) => Err(ProxyError::RunNotOpen {
            reason: refused.to_string(),
            // Sealed (or committing): reads still pass. Committed or aborted: nothing does.
            closed: matches!(
                &refused,
                airlock_ledger::Refused::RunNotOpen { state, .. } if state.is_final()
            ),
        }),
        Err(error) => Err(ledger_fault("could not stage the effect", error)),
    }
}

/// The answer to a ledger error that is not a refusal: 503 `ledger_degraded` while the
/// ledger heals from a storage fault, 507 `ledger_low_space` below the free-space floor,
/// else 500 with `the ledger {what}: {error}`.
pub(crate) fn ledger_fault(what: &str, error: airlock_ledger::LedgerError) -> ProxyError {
    let code = match error {
        airlock_ledger::LedgerError::Degraded { .. } => "ledger_degraded",
        airlock_ledger::LedgerError::LowSpace { .. } => "ledger_low_space",
        _ => {
            return ProxyError::Internal {
                reason: format!("the ledger {what}: {error}"),
            }
        }
    };
    ProxyError::LedgerUnavailable {
        code,
        reason: error.to_string(),
    }
}

/// After an effect is staged: its log line, the run's placeholder cache dropped when the
/// effect issues placeholders, and the lineage worker told.
fn note_staged(shared: &DataPlane, run: &RunId, url: &str, adapter: &str, effect: &Effect) {
    info!(run.id = %run, effect.id = %effect.id, effect.seq = effect.seq, url = %url,
          effect.depends_on = effect.depends_on.len(), effect.adapter = adapter, "effect staged");
    if !effect.placeholders.is_empty() {
        // The run now has more placeholders to look for.
        shared.forget_placeholders(&effect.run_id);
    }
    shared.lineage.submit(Job::Effect {
        effect: effect.id.clone(),
    });
}
