//! The proxy listener, the sandbox's door: run identity from `Proxy-Authorization`,
//! absolute-form `http://` requests, and `CONNECT` tunnels intercepted with a minted leaf.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::RunId;
use airlock_policy::{ConnectDecision, Scheme};
use base64::Engine as _;
use http::{header, Method, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::handle::handle;
use crate::DataPlane;
use airlock_net::authority::Target;
use airlock_net::body::ProxyBody;
use airlock_net::headers::{PARSER_MAX_HEADERS, PARSER_MAX_HEADER_BYTES};
use airlock_net::limits::keepalive::{Activity, Deadlines};
use airlock_net::limits::{Cap, ConnectionGuard};
use airlock_net::respond::ProxyError;
use airlock_net::strict_head::{HeadWatch, StrictHead};

mod intercept;

pub(crate) use intercept::{
    accept_tls, first_bytes, io_first_byte_is_not_tls, plain_http_in_tunnel, serve_intercepted,
    Refusal,
};

/// How long a tunnel waits for the client's first byte.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the accept loop until the task is dropped.
pub async fn serve(shared: Arc<DataPlane>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(error = %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let span = info_span!("connection", client.addr = %peer);
        let guard = match shared.connections.open() {
            Ok(guard) => guard,
            Err(cap) => {
                tokio::spawn(refuse_connection(stream, cap).instrument(span));
                continue;
            }
        };
        let stream = airlock_net::linger::Lingering::new(stream);
        tokio::spawn(serve_connection(shared, stream, guard, None).instrument(span));
    }
}

/// The run a client connection is bound to, once it authenticated.
type Binding = Arc<Mutex<Option<RunId>>>;

fn http1_builder(header_read_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(PARSER_MAX_HEADER_BYTES as usize)
        .max_headers(PARSER_MAX_HEADERS)
        .keep_alive(true);
    builder
}

/// What to tell the client stream's [`StrictHead`] once `req` is answered: whether a
/// `CONNECT` or upgrade request switched protocols (if not, its heads are checked again).
fn switching(watch: &HeadWatch, req: &Request<Incoming>) -> impl FnOnce(http::StatusCode) {
    let watch = watch.clone();
    let connect = req.method() == Method::CONNECT;
    let upgrade = req.headers().contains_key(header::UPGRADE);
    move |status| watch.answered(connect, upgrade, status)
}

/// Past `--max-connections`: one 429 with the JSON reason, then the connection closes.
pub(crate) async fn refuse_connection<T>(stream: T, cap: Cap)
where
    T: tokio::io::AsyncWrite + Unpin,
{
    let error = ProxyError::from(cap);
    warn!(reason = %error.body()["reason"], "connection refused");
    airlock_net::respond::refuse_connection(stream, &error, Duration::from_secs(5)).await;
}

/// Serves one client connection of the proxy listener (or of the proxy variable inside a
/// fence, carried over the fence socket): `Proxy-Authorization`, then absolute-form
/// requests or `CONNECT`. A fence connection comes `bound` to its run, so its clients
/// need no `Proxy-Authorization`.
pub(crate) async fn serve_connection<T>(
    shared: Arc<DataPlane>,
    stream: T,
    guard: Arc<ConnectionGuard>,
    bound: Option<RunId>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let header_timeout = shared.limits.header_read_timeout;
    let binding: Binding = Arc::new(Mutex::new(bound));
    let activity = Activity::new();
    let (stream, watch) = StrictHead::new(stream);
    let deadlines = Deadlines {
        activity: activity.clone(),
        keep_alive: shared.limits.keep_alive_timeout,
        auth: Some((guard.clone(), shared.limits.auth_timeout)),
        connections: &shared.connections,
        head: Some(watch.clone()),
    };
    let service = {
        let shared = shared.clone();
        let activity = activity.clone();
        service_fn(move |mut req| {
            let shared = shared.clone();
            let binding = binding.clone();
            let guard = guard.clone();
            let in_flight = activity.request(&mut req);
            let answered = switching(&watch, &req);
            async move {
                let response = dispatch(shared, binding, guard, req).await;
                answered(response.status());
                Ok::<_, std::convert::Infallible>(airlock_net::limits::keepalive::hold(
                    response, in_flight,
                ))
            }
        })
    };
    let conn = http1_builder(header_timeout)
        .serve_connection(TokioIo::new(activity.io(stream)), service)
        .with_upgrades();
    if let Some(Err(error)) =
        airlock_net::limits::keepalive::watch(conn, |conn| conn.graceful_shutdown(), deadlines)
            .await
    {
        debug!(error = %error, "client connection ended with an error");
    }
}

/// Authenticates the request's run and binds it to the connection (docs/cases.md C15).
async fn authenticate(
    shared: &Arc<DataPlane>,
    binding: &Binding,
    req: &Request<Incoming>,
) -> Result<RunId, ProxyError> {
    let bound = binding.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some(value) = req.headers().get(header::PROXY_AUTHORIZATION) else {
        return bound.ok_or_else(|| ProxyError::ProxyAuth {
            reason: "no Proxy-Authorization header: airlock needs the run's credentials".into(),
        });
    };
    let credentials = value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("basic").then_some(rest.trim())
        })
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|raw| String::from_utf8(raw).ok())
        .and_then(|text| {
            let (user, pass) = text.split_once(':')?;
            Some((user.to_owned(), pass.to_owned()))
        })
        .ok_or_else(|| ProxyError::ProxyAuth {
            reason: "Proxy-Authorization is not Basic base64(run_id:token)".into(),
        })?;
    let (ledger, tokens) = (shared.ledger.clone(), shared.run_tokens.clone());
    let run = tokio::task::spawn_blocking(move || {
        ledger.authenticate(&tokens, &credentials.0, &credentials.1)
    })
    .await
    .map_err(|e| ProxyError::Internal {
        reason: format!("authentication task failed: {e}"),
    })?
    .map_err(|e| crate::stage::ledger_fault("could not be read", e))?
    .ok_or_else(|| ProxyError::ProxyAuth {
        reason: "the credentials name no run, or the token is wrong".into(),
    })?;
    let mut slot = binding.lock().unwrap_or_else(|e| e.into_inner());
    match slot.as_ref() {
        Some(existing) if *existing != run.id => Err(ProxyError::ProxyAuth {
            reason: format!(
                "this connection is bound to run {existing}; open a new connection for another run"
            ),
        }),
        _ => {
            *slot = Some(run.id.clone());
            Ok(run.id)
        }
    }
}

async fn dispatch(
    shared: Arc<DataPlane>,
    binding: Binding,
    guard: Arc<ConnectionGuard>,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let run = match authenticate(&shared, &binding, &req).await {
        Ok(run) => run,
        Err(error) => return error.into_response(),
    };
    // The connection counts against its run's cap from here until it (or the tunnel or
    // upgraded connection it becomes, which carry the guard on) ends.
    if let Err(cap) = guard.bind(&run) {
        warn!(run.id = %run, "connection refused: the run is at --max-connections-per-run");
        return ProxyError::from(cap).into_response();
    }
    req.extensions_mut().insert(guard);
    if req.method() == Method::CONNECT {
        return connect(shared, run, req).await;
    }
    let uri = req.uri();
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(authority)) => {
            match Target::parse(Scheme::Http, authority.as_str(), 80) {
                Some(target) => handle(shared, run, target, req).await,
                None => bad_target(authority.as_str()),
            }
        }
        (Some(other), Some(_)) => ProxyError::BadRequest {
            code: "unsupported_scheme",
            reason: format!(
                "absolute-form {other}:// requests are not proxied; use CONNECT for https"
            ),
        }
        .into_response(),
        _ => ProxyError::BadRequest {
            code: "not_a_proxy_request",
            reason: "this is airlock's proxy listener: send absolute-form http:// requests or CONNECT; the admin API listens elsewhere".into(),
        }
        .into_response(),
    }
}

fn bad_target(authority: &str) -> Response<ProxyBody> {
    ProxyError::BadRequest {
        code: "bad_connect_target",
        reason: format!("{authority:?} is not a valid host:port"),
    }
    .into_response()
}

/// CONNECT: decide at the tunnel's level first, then answer 200 and intercept TLS.
async fn connect(
    shared: Arc<DataPlane>,
    run: RunId,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let arrived = std::time::Instant::now();
    // RFC 9110 §9.3.6 and RFC 9112 §3.2.3: the CONNECT target is authority-form,
    // `host:port` alone; an absolute URI (`http://host:port`) or a path is refused, never
    // read as the authority it holds.
    let uri = req.uri();
    if uri.scheme().is_some() || uri.path_and_query().is_some() {
        return ProxyError::BadRequest {
            code: "bad_connect_target",
            reason: format!(
                "CONNECT takes host:port alone (authority-form, RFC 9110 §9.3.6), not {:?}",
                uri.to_string()
            ),
        }
        .into_response();
    }
    let Some(authority) = uri.authority().map(|a| a.as_str().to_owned()) else {
        return bad_target(&uri.to_string());
    };
    // RFC 9110 §9.3.6: the CONNECT target is host:port, both required.
    let Some(target) = Target::parse(Scheme::Https, &authority, 0).filter(|t| t.port != 0) else {
        return bad_target(&authority);
    };
    // One policy snapshot decides this CONNECT (a reload cannot split it): admission.
    #[allow(clippy::disallowed_methods)]
    let policy = shared.policy.current();
    // The reserved manifest host is always intercepted: airlock answers it itself.
    let decision = if target.host == crate::manifest::MANIFEST_HOST {
        ConnectDecision::Intercept
    } else {
        let profile = match crate::enforce::profile_of(&shared, &run) {
            Ok(profile) => profile,
            Err(error) => return error.into_response(),
        };
        policy.decide_connect_for(&target.host, target.port, profile.as_deref())
    };
    if let ConnectDecision::Tunnel(decision) = decision {
        return crate::tunnel::open(shared, run, target, decision, req).await;
    }
    // A host the policy denies outright gets its reason where clients show it: the
    // CONNECT is answered 200 and every request inside gets the 403 JSON body (rule,
    // reason, manifest), over TLS with airlock's leaf as usual. Nothing is dialed: the
    // tunnel never reaches the origin. A client that does not trust the CA loses nothing
    // over a refused CONNECT (docs/policy.md, "Denied hosts").
    let mut denied = None;
    let refusal = match decision {
        ConnectDecision::Deny(decision) => {
            denied = Some((decision.rule.clone(), decision.reason_code));
            crate::denials::journal_connect(&shared, &run, &target, &decision, policy.revision());
            let refusal: Refusal =
                crate::denials::host_refusal(&target, decision, policy.revision());
            Some(refusal)
        }
        _ => None,
    };
    // An IP literal no request could ever be sent to (special-purpose and named by no
    // allow_private, or airlock's own listener) is refused here, not answered 200 and then
    // 403 on every request inside (docs/policy.md invariant 1).
    // (A denied host is answered with its denial, never dialed, so it is not checked.)
    let literal = match refusal {
        Some(_) => Ok(()),
        None => shared.dialer.check_literal(&target.host, target.port),
    };
    if let Err(refused) = literal {
        if let Some(code) = refused.refusal_code() {
            info!(run.id = %run, origin.host = %target.host, origin.port = target.port,
                  reason_code = code, "CONNECT refused: the address can never be dialed");
            return ProxyError::DestinationRefused {
                code,
                reason: literal_refusal(&refused, target.port),
            }
            .into_response();
        }
    }
    let config = match shared.ca.server_config(&target.host) {
        Ok(config) => config,
        Err(error) => {
            return ProxyError::Internal {
                reason: error.to_string(),
            }
            .into_response()
        }
    };
    // The denied host's CONNECT line, with what its client sees: a 200, then each request
    // inside refused with its own line (`handle::refused_inside`).
    if let Some((rule, reason_code)) = &denied {
        crate::handle::ConnectLine {
            run: &run,
            target: &target,
            action: crate::metrics::RequestAction::Deny,
            rule: rule.as_deref(),
            reason_code,
            status: 200,
            bytes: (0, 0),
            elapsed: arrived.elapsed(),
        }
        .write(&shared);
    }
    let span =
        info_span!("tunnel", run.id = %run, origin.host = %target.host, origin.port = target.port);
    tokio::spawn(
        async move {
            let guard = req.extensions().get::<Arc<ConnectionGuard>>().cloned();
            let upgraded = match hyper::upgrade::on(req).await {
                Ok(upgraded) => upgraded,
                Err(error) => {
                    debug!(error = %error, "CONNECT upgrade failed");
                    return;
                }
            };
            intercept::intercept(shared, run, target, config, upgraded, guard, refusal).await;
        }
        .instrument(span),
    );
    Response::new(Empty::new().map_err(|never| match never {}).boxed())
}

/// Why a CONNECT to an IP literal is refused, in the client's terms.
fn literal_refusal(refused: &airlock_net::dial::DialError, port: u16) -> String {
    match refused {
        airlock_net::dial::DialError::Private { addr, .. } => format!(
            "{addr} is a special-purpose address (loopback, private, link-local, … RFC 6890) \
             that no allow_private names for port {port}: airlock never dials it, so the \
             CONNECT is refused"
        ),
        other => other.to_string(),
    }
}
