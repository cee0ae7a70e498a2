//! The deadlines of a body airlock reads whole (issue #20 item 7): besides the 30 s pause
//! limit, `--body-read-timeout` bounds the whole read, so a body trickled under the pause
//! limit cannot hold its connection for ever.

use std::time::{Duration, Instant};

use airlock_tests::{curl, loopback_policy, ok_origin, Fixture};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{basic, read_response};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_body_trickled_under_the_idle_timeout_gets_a_json_408_at_the_total_deadline() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(port), &["--body-read-timeout", "2"])
        .await;
    // Something staged before, which the refused body must not disturb.
    let kept = curl(
        &env,
        &["-d", "keep me", &format!("https://127.0.0.1:{port}/hook")],
    )
    .await;
    assert_eq!(kept.status, 202, "{}", kept.stderr);

    let token = airlock.run_token(&run).await;
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let head = format!(
        "POST http://127.0.0.1:{port}/trickle HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Proxy-Authorization: Basic {}\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n",
        basic(&run, &token)
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    // One byte every 250 ms: far under the 30 s pause limit, and the 1000 bytes would take
    // 250 s; the 2 s total deadline must cut it.
    let trickle = tokio::spawn(async move {
        for _ in 0..1000 {
            if writer.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let answer = tokio::time::timeout(Duration::from_secs(20), read_response(&mut reader)).await;
    trickle.abort();
    let (status, body) = answer.expect("airlock answered within 20 s, not never");
    let waited = started.elapsed();
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["reason_code"], "body_timeout", "{body}");
    assert_eq!(body["limit_name"], "body_read_timeout", "{body}");
    assert_eq!(body["limit"], 2, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("2 s")),
        "{body}"
    );
    assert!(waited >= Duration::from_secs(2), "cut after {waited:?}");

    // Nothing of the trickled body was staged or sent; what was staged before is kept.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert!(effects[0]["url"]
        .as_str()
        .is_some_and(|u| u.ends_with("/hook")));
    assert_eq!(effects[0]["state"], "staged");
    assert!(origin.received().is_empty());
}
