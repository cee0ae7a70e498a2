//! The admin listener's connection cap and header-read timeout (issue 35, item 4):
//! `--admin-max-connections` answers a connection past it with one 429 naming the flag,
//! and `--header-read-timeout` closes a client that sends its head too slowly (slowloris),
//! so it holds a slot for that long at most. Both are counted in `/metrics`.

use std::time::{Duration, Instant};

use airlock_tests::{loopback_policy, Fixture};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{assert_counted, read_response};

/// A client that sends a request head one header line every 300 ms and never ends it.
async fn slowloris(admin: &str) -> tokio::task::JoinHandle<(Duration, bool)> {
    let mut stream = TcpStream::connect(admin).await.expect("connect");
    tokio::spawn(async move {
        let started = Instant::now();
        if stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .is_err()
        {
            return (started.elapsed(), true);
        }
        let mut buf = [0u8; 256];
        for i in 0..200 {
            let line = format!("X-Slow-{i}: y\r\n");
            if stream.write_all(line.as_bytes()).await.is_err() {
                return (started.elapsed(), true);
            }
            let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf));
            if let Ok(Ok(0) | Err(_)) = read.await {
                return (started.elapsed(), true);
            }
        }
        (started.elapsed(), false)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_caps_connections_and_closes_a_slowloris_client() {
    let fx = Fixture::new();
    let airlock = fx.start(
        &loopback_policy(9),
        &["--admin-max-connections", "3", "--header-read-timeout", "2"],
    );
    let admin = airlock.admin_url.trim_start_matches("http://").to_owned();
    let slow = [
        slowloris(&admin).await,
        slowloris(&admin).await,
        slowloris(&admin).await,
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Past the cap: one readable 429, then the close.
    let mut fourth = TcpStream::connect(&admin).await.expect("connect");
    let (status, body) = read_response(&mut fourth).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason_code"], "too_many_connections");
    assert_eq!(body["limit_name"], "--admin-max-connections");
    assert_eq!(body["limit"], 3);

    // Each slowloris client is closed at --header-read-timeout (2 s), not left holding
    // its slot while it dribbles.
    for client in slow {
        let (after, closed) = client.await.expect("slowloris task");
        assert!(closed, "a slowloris client is closed");
        assert!(
            after >= Duration::from_millis(1800) && after < Duration::from_secs(10),
            "closed after {after:?}, expected about 2 s"
        );
    }
    // The slots are free again.
    let health = airlock_tests::poll_until(Duration::from_secs(10), || async {
        airlock.admin.get("/healthz").await.ok()
    })
    .await
    .expect("/healthz answers once the slowloris clients are gone");
    assert_eq!(health["status"], "ok");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_counted(&metrics, "airlock_admin_connections_refused_total");
    assert_counted(&metrics, "airlock_admin_connections_timed_out_total");
}
