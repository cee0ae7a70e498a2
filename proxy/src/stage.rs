//! Staging: record the effect durably, then answer with its synthetic response.

use std::collections::HashMap;
use std::sync::Arc;

use airlock_ledger::{Dependency, NewEffect, PlaceholderSpec, RunId, ValueKind};
use airlock_policy::PlaceholderKind;
use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderName, HeaderValue, Response, StatusCode};
use tracing::info;

use crate::body::ProxyBody;
use crate::handle::full_body;
use crate::headers::{strip_hop_by_hop, to_records};
use crate::lineage::Job;
use crate::respond::{json_response, ProxyError, EFFECT_HEADER};
use crate::server::Shared;

/// Records the effect (flushed to disk), then answers: the rule's `respond` template with
/// placeholders filled in, or `202 Accepted` with a JSON body naming the effect. The
/// `airlock-effect` header always names the effect.
pub async fn stage(
    shared: &Arc<Shared>,
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
    let policy = shared.policy.current();
    let respond = rule
        .and_then(|id| policy.rule(id))
        .and_then(|rule| rule.respond())
        .cloned();
    let specs: Vec<PlaceholderSpec> = respond
        .as_ref()
        .map(|r| {
            r.placeholders()
                .into_iter()
                .map(|(pointer, kind)| PlaceholderSpec {
                    pointer,
                    kind: match kind {
                        PlaceholderKind::Number => ValueKind::Number,
                        PlaceholderKind::String => ValueKind::String,
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    let ledger = shared.ledger.clone();
    let run_id = run.clone();
    let method = parts.method.to_string();
    let url_owned = url.to_owned();
    let rule_owned = rule.map(str::to_owned);
    // Only the credential's name is stored; its value is added at release.
    let inject = rule
        .and_then(|id| policy.rule(id))
        .and_then(|rule| rule.inject())
        .map(str::to_owned);
    let revision = policy.revision().to_owned();
    let staged = tokio::task::spawn_blocking(move || {
        ledger.stage(NewEffect {
            run_id: &run_id,
            method: &method,
            url: &url_owned,
            headers: records,
            body: &body,
            rule: rule_owned.as_deref(),
            policy_revision: &revision,
            placeholders: specs,
            depends_on,
            inject: inject.as_deref(),
        })
    })
    .await
    .map_err(|e| ProxyError::Internal {
        reason: format!("staging task failed: {e}"),
    })?;
    let effect = match staged {
        Ok(effect) => effect,
        Err(airlock_ledger::LedgerError::Refused(refused)) => {
            return Err(ProxyError::RunNotOpen {
                reason: refused.to_string(),
            })
        }
        Err(error) => {
            return Err(ProxyError::Internal {
                reason: format!("the ledger could not stage the effect: {error}"),
            })
        }
    };
    info!(run.id = %run, effect.id = %effect.id, effect.seq = effect.seq, url = %url,
          effect.depends_on = effect.depends_on.len(), "effect staged");
    if !effect.placeholders.is_empty() {
        // The run now has more placeholders to look for.
        shared
            .placeholders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&effect.run_id);
    }
    shared.lineage.submit(Job::Effect {
        effect: effect.id.clone(),
    });

    let rendered = respond.as_ref().and_then(|respond| {
        let values: HashMap<&str, &str> = effect
            .placeholders
            .iter()
            .map(|p| (p.pointer.as_str(), p.value.as_str()))
            .collect();
        respond
            .render(&|pointer| values.get(pointer).copied().unwrap_or_default().to_owned())
            .map(|body| (respond, body))
    });
    let mut response = match rendered {
        Some((respond, body)) => {
            let length = body.len();
            let mut response = Response::new(full_body(Bytes::from(body)));
            *response.status_mut() =
                StatusCode::from_u16(respond.status).unwrap_or(StatusCode::ACCEPTED);
            let headers = response.headers_mut();
            for (name, value) in &respond.headers {
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    headers.insert(name, value);
                }
            }
            if let Ok(value) = HeaderValue::from_str(&respond.content_type) {
                headers.insert(header::CONTENT_TYPE, value);
            }
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            response
        }
        None => {
            let status = respond
                .as_ref()
                .and_then(|r| StatusCode::from_u16(r.status).ok())
                .unwrap_or(StatusCode::ACCEPTED);
            json_response(
                status,
                &serde_json::json!({
                    "effect": effect.id,
                    "status": effect.state,
                    "run": effect.run_id,
                    "seq": effect.seq,
                    "message": "airlock staged this request; it is sent to the origin only if a reviewer approves it and the run is committed",
                }),
            )
        }
    };
    if let Ok(value) = HeaderValue::from_str(effect.id.as_str()) {
        response.headers_mut().insert(EFFECT_HEADER, value);
    }
    Ok(response)
}
