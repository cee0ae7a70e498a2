//! The ways out of a doubtful or failed release (docs/design.md, "Outcomes of a release"):
//! `POST /v1/effects/{id}/retry`, `POST /v1/runs/{id}/retry` and
//! `POST /v1/effects/{id}/settle` (see `crate::outcomes`). Each records who asked.

use std::collections::BTreeMap;
use std::sync::Arc;

use airlock_ledger::Settlement;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;

use super::{parse_body, parse_effect, parse_run, ApiError, ApiResult};
use crate::runs::Actor;
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new()
        .route("/v1/effects/{id}/retry", post(retry_effect))
        .route("/v1/runs/{id}/retry", post(retry_run))
        .route("/v1/effects/{id}/settle", post(settle_effect))
}

#[utoipa::path(post, path = "/v1/effects/{id}/retry", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), responses((status = 200, description = "The commit report after the effect was released again", body = crate::outcomes::RetryReport)))]
async fn retry_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<crate::outcomes::RetryReport>> {
    let effect = parse_effect(&id)?;
    let report = crate::outcomes::retry_effect(&shared, &effect, &Actor::Person(reviewer.name))
        .await
        .map_err(retry_refusal)?;
    Ok(Json(report))
}

/// The effect and the state it was in when the ledger refused its transition, or `None`
/// for any other error (which then maps as everywhere).
fn refused_transition(
    error: &crate::release::CommitError,
) -> Option<(&airlock_ledger::EffectId, &airlock_ledger::EffectState)> {
    use airlock_ledger::{LedgerError, Refused};
    match error {
        crate::release::CommitError::Ledger(LedgerError::Refused(Refused::EffectTransition {
            effect,
            from,
            ..
        })) => Some((effect, from)),
        _ => None,
    }
}

/// A retry the effect's state refuses, said in terms of what retry is for (a release
/// that failed before it reached the origin, or an unknown one an idempotency key
/// covers) instead of the state machine's "cannot become approved". Other errors map as
/// everywhere.
fn retry_refusal(error: crate::release::CommitError) -> ApiError {
    use airlock_ledger::EffectState;
    let Some((effect, from)) = refused_transition(&error) else {
        return error.into();
    };
    let why = match from {
        EffectState::Released => "it was released: its origin has it, so there is nothing to retry",
        EffectState::Releasing => "it is being released right now; wait for the commit to finish",
        EffectState::Approved => "it is approved and not sent yet (or a retry already put it back): commit the run to release it",
        EffectState::Staged => "it has not been sent yet: approve it, then commit the run",
        _ => "it is never sent; stage the request anew if it is still wanted",
    };
    ApiError {
        hint: Some("retry re-sends a failed effect that provably never reached its origin, or an unknown one whose rule says retry_unknown = \"idempotent\"; GET /v1/effects/{id} shows its state and `next`"),
        ..ApiError::new(
            StatusCode::CONFLICT,
            "invalid_effect_transition",
            format!("effect {effect} is {from} and cannot be retried: {why}"),
        )
    }
}

#[utoipa::path(post, path = "/v1/runs/{id}/retry", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The commit report after every retriable effect was released again", body = crate::outcomes::RetryReport)))]
async fn retry_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<crate::outcomes::RetryReport>> {
    let run = parse_run(&id)?;
    let report = crate::outcomes::retry_run(&shared, &run, &Actor::Person(reviewer.name)).await?;
    if report.retried.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "nothing_to_retry",
            format!(
                "run {run} has no effect that can be retried: only a failed effect of which provably nothing was sent, or an unknown one whose rule says retry_unknown = \"idempotent\", is retried"
            ),
        ));
    }
    Ok(Json(report))
}

/// `POST /v1/effects/{id}/settle`: `{"delivered": bool, "note"?: string, "values"?: {NAME: VALUE}}`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SettleRequest {
    /// Required: what the reviewer found at the origin.
    delivered: Option<bool>,
    #[serde(default)]
    note: Option<String>,
    /// Real values of placeholders by JSON pointer (or stand-in value).
    #[serde(default)]
    values: BTreeMap<String, String>,
}

#[utoipa::path(post, path = "/v1/effects/{id}/settle", tag = "effects", params(("id" = String, Path, description = "The effect id (`eff_…`)")), request_body(content = SettleRequest, description = "What the reviewer found at the origin", content_type = "application/json"), responses((status = 200, description = "The run's commit report after the effect (and those it unblocked) was settled", body = crate::release::CommitReport)))]
async fn settle_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Json<crate::release::CommitReport>> {
    let effect = parse_effect(&id)?;
    let request: SettleRequest = parse_body(&body)?;
    let Some(delivered) = request.delivered else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "say what the origin has: {\"delivered\": true} or {\"delivered\": false}",
        ));
    };
    let settlement = Settlement {
        delivered,
        note: request.note,
        values: request.values.into_iter().collect(),
    };
    let report =
        crate::outcomes::settle(&shared, &effect, settlement, &Actor::Person(reviewer.name))
            .await
            .map_err(settle_refusal)?;
    Ok(Json(report))
}

/// A settle the effect's state refuses, said in terms of what settle is for: an effect
/// whose release outcome is `unknown` (or a `released` one, to give real values). Other
/// errors map as everywhere.
fn settle_refusal(error: crate::release::CommitError) -> ApiError {
    use airlock_ledger::EffectState;
    let Some((effect, from)) = refused_transition(&error) else {
        return error.into();
    };
    let next = match from {
        EffectState::Staged => "approve or reject it, then commit the run",
        EffectState::Approved => "commit the run to release it",
        EffectState::Failed => "the origin refused it or it was never sent: retry it if it is retriable, or stage the request anew",
        EffectState::Released => "it reached its origin; settle it again only to give real values (delivered = true with values)",
        _ => "GET /v1/effects/{id} shows its state and what to do next",
    };
    ApiError {
        hint: Some("settle records what you found at the origin for an effect whose release outcome is unknown; GET /v1/effects/{id} shows its state and `next`"),
        ..ApiError::new(
            StatusCode::CONFLICT,
            "invalid_effect_transition",
            format!(
                "effect {effect} is {from}: settle is only for an effect whose release \
                 outcome is unknown (it may or may not have reached its origin); {next}"
            ),
        )
    }
}
