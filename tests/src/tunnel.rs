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
    let stream = crate::connect_tunnel(&airlock.proxy, run, token, authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = crate::tls_trusting(&ca, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, stream).await.expect("tls");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .expect("h1");
    tokio::spawn(conn);
    sender
}
