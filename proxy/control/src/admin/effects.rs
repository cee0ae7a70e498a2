//! The effect endpoints: `GET /v1/effects/{id}` (the request, its lineage and its flow
//! decision) and the verdicts `POST /v1/effects/{id}/approve|reject`.

use std::sync::Arc;

use airlock_ledger::Verdict;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::render::{approval_json, body_json, edge_json, effect_summary, headers_json};
use super::{blocking, not_found, parse_effect, ApiResult};
use crate::runs::{self, Actor};
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new()
        .route("/v1/effects/{id}", get(show_effect))
        .route("/v1/effects/{id}/approve", post(approve_effect))
        .route("/v1/effects/{id}/reject", post(reject_effect))
}

#[utoipa::path(get, path = "/v1/effects/{id}", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary with headers, body, placeholders, dependencies, lineage and flows", body = super::render::EffectSummary)))]
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
    let mut sources: Vec<Value> = airlock_ledger::placeholder_edges(&effect)
        .iter()
        .map(|e| edge_json(e, &reads))
        .collect();
    if let Some(analysis) = &analysis {
        sources.extend(analysis.edges.iter().map(|e| edge_json(e, &reads)));
    }
    let dependents: Vec<Value> = siblings
        .iter()
        .filter(|s| s.depends_on.iter().any(|d| d.effect == effect.id))
        .map(|s| json!({ "id": s.id, "seq": s.seq, "method": s.method, "url": s.url, "state": s.state }))
        .collect();
    let mut out = effect_summary(&effect);
    out["placeholders"] = json!(effect.placeholders);
    out["depends_on"] = json!(effect.depends_on);
    // The credential added at release: its name only, never its value.
    out["inject"] = json!(effect.inject);
    out["lineage"] = json!({
        "analyzed": analysis.is_some(),
        "fingerprints": analysis.as_ref().map(|a| a.fingerprints),
        "truncated": analysis.as_ref().map(|a| a.truncated),
        "skipped": analysis.as_ref().and_then(|a| a.skipped.clone()),
        "incomplete_reads": analysis.as_ref().map(|a| a.incomplete_reads.clone()).unwrap_or_default(),
        "sources": sources,
        "dependents": dependents,
    });
    out["headers"] = headers_json(&effect.headers);
    out["body"] = body_json(&body);
    airlock_dataplane::enforce::redact_view(
        &shared.policy().current(),
        effect.rule.as_deref(),
        &body,
        &mut out,
    );
    out["body_digest"] = json!(effect.body_digest);
    out["policy_revision"] = json!(effect.policy_revision);
    out["decisions"] = json!(effect.decisions);
    out["approval"] = approval_json(&effect);
    out["flow_hold"] = json!(crate::flows::hold(&effect, &flows));
    out["flows"] = json!(flows);
    if let Some(release) = &effect.release {
        out["release"] = json!({
            "started_at_ms": release.started_at_ms,
            "finished_at_ms": release.finished_at_ms,
            "status": release.status,
            "headers": headers_json(&release.headers),
            "body": release_body.as_deref().map(body_json),
            "body_len": release.body_len,
            "error": release.error,
        });
    }
    // The adapter's account beyond the summary line (git: commits, paths, diffstat).
    out["details"] = json!(details);
    out["released"] = crate::released::released_json(&effect, &siblings, release_body.as_deref());
    out["earlier_releases"] = json!(effect
        .earlier_releases
        .iter()
        .map(|r| json!({
            "started_at_ms": r.started_at_ms,
            "finished_at_ms": r.finished_at_ms,
            "status": r.status,
            "error": r.error,
        }))
        .collect::<Vec<_>>());
    Ok(Json(out))
}

async fn decide(
    shared: Arc<Control>,
    reviewer: crate::ui::Reviewer,
    id: String,
    verdict: Verdict,
) -> ApiResult<Json<Value>> {
    let effect_id = parse_effect(&id)?;
    let effect = runs::decide_effect(
        &shared,
        &effect_id,
        verdict,
        &Actor::Reviewer(reviewer.name),
    )
    .await?;
    let mut out = effect_summary(&effect);
    out["approval"] = approval_json(&effect);
    Ok(Json(out))
}

#[utoipa::path(post, path = "/v1/effects/{id}/approve", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary, `approved`", body = super::render::EffectSummary)))]
async fn approve_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::ui::Reviewer>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    decide(shared, reviewer, id, Verdict::Approve).await
}

#[utoipa::path(post, path = "/v1/effects/{id}/reject", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The summary, `rejected`", body = super::render::EffectSummary)))]
async fn reject_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::ui::Reviewer>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    decide(shared, reviewer, id, Verdict::Reject).await
}
