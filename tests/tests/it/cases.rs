//! More cases from docs/cases.md: 100-continue, content-encoding, large header
//! sections, slow clients, IP literals, clients that distrust airlock's CA, immediate
//! answers.

use std::time::{Duration, Instant};

use airlock_tests::{
    curl, loopback_policy, run_client_async, slow_text_origin, text_origin, Fixture,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod framing;
mod headers;
mod tls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c09_slow_clients_are_cut_long_streams_are_not() {
    let fx = Fixture::new();
    let origin = slow_text_origin(
        Some(&fx.origin_ca),
        200,
        "data: tick\n\n",
        Duration::from_secs(4),
    )
    .await;
    let (airlock, _run, env) = fx
        .start_run(
            &loopback_policy(origin.addr().port()),
            &["--header-read-timeout", "2"],
        )
        .await;
    // Tricklers: one header byte every 500 ms never finish a head; they are closed.
    let mut tricklers = Vec::new();
    for _ in 0..5 {
        let proxy = airlock.proxy.clone();
        tricklers.push(tokio::spawn(async move {
            let started = Instant::now();
            let Ok(mut stream) = tokio::net::TcpStream::connect(&proxy).await else {
                return None;
            };
            for byte in b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n"
                .iter()
                .cycle()
                .take(200)
            {
                if stream.write_all(&[*byte]).await.is_err() {
                    return Some(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let mut probe = [0u8; 64];
                if let Ok(Ok(0)) =
                    tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
                {
                    return Some(started.elapsed());
                }
            }
            None
        }));
    }
    // Meanwhile a slow response (4 s before the origin answers) goes through untouched.
    let slow = curl(
        &env,
        &[&format!(
            "https://127.0.0.1:{}/events",
            origin.addr().port()
        )],
    )
    .await;
    assert_eq!(slow.status, 200, "{}", slow.stderr);
    assert_eq!(slow.body, b"data: tick\n\n");
    for trickler in tricklers {
        let cut = trickler
            .await
            .expect("trickler")
            .expect("the trickler was disconnected");
        assert!(cut < Duration::from_secs(20), "cut after {cut:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c21_the_synthetic_answer_is_immediate_and_release_comes_later() {
    let fx = Fixture::new();
    let origin = text_origin(Some(&fx.origin_ca), 200, "ok").await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    // An agent whose client gives up after 5 s still gets its answer.
    let out = run_client_async(
        "curl",
        &[
            "-sS",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "--data",
            "x",
            &format!("https://127.0.0.1:{}/hook", origin.addr().port()),
        ],
        &env,
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "202");
    // The reviewer decides later; only then does the effect leave.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(origin.received().is_empty());
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed");
    assert_eq!(origin.received().len(), 1);
}
