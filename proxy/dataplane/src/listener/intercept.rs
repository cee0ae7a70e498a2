//! A `CONNECT` tunnel after its `200`: the client's first bytes (TLS or plain HTTP?), the
//! TLS handshake with the leaf minted for the host, and the HTTP/1.1 or h2 requests inside,
//! each through the request phases.

use std::sync::Arc;

use airlock_ledger::RunId;
use airlock_policy::Scheme;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tracing::{debug, info, warn};

use super::{http1_builder, switching, FIRST_BYTE_TIMEOUT};
use crate::handle::handle;
use crate::DataPlane;
use airlock_net::authority::Target;
use airlock_net::headers::PARSER_MAX_HEADER_BYTES;
use airlock_net::limits::first_bytes::on_first_bytes;
use airlock_net::limits::keepalive::{Activity, Deadlines};
use airlock_net::limits::ConnectionGuard;
use airlock_net::respond::ProxyError;
use airlock_net::strict_head::{HeadWatch, StrictHead};

/// The tunnel after its `200`: every request is decided, or answered `refusal` when the
/// CONNECT's host is denied outright (nothing is dialed then).
pub(super) async fn intercept(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    config: Arc<rustls::ServerConfig>,
    upgraded: hyper::upgrade::Upgraded,
    guard: Option<Arc<ConnectionGuard>>,
    refusal: Option<Refusal>,
) {
    let Some(io) = first_bytes(TokioIo::new(upgraded), &target).await else {
        return;
    };
    if io_first_byte_is_not_tls(&io) {
        plain_http_in_tunnel(shared, run, target, io, guard, refusal).await;
        return;
    }
    let Some(tls) = accept_tls(&shared, &target, config, io).await else {
        return;
    };
    serve_intercepted(shared, run, target, tls, guard, refusal).await;
}

/// An answer given to every request of a connection instead of deciding it: a refusal
/// the client should be able to read (a fenced connection to a denied host or to an
/// address airlock's DNS never gave).
pub(crate) type Refusal = Arc<dyn Fn() -> ProxyError + Send + Sync>;

/// The tunnel after the client's first bytes, put back in front. A TLS handshake record
/// starts with 0x16; anything else is taken as plain HTTP inside the tunnel (docs/cases.md
/// C11). A client that waits for the server to speak first (SMTP, SSH banners) gets
/// nothing and is closed after [`FIRST_BYTE_TIMEOUT`] (`None`): such protocols need a
/// tunnel rule.
pub(crate) async fn first_bytes<T>(
    mut io: T,
    target: &Target,
) -> Option<airlock_net::prefixed::Prefixed<T>>
where
    T: tokio::io::AsyncRead + Unpin,
{
    let mut first = vec![0u8; 1024];
    let read = tokio::time::timeout(
        FIRST_BYTE_TIMEOUT,
        tokio::io::AsyncReadExt::read(&mut io, &mut first),
    )
    .await;
    let n = match read {
        Ok(Ok(n)) if n > 0 => n,
        Ok(_) => return None,
        Err(_) => {
            info!(origin.host = %target.host, origin.port = target.port,
                  "the client sent nothing after CONNECT (a server-speaks-first protocol?); closing the tunnel");
            return None;
        }
    };
    first.truncate(n);
    Some(airlock_net::prefixed::Prefixed::new(
        bytes::Bytes::from(first),
        io,
    ))
}

type Intercepted<T> = tokio_rustls::server::TlsStream<airlock_net::prefixed::Prefixed<T>>;

/// The TLS handshake with the client, with the leaf minted for the host (`config`),
/// within the header-read timeout. A client that rejects airlock's certificate is counted
/// and logged per host (docs/cases.md C13); `None` when the handshake failed.
pub(crate) async fn accept_tls<T>(
    shared: &DataPlane,
    target: &Target,
    config: Arc<rustls::ServerConfig>,
    io: airlock_net::prefixed::Prefixed<T>,
) -> Option<Intercepted<T>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let timeout = shared.limits.header_read_timeout;
    match tokio::time::timeout(timeout, acceptor.accept(io)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            shared
                .metrics
                .client_handshake_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if rejected_our_certificate(&error) {
                shared.metrics.client_untrusted_ca(&target.host);
                warn!(origin.host = %target.host, error = %error,
                      "the client does not trust airlock's CA (it rejected the certificate); \
                       give it the CA bundle, or add a tunnel rule for this host");
            } else {
                info!(error = %error, "TLS handshake with the client failed");
            }
            None
        }
        Err(_) => {
            info!("TLS handshake with the client timed out");
            None
        }
    }
}

/// Serves the requests inside an intercepted tunnel, HTTP/1.1 or h2 as ALPN chose, each
/// through [`handle`]; every request gets 421 when the SNI named another host than the
/// CONNECT (invariant 2), and `refusal` when one is given.
pub(crate) async fn serve_intercepted<T>(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    tls: Intercepted<T>,
    guard: Option<Arc<ConnectionGuard>>,
    refusal: Option<Refusal>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let sni_mismatch = tls
        .get_ref()
        .1
        .server_name()
        .map(|sni| sni.trim_end_matches('.').to_ascii_lowercase())
        .filter(|sni| *sni != target.host);
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let header_timeout = shared.limits.header_read_timeout;
    let activity = Activity::new();
    let watch = HeadWatch::default();
    let deadlines = Deadlines {
        activity: activity.clone(),
        keep_alive: shared.limits.keep_alive_timeout,
        auth: None,
        connections: &shared.connections,
        head: Some(watch.clone()),
    };
    let service = service_fn(|mut req: Request<Incoming>| {
        let in_flight = activity.request(&mut req);
        let answered = switching(&watch, &req);
        let shared = shared.clone();
        let run = run.clone();
        let target = target.clone();
        let sni_mismatch = sni_mismatch.clone();
        let refusal = refusal.clone();
        // Requests carry the connection's guard on, so an upgrade keeps it counted.
        if let Some(guard) = &guard {
            req.extensions_mut().insert(guard.clone());
        }
        async move {
            let response = if let Some(refusal) = refusal {
                refusal().into_response()
            } else if let Some(sni) = sni_mismatch {
                ProxyError::AuthorityMismatch {
                    reason: format!(
                        "TLS SNI {sni:?} does not name the CONNECT host {}",
                        target.host
                    ),
                }
                .into_response()
            } else {
                handle(shared, run, target, req).await
            };
            answered(response.status());
            Ok::<_, std::convert::Infallible>(airlock_net::limits::keepalive::hold(
                response, in_flight,
            ))
        }
    });
    // The client's protocol is whatever ALPN chose; each request is then translated to
    // whatever the origin speaks (the upstream client negotiates h2 or HTTP/1.1 itself).
    let served = if h2 {
        let mut builder =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .max_header_list_size(PARSER_MAX_HEADER_BYTES);
        let conn = builder.serve_connection(TokioIo::new(activity.io(tls)), service);
        airlock_net::limits::keepalive::watch(conn, |conn| conn.graceful_shutdown(), deadlines)
            .await
    } else {
        // HTTP/1.1 heads with a bare LF are refused (RFC 9112 §2.2; h2 has no lines).
        // hyper's connection (about 23 KiB of buffers) is built once the client sends its
        // first request bytes: an idle tunnel holds only the TLS stream.
        let (io_activity, io_watch) = (activity.clone(), watch.clone());
        let conn = on_first_bytes(tls, header_timeout, move |tls| {
            let io = TokioIo::new(io_activity.io(StrictHead::watched(tls, &io_watch)));
            http1_builder(header_timeout)
                .serve_connection(io, service)
                .with_upgrades()
        });
        airlock_net::limits::keepalive::watch(
            conn,
            |conn| conn.graceful_shutdown(|conn| conn.graceful_shutdown()),
            deadlines,
        )
        .await
        .flatten()
    };
    if let Some(Err(error)) = served {
        debug!(error = %error, "intercepted connection ended with an error");
    }
}

pub(crate) fn io_first_byte_is_not_tls<T>(io: &airlock_net::prefixed::Prefixed<T>) -> bool {
    io.first_byte().is_some_and(|b| b != 0x16)
}

/// Serves plain HTTP/1.1 inside a CONNECT tunnel (or a fenced connection): the same
/// decision path with scheme `http` and the CONNECT authority, or `refusal` for every
/// request when one is given. Requests carry the connection's `guard` on, so a WebSocket
/// upgraded here keeps counting against the run's cap until it ends.
pub(crate) async fn plain_http_in_tunnel<T>(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    io: airlock_net::prefixed::Prefixed<T>,
    guard: Option<Arc<ConnectionGuard>>,
    refusal: Option<Refusal>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let target = Target {
        scheme: Scheme::Http,
        ..target
    };
    info!(origin.host = %target.host, origin.port = target.port, "plain HTTP inside a CONNECT tunnel");
    let header_timeout = shared.limits.header_read_timeout;
    let activity = Activity::new();
    let (io, watch) = StrictHead::new(io);
    let deadlines = Deadlines {
        activity: activity.clone(),
        keep_alive: shared.limits.keep_alive_timeout,
        auth: None,
        connections: &shared.connections,
        head: Some(watch.clone()),
    };
    let service = service_fn(|mut req: Request<Incoming>| {
        let in_flight = activity.request(&mut req);
        let answered = switching(&watch, &req);
        let shared = shared.clone();
        let run = run.clone();
        let target = target.clone();
        let refusal = refusal.clone();
        if let Some(guard) = &guard {
            req.extensions_mut().insert(guard.clone());
        }
        async move {
            let response = match refusal {
                Some(refusal) => refusal().into_response(),
                None => handle(shared, run, target, req).await,
            };
            answered(response.status());
            Ok::<_, std::convert::Infallible>(airlock_net::limits::keepalive::hold(
                response, in_flight,
            ))
        }
    });
    let conn = http1_builder(header_timeout)
        .serve_connection(TokioIo::new(activity.io(io)), service)
        .with_upgrades();
    if let Some(Err(error)) =
        airlock_net::limits::keepalive::watch(conn, |conn| conn.graceful_shutdown(), deadlines)
            .await
    {
        debug!(error = %error, "plain tunnel connection ended with an error");
    }
}

/// Whether a failed handshake is the client rejecting airlock's certificate: an
/// `unknown_ca`, `bad_certificate`, `certificate_unknown` or `access_denied` alert right
/// after our certificate (docs/cases.md C13).
fn rejected_our_certificate(error: &std::io::Error) -> bool {
    use rustls::AlertDescription;
    let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        tls,
        rustls::Error::AlertReceived(
            AlertDescription::UnknownCA
                | AlertDescription::BadCertificate
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied
        )
    )
}
