//! The load generator: closed loop, HTTP/1.1 keep-alive over TLS, directly or through a
//! proxy's CONNECT tunnel. The same code drives every contestant.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::BoxError;

/// How the client reaches the origin.
#[derive(Clone, Debug)]
pub enum Route {
    /// Straight to the origin.
    Direct,
    /// Through a forward proxy with CONNECT; `auth` is the Basic `user:password`, if any.
    Proxy {
        /// The proxy listener.
        addr: SocketAddr,
        /// `user:password` for Proxy-Authorization.
        auth: Option<String>,
    },
}

/// Where requests go: the CONNECT authority and TLS name, and the TCP address when direct.
#[derive(Clone, Debug)]
pub struct Target {
    /// Host name or IP, as in the URL.
    pub host: String,
    /// Port, as in the URL.
    pub port: u16,
}

impl Target {
    /// The URL authority `host:port`.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Opens a TLS connection to `target`, through the proxy when there is one.
pub async fn open_tls(
    route: &Route,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, BoxError> {
    let tcp = match route {
        Route::Direct => TcpStream::connect((target.host.as_str(), target.port)).await?,
        Route::Proxy { addr, auth } => {
            let mut tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let authority = target.authority();
            let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
            if let Some(auth) = auth {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(auth);
                head.push_str(&format!("Proxy-Authorization: Basic {encoded}\r\n"));
            }
            head.push_str("\r\n");
            tcp.write_all(head.as_bytes()).await?;
            // The proxy sends nothing after its answer until the ClientHello, so reading in
            // chunks cannot swallow TLS bytes.
            let mut answer = Vec::with_capacity(256);
            let mut chunk = [0u8; 512];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tcp.read(&mut chunk).await?;
                if n == 0 || answer.len() > 16 * 1024 {
                    return Err("the proxy closed the connection during CONNECT".into());
                }
                answer.extend_from_slice(&chunk[..n]);
            }
            let status_line = String::from_utf8_lossy(&answer);
            let status_line = status_line.lines().next().unwrap_or_default().to_owned();
            if status_line.split_whitespace().nth(1) != Some("200") {
                return Err(format!("CONNECT {authority} answered {status_line:?}").into());
            }
            tcp
        }
    };
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(target.host.clone())?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await?;
    Ok(stream)
}

/// Opens an HTTP/1.1 connection (over TLS) to `target`.
pub async fn open(
    route: &Route,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<SendRequest<Full<Bytes>>, BoxError> {
    let stream = open_tls(route, target, tls).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// One request kind of a load run.
#[derive(Clone, Debug)]
pub struct Request {
    /// GET or POST.
    pub method: hyper::Method,
    /// Path and query.
    pub path: String,
    /// Request body (empty for GET).
    pub body: Bytes,
    /// Expected status.
    pub status: u16,
}

/// Sends `request` on `sender` and drains the answer; Ok(bytes of the body).
pub async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    request: &Request,
) -> Result<usize, BoxError> {
    sender.ready().await?;
    let mut builder = hyper::Request::builder()
        .method(request.method.clone())
        .uri(request.path.as_str())
        .header(hyper::header::HOST, target.authority());
    if !request.body.is_empty() {
        builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let response = sender
        .send_request(builder.body(Full::new(request.body.clone()))?)
        .await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len();
        }
    }
    if status != request.status {
        return Err(format!("{} {} answered {status}", request.method, request.path).into());
    }
    Ok(bytes)
}

/// What a load run measured (after the warm-up).
#[derive(Clone, Debug, Default)]
pub struct LoadResult {
    /// Requests completed in the measured window.
    pub requests: u64,
    /// Failed requests (the connection is reopened).
    pub errors: u64,
    /// The measured window.
    pub elapsed: Duration,
    /// Latencies in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

impl LoadResult {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0..=1), in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let index = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        f64::from(self.latencies_us[index]) / 1000.0
    }
}

/// Shape of a closed-loop run.
#[derive(Clone, Debug)]
pub struct LoadShape {
    /// Concurrent connections, each sending its next request when the answer is in.
    pub connections: usize,
    /// Discarded start.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
}

/// Runs the closed loop; `on_measure_start` is called once when the warm-up ends.
pub async fn run(
    route: Route,
    target: Target,
    tls: Arc<rustls::ClientConfig>,
    request: Request,
    shape: &LoadShape,
    on_measure_start: impl FnOnce() + Send + 'static,
) -> LoadResult {
    let start = Instant::now();
    let measure_from = start + shape.warmup;
    let end = measure_from + shape.duration;
    let marker = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        on_measure_start();
    });
    let mut tasks = Vec::with_capacity(shape.connections);
    for _ in 0..shape.connections {
        let (route, target, tls, request) =
            (route.clone(), target.clone(), tls.clone(), request.clone());
        tasks.push(tokio::spawn(async move {
            let mut result = LoadResult::default();
            let mut sender = None;
            while Instant::now() < end {
                if sender.is_none() {
                    match open(&route, &target, &tls).await {
                        Ok(s) => sender = Some(s),
                        Err(error) => {
                            result.errors += 1;
                            result.first_error.get_or_insert(error.to_string());
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    }
                }
                let Some(s) = sender.as_mut() else { continue };
                let sent = Instant::now();
                match send(s, &target, &request).await {
                    Ok(_) => {
                        let done = Instant::now();
                        if sent >= measure_from && done <= end {
                            result.requests += 1;
                            let micros = (done - sent).as_micros().min(u128::from(u32::MAX));
                            result.latencies_us.push(micros as u32);
                        }
                    }
                    Err(error) => {
                        result.errors += 1;
                        result.first_error.get_or_insert(error.to_string());
                        sender = None;
                    }
                }
            }
            result
        }));
    }
    let mut total = LoadResult {
        elapsed: shape.duration,
        ..LoadResult::default()
    };
    for task in tasks {
        if let Ok(part) = task.await {
            total.requests += part.requests;
            total.errors += part.errors;
            total.latencies_us.extend(part.latencies_us);
            if total.first_error.is_none() {
                total.first_error = part.first_error;
            }
        }
    }
    let _ = marker.await;
    total.latencies_us.sort_unstable();
    total
}
