//! docs/cases.md C12: headless Chromium through airlock, loading a loopback HTTPS origin.
//! Chromium's ClientHello carries GREASE values and extensions rustls does not know; the
//! terminating side must ignore them and the page must load.
//!
//! Chromium cannot send proxy credentials given on its command line (`--proxy-server`
//! drops `user:pass`, and a 407 needs an interactive handler), so the test puts a small
//! loopback forwarder in front of airlock: it adds the run's `Proxy-Authorization` to each
//! CONNECT head and then splices bytes untouched, so TLS stays end to end between Chromium
//! and airlock (docs/protocols.md, "Chromium through airlock").
//!
//! Trust is real: airlock's CA goes into an NSS database in a throwaway `HOME`
//! (`certutil`, Debian package `libnss3-tools`), which Chromium on Linux reads.
//!
//! Needs `chromium`, `chromedriver` (package `chromium-driver`) and `certutil`. Without
//! them the test is skipped with a message, except under CI (`CI` set), where it fails.

// Shared by the two browser binaries, outside `it` (which must not link fantoccini).
#[path = "shared/chromium.rs"]
mod chromium;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{loopback_policy, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use fantoccini::Locator;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The loopback forwarder: each connection's first head (Chromium's CONNECT) gets
/// `Proxy-Authorization: Basic base64(run:token)` added; then bytes are spliced unchanged.
async fn forwarder(airlock: String, credentials: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the forwarder");
    let addr = listener.local_addr().expect("forwarder address");
    let auth = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    );
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let airlock = airlock.clone();
            let auth = auth.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                let end = loop {
                    if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        break end;
                    }
                    match client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                };
                let Some(line_end) = head.windows(2).position(|w| w == b"\r\n") else {
                    return;
                };
                let mut out = Vec::with_capacity(head.len() + auth.len());
                out.extend_from_slice(&head[..line_end + 2]);
                out.extend_from_slice(auth.as_bytes());
                out.extend_from_slice(&head[line_end + 2..end + 4]);
                out.extend_from_slice(&head[end + 4..]);
                let Ok(mut upstream) = TcpStream::connect(&airlock).await else {
                    return;
                };
                if upstream.write_all(&out).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c12_headless_chromium_loads_an_https_origin_through_airlock() {
    let Some(tools) = chromium::Tools::find("case_c12", true) else {
        return;
    };

    let fixture = Fixture::new();
    let origin = Origin::start_alpn(
        Some(&fixture.origin_ca),
        Arc::new(|req: &Received| {
            if req.path == "/" {
                let mut reply = Reply::text(
                    200,
                    "<!doctype html><title>c12</title><p id=greeting>hello through airlock</p>",
                );
                reply.headers = vec![("content-type".into(), "text/html; charset=utf-8".into())];
                reply
            } else {
                Reply::text(404, "not here")
            }
        }),
        &[b"h2", b"http/1.1"],
    )
    .await
    .expect("origin starts");
    let port = origin.addr().port();
    let airlock = fixture.start(&loopback_policy(port), &[]);
    let (run, _env) = airlock.create_run().await;
    let token = airlock.run_token(&run).await;
    let proxy = forwarder(airlock.proxy.clone(), format!("{run}:{token}")).await;

    let (client, driver) = tools
        .open(
            &[
                format!("--proxy-server=http://{proxy}"),
                // Chromium never proxies loopback unless told to.
                "--proxy-bypass-list=<-loopback>".to_owned(),
            ],
            Some(&airlock.ca_file()),
        )
        .await;
    let url = format!("https://127.0.0.1:{port}/");
    client.goto(&url).await.expect("open the origin's page");
    let text = client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("p#greeting"))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the page did not load through airlock: {e}\nairlock log:\n{}",
                airlock.log()
            )
        })
        .text()
        .await
        .expect("text");
    assert_eq!(text, "hello through airlock");
    client.close().await.expect("close the session");
    drop(driver);

    let received = origin.received();
    assert!(
        received.iter().any(|r| r.method == "GET" && r.path == "/"),
        "the origin received the page request: {:?}",
        received
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "airlock_client_tls_handshake_failures_total 0"),
        "no TLS handshake with Chromium failed:\n{metrics}"
    );
}
