//! CASES.md C12: headless Chromium through airlock, loading a loopback HTTPS origin.
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

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_tests::{loopback_policy, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// chromedriver, killed when dropped.
struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver runs in its own process group with the browsers it starts: the
        // whole group goes, so a test that panics before closing its session leaves no
        // Chromium behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver with `home` as its (and so Chromium's) `HOME`.
fn start_driver(chromedriver: &Path, home: &Path) -> Driver {
    let port = StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(chromedriver)
        .process_group(0)
        .arg(format!("--port={port}"))
        .env("HOME", home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while StdStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver { child, addr }
}

/// Creates `$home/.pki/nssdb` trusting `ca_file` as a root for TLS servers.
fn nss_trust(certutil: &Path, home: &Path, ca_file: &Path) {
    let db = home.join(".pki/nssdb");
    std::fs::create_dir_all(&db).expect("nssdb dir");
    let db_arg = format!("sql:{}", db.display());
    let run = |args: &[&str]| {
        let out = Command::new(certutil)
            .args(args)
            .output()
            .expect("certutil runs");
        assert!(
            out.status.success(),
            "certutil {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["-N", "-d", &db_arg, "--empty-password"]);
    let ca = ca_file.to_str().expect("utf-8 path");
    run(&["-A", "-d", &db_arg, "-n", "airlock", "-t", "C,,", "-i", ca]);
}

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
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
    let chromedriver = on_path(&["chromedriver"]);
    let certutil = on_path(&["certutil"]);
    let (Some(chromium), Some(chromedriver), Some(certutil)) = (chromium, chromedriver, certutil)
    else {
        assert!(
            !in_ci,
            "CI is set but chromium, chromedriver and certutil are not all on PATH: .ci/run \
             installs the Debian packages chromium, chromium-driver and libnss3-tools"
        );
        println!(
            "SKIPPED case_c12: chromium, chromedriver and certutil are not all on PATH \
             (apt-get install chromium chromium-driver libnss3-tools)"
        );
        return;
    };
    // fantoccini's rustls connector uses the process-wide provider; airlock uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();

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

    let home = tempfile::tempdir().expect("home");
    nss_trust(&certutil, home.path(), &airlock.ca_file());
    let driver = start_driver(&chromedriver, home.path());
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run",
                     format!("--proxy-server=http://{proxy}"),
                     // Chromium never proxies loopback unless told to.
                     "--proxy-bypass-list=<-loopback>"],
        }),
    );
    let client = ClientBuilder::rustls()
        .expect("rustls client")
        .capabilities(caps)
        .connect(&format!("http://{}", driver.addr))
        .await
        .expect("a WebDriver session");
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
