//! WebSocket and the run's placeholders (docs/protocols.md, WebSocket): a handshake that
//! carries one is refused, and a client message that carries one — fragmented, JSON-escaped
//! or compressed with permessage-deflate — is never forwarded; the client gets a Close 1008.

use std::sync::Arc;

use airlock_tests::{Airlock, Fixture, Origin};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use super::{echo_origin_logging, exercise, tunnel, Handshakes, Messages};

/// A run that has a room staged (its id a string placeholder), beside a WebSocket echo
/// origin a read rule passes to.
struct Room {
    _fx: Fixture,
    items: Origin,
    airlock: Airlock,
    run: String,
    token: String,
    authority: String,
    seen: Handshakes,
    messages: Messages,
    room: String,
}

async fn room_staged() -> Room {
    let fx = Fixture::new();
    let (ws_port, seen, messages) = echo_origin_logging(None).await;
    let items = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &airlock_tests::Received| {
            airlock_tests::Reply::json(201, &serde_json::json!({"id": 1}))
        }),
    )
    .await
    .expect("origin");
    let items_port = items.addr().port();
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "create-room"
host = "127.0.0.1"
port = {items_port}
method = ["POST"]
path = "/rooms"
action = "stage"
[rule.respond]
status = 201
body = '{{"room": "{{{{placeholder:string:/room}}}}"}}'

[[rule]]
id = "ws-pass"
host = "127.0.0.1"
port = {ws_port}
method = "read"
action = "pass"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let created = airlock_tests::curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "{}",
            &format!("https://127.0.0.1:{items_port}/rooms"),
        ],
    )
    .await;
    assert_eq!(created.status, 201);
    let room = created.json()["room"].as_str().expect("room").to_owned();
    let token = airlock.run_token(&run).await;
    Room {
        _fx: fx,
        items,
        airlock,
        run,
        token,
        authority: format!("127.0.0.1:{ws_port}"),
        seen,
        messages,
        room,
    }
}

/// Asserts `close` is a Close 1008 whose reason starts with the placeholder's code.
fn assert_refused(close: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) {
    match close {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1008);
            assert!(
                frame.reason.starts_with("placeholder_in_websocket_message"),
                "{}",
                frame.reason
            );
        }
        other => panic!("expected a Close 1008, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_handshake_or_message_carrying_a_placeholder_never_reaches_the_origin() {
    let r = room_staged().await;
    let (airlock, run, token, authority) = (&r.airlock, &r.run, &r.token, &r.authority);
    let (ws_seen, ws_messages, items) = (&r.seen, &r.messages, &r.items);
    let room = r.room.clone();
    // In the URL, percent-encoded, and in a header.
    let encoded: String = room.bytes().map(|b| format!("%{b:02X}")).collect();
    for (path, header) in [
        (format!("/chat?room={room}"), None),
        (format!("/chat?room={encoded}"), None),
        ("/chat".to_owned(), Some(room.clone())),
    ] {
        let stream = tunnel(airlock, run, token, authority).await;
        let mut request = tokio_tungstenite::tungstenite::http::Request::builder()
            .uri(format!("ws://{authority}{path}"))
            .header("host", authority)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header(
                "sec-websocket-key",
                tokio_tungstenite::tungstenite::handshake::client::generate_key(),
            );
        if let Some(value) = &header {
            request = request.header("x-room", value);
        }
        let request = request.body(()).expect("request");
        match tokio_tungstenite::client_async(request, stream).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 403, "{path}");
                let body: serde_json::Value =
                    serde_json::from_slice(response.body().as_deref().unwrap_or(b"{}"))
                        .expect("json");
                assert_eq!(
                    body["reason_code"], "placeholder_in_upgrade",
                    "{path}: {body}"
                );
                assert!(
                    body["reason"].as_str().unwrap_or("").contains(&room),
                    "{body}"
                );
            }
            other => panic!(
                "{path}: expected 403, got {:?}",
                other.map(|(_, r)| r.status())
            ),
        }
    }
    assert!(
        ws_seen.lock().expect("seen").is_empty(),
        "no handshake carrying a placeholder reached the origin"
    );
    // A handshake without one is relayed as before.
    let stream = tunnel(airlock, run, token, authority).await;
    exercise(stream, &format!("ws://{authority}/chat")).await;
    assert_eq!(ws_seen.lock().expect("seen").len(), 1);
    // After the handshake: an ordinary message is echoed; one carrying the placeholder
    // (here spelt in JSON escapes, split over two fragments) is never forwarded, and the
    // client is told why with a Close 1008.
    ws_messages.lock().expect("messages").clear();
    let stream = tunnel(airlock, run, token, authority).await;
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{authority}/chat"), stream)
        .await
        .expect("handshake");
    ws.send(Message::text("hello")).await.expect("send");
    assert_eq!(
        ws.next().await.and_then(Result::ok),
        Some(Message::text("hello"))
    );
    let escaped: String = room
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let json = format!(r#"{{"room":"{escaped}"}}"#);
    let (first, second) = json.split_at(json.len() / 2);
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let start = Frame::message(first.as_bytes().to_vec(), OpCode::Data(Data::Text), false);
    ws.send(Message::Frame(start))
        .await
        .expect("first fragment");
    let end = Frame::message(
        second.as_bytes().to_vec(),
        OpCode::Data(Data::Continue),
        true,
    );
    ws.send(Message::Frame(end)).await.expect("last fragment");
    assert_refused(ws.next().await);
    // The origin got the ordinary message only.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        *ws_messages.lock().expect("messages"),
        vec!["hello".to_owned()]
    );
    assert!(items.received().is_empty(), "the room is still staged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_websocket_message_carrying_a_placeholder_never_reaches_the_origin() {
    use std::io::Write as _;
    let r = room_staged().await;
    let mut stream = tunnel(&r.airlock, &r.run, &r.token, &r.authority).await;
    let head = format!(
        "GET /chat HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        r.authority
    );
    stream.write_all(head.as_bytes()).await.expect("handshake");
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.expect("the 101");
        answer.push(byte[0]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // One text message, deflated and sync-flushed without its 00 00 ff ff (RFC 7692
    // §7.2.1), RSV1 set, masked (RFC 6455 §5.3).
    let mut deflater =
        flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    deflater
        .write_all(format!(r#"{{"room":"{}"}}"#, r.room).as_bytes())
        .expect("deflate");
    deflater.flush().expect("flush");
    let mut payload = std::mem::take(deflater.get_mut());
    payload.truncate(payload.len() - 4);
    let mask = [0x5a, 0x17, 0xc3, 0x88];
    let mut frame = vec![0xc1, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    stream.write_all(&frame).await.expect("send");
    let mut close = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stream.read_to_end(&mut close),
    )
    .await
    .expect("airlock answers and closes (bound: 30 s)");
    assert!(read.is_ok(), "{read:?}");
    assert_eq!(close.first(), Some(&0x88), "a Close frame: {close:?}");
    assert_eq!(close.get(2..4), Some(&[0x03, 0xf0][..]), "status 1008");
    assert!(
        close[4..].starts_with(b"placeholder_in_websocket_message"),
        "{}",
        String::from_utf8_lossy(&close)
    );
    assert!(r.messages.lock().expect("messages").is_empty());
    assert_eq!(
        r.seen.lock().expect("seen").len(),
        1,
        "the handshake passed"
    );
}
