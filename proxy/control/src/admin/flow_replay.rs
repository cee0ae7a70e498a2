//! `POST /v1/runs/{id}/flows/replay`: every effect of a run decided again under a
//! candidate policy and under the policy in force, by the live decision's own code
//! ([`crate::flows::replay_blocking`]), for `airlock policy replay`. Nothing is written.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::body::ApiBody;
use super::{blocking, load_run, ApiError, ApiResult};
use crate::flows::Decided;
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new().route("/v1/runs/{id}/flows/replay", post(replay))
}

/// The run's effects decided under the policy in force and the candidate.
#[derive(Debug, Serialize, ToSchema)]
pub struct FlowReplay {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: airlock_ledger::RunId,
    /// Revision of the policy in force (`sha256:…`).
    pub in_force_revision: String,
    /// Revision of the candidate.
    pub candidate_revision: String,
    /// Labelled reads of the run still streaming now (each holds the run's effects at
    /// commit until it ends).
    pub streaming_labelled_reads: usize,
    /// Every effect of the run, in staging order.
    pub effects: Vec<EffectReplay>,
}

/// One effect under both policies.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectReplay {
    /// The effect id (`eff_…`).
    #[schema(value_type = String)]
    pub effect: airlock_ledger::EffectId,
    /// The request method.
    pub method: String,
    /// The request URL.
    pub url: String,
    /// Its state now.
    #[schema(value_type = String)]
    pub state: airlock_ledger::EffectState,
    /// Whether the flows it violates, or what the commit would do with it, differ.
    pub changed: bool,
    /// Under the policy in force: `{analysed, incomplete, violations, at_commit}`.
    #[schema(value_type = Object)]
    pub was: Decided,
    /// Under the candidate, the same shape.
    #[schema(value_type = Object)]
    pub now: Decided,
}

/// The body is the candidate policy's TOML text. 200 [`FlowReplay`]; 404 `not_found` for
/// an unknown run; 422 `policy_invalid` when the candidate does not load; 400 `bad_body`
/// for a body that is not UTF-8.
#[utoipa::path(post, path = "/v1/runs/{id}/flows/replay", tag = "policy",
    params(("id" = String, Path, description = "The run id (`run_…`)")),
    request_body(content = String, description = "The candidate policy's TOML text", content_type = "text/plain"),
    responses(
        (status = 200, description = "Every effect's flow decision under the policy in force and the candidate", body = FlowReplay),
        (status = 422, description = "The candidate does not load (`policy_invalid`)", body = super::openapi::ApiErrorBody)))]
pub(super) async fn replay(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
    body: ApiBody,
) -> ApiResult<Json<FlowReplay>> {
    let text = String::from_utf8(body.0.to_vec()).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "the body must be the candidate policy's TOML text (UTF-8)",
        )
    })?;
    let candidate = airlock_policy::Policy::from_toml_str(&text, "the candidate").map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "policy_invalid",
            format!("the candidate policy does not load: {e}"),
        )
    })?;
    let (run, _) = load_run(&shared, &id).await?;
    let in_force_revision = shared.policy().current().revision().to_string();
    let streaming_labelled_reads = shared.data().streaming_labelled_reads(&run.id);
    let (control, run_id, policy) = (shared.clone(), run.id.clone(), candidate.clone());
    let replayed =
        blocking(move || crate::flows::replay_blocking(&control, &run_id, &policy)).await?;
    let effects = replayed
        .into_iter()
        .map(|r| EffectReplay {
            changed: verdicts(&r.was) != verdicts(&r.now) || r.was.at_commit != r.now.at_commit,
            effect: r.effect.id,
            method: r.effect.method,
            url: r.effect.url,
            state: r.effect.state,
            was: r.was,
            now: r.now,
        })
        .collect();
    Ok(Json(FlowReplay {
        run: run.id,
        in_force_revision,
        candidate_revision: candidate.revision().to_string(),
        streaming_labelled_reads,
        effects,
    }))
}

/// The (flow, action) pairs violated: what a change of verdict means.
fn verdicts(decided: &Decided) -> Vec<(&str, airlock_policy::FlowAction)> {
    decided
        .check
        .violations
        .iter()
        .map(|v| (v.flow.as_str(), v.action))
        .collect()
}
