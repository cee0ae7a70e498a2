//! The inspect phase, for a request about to be passed or staged: what it carries — the
//! placeholders of earlier staged effects, and credential placeholders bound to another
//! host — in its URL, headers or body (read whole where the search needs it).

use std::sync::Arc;

use airlock_ledger::fingerprint::readings::RequestReadings;
use airlock_ledger::{Dependency, IssuedPlaceholder, RunId};
use bytes::Bytes;
use http::request::Parts;
use http::{header, Response};
use tracing::{debug, info, warn};

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
    let body = search_pass_body(plane, &ctx.policy, run, &ctx.target, parts, body).await?;
    // Only a shared store reads the answer: the sled pass path scans nothing for it. The
    // head's readings are taken once, when something searches them.
    let mut head = None;
    let may_carry = plane.ledger.placeholders_shared()
        && (has_body(parts) || carries_shape(head.insert(head_readings(parts))));
    let issued = issued_placeholders(plane, run, may_carry).await?;
    if issued.is_empty() {
        return Ok(Inspected::Forward(body));
    }
    let mut readings = head.unwrap_or_else(|| head_readings(parts));
    let (mut depends_on, _) = find_dependencies(&issued, &readings);
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
    let limit = plane.limits.stage_body_bytes;
    if depends_on.is_empty() && declared.is_some_and(|n| n > limit) {
        // Too large to hold and search, and the run has placeholders out: refused rather
        // than streamed on unsearched (docs/lineage.md, "Where placeholders are searched").
        warn!(run.id = %run, url = %url, limit, "a passed body over the staging limit cannot be searched for the run's placeholders: refused");
        return Err(unsearchable(limit, "its declared length is over"));
    }
    let body = read_bounded(plane, parts, body)
        .await
        .map_err(|error| match error {
            ProxyError::BodyTooLarge { limit } => unsearchable(limit, "it grew past"),
            other => other,
        })?;
    readings.add_body(&body, crate::credentials::content_encoding(parts));
    let (found, cut) = find_dependencies(&issued, &readings);
    depends_on = found;
    if depends_on.is_empty() {
        if cut {
            warn!(run.id = %run, url = %url, "a passed body could not be decoded whole to search it for the run's placeholders: refused");
            return Err(undecodable());
        }
        return Ok(Inspected::Forward(full_body(body)));
    }
    info!(run.id = %run, url = %url, "the request carries a placeholder of a staged effect: staged instead of passed");
    Ok(Inspected::Stage(body, depends_on))
}

/// The refusal of a passed body too large to search for the run's placeholders: 413
/// `body_unsearchable`, naming `limit` (`--stage-body-limit`); `how` says how the body
/// passed it.
fn unsearchable(limit: u64, how: &str) -> ProxyError {
    ProxyError::BodyUnsearchable {
        limit,
        reason: format!(
            "the request body was not sent: {how} the staging limit of {limit} bytes (--stage-body-limit), and this run has handed out placeholders of staged effects, which must never reach an origin; airlock cannot search a body that large for them"
        ),
    }
}

/// The refusal of a body whose decoding airlock cannot complete (a Content-Encoding it
/// cannot decode, gzip expanding past its cap, decodings past their byte budget) while
/// the run has placeholders out: 400 `body_unsearchable`.
fn undecodable() -> ProxyError {
    ProxyError::BadRequest {
        code: "body_unsearchable",
        reason: "the request body was not sent: airlock cannot decode it whole (its Content-Encoding is not gzip or deflate, it expands past 8 MiB, or its decodings add up past 16 times its size) to search it for this run's placeholders of staged effects, which must never reach an origin; send it uncompressed or gzip-compressed".into(),
    }
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
    let body = read_bounded(plane, parts, body).await?;
    // Only a shared store reads the answer (and the body's decodings cost CPU): the
    // request's readings are taken once, when something searches them.
    let mut readings = None;
    let may_carry = plane.ledger.placeholders_shared()
        && carries_shape(readings.insert(crate::credentials::request_readings(parts, Some(&body))));
    let issued = issued_placeholders(plane, run, may_carry).await?;
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
    if issued.is_empty() {
        return Ok((body, Vec::new()));
    }
    let readings =
        readings.unwrap_or_else(|| crate::credentials::request_readings(parts, Some(&body)));
    let (depends_on, cut) = find_dependencies(&issued, &readings);
    if cut {
        return Err(undecodable());
    }
    Ok((body, depends_on))
}

/// Inspects an upgrade handshake about to be relayed (RFC 6455 §4.1): a handshake has no
/// body and cannot be staged (its messages flow both ways after it), so one that carries
/// a placeholder of a staged effect is refused 403 `placeholder_in_upgrade`: a staged
/// effect's placeholder never reaches an origin. (One carrying a credential placeholder
/// bound elsewhere was refused, as any request is, when it was decided.)
pub(super) async fn inspect_upgrade(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    parts: &Parts,
    rule: Option<&str>,
) -> Result<(), ProxyError> {
    let RequestCtx {
        plane, run, url, ..
    } = ctx;
    let mut head = None;
    let may_carry =
        plane.ledger.placeholders_shared() && carries_shape(head.insert(head_readings(parts)));
    let issued = issued_placeholders(plane, run, may_carry).await?;
    if issued.is_empty() {
        return Ok(());
    }
    let head = head.unwrap_or_else(|| head_readings(parts));
    let (depends_on, _) = find_dependencies(&issued, &head);
    let Some(found) = depends_on.first() else {
        return Ok(());
    };
    warn!(run.id = %run, url = %url, effect = %found.effect, found_in = %found.found_in,
          "an upgrade handshake carries a placeholder of a staged effect: refused");
    Err(ProxyError::Denied {
        rule: rule.map(str::to_owned),
        reason: format!(
            "the upgrade handshake carries placeholder {} of staged effect {} (in its {}): an upgrade cannot be staged, and a placeholder never reaches an origin",
            found.value, found.effect, found.found_in
        ),
        reason_code: PLACEHOLDER_IN_UPGRADE_CODE.to_owned(),
        policy_revision: policy.revision().to_owned(),
        hint: Some("open the connection once the effect is committed and its real value is known, or use a value that is not a placeholder".into()),
    })
}

/// Why a WebSocket message (or control frame payload) a client sent after a passed
/// handshake must not reach the origin `host` ([`crate::upgrade`]): it carries, in any of
/// its readings ([`airlock_ledger::fingerprint::readings::body`]), a credential
/// placeholder not bound to `host` (alerted as [`crate::credentials::refuse_off_host`]
/// does) or a placeholder of a staged effect. `None` when it may go; nothing is read when
/// the run has no placeholder out and no credential placeholder is bound elsewhere.
///
/// Errors: the ledger's faults reading the run's placeholders (the caller refuses the
/// message: it cannot be checked).
pub(crate) async fn message_refusal(
    plane: &Arc<DataPlane>,
    run: &RunId,
    host: &str,
    message: &[u8],
) -> Result<Option<String>, ProxyError> {
    // A message is not a request: it is checked under the policy in force when it is
    // sent (a reload reaches connections already open), not the handshake's snapshot.
    #[allow(clippy::disallowed_methods)]
    let policy = plane.policy.current();
    let off_host = crate::credentials::any_off_host(&policy, host);
    let shared = plane.ledger.placeholders_shared();
    if !off_host && !shared && issued_placeholders(plane, run, false).await?.is_empty() {
        return Ok(None);
    }
    let readings = airlock_ledger::fingerprint::readings::body(message, None);
    if let Some(credential) = crate::credentials::find_off_host_in(
        &policy,
        run,
        host,
        readings.texts.iter().map(|t| t.as_bytes()),
    ) {
        let _ = crate::credentials::refuse_off_host(plane, &policy, run, host, credential);
        return Ok(Some(format!(
            "{}: credential \"{}\"",
            crate::credentials::OFF_HOST_CODE,
            credential.name()
        )));
    }
    let may_carry = shared
        && readings
            .texts
            .iter()
            .any(|t| airlock_ledger::rules::may_hold_placeholder(t));
    let issued = issued_placeholders(plane, run, may_carry).await?;
    for text in &readings.texts {
        if let Some(found) = find_placeholders(&issued, text).first() {
            warn!(run.id = %run, origin.host = host, effect = %found.effect,
                  "a WebSocket message carries a placeholder of a staged effect: refused unsent");
            return Ok(Some(format!(
                "{PLACEHOLDER_IN_MESSAGE_CODE}: a placeholder of staged effect {}",
                found.effect
            )));
        }
    }
    Ok(None)
}

/// The reason code of a WebSocket message refused for carrying a placeholder of a staged
/// effect (the Close status is 1008, RFC 6455 §7.4.1).
pub const PLACEHOLDER_IN_MESSAGE_CODE: &str = "placeholder_in_websocket_message";

/// The reason code of an upgrade handshake refused for carrying a placeholder of a
/// staged effect (docs/policy.md, "Synthetic responses and placeholders").
pub const PLACEHOLDER_IN_UPGRADE_CODE: &str = "placeholder_in_upgrade";

/// The placeholders issued so far in `run`, from an in-memory cache filled from the
/// ledger on first use and dropped whenever this process stages an effect that issues
/// placeholders or hears (change notifications) that another did. This runs on every
/// inspected request.
///
/// On a store with one writer (sled, memory) every placeholder was issued through this
/// process, so the cache is authoritative: no I/O, no thread hop. On a shared store
/// (PostgreSQL: other proxies issue placeholders in the same runs) a notification arrives
/// milliseconds after the other proxy's commit, while the agent may send the placeholder
/// here as soon as that proxy answered, so the cached list's length is first checked
/// against the store's count, and the list reloaded on any difference (more: issued
/// elsewhere; fewer: pruned). The other proxy commits the effect before its answer
/// carries the placeholder, so the count read for a request carrying it includes it
/// (docs/fleet.md, "Bounds"). The check is skipped when the cache holds the run and
/// `may_carry` is false: a request whose URL, headers and body (when it has one, as every
/// text it decodes to) have no placeholder's shape
/// ([`airlock_ledger::rules::may_hold_placeholder`]) carries no placeholder issued since,
/// on any proxy.
///
/// Errors: the ledger's faults, as [`crate::stage::ledger_fault`] answers them: a request
/// whose placeholders cannot be checked is not passed.
async fn issued_placeholders(
    shared: &Arc<DataPlane>,
    run: &RunId,
    may_carry: bool,
) -> Result<Arc<Vec<IssuedPlaceholder>>, ProxyError> {
    if !shared.ledger.placeholders_shared() {
        return cached_placeholders(shared, run);
    }
    let cached = shared
        .placeholders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(run)
        .cloned();
    if let Some(cached) = cached.as_ref().filter(|_| !may_carry) {
        return Ok(cached.clone());
    }
    let (ledger, id) = (shared.ledger.clone(), run.clone());
    let checked = tokio::task::spawn_blocking(move || {
        if let Some(cached) = cached {
            match ledger.placeholder_count(&id)? {
                Some(count) if count != cached.len() as u64 => {
                    debug!(run.id = %id, cached = cached.len(), count,
                           "the run's placeholders changed in the shared store: reloaded");
                }
                _ => return Ok((cached, false)),
            }
        }
        ledger.placeholders(&id).map(|list| (Arc::new(list), true))
    })
    .await
    .map_err(|e| ProxyError::Internal {
        reason: format!("the placeholder check failed: {e}"),
    })?;
    let (issued, loaded) =
        checked.map_err(|e| crate::stage::ledger_fault("could not be read", e))?;
    if loaded {
        // Another request may have stored a list read earlier meanwhile (or later): the
        // next request's count check corrects either, so the last writer may win.
        remember(
            &mut shared
                .placeholders
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
            run,
            &issued,
        );
    }
    Ok(issued)
}

/// Whether any of `readings` (the texts [`find_dependencies`] searches) has a
/// placeholder's shape ([`airlock_ledger::rules::may_hold_placeholder`]).
fn carries_shape(readings: &RequestReadings) -> bool {
    readings
        .texts
        .iter()
        .any(|(_, text)| airlock_ledger::rules::may_hold_placeholder(text))
}

/// Every text the request's URL and headers (names, values, and what they decode to)
/// read as; [`RequestReadings::add_body`] adds the body's.
fn head_readings(parts: &Parts) -> RequestReadings {
    crate::credentials::request_readings(parts, None)
}

/// [`issued_placeholders`] on a store with one writer: the cache, loaded under its lock so
/// a load can never put back a list older than an invalidation.
fn cached_placeholders(
    shared: &DataPlane,
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
    remember(&mut cache, run, &issued);
    Ok(issued)
}

/// Caches `issued` as `run`'s placeholders, emptying the cache first once it holds 10,000
/// runs.
fn remember(
    cache: &mut std::collections::HashMap<RunId, Arc<Vec<IssuedPlaceholder>>>,
    run: &RunId,
    issued: &Arc<Vec<IssuedPlaceholder>>,
) {
    if cache.len() >= 10_000 && !cache.contains_key(run) {
        cache.clear();
    }
    cache.insert(run.clone(), issued.clone());
}

/// The earlier effects whose placeholders the request carries in `readings` (its URL,
/// header names and values and, when added, body, raw or in any encoding the origin may
/// decode: [`airlock_ledger::fingerprint::readings`]); and whether a decoding was cut
/// short (the search did not cover everything).
fn find_dependencies(
    issued: &[IssuedPlaceholder],
    readings: &RequestReadings,
) -> (Vec<Dependency>, bool) {
    let mut out: Vec<Dependency> = Vec::new();
    for (place, text) in &readings.texts {
        for placeholder in find_placeholders(issued, text) {
            if !out.iter().any(|d| d.value == placeholder.value) {
                out.push(Dependency {
                    effect: placeholder.effect.clone(),
                    value: placeholder.value.clone(),
                    found_in: place.clone(),
                });
            }
        }
    }
    (out, readings.cut)
}
