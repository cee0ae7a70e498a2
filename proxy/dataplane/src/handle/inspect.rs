//! The inspect phase, for a request about to be passed or staged: what it carries — the
//! placeholders of earlier staged effects, and credential placeholders bound to another
//! host — in its URL, headers or body (read whole where the search needs it).

use std::sync::Arc;

use airlock_ledger::{Dependency, IssuedPlaceholder, RunId};
use bytes::Bytes;
use http::request::Parts;
use http::{header, Response};
use tracing::{info, warn};

use super::request_body::{read_bounded, search_pass_body};
use super::RequestCtx;
use crate::lineage::find_placeholders;
use crate::policy_store::Snapshot;
use crate::request::has_body;
use crate::DataPlane;
use airlock_net::body::full_body;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// What a passed request's inspection found it to be.
pub(super) enum Inspected {
    /// Forwarded with this body (searched, or streaming on unsearched).
    Forward(ProxyBody),
    /// Staged instead: it carries a placeholder of these staged effects.
    Stage(Bytes, Vec<Dependency>),
    /// Answered from staged state (read-your-staged-writes).
    Answered(Response<ProxyBody>),
}

/// Inspects a passed request: its body is searched for credential placeholders bound
/// elsewhere, then the request for placeholders of staged effects (a placeholder must
/// never reach a real origin: a request that carries one depends on a staged effect, so it
/// is staged too, docs/design.md glossary: lineage).
pub(super) async fn inspect_pass_body(
    ctx: &RequestCtx<'_>,
    parts: &Parts,
    body: ProxyBody,
) -> Result<Inspected, ProxyError> {
    let RequestCtx {
        plane, run, url, ..
    } = ctx;
    let body = search_pass_body(plane, run, &ctx.target, parts, body).await?;
    let issued = issued_placeholders(plane, run).await?;
    if issued.is_empty() {
        return Ok(Inspected::Forward(body));
    }
    let mut depends_on = find_dependencies(&issued, parts, None);
    if !depends_on.is_empty() && !has_body(parts) {
        // Read-your-staged-writes: the adapter of the staged effect may answer
        // from staged state (docs/adapters.md).
        let parents: Vec<_> = depends_on.iter().map(|d| d.effect.clone()).collect();
        let method = parts.method.as_str();
        if let Some(answer) =
            crate::staged_reads::answer(plane, run, method, url, &parts.headers, &parents).await
        {
            return Ok(Inspected::Answered(answer));
        }
    }
    if depends_on.is_empty() && !has_body(parts) {
        return Ok(Inspected::Forward(body));
    }
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if depends_on.is_empty() && declared.is_some_and(|n| n > plane.limits.stage_body_bytes) {
        // Too large to hold and search: a passed upload streams on unsearched.
        warn!(run.id = %run, url = %url, "a passed body over the staging limit was not searched for placeholders");
        return Ok(Inspected::Forward(body));
    }
    let body = read_bounded(plane, parts, body).await?;
    depends_on = find_dependencies(&issued, parts, Some(&body));
    if depends_on.is_empty() {
        return Ok(Inspected::Forward(full_body(body)));
    }
    info!(run.id = %run, url = %url, "the request carries a placeholder of a staged effect: staged instead of passed");
    Ok(Inspected::Stage(body, depends_on))
}

/// Inspects a request about to be staged: its body is read whole (within the staging
/// limit) and searched for credential placeholders bound elsewhere (refused) and for the
/// placeholders of staged effects it depends on.
pub(super) async fn inspect_stage_body(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    parts: &Parts,
    body: ProxyBody,
) -> Result<(Bytes, Vec<Dependency>), ProxyError> {
    let RequestCtx {
        plane, run, target, ..
    } = ctx;
    let issued = issued_placeholders(plane, run).await?;
    let body = read_bounded(plane, parts, body).await?;
    if let Some(credential) =
        crate::credentials::find_off_host(policy, run, &target.host, parts, Some(&body))
    {
        return Err(crate::credentials::refuse_off_host(
            plane,
            policy,
            run,
            &target.host,
            credential,
        ));
    }
    let depends_on = find_dependencies(&issued, parts, Some(&body));
    Ok((body, depends_on))
}

/// The placeholders issued so far in `run`, from an in-memory cache (filled from the
/// ledger on first use, refreshed whenever an effect that issues placeholders is staged):
/// this runs on every request, so it must not hop threads or scan storage.
async fn issued_placeholders(
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
            .map_err(|e| crate::stage::ledger_fault("could not be read", e))?,
    );
    if cache.len() >= 10_000 {
        cache.clear();
    }
    cache.insert(run.clone(), issued.clone());
    Ok(issued)
}

/// The earlier effects whose placeholders the request carries, in its URL, header values
/// or (when given) body.
fn find_dependencies(
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
