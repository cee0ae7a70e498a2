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
    let mut dialer = shared.dialer.clone();
    let origin = match tower::Service::call(&mut dialer, uri).await {
        Ok(io) => io.into_inner(),
        Err(error) => return dial_error(error).into_response(),
    };
    let started = airlock_ledger::now_ms();
    let span =
        info_span!("tunnel", run.id = %run, origin.host = %target.host, origin.port = target.port);
    let idle = shared.limits.idle_timeout;
    tokio::spawn(
        async move {
            // Held until the splice ends: the tunnel counts against the run's connections.
            let _guard = req
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
            let spliced = airlock_net::limits::splice(TokioIo::new(upgraded), origin, idle).await;
            let (sent, received) = (spliced.up, spliced.down);
            let error = if spliced.idle {
                Some(format!(
                    "idle timeout: no byte either way for {} s (--idle-timeout)",
                    idle.as_secs()
                ))
            } else {
                spliced.error.map(|e| e.to_string())
            };
            info!(
                bytes.sent = sent,
                bytes.received = received,
                idle_timeout = spliced.idle,
                "tunnel closed"
            );
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
            };
            let ledger = shared.ledger.clone();
            let _ = tokio::task::spawn_blocking(move || ledger.journal_read(read)).await;
        }
        .instrument(span),
    );
    Response::new(Empty::new().map_err(|never| match never {}).boxed())
}

fn dial_error(error: DialError) -> ProxyError {
    ProxyError::upstream(&error)
}
