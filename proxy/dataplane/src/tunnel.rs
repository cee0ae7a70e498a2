//! `action = "tunnel"`: a CONNECT spliced to the origin without interception.
//!
//! The origin is dialed first, through the same SSRF-checked [`Dialer`](airlock_net::dial::Dialer)
//! as every pass (invariant 1), so a refused or unreachable destination gets a JSON error
//! instead of `200`. Then bytes flow both ways unchanged: the client sees the origin's own
//! certificate. When the tunnel closes it is journaled as a read (method `CONNECT`, the
//! rule, bytes each way), so a run's record shows where its opaque traffic went.

use std::sync::Arc;

use airlock_ledger::{Read, RunId};
use airlock_policy::Decision;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tracing::{debug, info, info_span, Instrument};

use crate::DataPlane;
use airlock_net::authority::Target;
use airlock_net::body::ProxyBody;
use airlock_net::dial::DialError;
use airlock_net::respond::ProxyError;

/// Dials `target` and, once connected, answers the CONNECT with `200` and splices.
pub async fn open(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    decision: Decision,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let rule = decision.rule.clone();
    info!(run.id = %run, origin.host = %target.host, origin.port = target.port,
          policy.rule = rule.as_deref().unwrap_or("<default>"), "CONNECT tunneled without interception");
    let uri: Uri = match format!("https://{}", target.authority()).parse() {
        Ok(uri) => uri,
        Err(_) => {
            return ProxyError::BadRequest {
                code: "bad_connect_target",
                reason: format!("{} is not a valid host:port", target.authority()),
            }
            .into_response()
        }
    };
    let origin = match dial(&shared, uri).await {
        Ok(origin) => origin,
        Err(error) => return error.into_response(),
    };
    let span =
        info_span!("tunnel", run.id = %run, origin.host = %target.host, origin.port = target.port);
    tokio::spawn(
        async move {
            // Held until the splice ends: the tunnel counts against the run's connections.
            let guard = req
                .extensions()
                .get::<Arc<airlock_net::limits::ConnectionGuard>>()
                .cloned();
            let upgraded = match hyper::upgrade::on(req).await {
                Ok(upgraded) => upgraded,
                Err(error) => {
                    debug!(error = %error, "CONNECT upgrade failed");
                    return;
                }
            };
            splice(
                shared,
                run,
                target,
                rule,
                TokioIo::new(upgraded),
                origin,
                guard,
            )
            .await;
        }
        .instrument(span),
    );
    Response::new(Empty::new().map_err(|never| match never {}).boxed())
}

/// Dials the origin of `uri` through the SSRF-checked dialer (invariant 1).
pub(crate) async fn dial(
    shared: &DataPlane,
    uri: Uri,
) -> Result<tokio::net::TcpStream, ProxyError> {
    let mut dialer = shared.dialer.clone();
    match tower::Service::call(&mut dialer, uri).await {
        Ok(io) => Ok(io.into_inner()),
        Err(error) => Err(dial_error(error)),
    }
}

/// Splices `client` and `origin` until either side ends or `--idle-timeout` passes, then
/// journals the tunnel as a read (method `CONNECT`, the rule, bytes each way). `guard`
/// is held until then, so the tunnel counts against the run's connections.
pub(crate) async fn splice<C>(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    rule: Option<String>,
    client: C,
    origin: tokio::net::TcpStream,
    guard: Option<Arc<airlock_net::limits::ConnectionGuard>>,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _guard = guard;
    let started = airlock_ledger::now_ms();
    let opened = std::time::Instant::now();
    let idle = shared.limits.idle_timeout;
    let spliced = airlock_net::limits::splice(client, origin, idle).await;
    let (sent, received) = (spliced.up, spliced.down);
    let error = if spliced.idle {
        Some(format!(
            "idle timeout: no byte either way for {} s (--idle-timeout)",
            idle.as_secs()
        ))
    } else {
        spliced.error.map(|e| e.to_string())
    };
    debug!(
        bytes.sent = sent,
        bytes.received = received,
        idle_timeout = spliced.idle,
        "tunnel closed"
    );
    crate::handle::ConnectLine {
        run: &run,
        target: &target,
        action: crate::metrics::RequestAction::Tunnel,
        rule: rule.as_deref(),
        reason_code: airlock_policy::reason_code::RULE_TUNNEL,
        status: 200,
        bytes: (sent, received),
        elapsed: opened.elapsed(),
    }
    .write(&shared);
    let read = Read {
        run_id: run,
        seq: 0,
        method: "CONNECT".to_owned(),
        url: target.url(""),
        status: Some(200),
        request_bytes: sent,
        response_bytes: received,
        response_digest: None,
        rule,
        created_at_ms: started,
        error,
        audit: Vec::new(),
        labels: Vec::new(),
    };
    let ledger = shared.ledger.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let (run, url) = (read.run_id.clone(), read.url.clone());
        if let Err(error) = ledger.journal_read(read) {
            crate::gaps::read_dropped(&*ledger, &run, &url, &error, false);
        }
    })
    .await;
}

fn dial_error(error: DialError) -> ProxyError {
    ProxyError::upstream(&error)
}
