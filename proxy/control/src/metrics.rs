//! The admin listener's `/metrics`: the data plane's counters and histograms, the policy,
//! connections, lineage, the ledger and runs, and the control plane's own release
//! histogram, in the Prometheus text format
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).

use std::sync::Arc;
use std::time::Duration;

use airlock_dataplane::metrics::{histogram, Histogram};
use airlock_ledger::{Effect, EffectState, RunId};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::Control;

/// The control plane's own series.
#[derive(Debug, Default)]
pub struct ControlMetrics {
    /// Seconds one effect's release took: the staged body read, placeholders substituted,
    /// `releasing` flushed, the request sent and answered, the outcome recorded.
    release_duration: Histogram,
}

/// Records a finished release attempt of `effect` (of `run`) and writes its log line:
/// target `airlock::release`, message `release`, with `run`, `effect`, `method`, `host`,
/// `outcome` (the effect's state after it: `released`, `failed`, `unknown`, …, or `error`
/// when the ledger could not record it), `origin_status` when the origin answered, and
/// `duration_ms`.
pub(crate) fn released(
    shared: &Control,
    run: &RunId,
    effect: &Effect,
    settled: &Result<Effect, crate::release::CommitError>,
    elapsed: Duration,
) {
    shared.metrics.release_duration.observe(elapsed);
    let (outcome, status) = match settled {
        Ok(settled) => (
            settled.state.as_str(),
            settled.release.as_ref().and_then(|r| r.status),
        ),
        Err(_) => ("error", None),
    };
    let host = url_host(&effect.url);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: "airlock::release",
                run = %run,
                effect = %effect.id,
                method = %effect.method,
                host = host,
                outcome = outcome,
                origin_status = status,
                duration_ms = elapsed.as_secs_f64() * 1000.0,
                "release"
            )
        };
    }
    // A release that did not end `released` is the operator's to look at.
    if matches!(settled, Ok(e) if e.state == EffectState::Released) {
        line!(info);
    } else {
        line!(warn);
    }
}

/// The host of `url`, for the release line (never its path or query).
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "other", responses((status = 200, description = "Prometheus text exposition (docs/architecture.md, Logs and metrics)", body = String, content_type = "text/plain; version=0.0.4")))]
pub(crate) async fn serve(State(shared): State<Arc<Control>>) -> Response {
    let ledger = shared.ledger().clone();
    let ledger_text = tokio::task::spawn_blocking(move || ledger_metrics(&*ledger))
        .await
        .unwrap_or_default();
    let in_flight = shared.data.requests_in_flight();
    let mut text = shared.data.metrics().render(in_flight);
    text += &crate::admin::policy_metrics(&shared);
    text += &shared.data.connections().metrics();
    text += &shared.data.lineage_metrics();
    histogram::render_family(
        &mut text,
        "airlock_release_duration_seconds",
        "Seconds one effect's release took, from reading its staged body to recording the origin's answer.",
        &[("", &shared.metrics.release_duration)],
    );
    text += &ledger_text;
    text += &crate::admin::health::metrics(&shared.ledger().health());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Prometheus text for the ledger: its page cache (`--ledger-cache-mib`), its size on
/// disk, which grows with every read, effect and denial (nothing prunes it yet), and the
/// runs by state. Blocking: sled stats its files (and lists its blob directory) for the
/// size, and the runs are listed (one scan of the run tree per scrape).
fn ledger_metrics(ledger: &dyn airlock_ledger::Store) -> String {
    let mut text = format!(
        "# HELP airlock_ledger_cache_capacity_bytes Ledger pages kept in memory at most (--ledger-cache-mib).\n\
         # TYPE airlock_ledger_cache_capacity_bytes gauge\n\
         airlock_ledger_cache_capacity_bytes {}\n",
        ledger.cache_capacity()
    );
    if let Ok(bytes) = ledger.size_on_disk() {
        text.push_str(&format!(
            "# HELP airlock_ledger_disk_bytes Bytes the ledger's files take on disk.\n\
             # TYPE airlock_ledger_disk_bytes gauge\n\
             airlock_ledger_disk_bytes {bytes}\n"
        ));
    }
    if let Ok(runs) = ledger.runs() {
        use airlock_ledger::RunState;
        let mut counts: std::collections::BTreeMap<&'static str, u64> = [
            RunState::Open,
            RunState::Sealed,
            RunState::Committing,
            RunState::Committed,
            RunState::PartiallyCommitted,
            RunState::Aborted,
        ]
        .into_iter()
        .map(|state| (state.as_str(), 0))
        .collect();
        for run in &runs {
            *counts.entry(run.state.as_str()).or_insert(0) += 1;
        }
        text.push_str(
            "# HELP airlock_runs Runs in the ledger by state (open: accepting requests).\n\
             # TYPE airlock_runs gauge\n",
        );
        for (state, count) in counts {
            text.push_str(&format!("airlock_runs{{state=\"{state}\"}} {count}\n"));
        }
    }
    text
}
