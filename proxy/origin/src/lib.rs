//! Small loopback origins for the demo and the tests: an HTTPS (or plain HTTP) server on
//! 127.0.0.1 with a throwaway CA, recording every request it receives.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub mod git_http;

/// A host name the origins' certificates also carry, under the `.test` top-level domain
/// reserved for testing (RFC 6761 section 6.2): a client reaches an origin by this name
/// through airlock started with `--resolve origin.test=127.0.0.1` (clients such as Go's
/// `net/http` never send `localhost` or loopback IPs through a proxy).
pub const TEST_HOST: &str = "origin.test";

/// A request as the origin received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Method.
    pub method: String,
    /// HTTP version, as `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// Path and query.
    pub path: String,
    /// Headers, lowercase names, in order.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the origin answers.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
    /// Wait this long (after recording the request) before answering.
    pub delay: Option<Duration>,
    /// Trailer fields sent after the body (the body is then streamed, never sized).
    pub trailers: Vec<(String, String)>,
    /// Keep the response open this long after the body before ending it (a streaming
    /// answer: the client has the body while the response is not over).
    pub hold_open: Option<Duration>,
    /// Record the request (body included), then close the connection without answering:
    /// an origin that got the request and died before replying.
    pub hang_up: bool,
}

impl Reply {
    /// A reply with `status` and a JSON `body`.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            delay: None,
            trailers: Vec::new(),
            hold_open: None,
            hang_up: false,
        }
    }

    /// No reply: the origin records the request and closes the connection
    /// ([`Reply::hang_up`]).
    pub fn hang_up() -> Self {
        Self {
            hang_up: true,
            ..Self::default()
        }
    }

    /// A reply with `status` and a text body.
    pub fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: body.as_bytes().to_vec(),
            delay: None,
            trailers: Vec::new(),
            hold_open: None,
            hang_up: false,
        }
    }
}

/// How the origin answers each request.
pub type Handler = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

/// A throwaway CA for origins; its PEM is what `airlock serve --upstream-ca` trusts.
pub struct OriginCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl OriginCa {
    /// A new CA (ECDSA P-256), valid for a day.
    pub fn new() -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "airlock test origin CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A leaf certificate for the same names as [`OriginCa::server_config`], as PEM
    /// `(certificate, PKCS#8 private key)`: for origins that are not this crate's own
    /// server (a Python SDK's, say), which read their certificate from files.
    ///
    /// # Errors
    /// [`rcgen::Error`] when the key or certificate cannot be made.
    pub fn leaf_pem(&self) -> Result<(String, String), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            TEST_HOST.to_owned(),
        ])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A TLS server config for `127.0.0.1` and `localhost` (IP and DNS SANs; also
    /// 127.0.0.2, ::1 and [`TEST_HOST`]), ALPN http/1.1.
    pub fn server_config(
        &self,
    ) -> Result<rustls::ServerConfig, Box<dyn std::error::Error + Send + Sync>> {
        self.server_config_alpn(&[b"http/1.1"])
    }

    /// A TLS server config as [`OriginCa::server_config`], offering `protocols` by ALPN
    /// (none: no ALPN extension at all).
    pub fn server_config_alpn(
        &self,
        protocols: &[&[u8]],
    ) -> Result<rustls::ServerConfig, Box<dyn std::error::Error + Send + Sync>> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "127.0.0.2".to_owned(),
            "::1".to_owned(),
            TEST_HOST.to_owned(),
        ])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }
}

/// A running origin on 127.0.0.1; stops when dropped.
pub struct Origin {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    /// Starts an HTTPS origin with a certificate from `ca` (or plain HTTP when `ca` is
    /// `None`), answering with `handler`.
    pub async fn start(ca: Option<&OriginCa>, handler: Handler) -> std::io::Result<Self> {
        Self::start_alpn(ca, handler, &[b"http/1.1"]).await
    }

    /// Starts an HTTPS origin offering `protocols` by ALPN: with `h2` negotiated it speaks
    /// HTTP/2, otherwise HTTP/1.1 (`&[b"h2"]` makes an h2-only origin).
    pub async fn start_alpn(
        ca: Option<&OriginCa>,
        handler: Handler,
        protocols: &[&[u8]],
    ) -> std::io::Result<Self> {
        Self::start_on(
            "127.0.0.1:0".parse().map_err(std::io::Error::other)?,
            ca,
            handler,
            protocols,
        )
        .await
    }

    /// Starts an origin bound to `addr` (a loopback address: `127.0.0.2`, `[::1]` …).
    pub async fn start_on(
        addr: SocketAddr,
        ca: Option<&OriginCa>,
        handler: Handler,
        protocols: &[&[u8]],
    ) -> std::io::Result<Self> {
        let tls = match ca {
            Some(ca) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
                ca.server_config_alpn(protocols)
                    .map_err(std::io::Error::other)?,
            ))),
            None => None,
        };
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let log = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let log = log.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(req, handler.clone(), log.clone()));
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder.max_headers(512).max_buf_size(512 * 1024);
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                                    let _ = hyper::server::conn::http2::Builder::new(
                                        hyper_util::rt::TokioExecutor::new(),
                                    )
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                                } else {
                                    let _ = builder
                                        .serve_connection(TokioIo::new(stream), service)
                                        .await;
                                }
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            received,
            task,
        })
    }

    /// The origin's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The origin's response body: whole, or streamed with trailers.
type OriginBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// Why the origin answered nothing: a service error makes hyper close the connection
/// without a response.
type NoAnswer = Box<dyn std::error::Error + Send + Sync>;

async fn answer(
    req: Request<Incoming>,
    handler: Handler,
    log: Arc<Mutex<Vec<Received>>>,
) -> Result<Response<OriginBody>, NoAnswer> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    let received = Received {
        version: format!("{:?}", parts.version),
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    let reply = handler(&received);
    log.lock().unwrap_or_else(|e| e.into_inner()).push(received);
    if reply.hang_up {
        return Err("the origin hangs up without answering".into());
    }
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let body: OriginBody = if let Some(hold) = reply.hold_open {
        use futures_util::StreamExt as _;
        let data = futures_util::stream::iter(vec![Ok::<_, std::convert::Infallible>(
            hyper::body::Frame::data(Bytes::from(reply.body)),
        )]);
        let end =
            futures_util::stream::once(tokio::time::sleep(hold)).filter_map(|()| async { None });
        http_body_util::StreamBody::new(data.chain(end)).boxed_unsync()
    } else if reply.trailers.is_empty() {
        Full::new(Bytes::from(reply.body)).boxed_unsync()
    } else {
        let mut trailers = http::HeaderMap::new();
        for (name, value) in &reply.trailers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                trailers.append(name, value);
            }
        }
        let mut frames = Vec::new();
        if !reply.body.is_empty() {
            frames.push(Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                Bytes::from(reply.body),
            )));
        }
        frames.push(Ok(hyper::body::Frame::trailers(trailers)));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    };
    let declared: Vec<String> = reply.trailers.iter().map(|(n, _)| n.clone()).collect();
    let mut response = Response::new(body);
    if !declared.is_empty() {
        // HTTP/1.1 sends only trailer fields the `Trailer` header declares (RFC 9110 §6.6.2).
        if let Ok(value) = http::HeaderValue::from_str(&declared.join(", ")) {
            response.headers_mut().insert(http::header::TRAILER, value);
        }
    }
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    Ok(response)
}
