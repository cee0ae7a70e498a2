//! Admin endpoints of `airlock run`: attach a workspace, record steps, decide, resume,
//! savepoints and rollback-to. Reference: docs/run.md and docs/admin-api.md.

use std::sync::Arc;

use airlock_ledger::StepRecord;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;

use super::views::{SavepointView, WorkspaceView};
use super::{parse_body, parse_run, ApiError, ApiResult};
use crate::access::{Action, Principal};
use crate::runs::workspace::{DecideRequest, DecisionReport, WorkspaceError};
use crate::Control;

impl From<WorkspaceError> for ApiError {
    fn from(error: WorkspaceError) -> Self {
        match error {
            WorkspaceError::Ledger(error) => error.into(),
            WorkspaceError::Commit(error) => error.into(),
            WorkspaceError::Invalid(message) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_workspace_request", message)
            }
            WorkspaceError::Snapshot(crate::snapshot::SnapshotError::Unsupported(message)) => {
                ApiError::new(StatusCode::BAD_REQUEST, "snapshot_unsupported", message)
            }
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "snapshot_failed",
                airlock_net::respond::error_chain(&other).unwrap_or_else(|| other.to_string()),
            ),
        }
    }
}

/// The workspace routes, merged into the admin router behind the token.
pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new()
        .route("/v1/runs/{id}/workspace", post(attach).get(show))
        .route("/v1/runs/{id}/workspace/steps", post(step))
        .route("/v1/runs/{id}/workspace/decide", post(decide))
        .route("/v1/runs/{id}/workspace/resume", post(resume))
        .route("/v1/runs/{id}/savepoints", post(savepoint))
        .route("/v1/runs/{id}/rollback-to", post(rollback_to))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct AttachRequest {
    path: String,
    #[serde(default)]
    driver: Option<String>,
    #[serde(default)]
    snapshot_cmd: Option<String>,
    #[serde(default)]
    rollback_cmd: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/workspace", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = AttachRequest, description = "The workspace path and snapshot driver", content_type = "application/json"), responses((status = 201, description = "The workspace record, with its first snapshot", body = WorkspaceView)))]
async fn attach(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Response> {
    let run = parse_run(&id)?;
    let request: AttachRequest = parse_body(&body)?;
    let driver = request.driver.unwrap_or_else(|| "dir".into());
    // The cmd driver runs commands as the server's user: the admin role's alone.
    if driver == "cmd" || request.snapshot_cmd.is_some() || request.rollback_cmd.is_some() {
        principal.require(Action::WorkspaceCommand)?;
    }
    if principal.role != crate::access::Role::Admin {
        runner_may_attach(&shared, &principal, &request.path, &driver)?;
    }
    let commands = match (request.snapshot_cmd, request.rollback_cmd) {
        (Some(snapshot), Some(rollback)) => Some(crate::snapshot::Commands { snapshot, rollback }),
        (None, None) => None,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_workspace_request",
                "snapshot_cmd and rollback_cmd go together",
            ))
        }
    };
    let (record, described) =
        crate::runs::workspace::attach(&shared, &run, &request.path, &driver, commands).await?;
    let overlay = record.driver.starts_with("overlay").then(|| {
        // `airlock run` mounts each step from here (docs/run.md, "The overlay driver").
        crate::snapshot::Store::new(&shared.data_dir)
            .overlay_state(run.as_str())
            .display()
            .to_string()
    });
    let mut view = WorkspaceView::of(record, Some(run));
    view.snapshot_contents = Some(described);
    view.overlay_state = overlay;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// What a non-admin token may attach: the `dir` driver only (the `git` driver runs the
/// repository's configured filter commands, the overlay driver mounts, both as the
/// server's user), on a path under a `--runner-workspace-root`, since the server reads
/// and restores it as its own user.
///
/// Errors: 403 `forbidden_for_role` (action `workspace_command`) for another driver; 403
/// `workspace_outside_roots` for a path under no root, or when the server has none.
fn runner_may_attach(
    shared: &Control,
    principal: &Principal,
    path: &str,
    driver: &str,
) -> ApiResult<()> {
    if driver != "dir" {
        principal.require(Action::WorkspaceCommand)?;
    }
    let outside =
        |reason: String| ApiError::new(StatusCode::FORBIDDEN, "workspace_outside_roots", reason);
    if shared.runner_workspace_roots.is_empty() {
        return Err(outside(format!(
            "{} ({}) may attach workspaces only under a --runner-workspace-root, and this server has none",
            principal.name, principal.role
        )));
    }
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| outside(format!("{path:?} cannot be resolved: {e}")))?;
    let inside = shared
        .runner_workspace_roots
        .iter()
        .any(|root| std::fs::canonicalize(root).is_ok_and(|root| canonical.starts_with(root)));
    if inside {
        Ok(())
    } else {
        Err(outside(format!(
            "{} is under no --runner-workspace-root of this server",
            canonical.display()
        )))
    }
}

#[utoipa::path(get, path = "/v1/runs/{id}/workspace", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The workspace record", body = WorkspaceView)))]
async fn show(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkspaceView>> {
    let run = parse_run(&id)?;
    let ledger = shared.ledger().clone();
    let run2 = run.clone();
    let record = super::blocking(move || ledger.workspace(&run2)).await?;
    let record = record.ok_or_else(|| super::not_found("workspace of run", &id))?;
    Ok(Json(WorkspaceView::of(record, Some(run))))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct StepRequest {
    kind: String,
    command: String,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    success: bool,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    containment: Option<airlock_ledger::Containment>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/workspace/steps", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = StepRequest, description = "A step of `airlock run`", content_type = "application/json"), responses((status = 200, description = "The workspace record with the step", body = WorkspaceView)))]
async fn step(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Json<WorkspaceView>> {
    let run = parse_run(&id)?;
    let request: StepRequest = parse_body(&body)?;
    let ledger = shared.ledger().clone();
    let step = StepRecord {
        kind: request.kind,
        command: request.command,
        exit_code: request.exit_code,
        success: request.success,
        duration_ms: request.duration_ms,
        note: request.note,
        output: request.output,
        containment: request.containment,
        at_ms: airlock_ledger::now_ms(),
    };
    let record = super::blocking(move || ledger.record_step(&run, step)).await?;
    Ok(Json(WorkspaceView::of(record, None)))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    /// `keep` or `rollback`.
    outcome: String,
    #[serde(default)]
    commit: bool,
    #[serde(default)]
    approve_all: bool,
    #[serde(default)]
    reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/workspace/decide", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = DecideBody, description = "keep or discard, and whether to commit", content_type = "application/json"), responses((status = 200, description = "The workspace decision applied to files and effects", body = DecisionReport)))]
async fn decide(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Json<DecisionReport>> {
    let run = parse_run(&id)?;
    let request: DecideBody = parse_body(&body)?;
    // Keeping and committing releases effects: the commit's roles; approving what is
    // undecided on the way (`--approve-all`) is a decision too.
    if request.outcome == "keep" && request.commit {
        principal.require(Action::Commit)?;
        if request.approve_all {
            principal.require(Action::Decide)?;
        }
    }
    let keep = match request.outcome.as_str() {
        "keep" => true,
        "rollback" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                format!("outcome must be keep or rollback, not {other:?}"),
            ))
        }
    };
    let request = DecideRequest {
        keep,
        commit: request.commit,
        approve_all: request.approve_all,
        reason: request.reason.unwrap_or_default(),
        by: "airlock run".into(),
    };
    // Applied in its own task: a client that hangs up does not stop it halfway.
    let task =
        tokio::spawn(async move { crate::runs::workspace::decide(&shared, &run, request).await });
    let report = task.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "task_failed",
            e.to_string(),
        )
    })??;
    Ok(Json(report))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    #[serde(default)]
    decide_if_missing: bool,
}

#[utoipa::path(post, path = "/v1/runs/{id}/workspace/resume", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = ResumeBody, description = "Optional", content_type = "application/json"), responses((status = 200, description = "The workspace decision, finished", body = DecisionReport)))]
async fn resume(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Json<DecisionReport>> {
    let run = parse_run(&id)?;
    let request: ResumeBody = parse_body(&body)?;
    let task = tokio::spawn(async move {
        crate::runs::workspace::resume(&shared, &run, request.decide_if_missing).await
    });
    let report = task.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "task_failed",
            e.to_string(),
        )
    })??;
    match report {
        Some(report) => Ok(Json(report)),
        None => Err(super::not_found("decision for run", &id)),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SavepointBody {
    #[serde(default)]
    name: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/savepoints", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = SavepointBody, description = "Optional: its name", content_type = "application/json"), responses((status = 201, description = "The savepoint", body = SavepointView)))]
async fn savepoint(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Response> {
    let run = parse_run(&id)?;
    let request: SavepointBody = parse_body(&body)?;
    let (savepoint, notes) = crate::runs::savepoint(&shared, &run, request.name).await?;
    let view = SavepointView {
        run,
        name: savepoint.name,
        snapshot: savepoint.snapshot,
        effect_seq: savepoint.effect_seq,
        at_ms: savepoint.at_ms,
        snapshot_notes: notes,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RollbackToBody {
    savepoint: String,
}

#[utoipa::path(post, path = "/v1/runs/{id}/rollback-to", tag = "workspaces", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = RollbackToBody, description = "The savepoint", content_type = "application/json"), responses((status = 200, description = "The run rolled back: files restored, later effects discarded", body = DecisionReport)))]
async fn rollback_to(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Json<DecisionReport>> {
    let run = parse_run(&id)?;
    let request: RollbackToBody = parse_body(&body)?;
    let actor = crate::runs::Actor::Person(principal.name);
    let task = tokio::spawn(async move {
        crate::runs::rollback_to(&shared, &run, &request.savepoint, &actor).await
    });
    let report = task.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "task_failed",
            e.to_string(),
        )
    })??;
    Ok(Json(report))
}
