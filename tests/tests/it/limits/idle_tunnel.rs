//! Idle intercepted tunnels (issue #22, "5,000 idle intercepted tunnels ≤ 20 KiB each"):
//! hyper's connection is built only when the client sends its first request bytes
//! (`airlock_net::limits::first_bytes`), so a tunnel idle after its TLS handshake holds
//! only the TLS stream. What the client sees must not change: a tunnel that speaks late
//! is served, and one that never speaks is closed at `--header-read-timeout`.

use std::time::{Duration, Instant};

use airlock_tests::{connect_tunnel, loopback_policy, Fixture};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::slow_origin;

/// `--header-read-timeout 2`: over intercepted HTTP/1.1, a tunnel whose client waits 1 s
/// after the TLS handshake before its request gets the origin's answer, and a keep-alive
/// request after it on the same connection too; a tunnel whose client never sends a byte
/// after the handshake is closed by airlock between 2 s and 10 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tunnels_a_late_request_is_served_and_a_silent_tunnel_is_closed_at_the_header_read_timeout(
) {
    let fx = Fixture::new();
    let origin = slow_origin(Some(&fx.origin_ca)).await;
    let port = origin.addr().port();
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(port), &["--header-read-timeout", "2"])
        .await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = airlock_tests::tls_trusting(&ca, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");

    // Late but within the timeout: served, twice on one connection.
    let stream = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let mut tls = connector.connect(name.clone(), stream).await.expect("tls");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for path in ["/late", "/again"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
        tls.write_all(head.as_bytes()).await.expect("send");
        let answer = read_answer(&mut tls).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        assert!(answer.contains(path), "{path} reached the origin: {answer}");
    }

    // Silent after the handshake: closed at the header-read timeout, not kept for the
    // keep-alive timeout (300 s by default).
    let stream = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let mut tls = connector.connect(name, stream).await.expect("tls");
    let started = Instant::now();
    let mut rest = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(30), tls.read(&mut rest))
        .await
        .expect("airlock closes a silent tunnel (bound: 30 s)");
    let waited = started.elapsed();
    assert!(
        matches!(ended, Ok(0) | Err(_)),
        "closed, not answered: {ended:?}"
    );
    assert!(
        waited >= Duration::from_millis(1900) && waited <= Duration::from_secs(10),
        "closed after {waited:?}, expected about --header-read-timeout (2 s)"
    );
}

/// Reads one HTTP/1.1 answer with a `content-length` body, as text.
async fn read_answer(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk))
            .await
            .expect("an answer within 20 s")
            .expect("read");
        assert!(n > 0, "the connection closed before the answer ended");
        got.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
    }
}
