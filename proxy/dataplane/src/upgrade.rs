//! Protocol upgrades (WebSocket, RFC 6455 §4) through the proxy: the handshake is decided
//! by policy like any request (and refused when it carries a placeholder, as any request
//! that carries one would be staged); a passed handshake is relayed to the origin over
//! HTTP/1.1 with its `Upgrade` headers, and after `101 Switching Protocols` the origin's
//! bytes flow to the client unchanged while the client's messages are searched on their
//! way (`upgrade/frames.rs`). An upgrade cannot be staged: a stage rule that matches one is
//! answered 403.

mod frames;

use std::sync::Arc;
use std::time::Duration;

use airlock_ledger::{Read, RunId};
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::{debug, info, warn};

use crate::credentials::scrub::Scrubber;
use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_net::body::{BoxError, ProxyBody};
use airlock_net::headers::{strip_hop_by_hop, strip_reserved};
use airlock_net::limits::ConnectionGuard;
use airlock_net::respond::ProxyError;

/// The protocol an HTTP/1.1 request asks to upgrade to (`Connection: upgrade` plus
/// `Upgrade: NAME`), lower-cased.
pub fn requested(headers: &HeaderMap) -> Option<String> {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    let upgrade = headers
        .get(header::UPGRADE)?
        .to_str()
        .ok()?
        .trim()
        .to_ascii_lowercase();
    // Only WebSocket is relayed as an upgrade (RFC 6455): after any other 101 (h2c, a
    // custom protocol) the bytes would flow undecided. Other upgrade requests are handled
    // as ordinary requests, their Upgrade header dropped as hop-by-hop.
    (connection_upgrade && upgrade == "websocket").then_some(upgrade)
}

/// Relays an upgrade handshake to the origin and, on 101, joins the two connections.
/// `policy` is the handshake request's snapshot (the rule's labels for its read); each
/// message after it is checked under the policy in force when it is sent.
#[allow(clippy::too_many_arguments)]
pub async fn relay(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    host: &str,
    url: &str,
    rule: Option<String>,
    protocol: String,
    mut parts: Parts,
) -> Result<Response<ProxyBody>, ProxyError> {
    // The handshake is journaled as a read: refused when it could not be.
    shared
        .ledger
        .journal_room()
        .map_err(|error| crate::stage::ledger_fault("cannot journal the upgrade", error))?;
    let audit = crate::enforce::take_audit(&mut parts);
    let guard = parts.extensions.remove::<Arc<ConnectionGuard>>();
    let Some(client_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return Err(ProxyError::BadRequest {
            code: "upgrade_unsupported",
            reason: "this connection cannot be upgraded (upgrades need HTTP/1.1)".into(),
        });
    };
    let scrubber = prepare_handshake(&mut parts, url)?;
    let method = parts.method.to_string();
    let request = Request::from_parts(
        parts,
        Empty::new()
            .map_err(|never| -> BoxError { match never {} })
            .boxed(),
    );
    let response = shared
        .upstream_http1
        .request(request)
        .await
        .map_err(|e| ProxyError::upstream(&e))?;
    let status = response.status();
    let rule_for_messages = rule.clone();
    let labels = match rule.as_deref() {
        Some(rule) => policy.labels_of(rule).to_vec(),
        None => Vec::new(),
    };
    let read = Read {
        labels,
        run_id: run.clone(),
        seq: 0,
        method,
        url: url.to_owned(),
        status: Some(status.as_u16()),
        request_bytes: 0,
        response_bytes: 0,
        response_digest: None,
        rule,
        audit,
        created_at_ms: airlock_ledger::now_ms(),
        error: (status != StatusCode::SWITCHING_PROTOCOLS)
            .then(|| format!("the origin did not switch to {protocol}")),
    };
    let (run_id, read_url) = (read.run_id.clone(), read.url.clone());
    if let Err(error) = shared.ledger.journal_read(read) {
        crate::gaps::read_dropped(&*shared.ledger, &run_id, &read_url, &error, false);
    }
    let (mut head, body) = response.into_parts();
    strip_reserved(&mut head.headers);
    if let Some(scrubber) = &scrubber {
        scrubber.scrub_headers(&mut head.headers);
    }
    if status != StatusCode::SWITCHING_PROTOCOLS {
        strip_hop_by_hop(&mut head.headers);
        return Ok(Response::from_parts(
            head,
            body.map_err(|e| -> BoxError { Box::new(e) }).boxed(),
        ));
    }
    let origin_upgrade = hyper::upgrade::on(Response::from_parts(head.clone(), body));
    info!(run.id = %run, url = %url, protocol = %protocol, "upgrade relayed");
    let idle = shared.limits.idle_timeout;
    let inspector = frames::Inspector {
        plane: shared.clone(),
        run: run.clone(),
        host: host.to_owned(),
        port: crate::flows::host_port(url).map_or(443, |(_, port)| port),
        url: url.to_owned(),
        rule: rule_for_messages,
        limit: shared.limits.stage_body_bytes,
    };
    tokio::spawn(splice(
        client_upgrade,
        origin_upgrade,
        guard,
        idle,
        inspector,
    ));
    // The 101 keeps the origin's handshake headers (Upgrade, Connection,
    // Sec-WebSocket-Accept, -Protocol, -Extensions) unchanged.
    Ok(Response::from_parts(
        head,
        Empty::new()
            .map_err(|never| -> BoxError { match never {} })
            .boxed(),
    ))
}

/// Readies the handshake for the origin: hop-by-hop headers stripped but its `Upgrade`
/// (with `Connection: upgrade`), the absolute URI, HTTP/1.1, and the rule's credential and
/// the run's placeholders placed (the messages that follow it are relayed unchanged and
/// unscrubbed). Returns the scrubber of what was placed.
fn prepare_handshake(parts: &mut Parts, url: &str) -> Result<Option<Scrubber>, ProxyError> {
    let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(value) = upgrade_value {
        parts.headers.insert(header::UPGRADE, value);
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    parts.uri = url.parse().map_err(|_| ProxyError::BadRequest {
        code: "bad_uri",
        reason: format!("{url} is not a valid URI"),
    })?;
    parts.version = http::Version::HTTP_11;
    crate::credentials::apply(parts)
}

/// Joins the upgraded client and origin connections ([`frames::relay`]: the client's
/// messages searched on their way) until either closes, a message is refused, or both are
/// idle past `idle`; `guard` is held until then (the upgraded connection counts against
/// the run's).
async fn splice(
    client_upgrade: OnUpgrade,
    origin_upgrade: OnUpgrade,
    guard: Option<Arc<ConnectionGuard>>,
    idle: Duration,
    inspector: frames::Inspector,
) {
    let _guard = guard;
    let (client, origin) = match tokio::try_join!(client_upgrade, origin_upgrade) {
        Ok(pair) => pair,
        Err(error) => {
            debug!(error = %error, "upgrade did not complete");
            return;
        }
    };
    let run = inspector.run.clone();
    let (plane, url, rule) = (
        inspector.plane.clone(),
        inspector.url.clone(),
        inspector.rule.clone(),
    );
    let relayed = frames::relay(TokioIo::new(client), TokioIo::new(origin), idle, inspector).await;
    if let Some((code, reason)) = &relayed.refused {
        warn!(run.id = %run, close.code = code, reason = %reason,
              "a WebSocket message from the client was refused unsent; closed both sides");
        // Every refused message is a denial of the run (`WEBSOCKET`, the handshake's URL,
        // the reason code before the first colon of the Close reason).
        #[allow(clippy::disallowed_methods)]
        let revision = plane.policy.current().revision().to_owned();
        crate::denials::journal(
            &plane,
            &run,
            crate::denials::Refusal {
                method: "WEBSOCKET".into(),
                url,
                has_body: true,
                rule,
                reason_code: reason.split(':').next().unwrap_or(reason).trim().to_owned(),
                policy_revision: revision,
            },
        );
    } else if relayed.idle {
        info!(
            bytes.up = relayed.up,
            bytes.down = relayed.down,
            idle_secs = idle.as_secs(),
            "upgraded connection idle past --idle-timeout; closed both sides"
        );
    } else if let Some(error) = relayed.error {
        debug!(error = %error, "upgraded connection ended with an error");
    } else {
        debug!(
            bytes.up = relayed.up,
            bytes.down = relayed.down,
            "upgraded connection closed"
        );
    }
}
