//! `POST /v1/runs/{id}/compensate`: compensating effects for a committed run's released
//! effects, staged in a new sealed run for review (see `crate::compensate`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};

use super::{parse_run, ApiError, ApiResult};
use crate::compensate::{compensate, CompensateError, CompensationReport};
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new().route("/v1/runs/{id}/compensate", post(create))
}

#[utoipa::path(post, path = "/v1/runs/{id}/compensate", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 201, description = "The compensation run, sealed, with its staged inverses", body = CompensationReport), (status = 200, description = "Nothing to compensate: `compensation_run` is null, `not_compensable` says why", body = CompensationReport)))]
async fn create(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<CompensationReport>)> {
    let run = parse_run(&id)?;
    let report = tokio::task::spawn_blocking(move || compensate(&shared, &run))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "task_failed",
                e.to_string(),
            )
        })?
        .map_err(|error| match error {
            CompensateError::Ledger(error) => ApiError::from(error),
            CompensateError::NotCommitted { .. } => {
                ApiError::new(StatusCode::CONFLICT, "run_not_committed", error.to_string())
            }
            CompensateError::AlreadyCompensated { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "already_compensated",
                error.to_string(),
            ),
        })?;
    let status = if report.compensation_run.is_some() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(report)))
}
