//! The effect endpoints: `GET /v1/effects/{id}` (the request, its lineage and its flow
//! decision) and the verdicts `POST /v1/effects/{id}/approve|reject`.

use std::sync::Arc;

use airlock_ledger::Verdict;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use super::render::{approval_view, body_view, edge_view, headers_view, summary_of};
use super::views::{
    DecidedEffect, Dependent, EarlierRelease, EdgeView, EffectDetail, EffectLineageView,
    ReleaseView,
};
use super::{blocking, not_found, parse_effect, ApiResult};
use crate::runs::{self, Actor};
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new()
        .route("/v1/effects/{id}", get(show_effect))
        .route("/v1/effects/{id}/approve", post(approve_effect))
        .route("/v1/effects/{id}/reject", post(reject_effect))
}

#[utoipa::path(get, path = "/v1/effects/{id}", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary with headers, body, placeholders, dependencies, lineage and flows", body = EffectDetail)))]
async fn show_effect(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let effect_id = parse_effect(&id)?;
    let ledger = shared.ledger().clone();
    let found = blocking(move || match ledger.effect(&effect_id)? {
        Some(effect) => {
            let body = ledger.body(&effect.body_digest)?.unwrap_or_default();
            let release_body = match effect.release.as_ref().and_then(|r| r.body_digest.clone()) {
                Some(digest) => ledger.body(&digest)?,
                None => None,
            };
            // The adapter's account (git: the pack read), off the async workers.
            let details = airlock_adapters::of_effect(&effect)
                .details(&airlock_adapters::Call::of_effect(&effect, &body));
            Ok(Some((effect, body, release_body, details)))
        }
        None => Ok(None),
    })
    .await?;
    let (effect, body, release_body, details) = found.ok_or_else(|| not_found("effect", &id))?;
    let (control, checked) = (shared.clone(), effect.clone());
    let flows = blocking(move || crate::flows::check_blocking(&control, &checked)).await?;
    let ledger = shared.ledger().clone();
    let run_id = effect.run_id.clone();
    let effect_id = effect.id.clone();
    let (analysis, reads, siblings) = blocking(move || {
        Ok((
            ledger.effect_lineage(&effect_id)?,
            ledger.reads(&run_id)?,
            ledger.effects(&run_id)?,
        ))
    })
    .await?;
    let mut sources: Vec<EdgeView> = airlock_ledger::placeholder_edges(&effect)
        .iter()
        .map(|e| edge_view(e, &reads))
        .collect();
    if let Some(analysis) = &analysis {
        sources.extend(analysis.edges.iter().map(|e| edge_view(e, &reads)));
    }
    let dependents: Vec<Dependent> = siblings
        .iter()
        .filter(|s| s.depends_on.iter().any(|d| d.effect == effect.id))
        .map(|s| Dependent {
            id: s.id.clone(),
            seq: s.seq,
            method: s.method.clone(),
            url: s.url.clone(),
            state: s.state,
        })
        .collect();
    let detail = EffectDetail {
        summary: summary_of(&effect),
        placeholders: effect.placeholders.clone(),
        depends_on: effect.depends_on.clone(),
        // The credential added at release: its name only, never its value.
        inject: effect.inject.clone(),
        lineage: EffectLineageView {
            analyzed: analysis.is_some(),
            fingerprints: analysis.as_ref().map(|a| a.fingerprints),
            truncated: analysis.as_ref().map(|a| a.truncated),
            skipped: analysis.as_ref().and_then(|a| a.skipped.clone()),
            incomplete_reads: analysis
                .as_ref()
                .map(|a| a.incomplete_reads.clone())
                .unwrap_or_default(),
            sources,
            dependents,
        },
        headers: headers_view(&effect.headers),
        body: body_view(&body),
        body_digest: effect.body_digest.clone(),
        policy_revision: effect.policy_revision.clone(),
        decisions: effect.decisions.clone(),
        approval: approval_view(&effect),
        flow_hold: crate::flows::hold(&effect, &flows),
        release: effect.release.as_ref().map(|release| ReleaseView {
            started_at_ms: release.started_at_ms,
            finished_at_ms: release.finished_at_ms,
            status: release.status,
            headers: headers_view(&release.headers),
            body: release_body.as_deref().map(body_view),
            body_len: release.body_len,
            error: release.error.clone(),
        }),
        // The adapter's account beyond the summary line (git: commits, paths, diffstat).
        details,
        released: crate::released::released_json(&effect, &siblings, release_body.as_deref()),
        earlier_releases: effect
            .earlier_releases
            .iter()
            .map(|r| EarlierRelease {
                started_at_ms: r.started_at_ms,
                finished_at_ms: r.finished_at_ms,
                status: r.status,
                error: r.error.clone(),
            })
            .collect(),
        flows,
        redacted: None,
    };
    let mut out = serde_json::to_value(detail).unwrap_or_default();
    // A rule's `redact` masks headers and body and adds `redacted`.
    airlock_dataplane::enforce::redact_view(
        &shared.policy().current(),
        effect.rule.as_deref(),
        &body,
        &mut out,
    );
    Ok(Json(out))
}

async fn decide(
    shared: Arc<Control>,
    reviewer: crate::access::Principal,
    id: String,
    verdict: Verdict,
) -> ApiResult<Json<DecidedEffect>> {
    let effect_id = parse_effect(&id)?;
    let effect =
        runs::decide_effect(&shared, &effect_id, verdict, &Actor::Person(reviewer.name)).await?;
    Ok(Json(DecidedEffect {
        summary: summary_of(&effect),
        approval: approval_view(&effect),
    }))
}

#[utoipa::path(post, path = "/v1/effects/{id}/approve", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary, `approved`", body = DecidedEffect)))]
async fn approve_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<DecidedEffect>> {
    decide(shared, reviewer, id, Verdict::Approve).await
}

#[utoipa::path(post, path = "/v1/effects/{id}/reject", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary, `rejected`", body = DecidedEffect)))]
async fn reject_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<DecidedEffect>> {
    decide(shared, reviewer, id, Verdict::Reject).await
}
