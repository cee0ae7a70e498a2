//! docs/cases.md C06: WebSocket inside an intercepted tunnel (wss) and plain ws through the
//! proxy; decided at the handshake, then relayed both ways unchanged.

use std::sync::{Arc, Mutex};

use airlock_tests::{Airlock, Fixture};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::handshake::server::{
    Request as WsRequest, Response as WsResponse,
};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

mod flows;
mod placeholders;

/// The handshake headers each connection to an echo origin brought.
type Handshakes = Arc<Mutex<Vec<Vec<(String, String)>>>>;

/// The text and binary messages an echo origin received, in order (binary ones lossily).
type Messages = Arc<Mutex<Vec<String>>>;

/// A WebSocket echo origin on 127.0.0.1 (wss when `tls` is given); records each
/// handshake's headers.
async fn echo_origin(
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (u16, Arc<Mutex<Vec<Vec<(String, String)>>>>) {
    let (port, seen, _) = echo_origin_logging(tls).await;
    (port, seen)
}

/// [`echo_origin`], also recording every message it received.
async fn echo_origin_logging(
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (u16, Handshakes, Messages) {
    let messages: Messages = Arc::default();
    let received = messages.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen: Handshakes = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tls = tls.clone();
            let log = log.clone();
            let received = received.clone();
            tokio::spawn(async move {
                match tls {
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            serve_echo(stream, log, received).await;
                        }
                    }
                    None => serve_echo(stream, log, received).await,
                }
            });
        }
    });
    (port, seen, messages)
}

async fn serve_echo<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    log: Handshakes,
    received: Messages,
) {
    #[expect(
        clippy::result_large_err,
        reason = "the signature is tungstenite's callback type"
    )]
    let callback = |req: &WsRequest, mut response: WsResponse| {
        let headers = req
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        log.lock().expect("log").push(headers);
        if let Some(protocol) = req.headers().get("sec-websocket-protocol") {
            let first = protocol
                .to_str()
                .unwrap_or("")
                .split(',')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            response
                .headers_mut()
                .insert("sec-websocket-protocol", first.parse().expect("header"));
        }
        Ok(response)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    while let Some(Ok(message)) = ws.next().await {
        match message {
            Message::Close(_) => {
                // tungstenite queued the close reply on reading the close: send it.
                let _ = ws.flush().await;
            }
            Message::Ping(_) | Message::Pong(_) => {}
            other => {
                let text = match &other {
                    Message::Text(text) => text.to_string(),
                    Message::Binary(data) => String::from_utf8_lossy(data).into_owned(),
                    _ => String::new(),
                };
                received.lock().expect("messages").push(text);
                if ws.send(other).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// CONNECT through airlock; returns the raw tunnel.
async fn tunnel(
    airlock: &Airlock,
    run: &str,
    token: &str,
    authority: &str,
) -> tokio::net::TcpStream {
    airlock_tests::connect_tunnel(&airlock.proxy, run, token, authority).await
}

fn client_tls(ca_pem: &str) -> tokio_rustls::TlsConnector {
    airlock_tests::tls_trusting(ca_pem, &[b"http/1.1"])
}

async fn exercise<S: AsyncRead + AsyncWrite + Unpin>(stream: S, url: &str) {
    let request = tokio_tungstenite::tungstenite::http::Request::builder()
        .uri(url)
        .header("host", url.split('/').nth(2).unwrap_or(""))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header(
            "sec-websocket-key",
            tokio_tungstenite::tungstenite::handshake::client::generate_key(),
        )
        .header("sec-websocket-protocol", "chat.v2, chat.v1")
        .header(
            "sec-websocket-extensions",
            "permessage-deflate; client_max_window_bits",
        )
        .body(())
        .expect("request");
    let (mut ws, response) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("handshake through airlock");
    assert_eq!(response.status(), 101);
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some("chat.v2")
    );
    // 1 MiB binary message, echoed byte for byte.
    let payload: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(payload.clone()))
        .await
        .expect("send");
    match ws.next().await {
        Some(Ok(Message::Binary(data))) => assert_eq!(data.as_ref(), payload.as_slice()),
        other => panic!("expected the echo, got {other:?}"),
    }
    ws.send(Message::text("hello")).await.expect("send text");
    assert_eq!(
        ws.next().await.and_then(Result::ok),
        Some(Message::text("hello"))
    );
    ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .expect("ping");
    match ws.next().await {
        Some(Ok(Message::Pong(data))) => assert_eq!(data.as_ref(), b"are you there"),
        other => panic!("expected a pong, got {other:?}"),
    }
    ws.close(Some(CloseFrame {
        code: CloseCode::from(4000),
        reason: "done".into(),
    }))
    .await
    .expect("close");
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 4000),
        other => panic!("expected the close echoed, got {other:?}"),
    }
}

fn policy(wss: u16, ws: u16) -> String {
    format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "ws-stage"
host = "127.0.0.1"
port = [{wss}, {ws}]
path = "/staged"
action = "stage"

[[rule]]
id = "ws-deny"
host = "127.0.0.1"
port = [{wss}, {ws}]
path = "/denied"
action = "deny"

[[rule]]
id = "ws-pass"
host = "127.0.0.1"
port = [{wss}, {ws}]
method = "read"
action = "pass"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c06_websocket_inside_an_intercepted_tunnel_and_plain_ws() {
    let fx = Fixture::new();
    let origin_tls = tokio_rustls::TlsAcceptor::from(Arc::new(
        fx.origin_ca.server_config().expect("origin tls"),
    ));
    let (wss_port, wss_seen) = echo_origin(Some(origin_tls)).await;
    let (ws_port, ws_seen) = echo_origin(None).await;
    let (airlock, run, _) = fx.start_run(&policy(wss_port, ws_port), &[]).await;
    let token = airlock.run_token(&run).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");

    // wss:// inside an intercepted tunnel.
    let authority = format!("127.0.0.1:{wss_port}");
    let tunnel_stream = tunnel(&airlock, &run, &token, &authority).await;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = client_tls(&ca)
        .connect(name, tunnel_stream)
        .await
        .expect("TLS with airlock's leaf");
    exercise(tls, &format!("wss://{authority}/chat")).await;
    let seen = wss_seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    let header = |name: &str| {
        seen[0]
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("sec-websocket-protocol").as_deref(),
        Some("chat.v2, chat.v1"),
        "relayed unchanged"
    );
    assert_eq!(
        header("sec-websocket-extensions").as_deref(),
        Some("permessage-deflate; client_max_window_bits")
    );
    assert_eq!(header("proxy-authorization"), None);

    // ws:// through a CONNECT tunnel carrying plain HTTP.
    let authority = format!("127.0.0.1:{ws_port}");
    let plain = tunnel(&airlock, &run, &token, &authority).await;
    exercise(plain, &format!("ws://{authority}/chat")).await;
    assert_eq!(ws_seen.lock().expect("seen").len(), 1);

    // A handshake a stage rule matches is refused: an upgrade cannot be staged.
    for (path, code) in [
        ("/staged", "upgrade_not_stageable"),
        ("/denied", "rule_deny"),
    ] {
        let authority = format!("127.0.0.1:{wss_port}");
        let stream = tunnel(&airlock, &run, &token, &authority).await;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let tls = client_tls(&ca).connect(name, stream).await.expect("TLS");
        let request = tokio_tungstenite::tungstenite::http::Request::builder()
            .uri(format!("wss://{authority}{path}"))
            .header("host", &authority)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header(
                "sec-websocket-key",
                tokio_tungstenite::tungstenite::handshake::client::generate_key(),
            )
            .body(())
            .expect("request");
        match tokio_tungstenite::client_async(request, tls).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 403, "{path}");
                let body: serde_json::Value =
                    serde_json::from_slice(response.body().as_deref().unwrap_or(b"{}"))
                        .expect("json");
                assert_eq!(body["reason_code"], code, "{path}: {body}");
            }
            other => panic!(
                "{path}: expected 403, got {:?}",
                other.map(|(_, r)| r.status())
            ),
        }
    }
    assert_eq!(
        wss_seen.lock().expect("seen").len(),
        1,
        "refused handshakes never reached the origin"
    );
    assert!(airlock.effects(&run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_handshake_carries_the_rules_credential() {
    let fx = Fixture::new();
    let (ws_port, ws_seen) = echo_origin(None).await;
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]

[credential.ws-bot]
source = {{ env = "AIRLOCK_TEST_WS_TOKEN" }}
bind = {{ hosts = ["127.0.0.1"] }}
place = {{ header = "authorization", format = "Bearer {{}}" }}

[[rule]]
id = "ws-pass"
host = "127.0.0.1"
port = {ws_port}
method = "read"
action = "pass"
inject = "ws-bot"
"#
    );
    let airlock = fx.start_with_env(
        &policy,
        &[],
        &[("AIRLOCK_TEST_WS_TOKEN", "ws-s3cret-value")],
    );
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{ws_port}");
    let plain = tunnel(&airlock, &run, &token, &authority).await;
    exercise(plain, &format!("ws://{authority}/chat")).await;
    let seen = ws_seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0]
            .iter()
            .any(|(n, v)| n == "authorization" && v == "Bearer ws-s3cret-value"),
        "{:?}",
        seen[0]
    );
}
