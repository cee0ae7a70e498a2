//! An HTTP/1.1 connection kept alive through airlock: CONNECT with a run's credentials,
//! TLS trusting airlock's CA, then hyper's client handshake; for tests that send many
//! requests on one intercepted connection without a client's start-up per request.

use crate::Airlock;

/// Opens a CONNECT tunnel through `airlock` to `authority` (`127.0.0.1:PORT`) with `run`'s
/// `token`, speaks TLS to airlock's leaf for 127.0.0.1 and HTTP/1.1 over it, and returns
/// the request sender (its connection task is spawned). Panics when a step fails.
pub async fn h1_through<B>(
    airlock: &Airlock,
    run: &str,
    token: &str,
    authority: &str,
) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = connect_tunnel(&airlock.proxy, run, token, authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = tls_trusting(&ca, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, stream).await.expect("tls");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .expect("h1");
    tokio::spawn(conn);
    sender
}

/// Opens a CONNECT tunnel through airlock to `authority` with `run`'s credentials and
/// returns the raw stream once airlock answered 200 (panics otherwise).
pub async fn connect_tunnel(
    proxy: &str,
    run: &str,
    token: &str,
    authority: &str,
) -> tokio::net::TcpStream {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect to airlock");
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{run}:{token}"));
    stream
        .write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Basic {credentials}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("send CONNECT");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream
            .read_exact(&mut byte)
            .await
            .expect("read the CONNECT answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "CONNECT refused: {}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// A TLS connector that trusts only the CA in `ca_pem` (airlock's) and offers `alpn`.
pub fn tls_trusting(ca_pem: &str, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use base64::Engine as _;
    let mut roots = rustls::RootCertStore::empty();
    let mut current = String::new();
    for line in ca_pem.lines() {
        match line.trim() {
            "-----BEGIN CERTIFICATE-----" => current.clear(),
            "-----END CERTIFICATE-----" => {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(&current)
                    .expect("PEM base64");
                roots.add(der.into()).expect("a usable CA certificate");
            }
            other => current.push_str(other),
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}
