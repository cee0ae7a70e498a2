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
    /// The audit log's counters ([`crate::access::audit`]).
    pub(crate) audit: crate::access::audit::AuditMetrics,
}

/// Records a finished release attempt of `effect` (of `run`) and writes its log line, the
/// only event of a release attempt: target `airlock::release`, message `release`, with
/// `run.id`, `effect.id`, `method`, `origin.host` and `origin.port` (never the path),
/// `outcome` (the effect's state after it: `released`, `failed`, `unknown`, …, or `error`
/// when the ledger could not record it), `origin.status` when the origin answered,
/// `error` when the attempt failed or the effect was not sent (why), and `duration_ms`
/// (to the microsecond, [`airlock_dataplane::handle::millis`]).
pub(crate) fn released(
    shared: &Control,
    run: &RunId,
    effect: &Effect,
    settled: &Result<Effect, crate::release::CommitError>,
    elapsed: Duration,
) {
    shared.metrics.release_duration.observe(elapsed);
    let (outcome, status, error) = match settled {
        Ok(settled) => (
            settled.state.as_str(),
            settled.release.as_ref().and_then(|r| r.status),
            // The attempt's error; for one never sent (an approval that no longer
            // matches, a placeholder with no real value), why.
            settled
                .release
                .as_ref()
                .and_then(|r| r.error.clone())
                .or_else(|| {
                    (settled.state != EffectState::Released)
                        .then(|| settled.state_reason.clone())
                        .flatten()
                }),
        ),
        Err(error) => ("error", None, Some(error.to_string())),
    };
    let (host, port) = url_origin(&effect.url);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: "airlock::release",
                method = %effect.method,
                "run.id" = %run,
                "effect.id" = %effect.id,
                "origin.host" = host,
                "origin.port" = port,
                outcome = outcome,
                "origin.status" = status,
                error = error.as_deref(),
                duration_ms = airlock_dataplane::handle::millis(elapsed),
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

/// The host and port of `url`, for the release line (never its path or query): the port
/// written in the URL, or the scheme's (443 for `https`, 80 for `http`); the host of an
/// IPv6 literal without its brackets, as the request line has it.
fn url_origin(url: &str) -> (&str, Option<u16>) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default = match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    };
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => (authority, None),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(port) => port.parse().ok(),
        None => default,
    };
    (host, port)
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
    text += &shared.fence.metrics();
    text += &shared.admin_connections.metrics();
    text += &shared.data.lineage_metrics();
    histogram::render_family(
        &mut text,
        "airlock_release_duration_seconds",
        "Seconds one effect's release took, from reading its staged body to recording the origin's answer.",
        &[("", &shared.metrics.release_duration)],
    );
    text += &ledger_text;
    text += &shared.metrics.audit.render();
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
