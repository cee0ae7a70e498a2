//! `/healthz` and the ledger's health metrics: airlock is healthy while its ledger can
//! write ([`airlock_ledger::Store::health`]).

use std::sync::Arc;

use airlock_ledger::Health;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::Control;

/// `GET /healthz` (no token): 200 `{"status":"ok"}` while the ledger can write; 503
/// `{"status":"degraded","reason":"ledger_degraded"|"ledger_low_space","detail":…}`
/// while it cannot (a storage fault being healed, or less free space than
/// `--ledger-min-free-mib`), so load balancers and supervisors stop sending agents here.
#[utoipa::path(get, path = "/healthz", tag = "other", security(()),
    responses(
        (status = 200, description = "The ledger can write: `{\"status\": \"ok\"}`", body = super::views::HealthOk),
        (status = 503, description = "The ledger cannot write: `{\"status\": \"degraded\", \"reason\": \"ledger_degraded\" | \"ledger_low_space\", \"detail\", \"storage_faults\", \"recoveries\"}`", body = super::views::HealthDegraded)))]
pub(crate) async fn healthz(State(shared): State<Arc<Control>>) -> Response {
    let ledger = shared.ledger().clone();
    let health = tokio::task::spawn_blocking(move || ledger.health())
        .await
        .unwrap_or_else(|_| Health {
            writable: false,
            reason: Some("ledger_degraded"),
            detail: Some("the health check failed".into()),
            ..Health::default()
        });
    if health.writable {
        return Json(super::views::HealthOk { status: "ok" }).into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(super::views::HealthDegraded {
            status: "degraded",
            reason: health.reason,
            detail: health.detail,
            storage_faults: health.storage_faults,
            recoveries: health.recoveries,
        }),
    )
        .into_response()
}

/// Prometheus text: `airlock_ledger_writable` (1 or 0), `airlock_ledger_storage_faults_total`
/// `airlock_ledger_recoveries_total` and `airlock_ledger_repaired_files_total`.
pub(crate) fn metrics(health: &Health) -> String {
    format!(
        "# HELP airlock_ledger_writable Whether the ledger can write now (0 while degraded or below --ledger-min-free-mib).\n\
         # TYPE airlock_ledger_writable gauge\n\
         airlock_ledger_writable {}\n\
         # HELP airlock_ledger_storage_faults_total Storage faults the ledger returned.\n\
         # TYPE airlock_ledger_storage_faults_total counter\n\
         airlock_ledger_storage_faults_total {}\n\
         # HELP airlock_ledger_recoveries_total Times the ledger was reopened and proved writable after a fault.\n\
         # TYPE airlock_ledger_recoveries_total counter\n\
         airlock_ledger_recoveries_total {}\n\
         # HELP airlock_ledger_repaired_files_total Torn ledger files set aside (to quarantine/) when the ledger opened.\n\
         # TYPE airlock_ledger_repaired_files_total counter\n\
         airlock_ledger_repaired_files_total {}\n",
        u8::from(health.writable),
        health.storage_faults,
        health.recoveries,
        health.repaired_files
    )
}
