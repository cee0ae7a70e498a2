//! Connection caps and idle timeouts (issue #7, docs/cases.md C09 class): `--idle-timeout` on
//! `tunnel` splices and upgraded connections, `--keep-alive-timeout` on HTTP connections,
//! `--auth-timeout`, and `--max-connections-per-run`, `--max-connections` and
//! `--max-unauthenticated-connections` answered with 429 `too_many_connections`.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{connect_tunnel, loopback_policy, ok_origin, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

mod admin;
mod body;
mod fence_socket;
mod idle_tunnel;
mod keep_alive;
mod unauthenticated;

/// A raw TCP origin on 127.0.0.1. With `upgrade`, it first reads an HTTP head and answers
/// `101 Switching Protocols`. Then it echoes bytes and reports on `closed` when its client
/// side ended (EOF or error).
async fn echo_origin(upgrade: bool) -> (u16, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (closed, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let closed = closed.clone();
            tokio::spawn(async move {
                if upgrade {
                    let head = read_head(&mut stream).await;
                    assert!(
                        head.to_ascii_lowercase().contains("upgrade: websocket"),
                        "{head}"
                    );
                    let _ = stream
                        .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
                        .await;
                }
                let mut buf = [0u8; 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = closed.send(());
            });
        }
    });
    (port, rx)
}

/// Reads up to the end of an HTTP head (byte by byte: nothing past it is consumed).
async fn read_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads a response head and its `Content-Length` body: `(status, JSON body)`.
async fn read_response(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> (u16, Value) {
    let head = read_head(stream).await;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head:?}"));
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.expect("the body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn basic(run: &str, token: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{run}:{token}"))
}

/// Whether a `CONNECT authority` of `run` gets 200 within 10 s (a slot was released).
async fn a_connect_gets_through(proxy: &str, run: &str, token: &str, authority: &str) -> bool {
    airlock_tests::poll_until(Duration::from_secs(10), || async {
        let (_stream, status, _) = connect_raw(proxy, run, token, authority).await;
        (status == 200).then_some(())
    })
    .await
    .is_some()
}

/// Sends `CONNECT authority` with the run's credentials on a new connection.
async fn connect_raw(
    proxy: &str,
    run: &str,
    token: &str,
    authority: &str,
) -> (TcpStream, u16, Value) {
    let mut stream = TcpStream::connect(proxy).await.expect("connect to airlock");
    let head = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic(run, token)
    );
    stream
        .write_all(head.as_bytes())
        .await
        .expect("send CONNECT");
    let (status, body) = read_response(&mut stream).await;
    (stream, status, body)
}

/// Echoes `ping` through `stream`, then waits (at most 60 s) for airlock to close it.
/// A masked text frame carrying "ping" (RFC 6455 §5.2): through a tunnel it is bytes like
/// any other, and an upgraded connection reads it as the client's message it is.
fn ping_frame() -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = vec![0x81, 0x84];
    frame.extend_from_slice(&mask);
    frame.extend(b"ping".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    frame
}

async fn ping_then_expect_close(stream: &mut TcpStream) {
    let frame = ping_frame();
    stream.write_all(&frame).await.expect("send");
    let mut echo = vec![0u8; frame.len()];
    stream.read_exact(&mut echo).await.expect("the echo");
    assert_eq!(echo, frame);
    let mut rest = [0u8; 16];
    let ended = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut rest))
        .await
        .expect("airlock closes an idle connection (bound: 60 s for a 1 s idle timeout)");
    assert!(matches!(ended, Ok(0) | Err(_)), "{ended:?}");
}

/// Sends a byte every 200 ms for `total`, each echoed: the connection stays open while
/// bytes flow, whatever the idle timeout.
async fn keep_busy(stream: &mut TcpStream, total: Duration) {
    let until = tokio::time::Instant::now() + total;
    while tokio::time::Instant::now() < until {
        stream.write_all(b"x").await.expect("still open");
        let mut echo = [0u8; 1];
        stream.read_exact(&mut echo).await.expect("still echoing");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_on_both_sides_but_a_busy_one_is_not() {
    let fx = Fixture::new();
    let (port, mut closed) = echo_origin(false).await;
    let policy = format!(
        r#"version = 1
default = "deny"

[[rule]]
id = "raw"
host = "127.0.0.1"
port = {port}
action = "tunnel"
allow_private = ["127.0.0.1"]
"#
    );
    let (airlock, run, _) = fx.start_run(&policy, &["--idle-timeout", "2"]).await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let mut stream = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    keep_busy(&mut stream, Duration::from_secs(5)).await;
    ping_then_expect_close(&mut stream).await;
    tokio::time::timeout(Duration::from_secs(30), closed.recv())
        .await
        .expect("the origin side was closed too");
    // The run's record says why the tunnel ended.
    let read = airlock_tests::poll_until(Duration::from_secs(10), || async {
        airlock
            .reads(&run)
            .await?
            .iter()
            .find(|r| r["method"] == "CONNECT")
            .cloned()
    })
    .await
    .expect("the tunnel is journaled");
    assert!(
        read["error"]
            .as_str()
            .is_some_and(|e| e.contains("idle timeout") && e.contains("--idle-timeout")),
        "{read}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_upgraded_connection_is_closed_on_both_sides() {
    let fx = Fixture::new();
    let (port, mut closed) = echo_origin(true).await;
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(port), &["--idle-timeout", "1"])
        .await;
    let token = airlock.run_token(&run).await;
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let head = format!(
        "GET http://127.0.0.1:{port}/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {}\r\n\
         Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        basic(&run, &token)
    );
    stream.write_all(head.as_bytes()).await.expect("handshake");
    let answer = read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    ping_then_expect_close(&mut stream).await;
    tokio::time::timeout(Duration::from_secs(30), closed.recv())
        .await
        .expect("the origin side was closed too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_connection_cap_gets_429_and_the_count_is_released() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(port), &["--max-connections-per-run", "2"])
        .await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let first = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let _second = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let (_third, status, body) = connect_raw(&airlock.proxy, &run, &token, &authority).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason_code"], "too_many_connections");
    assert_eq!(body["limit_name"], "--max-connections-per-run");
    assert_eq!(body["limit"], 2);
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("--max-connections-per-run")),
        "{body}"
    );

    // Another run has its own count.
    let (other, _) = airlock.create_run().await;
    let other_token = airlock.run_token(&other).await;
    let (_other_stream, status, body) =
        connect_raw(&airlock.proxy, &other, &other_token, &authority).await;
    assert_eq!(status, 200, "{body}");

    // Closing a tunnel releases its slot.
    drop(first);
    let freed = a_connect_gets_through(&airlock.proxy, &run, &token, &authority).await;
    assert!(freed, "a closed tunnel no longer counts against the run");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_counted(
        &metrics,
        "airlock_client_connections_refused_total{limit=\"max_connections_per_run\"}",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_global_connection_cap_a_new_connection_gets_429() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(
        &loopback_policy(origin.addr().port()),
        &["--max-connections", "2"],
    );
    let first = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let _second = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let mut third = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, body) = read_response(&mut third).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason_code"], "too_many_connections");
    assert_eq!(body["limit_name"], "--max-connections");
    drop(first);
    let mut served = false;
    for _ in 0..100 {
        let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
        stream
            .write_all(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
            .await
            .expect("send");
        let (status, _) = read_response(&mut stream).await;
        if status == 407 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        served,
        "a closed connection frees its slot: the next one is served (407 without credentials)"
    );
}

/// Sends an absolute-form GET for `url` on `stream` (with the run's credentials when
/// given) and reads the answer.
async fn get_raw(stream: &mut TcpStream, url: &str, auth: Option<(&str, &str)>) -> (u16, Value) {
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let credentials = auth
        .map(|(run, token)| format!("Proxy-Authorization: Basic {}\r\n", basic(run, token)))
        .unwrap_or_default();
    let head = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n{credentials}\r\n");
    stream.write_all(head.as_bytes()).await.expect("send GET");
    read_response(stream).await
}

/// Waits (at most 60 s) for airlock to close `stream`: a read gives EOF or an error.
async fn expect_closed(stream: &mut TcpStream, what: &str) {
    let mut rest = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut rest))
        .await
        .unwrap_or_else(|_| panic!("airlock closes {what} (bound: 60 s)"));
    assert!(matches!(ended, Ok(0) | Err(_)), "{what}: {ended:?}");
}

/// Asserts that `/metrics` text has the counter `series` (name and labels) above 0.
fn assert_counted(metrics: &str, series: &str) {
    assert!(
        metrics.contains(&format!("{series} ")) && !metrics.contains(&format!("{series} 0\n")),
        "{series} counted: {metrics}"
    );
}

/// An origin (TLS with `ca`, else plain HTTP) that answers `/slow` after 3 s and
/// everything else at once.
async fn slow_origin(ca: Option<&airlock_tests::OriginCa>) -> Origin {
    Origin::start(
        ca,
        Arc::new(|req: &Received| {
            let mut reply = Reply::json(200, &serde_json::json!({"path": req.path}));
            if req.path == "/slow" {
                reply.delay = Some(Duration::from_secs(3));
            }
            reply
        }),
    )
    .await
    .expect("origin starts")
}

/// A WebSocket upgraded on plain HTTP inside a CONNECT tunnel counts against the run's
/// connection cap until it ends, like the other upgrade paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_in_a_plain_http_tunnel_counts_against_the_run_until_it_ends() {
    let fx = Fixture::new();
    let (port, _closed) = echo_origin(true).await;
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(port), &["--max-connections-per-run", "1"])
        .await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let mut ws = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let head = format!(
        "GET /chat HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    ws.write_all(head.as_bytes()).await.expect("handshake");
    let answer = read_head(&mut ws).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    // A WebSocket frame, echoed byte for byte by the origin.
    let frame = ping_frame();
    ws.write_all(&frame).await.expect("send");
    let mut echo = vec![0u8; frame.len()];
    ws.read_exact(&mut echo).await.expect("the echo");
    assert_eq!(echo, frame);

    // The upgraded connection holds the run's one slot.
    let (_refused, status, body) = connect_raw(&airlock.proxy, &run, &token, &authority).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["limit_name"], "--max-connections-per-run");

    // Once it ends, the slot is free.
    drop(ws);
    let freed = a_connect_gets_through(&airlock.proxy, &run, &token, &authority).await;
    assert!(freed, "a closed WebSocket no longer counts against the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_cache_flag_reaches_the_ledger_and_metrics_show_it_and_the_ledger_size() {
    let fx = Fixture::new();
    let airlock = fx.start(&loopback_policy(9), &["--ledger-cache-mib", "3"]);
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("\nairlock_ledger_cache_capacity_bytes 3145728\n"),
        "{metrics}"
    );
    let disk = metrics
        .lines()
        .find_map(|line| line.strip_prefix("airlock_ledger_disk_bytes "))
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no airlock_ledger_disk_bytes in {metrics}"));
    assert!(disk > 0, "{metrics}");
}
