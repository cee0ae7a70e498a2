//! The inspect phase: what a passed or staged request carries — the placeholders of
//! earlier staged effects, in its URL, headers or body.

use std::sync::Arc;

use airlock_ledger::{Dependency, IssuedPlaceholder, RunId};
use bytes::Bytes;
use http::header;
use http::request::Parts;

use crate::lineage::find_placeholders;
use crate::DataPlane;
use airlock_net::respond::ProxyError;

/// The placeholders issued so far in `run`, from an in-memory cache (filled from the
/// ledger on first use, refreshed whenever an effect that issues placeholders is staged):
/// this runs on every request, so it must not hop threads or scan storage.
pub(super) async fn issued_placeholders(
    shared: &Arc<DataPlane>,
    run: &RunId,
) -> Result<Arc<Vec<IssuedPlaceholder>>, ProxyError> {
    let mut cache = shared
        .placeholders
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(cached) = cache.get(run) {
        return Ok(cached.clone());
    }
    let issued = Arc::new(
        shared
            .ledger
            .placeholders(run)
            .map_err(|e| ProxyError::Internal {
                reason: format!("the ledger could not be read: {e}"),
            })?,
    );
    if cache.len() >= 10_000 {
        cache.clear();
    }
    cache.insert(run.clone(), issued.clone());
    Ok(issued)
}

/// The earlier effects whose placeholders the request carries, in its URL, header values
/// or (when given) body.
pub(super) fn find_dependencies(
    issued: &[IssuedPlaceholder],
    parts: &Parts,
    body: Option<&Bytes>,
) -> Vec<Dependency> {
    if issued.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Dependency> = Vec::new();
    let mut add = |found: Vec<&IssuedPlaceholder>, place: String| {
        for placeholder in found {
            if !out.iter().any(|d| d.value == placeholder.value) {
                out.push(Dependency {
                    effect: placeholder.effect.clone(),
                    value: placeholder.value.clone(),
                    found_in: place.clone(),
                });
            }
        }
    };
    add(
        find_placeholders(issued, &parts.uri.to_string()),
        "url".into(),
    );
    for (name, value) in &parts.headers {
        add(
            find_placeholders(issued, &String::from_utf8_lossy(value.as_bytes())),
            format!("header:{name}"),
        );
    }
    if let Some(body) = body {
        add(
            find_placeholders(issued, &String::from_utf8_lossy(body)),
            "body".into(),
        );
        // Also under gzip, percent-encoding and base64: a placeholder must not slip past
        // in an encoded body.
        let encoding = parts
            .headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok());
        for text in airlock_ledger::fingerprint::decoded_texts(body, encoding)
            .iter()
            .skip(1)
        {
            add(find_placeholders(issued, text), "body (encoded)".into());
        }
    }
    out
}
