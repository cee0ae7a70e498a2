//! The retention endpoints (docs/admin-api.md, "Export and prune"): `GET
//! /v1/runs/{id}/export` streams a run's whole record as NDJSON, `POST
//! /v1/runs/{id}/prune` removes one finished run, and `POST /v1/runs/prune` removes every
//! finished run that ended long enough ago.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::info;

use super::{blocking, not_found, parse_body, parse_run, ApiError, ApiResult};
use crate::retention::{self, PruneReport};
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new()
        .route("/v1/runs/{id}/export", get(export_run))
        .route("/v1/runs/{id}/prune", post(prune_run))
        .route("/v1/runs/prune", post(prune_runs))
}

/// Lines in flight between the ledger thread and the response: a few, so a slow client
/// holds back the export rather than airlock's memory.
const LINES_BUFFERED: usize = 16;

/// A response body fed line by line from a channel.
struct Lines(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Lines {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

#[utoipa::path(get, path = "/v1/runs/{id}/export", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The run's whole record as NDJSON, one JSON object per line with a `kind` (docs/admin-api.md, \"Export\"), streamed; the last line is `{kind: \"end\", counts}`", body = String, content_type = "application/x-ndjson")))]
async fn export_run(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let run_id = parse_run(&id)?;
    let ledger = shared.ledger().clone();
    let probe = (ledger.clone(), run_id.clone());
    if blocking(move || probe.0.run(&probe.1)).await?.is_none() {
        return Err(not_found("run", &id));
    }
    let (lines, receiver) = tokio::sync::mpsc::channel::<Bytes>(LINES_BUFFERED);
    tokio::task::spawn_blocking(move || {
        let mut emit = |line: Value| {
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            lines.blocking_send(Bytes::from(bytes)).is_ok()
        };
        if let Err(error) = retention::export(&*ledger, &run_id, &mut emit) {
            // The status was sent: a last line says why the export is cut (no `end`).
            tracing::warn!(run.id = %run_id, error = %error, "export cut short");
            emit(json!({ "kind": "error", "reason": error.to_string() }));
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::new(Lines(receiver)),
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/runs/{id}/prune", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), request_body(content = PruneOne, description = "Optional: `exported_to`, where the run's export is kept (recorded in the audit log)", content_type = "application/json"), responses((status = 200, description = "`{run, removed}`: the run and every record of it are gone (`removed` counts them; `bodies_kept` are bodies another run references)", body = crate::retention::PrunedOne), (status = 409, description = "The run is not finished (`run_not_finished`)", body = super::openapi::ApiErrorBody)))]
async fn prune_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<crate::access::Principal>,
    Path(id): Path<String>,
    body: super::body::ApiBody,
) -> ApiResult<Response> {
    let run_id = parse_run(&id)?;
    let request: PruneOne = parse_body(&body)?;
    let ledger = shared.ledger().clone();
    let pruned_id = run_id.clone();
    let removed = blocking(move || ledger.prune_run(&pruned_id)).await?;
    info!(run.id = %run_id, by = %principal.name, effects = removed.effects, reads = removed.reads,
          bodies_removed = removed.bodies_removed, bodies_kept = removed.bodies_kept,
          "pruned a finished run");
    // The audit entry of the prune outlives the run: what went, and where its export is.
    let detail = crate::access::audit::AuditDetail(json!({
        "removed": removed,
        "exported_to": request.exported_to,
    }));
    let mut response = Json(crate::retention::PrunedOne {
        run: run_id,
        removed,
    })
    .into_response();
    response.extensions_mut().insert(detail);
    Ok(response)
}

/// `POST /v1/runs/{id}/prune`: optional, where the caller keeps the run's export (recorded
/// in the audit entry of the prune).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PruneOne {
    /// The path or URL of the export taken before the prune (`airlock runs prune --export`).
    #[serde(default)]
    exported_to: Option<String>,
}

/// `POST /v1/runs/prune`: which runs to remove.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PruneRequest {
    /// Remove the finished runs that finished at least this many seconds ago (0: every
    /// finished run). Required (an empty body prunes nothing).
    #[schema(required = true, value_type = u64)]
    finished_before_s: Option<u64>,
    /// List what would be removed, remove nothing.
    #[serde(default)]
    dry_run: bool,
}

#[utoipa::path(post, path = "/v1/runs/prune", tag = "runs", request_body(content = PruneRequest, description = "`finished_before_s` (required) and `dry_run`", content_type = "application/json"), responses((status = 200, description = "What was pruned, oldest first, and which old runs were kept because they are not finished", body = PruneReport)))]
async fn prune_runs(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<crate::access::Principal>,
    body: super::body::ApiBody,
) -> ApiResult<Json<PruneReport>> {
    let request: PruneRequest = parse_body(&body)?;
    let Some(seconds) = request.finished_before_s else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "give finished_before_s: prune runs that finished at least this many seconds ago",
        ));
    };
    let cutoff = airlock_ledger::now_ms().saturating_sub(seconds.saturating_mul(1000));
    let ledger = shared.ledger().clone();
    let dry_run = request.dry_run;
    let report =
        blocking(move || retention::prune_finished_before(&*ledger, cutoff, dry_run)).await?;
    if !dry_run {
        // One `prune` entry per run removed, so each run's part of the log says it went.
        for pruned in &report.pruned {
            let entry = airlock_ledger::NewAuditEntry::new(
                &principal.name,
                principal.role.as_str(),
                "prune",
            )
            .run(&pruned.run)
            .detail(json!({ "removed": pruned.removed, "by": "POST /v1/runs/prune", "finished_before_s": seconds }));
            crate::access::audit::record(&shared, entry).await;
        }
    }
    Ok(Json(report))
}
