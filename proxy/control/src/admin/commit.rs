//! `POST /v1/runs/{id}/commit`, bound to the effects the client was shown: the body's
//! `expect` ([`Expectation`], taken from `GET /v1/runs/{id}/effects`) is required with
//! `approve_pending` and checked whenever given (docs/admin-api.md#expectations).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::render::effect_summary;
use super::{parse_body, parse_run, ApiError, ApiResult};
use crate::runs::expect::{Expectation, SetChanged};
use crate::runs::{self, Actor};
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new().route("/v1/runs/{id}/commit", post(commit_run))
}

/// The query form: `?approve_pending=true` (the expectation goes in the body).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitQuery {
    #[serde(default)]
    approve_pending: bool,
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CommitRequest {
    #[serde(default)]
    approve_pending: bool,
    /// What the client was shown: the `expect` of `GET /v1/runs/{id}/effects`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    expect: Option<Expectation>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/commit", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)"), ("approve_pending" = Option<bool>, Query, description = "Approve every pending effect (the body's `expect` is then required)")), request_body(content = CommitRequest, description = "Optional: `approve_pending` and the `expect` of `GET /v1/runs/{id}/effects`", content_type = "application/json"), responses((status = 200, description = "The commit report: the run's state and each effect's outcome", body = crate::release::CommitReport), (status = 428, description = "`approve_pending` without `expect` (`expectation_required`)", body = super::openapi::ApiErrorBody)))]
async fn commit_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(reviewer): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
    query: Result<Query<CommitQuery>, axum::extract::rejection::QueryRejection>,
    body: super::body::ApiBody,
) -> ApiResult<Json<crate::release::CommitReport>> {
    let run_id = parse_run(&id)?;
    // A malformed query is answered in the API's JSON error shape, not axum's plain text.
    let Query(query) = query.map_err(|rejection| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("the query string is not valid: {}", rejection.body_text()),
        )
    })?;
    let request: CommitRequest = parse_body(&body)?;
    let approve_pending = query.approve_pending || request.approve_pending;
    if approve_pending && request.expect.is_none() {
        // RFC 6585 section 3: the server requires the request to be conditional.
        return Err(ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            "expectation_required",
            "approve_pending approves whatever is staged when the commit runs: say which \
             effects you were shown with expect = {through_seq, digest}",
        ));
    }
    // Once decided, a commit finishes whatever happens to this HTTP exchange (the runs
    // service runs it in a task of its own).
    let report = runs::commit_detached(
        &shared,
        &run_id,
        approve_pending,
        request.expect,
        &Actor::Person(reviewer.name),
    )
    .await?;
    Ok(Json(report))
}

/// The 409 `set_changed` answer: what was expected, what is covered now, and which of the
/// covered effects are new.
pub(super) fn set_changed(changed: &SetChanged) -> ApiError {
    let mut error = ApiError::new(StatusCode::CONFLICT, "set_changed", changed.to_string());
    error.details = Some(json!({
        "run": changed.run,
        "expected": changed.expected,
        "now": changed.now,
        "added": changed.added.iter().map(effect_summary).collect::<Vec<_>>(),
        "covered": changed.covered.iter().map(effect_summary).collect::<Vec<_>>(),
    }));
    error
}
