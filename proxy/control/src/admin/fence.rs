//! `GET /v1/runs/{id}/fence`: where a fence's relay reaches airlock, and what the fence of
//! the run captured and refused so far (docs/containment.md).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};

use super::ApiResult;
use crate::Control;

pub(super) fn routes() -> Router<Arc<Control>> {
    Router::new().route("/v1/runs/{id}/fence", get(show))
}

/// `{"socket": PATH, "counts": {proxy_connections, connections_captured,
/// connections_refused, dns_answered, dns_refused}}`; 404 for an unknown run.
#[utoipa::path(get, path = "/v1/runs/{id}/fence", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "Where a fence's relay reaches airlock, and the run's names and counts", body = super::views::FenceView)))]
async fn show(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<super::views::FenceView>> {
    let (run, _) = super::load_run(&shared, &id).await?;
    Ok(Json(super::views::FenceView {
        socket: shared.fence_socket().display().to_string(),
        counts: shared.fence.counts(&run.id),
    }))
}
