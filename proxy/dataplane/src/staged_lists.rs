//! Staged objects in list reads on the pass path: a passed `GET` of a list an adapter
//! knows (`GET /repos/o/r/pulls`, docs/adapters.md) is forwarded as usual, and the run's
//! not-yet-released effects of that adapter are merged into the origin's answer, so an
//! agent that lists its pull requests sees the one it just opened.

use std::sync::Arc;

use airlock_adapters::{Call, Staged};
use airlock_ledger::{EffectState, RunId};
use airlock_net::body::{full_body, ProxyBody};
use airlock_net::failure::Failure;
use airlock_net::respond::ProxyError;
use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use tracing::info;

use crate::policy_store::Snapshot;
use crate::DataPlane;

/// The largest list answer airlock buffers to merge staged objects into: 8 MiB (a
/// GitHub page of 100 objects is well under 1 MiB).
pub const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// The response header naming how many staged objects airlock added to a list answer.
pub const STAGED_LIST_HEADER: &str = "airlock-staged-list";

/// Forwards a passed request ([`crate::forward::forward`]); when it is a list read an
/// adapter merges into and the run has staged effects of that adapter, the origin's
/// answer is buffered (up to [`MAX_LIST_BYTES`]), merged and sent with a new
/// `Content-Length`, no `ETag` (the body is not the origin's) and
/// [`STAGED_LIST_HEADER`]. The request then goes out without `Accept-Encoding` and
/// conditional headers, so the origin answers a whole, uncompressed page.
///
/// `policy` is the request's snapshot.
///
/// Errors: those of `forward`, and 502 when the list answer is over the limit or breaks
/// off while it is read.
pub(crate) async fn forward(
    plane: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    url: &str,
    rule: Option<String>,
    mut parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let Some(name) = airlock_adapters::list_merger(parts.method.as_str(), url).map(|a| a.name())
    else {
        return crate::forward::forward(plane, policy, run, url, rule, parts, body).await;
    };
    let staged = unreleased(plane.ledger.clone(), run.clone(), name).await;
    if staged.is_empty() {
        return crate::forward::forward(plane, policy, run, url, rule, parts, body).await;
    }
    parts.headers.remove(ACCEPT_ENCODING);
    parts.headers.remove(http::header::IF_NONE_MATCH);
    parts.headers.remove(http::header::IF_MODIFIED_SINCE);
    let response = crate::forward::forward(plane, policy, run, url, rule, parts, body).await?;
    if !mergeable(&response) {
        return Ok(response);
    }
    let (head, body) = response.into_parts();
    let page = read_page(body).await?;
    Ok(merged(run, url, name, head, page, &staged))
}

/// The answer with the staged objects merged in, or the origin's as it was.
fn merged(
    run: &RunId,
    url: &str,
    name: &'static str,
    mut head: http::response::Parts,
    page: Bytes,
    staged: &[Staged],
) -> Response<ProxyBody> {
    let method = "GET";
    let Some(adapter) = airlock_adapters::by_name(name) else {
        return Response::from_parts(head, full_body(page));
    };
    let link = head
        .headers
        .get("link")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let call = Call {
        method,
        url,
        headers: Vec::new(),
        body: &[],
        template: None,
        context: None,
    };
    let Some((merged, added)) = adapter.merge_list(&call, link.as_deref(), &page, staged) else {
        return Response::from_parts(head, full_body(page));
    };
    info!(run.id = %run, url = %url, adapter = adapter.name(), added, "staged objects merged into a list read");
    head.headers.remove(ETAG);
    head.headers
        .insert(CONTENT_LENGTH, HeaderValue::from(merged.len()));
    head.headers
        .insert(STAGED_LIST_HEADER, HeaderValue::from(added));
    Response::from_parts(head, full_body(Bytes::from(merged)))
}

/// Whether an answer can take merged objects: 200, JSON, not content-coded.
fn mergeable(response: &Response<ProxyBody>) -> bool {
    let headers = response.headers();
    let coded = headers
        .get(CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity");
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    response.status() == StatusCode::OK && !coded && json
}

/// The whole answer body, up to [`MAX_LIST_BYTES`].
async fn read_page(mut body: ProxyBody) -> Result<Bytes, ProxyError> {
    let failed = |problem: String| {
        ProxyError::Upstream {
        failure: Failure::Other,
        reason: format!(
            "the origin's list answer could not be read whole to merge the run's staged objects into it: {problem}"
        ),
    }
    };
    let mut page: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| failed(error.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if page.len() + data.len() > MAX_LIST_BYTES {
                return Err(failed(format!("it is over {MAX_LIST_BYTES} bytes")));
            }
            page.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(page))
}

/// The run's effects of adapter `name` that are held and not yet sent (staged or approved), in
/// staging order, with their bodies; empty when the ledger cannot be read.
async fn unreleased(
    ledger: Arc<dyn airlock_ledger::Store>,
    run: RunId,
    name: &'static str,
) -> Vec<Staged> {
    tokio::task::spawn_blocking(move || -> Vec<Staged> {
        let Ok(effects) = ledger.effects(&run) else {
            return Vec::new();
        };
        effects
            .into_iter()
            .filter(|e| e.adapter.as_deref() == Some(name))
            .filter(|e| matches!(e.state, EffectState::Staged | EffectState::Approved))
            .filter_map(|effect| {
                let body = ledger.body(&effect.body_digest).ok()??;
                Some(Staged { effect, body })
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}
