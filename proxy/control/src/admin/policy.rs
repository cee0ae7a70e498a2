//! `GET /v1/policy` (the policy in force) and `POST /v1/policy` (hot reload from a posted
//! text: validate, build, swap atomically; an invalid text keeps the last good policy).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::json;

use super::views::{PolicyReloaded, PolicyView};

use super::body::ApiBody;
use super::{ApiError, ApiResult};
use crate::Control;

/// `{revision, generation, source, loaded_at_ms, path, text, reloads, reload_failures}`.
#[utoipa::path(get, path = "/v1/policy", tag = "policy", responses((status = 200, description = "The policy in force: revision, generation, source, text, reloads", body = PolicyView)))]
pub(super) async fn show(State(shared): State<Arc<Control>>) -> Json<PolicyView> {
    let current = shared.policy().current();
    let (reloads, failures) = shared.policy().reload_counts();
    Json(PolicyView {
        revision: current.revision().to_string(),
        generation: current.generation,
        source: current.source,
        loaded_at_ms: current.loaded_at_ms,
        path: shared.policy().path().display().to_string(),
        text: current.text.clone(),
        reloads,
        reload_failures: failures,
    })
}

/// The body is the policy's TOML text. 200 `{revision, generation, changed}`; 422
/// `policy_invalid` with the parse or compile error and the revision that stays in force;
/// 413 `body_too_large` (JSON, like every admin error) past [`super::body::BODY_LIMIT`].
#[utoipa::path(post, path = "/v1/policy", tag = "policy", request_body(content = String, description = "The policy file's TOML text", content_type = "text/plain"), responses((status = 200, description = "`{revision, generation, changed}`", body = PolicyReloaded), (status = 422, description = "The policy does not load (`policy_invalid`); the one in force stays", body = super::openapi::ApiErrorBody)))]
pub(super) async fn replace(
    State(shared): State<Arc<Control>>,
    body: ApiBody,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse as _;
    let text = String::from_utf8(body.0.to_vec()).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "the body must be the policy file's TOML text (UTF-8)",
        )
    })?;
    let store = shared.policy().clone();
    let before = store.current().revision().to_string();
    let outcome = tokio::task::spawn_blocking(move || store.replace(text))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "task_failed",
                e.to_string(),
            )
        })?;
    match outcome {
        Ok(reloaded) => {
            // The audit entry of the reload names both revisions.
            let detail = crate::access::audit::AuditDetail(json!({
                "revision_before": before,
                "revision_after": reloaded.revision,
                "generation": reloaded.generation,
                "changed": reloaded.changed,
            }));
            let mut response = Json(PolicyReloaded {
                revision: reloaded.revision,
                generation: reloaded.generation,
                changed: reloaded.changed,
            })
            .into_response();
            response.extensions_mut().insert(detail);
            Ok(response)
        }
        Err(failure) => Err(ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "policy_invalid",
            reason: format!(
                "{}; policy {} (generation {}) stays in force",
                failure.error, failure.revision, failure.generation
            ),
            details: Some(json!({
                "revision": failure.revision,
                "generation": failure.generation,
            })),
            hint: None,
        }),
    }
}

/// Prometheus lines for the policy in force and its reloads.
pub(crate) fn metrics(shared: &Control) -> String {
    let current = shared.policy().current();
    let (reloads, failures) = shared.policy().reload_counts();
    format!(
        "# HELP airlock_policy_generation Generation of the policy in force (1 at start, +1 per reload).\n\
         # TYPE airlock_policy_generation gauge\n\
         airlock_policy_generation{{revision=\"{}\"}} {}\n\
         # HELP airlock_policy_reloads_total Policy reloads by outcome.\n\
         # TYPE airlock_policy_reloads_total counter\n\
         airlock_policy_reloads_total{{outcome=\"ok\"}} {reloads}\n\
         airlock_policy_reloads_total{{outcome=\"refused\"}} {failures}\n",
        current.revision(),
        current.generation,
    )
}
