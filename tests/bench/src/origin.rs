//! The local HTTPS origin: nginx (one worker, as in docs/performance.md) when installed, else
//! this binary's own hyper origin in a child process. Both serve `/small` (2 bytes),
//! `/64k` (64 KiB), `/stream` (the streaming size) and `/stage` (any method, a small JSON
//! answer) on every port given, with keep-alive.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::process::{Child, Command};

use crate::BoxError;

/// Where nginx lives when Debian's `nginx-light` is installed.
const NGINX: &str = "/usr/sbin/nginx";

/// A running origin.
pub struct Origin {
    /// `nginx 1.22.1` or `hyper (in-process fallback)`.
    pub kind: String,
    /// The ports, all on 127.0.0.1; the first is the main one.
    pub ports: Vec<u16>,
    /// The child process.
    pub child: Child,
}

/// A free port on 127.0.0.1 (bound and released: the usual small race).
pub fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts the origin with `port_count` ports serving the files under `dir`.
pub async fn start(
    dir: &Path,
    cert: &Path,
    key: &Path,
    port_count: usize,
    stream_bytes: u64,
    force_hyper: bool,
) -> Result<Origin, BoxError> {
    let ports = (0..port_count)
        .map(|_| free_port())
        .collect::<Result<Vec<_>, _>>()?;
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    std::fs::write(www.join("64k"), vec![b'x'; 64 * 1024])?;
    // Sparse: served from the page cache, never written to disk.
    std::fs::File::create(www.join("stream"))?.set_len(stream_bytes)?;
    let child = if Path::new(NGINX).exists() && !force_hyper {
        let conf = nginx_conf(dir, cert, key, &ports);
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let version = std::process::Command::new(NGINX).arg("-v").output()?;
        let version = String::from_utf8_lossy(&version.stderr).trim().to_owned();
        Origin {
            kind: version.replace("nginx version: ", ""),
            ports,
            child,
        }
    } else {
        let list = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let child = Command::new(std::env::current_exe()?)
            .arg("origin")
            .arg(cert)
            .arg(key)
            .arg(list)
            .arg(stream_bytes.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        Origin {
            kind: "hyper origin (nginx not installed)".to_owned(),
            ports,
            child,
        }
    };
    for port in &child.ports {
        wait_for_port(*port).await?;
    }
    Ok(child)
}

/// Waits until something accepts on 127.0.0.1:`port` (10 s at most).
pub async fn wait_for_port(port: u16) -> Result<(), BoxError> {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("nothing listens on 127.0.0.1:{port}").into())
}

fn nginx_conf(dir: &Path, cert: &Path, key: &Path, ports: &[u16]) -> String {
    let d = dir.display();
    let listens: String = ports
        .iter()
        .map(|p| format!("    listen 127.0.0.1:{p} ssl;\n"))
        .collect();
    format!(
        r#"worker_processes 1;
master_process off;
daemon off;
pid {d}/nginx.pid;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp-body;
  proxy_temp_path {d}/tmp-proxy;
  fastcgi_temp_path {d}/tmp-fastcgi;
  uwsgi_temp_path {d}/tmp-uwsgi;
  scgi_temp_path {d}/tmp-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  default_type application/octet-stream;
  server {{
{listens}    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    root {d}/www;
    location = /small {{ default_type text/plain; return 200 "ok"; }}
    location = /stage {{ default_type application/json; return 200 '{{"id":1}}'; }}
    location = /64k {{ }}
    location = /stream {{ }}
  }}
}}
"#,
        cert = cert.display(),
        key = key.display(),
    )
}

type OriginBody = BoxBody<Bytes, Infallible>;

/// The fallback origin's main: `origin CERT KEY PORT,PORT,… STREAM_BYTES`.
pub fn main(args: &[String]) -> Result<(), BoxError> {
    let [cert, key, ports, stream_bytes] = args else {
        return Err("usage: airlock-bench origin CERT KEY PORTS STREAM_BYTES".into());
    };
    let tls = crate::tls::server_config(&PathBuf::from(cert), &PathBuf::from(key))?;
    let stream_bytes: u64 = stream_bytes.parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut servers = Vec::new();
        for port in ports.split(',') {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let tls = tls.clone();
            servers.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
                    tokio::spawn(async move {
                        let Ok(stream) = acceptor.accept(stream).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |req| async move {
                            Ok::<_, Infallible>(answer(req, stream_bytes).await)
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .http1_only()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }));
        }
        for server in servers {
            let _ = server.await;
        }
        Ok::<_, BoxError>(())
    })
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    stream_bytes: u64,
) -> hyper::Response<OriginBody> {
    let path = req.uri().path().to_owned();
    // Drain the request body, as an origin does.
    let _ = req.into_body().collect().await;
    let full = |bytes: Bytes| Full::new(bytes).boxed();
    let body = match path.as_str() {
        "/small" => full(Bytes::from_static(b"ok")),
        "/stage" => full(Bytes::from_static(b"{\"id\":1}")),
        "/64k" => full(Bytes::from(vec![b'x'; 64 * 1024])),
        "/stream" => {
            let chunk = Bytes::from(vec![0u8; 64 * 1024]);
            let left = stream_bytes.div_ceil(64 * 1024);
            RepeatBody { chunk, left }.boxed()
        }
        _ => {
            let mut response = hyper::Response::new(full(Bytes::new()));
            *response.status_mut() = hyper::StatusCode::NOT_FOUND;
            return response;
        }
    };
    hyper::Response::new(body)
}

/// `left` frames of `chunk`.
struct RepeatBody {
    chunk: Bytes,
    left: u64,
}

impl hyper::body::Body for RepeatBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        std::task::Poll::Ready(Some(Ok(Frame::data(self.chunk.clone()))))
    }
}
