//! Connection caps and idle timeouts (issue #7, CASES.md C09 class): `--idle-timeout` on
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
async fn read_head(stream: &mut TcpStream) -> String {
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
async fn read_response(stream: &mut TcpStream) -> (u16, Value) {
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
async fn ping_then_expect_close(stream: &mut TcpStream) {
    stream.write_all(b"ping").await.expect("send");
    let mut echo = [0u8; 4];
    stream.read_exact(&mut echo).await.expect("the echo");
    assert_eq!(&echo, b"ping");
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
    let airlock = fx.start(&policy, &["--idle-timeout", "2"]);
    let (run, _) = airlock.create_run().await;
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
        let reads = airlock
            .admin
            .get(&format!("/v1/runs/{run}/reads"))
            .await
            .ok()?;
        reads["reads"]
            .as_array()?
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
    let airlock = fx.start(&loopback_policy(port), &["--idle-timeout", "1"]);
    let (run, _) = airlock.create_run().await;
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
    let airlock = fx.start(&loopback_policy(port), &["--max-connections-per-run", "2"]);
    let (run, _) = airlock.create_run().await;
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

/// `--keep-alive-timeout 1` (and a long `--header-read-timeout`, which hyper also runs on
/// an idle HTTP/1.1 connection, so that only the keep-alive timeout can close it): a
/// request whose origin answers after 3 s completes, then the idle connection is closed:
/// intercepted HTTP/1.1 and h2 inside CONNECT+TLS, and a plain proxy connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_but_a_slow_request_completes() {
    use http_body_util::BodyExt as _;
    let fx = Fixture::new();
    let origin = slow_origin(Some(&fx.origin_ca)).await;
    let port = origin.addr().port();
    let plain = slow_origin(None).await;
    let policy = format!(
        "{}\n[[rule]]\nid = \"plain\"\nhost = \"127.0.0.1\"\nport = {}\nmethod = \"read\"\naction = \"pass\"\n",
        loopback_policy(port),
        plain.addr().port()
    );
    let airlock = fx.start(
        &policy,
        &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
    );
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let label = String::from_utf8_lossy(alpn).into_owned();
        let stream = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
        let connector = airlock_tests::tls_trusting(&ca, &[alpn]);
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let tls = connector.connect(name, stream).await.expect("tls");
        let io = hyper_util::rt::TokioIo::new(tls);
        let request = |path: &str| {
            let mut builder = http::Request::get(format!("https://{authority}{path}"));
            if alpn != b"h2" {
                builder = builder.header("host", &authority);
            }
            builder
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .expect("request")
        };
        // The connection task ends when airlock closes the connection (the sender is
        // kept: dropping it would end the task too).
        let (response, conn, _sender): (_, _, Box<dyn std::any::Any + Send>) = if alpn == b"h2" {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .expect("h2");
            let conn = tokio::spawn(conn);
            let response = sender.send_request(request("/slow")).await;
            (response, conn, Box::new(sender))
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
            let conn = tokio::spawn(conn);
            let response = sender.send_request(request("/slow")).await;
            (response, conn, Box::new(sender))
        };
        let response =
            response.unwrap_or_else(|e| panic!("{label}: the slow request completes: {e}"));
        assert_eq!(response.status(), 200, "{label}");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("/slow"), "{label}");
        let _ = tokio::time::timeout(Duration::from_secs(60), conn)
            .await
            .unwrap_or_else(|_| panic!("{label}: airlock closes the idle connection (bound: 60 s)"))
            .expect("the connection task");
    }

    // A plain proxy connection (absolute-form http://): the same.
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let url = format!("http://127.0.0.1:{}/slow", plain.addr().port());
    let (status, body) = get_raw(&mut stream, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["path"], "/slow");
    expect_closed(&mut stream, "an idle plain proxy connection").await;
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_counted(
        &metrics,
        "airlock_client_connections_timed_out_total{timeout=\"keep_alive_timeout\"}",
    );
}

/// `--max-unauthenticated-connections 2`: a silent connection and one that got a 407 fill
/// it; a new connection still gets in and is served, and the oldest unauthenticated one is
/// closed to make room (so silent sockets cannot keep new clients out), while a connection
/// that authenticated earlier is served on throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_unauthenticated_cap_the_oldest_unauthenticated_connection_is_evicted() {
    let fx = Fixture::new();
    let plain = slow_origin(None).await;
    let port = plain.addr().port();
    let airlock = fx.start(
        &loopback_policy(port),
        // A long --auth-timeout: only the eviction can close the silent connection.
        &[
            "--max-unauthenticated-connections",
            "2",
            "--auth-timeout",
            "300",
        ],
    );
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let url = format!("http://127.0.0.1:{port}/");
    let mut authenticated = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, body) = get_raw(&mut authenticated, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");

    let mut first = TcpStream::connect(&airlock.proxy).await.expect("connect");
    // Let airlock accept it before the next ones (eviction is oldest first).
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One that got a 407 stays unauthenticated too.
    let mut second = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, _) = get_raw(&mut second, &url, None).await;
    assert_eq!(status, 407);
    // Past the cap: the new connection is served...
    let mut third = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, body) = get_raw(&mut third, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");
    // ...and the oldest unauthenticated one was closed for it.
    expect_closed(&mut first, "the evicted connection").await;
    // The run's authenticated connection is served on.
    let (status, body) = get_raw(&mut authenticated, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_counted(&metrics, "airlock_client_connections_evicted_total");
}

/// `--auth-timeout 1`: a connection that sends nothing, one that dribbles a request head,
/// and one that got a 407 and stays are closed; an authenticated keep-alive connection
/// outlives the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    let fx = Fixture::new();
    let plain = slow_origin(None).await;
    let port = plain.addr().port();
    let airlock = fx.start(&loopback_policy(port), &["--auth-timeout", "1"]);
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let url = format!("http://127.0.0.1:{port}/");
    let mut authenticated = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, body) = get_raw(&mut authenticated, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");

    let mut silent = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let mut refused = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let (status, _) = get_raw(&mut refused, &url, None).await;
    assert_eq!(status, 407);
    let mut dribbling = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let dribble = async {
        for byte in format!("GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n").bytes() {
            if dribbling.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The head never ends: the connection must have been closed by now.
        let mut rest = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(60), dribbling.read(&mut rest))
            .await
            .expect("airlock closes a dribbling connection (bound: 60 s)");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "no answer to an unfinished head: {read:?}"
        );
    };
    dribble.await;
    expect_closed(&mut silent, "a silent connection").await;
    expect_closed(&mut refused, "a connection answered 407").await;

    // The authenticated connection outlived the deadline.
    let (status, body) = get_raw(&mut authenticated, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        !metrics
            .contains("airlock_client_connections_timed_out_total{timeout=\"auth_timeout\"} 0\n"),
        "{metrics}"
    );
}

/// A WebSocket upgraded on plain HTTP inside a CONNECT tunnel counts against the run's
/// connection cap until it ends, like the other upgrade paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_in_a_plain_http_tunnel_counts_against_the_run_until_it_ends() {
    let fx = Fixture::new();
    let (port, _closed) = echo_origin(true).await;
    let airlock = fx.start(&loopback_policy(port), &["--max-connections-per-run", "1"]);
    let (run, _) = airlock.create_run().await;
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
    ws.write_all(b"ping").await.expect("send");
    let mut echo = [0u8; 4];
    ws.read_exact(&mut echo).await.expect("the echo");
    assert_eq!(&echo, b"ping");

    // The upgraded connection holds the run's one slot.
    let (_refused, status, body) = connect_raw(&airlock.proxy, &run, &token, &authority).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["limit_name"], "--max-connections-per-run");

    // Once it ends, the slot is free.
    drop(ws);
    let freed = a_connect_gets_through(&airlock.proxy, &run, &token, &authority).await;
    assert!(freed, "a closed WebSocket no longer counts against the run");
}

/// `--keep-alive-timeout 1`: clients that stop reading a large response for 8 s (past the
/// timeout and the close grace) still get every byte: a connection waiting for its client
/// to read is not idle, even once hyper has taken the whole body from the origin and only
/// its own buffers hold the rest. Where that happens depends on the kernel's socket
/// buffers, so 15 sizes from 1 to 8 MiB run at once, each on its own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_reads_slowly_is_not_cut_by_the_keep_alive_timeout() {
    let fx = Fixture::new();
    let origin = Origin::start(
        None,
        Arc::new(|req: &Received| {
            let size: usize = req
                .path
                .trim_start_matches("/big/")
                .parse()
                .unwrap_or_default();
            let mut reply = Reply::text(200, "");
            reply.headers = vec![("content-type".into(), "application/octet-stream".into())];
            reply.body = vec![b'x'; size];
            reply
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let airlock = fx.start(
        &loopback_policy(port),
        &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
    );
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let credentials = basic(&run, &token);
    let mut readers = Vec::new();
    for step in 2..=16 {
        let size = step * (512 << 10);
        let proxy = airlock.proxy.clone();
        let credentials = credentials.clone();
        readers.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&proxy).await.expect("connect");
            let head = format!(
                "GET http://127.0.0.1:{port}/big/{size} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {credentials}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.expect("send");
            let head = read_head(&mut stream).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            tokio::time::sleep(Duration::from_secs(8)).await;
            let mut received = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            while received < size {
                match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => received += n,
                    _ => break,
                }
            }
            (size, received)
        }));
    }
    for reader in readers {
        let (size, received) = reader.await.expect("reader");
        assert_eq!(received, size, "a {size}-byte response was cut");
    }
}

/// `--keep-alive-timeout 1`: an origin answers a POST before its body is complete; the
/// client sends the rest of the body 8 s later (past the timeout and the close grace) and
/// the origin still receives all of it: a request body still being sent is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_goes_on_after_an_early_answer_is_not_cut_by_the_keep_alive_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        read_head(&mut socket).await;
        let mut buffered: Vec<u8> = Vec::new();
        socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .expect("answer early");
        let mut buf = [0u8; 64];
        while buffered.len() < 40 {
            match socket.read(&mut buf).await {
                Ok(n) if n > 0 => buffered.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let _ = tx.send(buffered.len());
    });
    let fx = Fixture::new();
    let policy = format!(
        "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n\n[[rule]]\nid = \"upload\"\nhost = \"127.0.0.1\"\nport = {port}\nmethod = [\"POST\"]\naction = \"pass\"\n"
    );
    let airlock = fx.start(
        &policy,
        &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
    );
    let (run, _) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let head = format!(
        "POST http://127.0.0.1:{port}/upload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {}\r\nContent-Length: 40\r\n\r\n0123456789",
        basic(&run, &token)
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    let answer = read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::sleep(Duration::from_secs(8)).await;
    // The rest of the body: the connection must still be open for it.
    stream
        .write_all(b"abcdefghijklmnopqrstuvwxyz0123")
        .await
        .expect("the rest of the body");
    let got = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the origin finishes reading")
        .expect("a count");
    assert_eq!(got, 40, "the origin received the whole body");
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
