//! Connections that never authenticate: `--max-unauthenticated-connections` and `--auth-timeout`.

use std::time::Duration;

use airlock_tests::{loopback_policy, Fixture};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{assert_counted, expect_closed, get_raw, slow_origin};

/// `--max-unauthenticated-connections 2`: a silent connection and one that got a 407 fill
/// it; a new connection still gets in and is served, and the oldest unauthenticated one is
/// closed to make room (so silent sockets cannot keep new clients out), while a connection
/// that authenticated earlier is served on throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_unauthenticated_cap_the_oldest_unauthenticated_connection_is_evicted() {
    let fx = Fixture::new();
    let plain = slow_origin(None).await;
    let port = plain.addr().port();
    let (airlock, run, _) = fx
        .start_run(
            &loopback_policy(port),
            // A long --auth-timeout: only the eviction can close the silent connection.
            &[
                "--max-unauthenticated-connections",
                "2",
                "--auth-timeout",
                "300",
            ],
        )
        .await;
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
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(port), &["--auth-timeout", "1"])
        .await;
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
