//! Read-your-staged-writes on the request path: load the run's staged effects of the
//! parents' adapters, with their bodies, and let those adapters answer the read
//! ([`airlock_adapters::answer_read`]; docs/adapters.md).

use std::sync::Arc;

use airlock_adapters::Staged;
use airlock_ledger::{EffectId, RunId};
use airlock_net::body::ProxyBody;
use http::Response;

use crate::DataPlane;

/// The answer to a read of `run` that carries placeholders of the staged effects
/// `parents`, from the run's staged state; `None` when no adapter answers (or the ledger
/// cannot be read), and airlock then stages the read so that no placeholder reaches an
/// origin.
pub(crate) async fn answer(
    plane: &Arc<DataPlane>,
    run: &RunId,
    method: &str,
    url: &str,
    headers: &http::HeaderMap,
    parents: &[EffectId],
) -> Option<Response<ProxyBody>> {
    if method != "GET" && method != "HEAD" {
        return None;
    }
    let ledger = plane.ledger.clone();
    let run_id = run.clone();
    let parent_ids = parents.to_vec();
    let staged = tokio::task::spawn_blocking(move || -> Option<Vec<Staged>> {
        let effects = ledger.effects(&run_id).ok()?;
        // Only effects of the parents' adapters can answer: their bodies are loaded.
        let adapters: Vec<Option<String>> = effects
            .iter()
            .filter(|e| parent_ids.contains(&e.id))
            .map(|e| e.adapter.clone())
            .collect();
        Some(
            effects
                .into_iter()
                .filter(|effect| adapters.contains(&effect.adapter))
                .filter_map(|effect| {
                    let body = ledger.body(&effect.body_digest).ok()??;
                    Some(Staged { effect, body })
                })
                .collect(),
        )
    })
    .await
    .ok()??;
    airlock_adapters::answer_read(&staged, run, method, url, headers, parents)
}
