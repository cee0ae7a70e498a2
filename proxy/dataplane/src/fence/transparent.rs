//! The transparent path: a connection the fence captured, with its original destination.
//!
//! The destination must be a pool address airlock's DNS gave this run; it maps back to
//! the name, which the TLS SNI (or the HTTP `Host`) must then confirm, as on the proxy
//! listener (invariant 2). From there the connection is decided like a `CONNECT` to
//! `name:port`: a tunnel rule splices, a host-level deny refuses, and anything else is
//! intercepted and each request decided, staged and journaled on the same path.
//!
//! A refusal is made readable: airlock completes the TLS handshake with a leaf for the
//! name (or the address) and answers every request with the JSON error, `403` for a
//! denied host and `403 unresolved_address` for an address its DNS never gave. A
//! connection that speaks neither TLS nor HTTP first is closed. Every refusal is
//! journaled as a denial.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use airlock_ledger::RunId;
use airlock_net::authority::Target;
use airlock_net::respond::ProxyError;
use airlock_policy::{ConnectDecision, Scheme};
use tracing::{info, warn};

use super::Fence;
use crate::denials::{journal, Refusal};
use crate::listener::{self, Refusal as Answer};
use crate::DataPlane;

/// Reason code of a captured connection to an address airlock's DNS never gave.
pub const UNRESOLVED_ADDRESS: &str = "unresolved_address";

/// Serves one captured connection of `run` to `dst`, holding `guard` (already counted
/// against the run's `--max-connections-per-run`).
pub(super) async fn serve<T>(
    shared: Arc<DataPlane>,
    fence: Arc<Fence>,
    run: RunId,
    dst: SocketAddr,
    stream: T,
    guard: Arc<airlock_net::limits::ConnectionGuard>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let name = match dst.ip() {
        IpAddr::V4(ip) => fence.with_run(&run, |f| f.names.name(ip).map(str::to_owned)),
        IpAddr::V6(_) => None,
    };
    // A fenced connection is admitted here, under the policy of the moment.
    #[allow(clippy::disallowed_methods)]
    let policy = shared.policy.current();
    let Some(host) = name else {
        fence.count(&run, |c| c.connections_refused += 1);
        let reason = format!(
            "{dst} is not an address airlock's DNS gave this run: a fenced run reaches hosts by \
             name (airlock resolves names some rule could allow), never by raw IP"
        );
        info!(run.id = %run, dst = %dst, "fenced connection to an unresolved address refused");
        journal(
            &shared,
            &run,
            Refusal {
                method: "CONNECT".into(),
                url: format!("tcp://{dst}"),
                has_body: false,
                rule: None,
                reason_code: UNRESOLVED_ADDRESS.into(),
                policy_revision: policy.revision().to_owned(),
            },
        );
        let revision = policy.revision().to_owned();
        let answer: Answer = Arc::new(move || ProxyError::Denied {
            rule: None,
            reason: reason.clone(),
            reason_code: UNRESOLVED_ADDRESS.to_owned(),
            policy_revision: revision.clone(),
            hint: None,
        });
        let target = Target {
            scheme: Scheme::Https,
            host: dst.ip().to_string(),
            port: dst.port(),
        };
        return serve_refusal(shared, run, target, stream, guard, answer).await;
    };
    let target = Target {
        scheme: Scheme::Https,
        host,
        port: dst.port(),
    };
    let decision = if target.host == crate::manifest::MANIFEST_HOST {
        ConnectDecision::Intercept
    } else {
        let profile = crate::enforce::profile_of(&shared, &run).ok().flatten();
        policy.decide_connect_for(&target.host, target.port, profile.as_deref())
    };
    match decision {
        ConnectDecision::Tunnel(decision) => {
            fence.count(&run, |c| c.connections_captured += 1);
            let uri = match format!("https://{}", target.authority()).parse() {
                Ok(uri) => uri,
                Err(_) => return,
            };
            info!(run.id = %run, origin.host = %target.host, origin.port = target.port,
                  "fenced connection tunneled without interception");
            match crate::tunnel::dial(&shared, uri).await {
                Ok(origin) => {
                    crate::tunnel::splice(
                        shared,
                        run,
                        target,
                        decision.rule,
                        stream,
                        origin,
                        Some(guard),
                    )
                    .await
                }
                Err(error) => {
                    info!(run.id = %run, error = %error, "fenced tunnel: the origin cannot be reached");
                }
            }
        }
        ConnectDecision::Deny(decision) => {
            fence.count(&run, |c| c.connections_refused += 1);
            info!(run.id = %run, origin.host = %target.host, origin.port = target.port,
                  policy.rule = decision.rule.as_deref().unwrap_or("<default>"), "fenced connection denied");
            crate::denials::journal_connect(&shared, &run, &target, &decision, policy.revision());
            let answer: Answer = crate::denials::host_refusal(&target, decision, policy.revision());
            serve_refusal(shared, run, target, stream, guard, answer).await;
        }
        ConnectDecision::Intercept => {
            fence.count(&run, |c| c.connections_captured += 1);
            intercept(shared, run, target, stream, guard, None).await
        }
    }
}

async fn serve_refusal<T>(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    stream: T,
    guard: Arc<airlock_net::limits::ConnectionGuard>,
    answer: Answer,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    intercept(shared, run, target, stream, guard, Some(answer)).await;
}

/// TLS (first byte 0x16) is terminated with a leaf for the host and served as an
/// intercepted tunnel; anything else is served as plain HTTP with scheme `http`.
async fn intercept<T>(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    stream: T,
    guard: Arc<airlock_net::limits::ConnectionGuard>,
    refusal: Option<Answer>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Some(io) = listener::first_bytes(stream, &target).await else {
        return;
    };
    if listener::io_first_byte_is_not_tls(&io) {
        listener::plain_http_in_tunnel(shared, run, target, io, Some(guard), refusal).await;
        return;
    }
    let config = match shared.ca.server_config(&target.host) {
        Ok(config) => config,
        Err(error) => {
            warn!(error = %error, "no leaf for a fenced connection");
            return;
        }
    };
    let Some(tls) = listener::accept_tls(&shared, &target, config, io).await else {
        return;
    };
    listener::serve_intercepted(shared, run, target, tls, Some(guard), refusal).await;
}
