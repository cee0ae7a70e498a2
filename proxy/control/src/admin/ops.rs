//! The ops listener of a proxy instance (`airlock serve --role proxy`, on its `--admin`
//! address): `/healthz` for probes and `/metrics` for scraping, as the admin listener
//! serves them, and nothing else — no admin API, no review UI (docs/fleet.md).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use super::{health, require_token, ApiError};
use crate::Control;

/// The reason code of every other path on the ops listener.
pub const NOT_SERVED_BY_ROLE: &str = "not_served_by_role";

/// The ops router over `shared`: `GET /healthz` (no token; 200, or 503 while the store
/// cannot write) and `GET /metrics` (bearer token, like the admin listener's). Any other
/// path answers 404 `{"reason_code": "not_served_by_role", …}`: the admin API and the
/// review UI are on the control instances.
pub fn ops_router(shared: Arc<Control>) -> Router {
    let metrics = Router::new()
        .route("/metrics", get(crate::metrics::serve))
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .merge(metrics)
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                NOT_SERVED_BY_ROLE,
                "this is a proxy instance (airlock serve --role proxy): its admin address serves only /healthz and /metrics; the admin API and the review UI are on the control instances",
            )
        })
        .with_state(shared)
}
