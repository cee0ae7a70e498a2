//! The commit authority: writes the commit decision, then releases a run's approved effects
//! in staging order, each marked `releasing` durably before it is sent, at most once.

use std::collections::BTreeMap;
use std::sync::Arc;

use airlock_ledger::{Effect, EffectState, LedgerError, RunId, RunState};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use tracing::{info, warn};

use crate::body::BoxError;
use crate::handle::error_chain;
use crate::headers::{strip_hop_by_hop, strip_reserved, to_records};
use crate::server::Shared;

/// How much of an origin's response to a release is stored in the ledger.
const RELEASE_CAPTURE_BYTES: usize = 1024 * 1024;

/// One effect's line in a commit report.
#[derive(Debug, Clone, Serialize)]
pub struct EffectOutcome {
    /// The effect.
    pub id: String,
    /// Staging order.
    pub seq: u64,
    /// Request method.
    pub method: String,
    /// Request URL.
    pub url: String,
    /// Final state.
    pub state: EffectState,
    /// The origin's status, when released or failed with a response.
    pub status: Option<u16>,
    /// Why it is in its state, when that needs saying.
    pub reason: Option<String>,
}

/// What a commit did, reported honestly: released, failed, unknown, rejected, skipped.
#[derive(Debug, Clone, Serialize)]
pub struct CommitReport {
    /// The run.
    pub run: RunId,
    /// The run's state after the commit.
    pub state: RunState,
    /// Effects per state.
    pub counts: BTreeMap<&'static str, usize>,
    /// Every effect of the run in staging order.
    pub effects: Vec<EffectOutcome>,
}

impl CommitReport {
    fn new(run: RunId, state: RunState, effects: &[Effect]) -> Self {
        let mut counts = BTreeMap::new();
        for effect in effects {
            *counts.entry(effect.state.as_str()).or_insert(0) += 1;
        }
        Self {
            run,
            state,
            counts,
            effects: effects
                .iter()
                .map(|e| EffectOutcome {
                    id: e.id.to_string(),
                    seq: e.seq,
                    method: e.method.clone(),
                    url: e.url.clone(),
                    state: e.state,
                    status: e.release.as_ref().and_then(|r| r.status),
                    reason: e.state_reason.clone(),
                })
                .collect(),
        }
    }
}

/// Why a commit could not proceed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A ledger task panicked or was cancelled.
    #[error("a ledger task failed: {0}")]
    Task(String),
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, CommitError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CommitError::Task(e.to_string()))??)
}

/// Commits `run`: seals it, refuses while effects are undecided unless `approve_pending`,
/// writes the decision, releases approved effects in staging order and reports. A second
/// commit of a finished run does nothing and reports the same outcome.
///
/// Errors: the ledger's refusals ([`airlock_ledger::Refused`]) and storage faults.
pub async fn commit(
    shared: &Arc<Shared>,
    run: &RunId,
    approve_pending: bool,
    by: &str,
) -> Result<CommitReport, CommitError> {
    let _serial = shared.commit_lock.lock().await;
    let ledger = shared.ledger.clone();
    let (run_id, by_owned) = (run.clone(), by.to_owned());
    let (_, release) =
        blocking(move || ledger.begin_commit(&run_id, approve_pending, &by_owned)).await?;
    if release {
        let ledger = shared.ledger.clone();
        let run_id = run.clone();
        let effects = blocking(move || ledger.effects(&run_id)).await?;
        for effect in effects
            .into_iter()
            .filter(|e| e.state == EffectState::Approved)
        {
            release_one(shared, effect).await?;
        }
        let ledger = shared.ledger.clone();
        let run_id = run.clone();
        blocking(move || ledger.finish_commit(&run_id)).await?;
    }
    let ledger = shared.ledger.clone();
    let run_id = run.clone();
    let (state, effects) = blocking(move || {
        let state = ledger
            .run(&run_id)?
            .map(|r| r.state)
            .unwrap_or(RunState::Committed);
        Ok((state, ledger.effects(&run_id)?))
    })
    .await?;
    info!(run.id = %run, run.state = %state, "commit finished");
    Ok(CommitReport::new(run.clone(), state, &effects))
}

/// Releases one approved effect: `releasing` (flushed), send, record the outcome (flushed).
async fn release_one(shared: &Arc<Shared>, effect: Effect) -> Result<(), CommitError> {
    let ledger = shared.ledger.clone();
    let id = effect.id.clone();
    blocking(move || ledger.mark_releasing(&id)).await?;
    let ledger = shared.ledger.clone();
    let digest = effect.body_digest.clone();
    let body = blocking(move || ledger.body(&digest)).await?;
    let outcome = match body {
        None => Err(format!(
            "the staged body {} is missing from the ledger",
            effect.body_digest
        )),
        Some(body) => send(shared, &effect, body).await,
    };
    let ledger = shared.ledger.clone();
    let id = effect.id.clone();
    let recorded = match outcome {
        Ok((status, headers, captured, total)) => {
            let error = (status >= 400).then(|| format!("the origin answered {status}"));
            info!(effect.id = %effect.id, url = %effect.url, origin.status = status, "effect released");
            blocking(move || {
                ledger.record_release(&id, Some(status), headers, &captured, total, error)
            })
            .await?
        }
        Err(reason) => {
            warn!(effect.id = %effect.id, url = %effect.url, reason = %reason, "release failed");
            blocking(move || ledger.record_release(&id, None, Vec::new(), &[], 0, Some(reason)))
                .await?
        }
    };
    let _ = recorded;
    Ok(())
}

type Sent = (u16, Vec<airlock_ledger::Header>, Vec<u8>, u64);

async fn send(shared: &Arc<Shared>, effect: &Effect, body: Vec<u8>) -> Result<Sent, String> {
    let method = Method::from_bytes(effect.method.as_bytes()).map_err(|e| e.to_string())?;
    let mut request = Request::builder().method(method).uri(effect.url.as_str());
    {
        let headers = request.headers_mut().ok_or("invalid release request")?;
        for header in &effect.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(header.name.as_bytes()),
                HeaderValue::from_bytes(header.value.as_bytes()),
            ) else {
                continue;
            };
            headers.append(name, value);
        }
        strip_hop_by_hop(headers);
        headers.remove(http::header::CONTENT_LENGTH);
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let request = request
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| -> BoxError { match never {} })
                .boxed(),
        )
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let response = shared
            .upstream
            .request(request)
            .await
            .map_err(|e| error_chain(&e).unwrap_or_else(|| e.to_string()))?;
        let (mut parts, mut body) = response.into_parts();
        strip_reserved(&mut parts.headers);
        let mut captured = Vec::new();
        let mut total = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the origin's response failed: {e}"))?;
            if let Some(data) = frame.data_ref() {
                total += data.len() as u64;
                let room = RELEASE_CAPTURE_BYTES.saturating_sub(captured.len());
                captured.extend_from_slice(&data[..data.len().min(room)]);
            }
        }
        Ok::<_, String>((
            parts.status.as_u16(),
            to_records(&parts.headers),
            captured,
            total,
        ))
    };
    tokio::time::timeout(shared.limits.release_timeout, exchange)
        .await
        .map_err(|_| {
            format!(
                "the origin did not answer within {:?}",
                shared.limits.release_timeout
            )
        })?
}
