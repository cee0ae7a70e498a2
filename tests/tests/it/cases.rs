//! More cases from shared/CASES.md: 100-continue, content-encoding, large header
//! sections, slow clients, IP literals, clients that distrust airlock's CA, immediate
//! answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_tests::{curl, loopback_policy, run_client_async, Fixture, Origin, Received, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plain-HTTP origin that answers from the request head only: `413` at once without
/// reading (`/early`), or reads the whole body without ever sending 100 Continue and
/// answers 201 (anything else).
async fn raw_origin() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    if stream.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                log.lock()
                    .expect("log")
                    .push(text.lines().next().unwrap_or("").to_owned());
                if text.contains("/early") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 9\r\nconnection: close\r\n\r\ntoo large")
                        .await;
                    // Lingering close, as real servers do: closing with the unread body
                    // still arriving would make the kernel send a reset that can destroy
                    // the 413 before the proxy reads it.
                    let _ = stream.shutdown().await;
                    let mut sink = [0u8; 16 * 1024];
                    let _ = tokio::time::timeout(Duration::from_secs(5), async {
                        while let Ok(n) = stream.read(&mut sink).await {
                            if n == 0 {
                                break;
                            }
                        }
                    })
                    .await;
                    return;
                }
                let length: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                if stream.read_exact(&mut body).await.is_ok() {
                    let _ = stream
                        .write_all(format!("HTTP/1.1 201 Created\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}", 4, "done").as_bytes())
                        .await;
                }
            });
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c01_expect_continue_meets_stage_deny_and_pass() {
    let fx = Fixture::new();
    let tls_origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::text(201, "stored")),
    )
    .await
    .expect("origin");
    let (raw_port, raw_seen) = raw_origin().await;
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]
[[rule]]
id = "deny-put"
host = "127.0.0.1"
path = "/denied"
port = [{tls}, {raw}]
action = "deny"
[[rule]]
id = "stage-put"
host = "127.0.0.1"
path = "/staged"
port = [{tls}, {raw}]
action = "stage"
[[rule]]
id = "pass-rest"
host = "127.0.0.1"
port = [{tls}, {raw}]
action = "pass"
"#,
        tls = tls_origin.addr().port(),
        raw = raw_port
    );
    let airlock = fx.start(&policy, &[]);
    let (run, env) = airlock.create_run().await;
    let big = fx.dir.path().join("2mib.bin");
    std::fs::write(&big, vec![b'x'; 2 * 1024 * 1024]).expect("write");
    let data = format!("@{}", big.display());
    let tls = format!("https://127.0.0.1:{}", tls_origin.addr().port());
    let raw = format!("http://127.0.0.1:{raw_port}");
    // If a 100 never came, curl would wait the whole 20 s for it: each case must answer
    // well within that.
    let put = |url: String| {
        let env = env.clone();
        let data = data.clone();
        async move {
            let started = Instant::now();
            // HTTP/1.1: hyper's h2 server sends no interim 100 (docs/protocols.md).
            let out = curl(
                &env,
                &[
                    "--http1.1",
                    "-X",
                    "PUT",
                    "-H",
                    "Expect: 100-continue",
                    "--expect100-timeout",
                    "20",
                    "--data-binary",
                    &data,
                    &url,
                ],
            )
            .await;
            (out, started.elapsed())
        }
    };
    let (staged, took) = put(format!("{tls}/staged")).await;
    assert_eq!(staged.status, 202, "{}", staged.stderr);
    assert!(
        took < Duration::from_secs(15),
        "stage waited for a 100: {took:?}"
    );
    let (denied, took) = put(format!("{tls}/denied")).await;
    assert_eq!(denied.status, 403);
    assert!(
        took < Duration::from_secs(15),
        "deny waited for a 100: {took:?}"
    );
    let (passed, took) = put(format!("{tls}/upload")).await;
    assert_eq!(passed.status, 201, "(a) origin reads, answers 201");
    assert!(took < Duration::from_secs(15));
    let (early, took) = put(format!("{raw}/early")).await;
    assert_eq!(
        early.status,
        413,
        "(b) the origin's early final status is relayed: {} {}",
        early.stderr,
        String::from_utf8_lossy(&early.body)
    );
    assert!(took < Duration::from_secs(15));
    let (silent, took) = put(format!("{raw}/silent")).await;
    assert_eq!(
        silent.status, 201,
        "(c) an origin that never sends 100: {}",
        silent.stderr
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["body_len"], 2 * 1024 * 1024);
    assert_eq!(
        tls_origin.received().len(),
        1,
        "only the passed upload reached the TLS origin"
    );
    assert_eq!(raw_seen.lock().expect("seen").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c07_content_encoding_untouched_on_pass_and_kept_on_stage() {
    use std::io::Write as _;
    let fx = Fixture::new();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(br#"{"greeting": "hello through gzip", "n": 42}"#)
        .expect("gzip");
    let gz = encoder.finish().expect("gzip");
    let served = gz.clone();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |_: &Received| Reply {
            status: 200,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("content-encoding".into(), "gzip".into()),
                ("etag".into(), "\"abc\"".into()),
            ],
            body: served.clone(),
            ..Reply::default()
        }),
    )
    .await
    .expect("origin");
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let (run, env) = airlock.create_run().await;
    let url = format!("https://127.0.0.1:{}/data", origin.addr().port());
    let via = curl(&env, &[&url]).await;
    let ca = fx.dir.path().join("origin-ca.pem");
    let direct = curl(
        &Default::default(),
        &["--cacert", ca.to_str().unwrap_or(""), &url],
    )
    .await;
    assert_eq!(via.status, 200);
    assert_eq!(via.body, gz, "pass never changes bytes: still gzip");
    assert_eq!(via.body, direct.body);
    for name in ["content-encoding", "content-length", "etag", "content-type"] {
        assert_eq!(via.header(name), direct.header(name), "{name} unchanged");
    }
    // A body that claims gzip but is plain JSON is staged as sent, not an error.
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-encoding: gzip",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"plain": true}"#,
            &url,
        ],
    )
    .await;
    assert_eq!(staged.status, 202);
    let effect = staged.header("airlock-effect").expect("effect");
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{effect}"))
        .await
        .expect("show");
    assert_eq!(shown["body"]["text"], r#"{"plain": true}"#);
    assert_eq!(airlock.effects(&run).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c08_large_header_sections_on_every_side() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| {
            let mut reply = Reply::text(200, &format!("{} headers", req.headers.len()));
            let cookies = if req.path == "/too-many" { 300 } else { 150 };
            for i in 0..cookies {
                reply
                    .headers
                    .push(("set-cookie".into(), format!("c{i}=v{i}; Path=/")));
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let (_run, env) = airlock.create_run().await;
    let url = format!("https://127.0.0.1:{}/", origin.addr().port());
    let cookie = format!("cookie: big={}", "c".repeat(60 * 1024));
    let mut many: Vec<String> = (0..150).map(|i| format!("x-h{i}: value {i}")).collect();
    many.push(cookie);
    let headers_file = fx.dir.path().join("headers.txt");
    std::fs::write(&headers_file, many.join("\n")).expect("write");
    let headers_arg = format!("@{}", headers_file.display());
    for flag in ["--http1.1", "--http2"] {
        let out = curl(&env, &[flag, "-H", &headers_arg, &url]).await;
        assert_eq!(out.status, 200, "{flag}: {}", out.stderr);
        assert!(
            String::from_utf8_lossy(&out.body).starts_with("15"),
            "{flag}: the origin got them all: {}",
            String::from_utf8_lossy(&out.body)
        );
        let cookies = out
            .headers
            .to_ascii_lowercase()
            .matches("set-cookie: c")
            .count();
        assert_eq!(cookies, 150, "{flag}: 150 Set-Cookie relayed");
    }
    // Past the field limit (256) an origin's answer is refused with a code that says so.
    let out = curl(&env, &[&format!("{url}too-many")]).await;
    assert_eq!(out.status, 502, "{}", out.stderr);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("upstream_head_too_large"),
        "{}",
        String::from_utf8_lossy(&out.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c09_slow_clients_are_cut_long_streams_are_not() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| {
            let mut reply = Reply::text(200, "data: tick\n\n");
            reply.delay = Some(Duration::from_secs(4));
            reply
        }),
    )
    .await
    .expect("origin");
    let airlock = fx.start(
        &loopback_policy(origin.addr().port()),
        &["--header-read-timeout", "2"],
    );
    let (_run, env) = airlock.create_run().await;
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
async fn case_c10_connect_to_ip_literals_and_ipv6() {
    let fx = Fixture::new();
    let hello = |_: &Received| Reply::text(200, "ip literal ok");
    let v4 = Origin::start_on(
        "127.0.0.2:0".parse().expect("addr"),
        Some(&fx.origin_ca),
        Arc::new(hello),
        &[b"http/1.1"],
    )
    .await;
    let v6 = Origin::start_on(
        "[::1]:0".parse().expect("addr"),
        Some(&fx.origin_ca),
        Arc::new(hello),
        &[b"http/1.1"],
    )
    .await;
    let (Ok(v4), Ok(v6)) = (v4, v6) else {
        eprintln!("SKIPPED: 127.0.0.2 or ::1 cannot be bound on this machine");
        return;
    };
    let policy = format!(
        "version = 1\nallow_private = [\"127.0.0.0/8\", \"::1/128\"]\n[[rule]]\nid = \"v4\"\nhost = \"127.0.0.2\"\nport = {}\naction = \"pass\"\n[[rule]]\nid = \"v6\"\nhost = \"::1\"\nport = {}\naction = \"pass\"\n",
        v4.addr().port(),
        v6.addr().port()
    );
    let airlock = fx.start(&policy, &[]);
    let (_run, env) = airlock.create_run().await;
    for url in [
        format!("https://127.0.0.2:{}/", v4.addr().port()),
        format!("https://[::1]:{}/", v6.addr().port()),
    ] {
        // curl checks the leaf's iPAddress SAN against the literal.
        let out = curl(&env, &[&url]).await;
        assert_eq!(out.status, 200, "{url}: {}", out.stderr);
        assert_eq!(out.body, b"ip literal ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c13_a_client_with_its_own_roots_is_recorded_per_host() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::text(200, "ok")),
    )
    .await
    .expect("origin");
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let (_run, mut env) = airlock.create_run().await;
    // A client that trusts only its own bundled roots (not airlock's CA).
    let own_roots = fx.dir.path().join("own-roots.pem");
    std::fs::write(&own_roots, fx.origin_ca.cert_pem()).expect("write");
    for key in ["SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"] {
        env.insert(key.into(), own_roots.display().to_string());
    }
    let out = curl(
        &env,
        &[&format!("https://127.0.0.1:{}/", origin.addr().port())],
    )
    .await;
    assert!(!out.success, "the client refuses airlock's certificate");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("airlock_client_untrusted_ca_total{host=\"127.0.0.1\"} 1"),
        "{metrics}"
    );
    assert!(
        airlock.log().contains("does not trust airlock's CA"),
        "a log line says so"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c21_the_synthetic_answer_is_immediate_and_release_comes_later() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::text(200, "ok")),
    )
    .await
    .expect("origin");
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let (run, env) = airlock.create_run().await;
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
    let report = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(serde_json::json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    assert_eq!(report["state"], "committed");
    assert_eq!(origin.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c02_chunked_request_bodies_without_content_length() {
    let fx = Fixture::new();
    // A bare repository served by git's own http-backend, and a recording origin.
    let root = fx.dir.path().join("git-root");
    std::fs::create_dir_all(&root).expect("root");
    crate::run::git(&root, &["init", "-q", "--bare", "-b", "main", "repo.git"]);
    crate::run::git(
        &root.join("repo.git"),
        &["config", "http.receivepack", "true"],
    );
    let git = airlock_tests::git_http::backend(root.clone());
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| {
            if req.path.starts_with("/repo.git/") {
                git(req)
            } else {
                Reply::text(201, "stored")
            }
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]
[[rule]]
id = "git-push"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/repo.git/git-receive-pack"
action = "pass"
[[rule]]
id = "uploads"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/upload"
action = "pass"
[[rule]]
id = "staged"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/staged"
action = "stage"
[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
"#
    );
    let airlock = fx.start(&policy, &[]);
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{port}");
    let five = fx.dir.path().join("five.bin");
    std::fs::write(
        &five,
        (0..5 * 1024 * 1024)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<u8>>(),
    )
    .expect("write");

    // curl, chunked, 5 MiB: passed streams on; the origin gets every byte.
    let script = |path: &str| {
        format!("curl -sS --http1.1 -o /dev/null -w '%{{http_code}}' -X POST -H 'transfer-encoding: chunked' -T - {base}{path} < {}", five.display())
    };
    let out = run_client_async("sh", &["-c", &script("/upload")], &env).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "201",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received = origin.received();
    let upload = received
        .iter()
        .find(|r| r.path == "/upload")
        .expect("upload reached the origin");
    assert_eq!(upload.body.len(), 5 * 1024 * 1024);
    assert_eq!(upload.body, std::fs::read(&five).expect("read"));
    // Staged: the decoded body is stored, and released later with a Content-Length.
    let out = run_client_async("sh", &["-c", &script("/staged")], &env).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "202");
    airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(serde_json::json!({"approve_pending": true})),
        )
        .await
        .expect("commit");
    let received = origin.received();
    let released = received
        .iter()
        .find(|r| r.path == "/staged")
        .expect("released");
    assert_eq!(released.header("content-length"), Some("5242880"));
    assert_eq!(released.header("transfer-encoding"), None);
    assert_eq!(released.body.len(), 5 * 1024 * 1024);

    // git push of a 5 MB commit with a small postBuffer (chunked POST after the probe).
    let (run, env) = airlock.create_run().await;
    let work = fx.dir.path().join("work");
    std::fs::create_dir_all(&work).expect("work");
    crate::run::git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(
        work.join("blob.bin"),
        (0..5_000_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    )
    .expect("blob");
    crate::run::git(&work, &["add", "."]);
    crate::run::git(&work, &["commit", "-q", "-m", "big"]);
    let push = run_client_async(
        "git",
        &[
            "-C",
            work.to_str().unwrap_or(""),
            "-c",
            "http.postBuffer=65536",
            "push",
            &format!("{base}/repo.git"),
            "main",
        ],
        &env,
    )
    .await;
    assert!(
        push.status.success(),
        "git push through airlock: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    let pushed = crate::run::git(&root.join("repo.git"), &["rev-parse", "main"]);
    let local = crate::run::git(&work, &["rev-parse", "main"]);
    assert_eq!(pushed, local, "the remote has the commit");
    assert!(airlock.effects(&run).await.is_empty());
}

/// Python `requests` sends one header of `kb` KiB plus `extra` small ones; prints the
/// status, the `airlock-error` header and the body.
const PY_BIG_HEAD: &str = r#"
import requests, sys
url, kb, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
headers = {"cookie": "big=" + "c" * kb * 1024}
headers.update({"x-h%d" % i: str(i) for i in range(extra)})
r = requests.get(url, headers=headers, timeout=20)
print(r.status_code)
print(r.headers.get("airlock-error"))
print(r.text)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c08_past_the_limits_the_client_gets_431_with_a_reason_not_a_reset() {
    let fx = Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let plain = Origin::start(None, Arc::new(|_: &Received| Reply::text(200, "plain")))
        .await
        .expect("plain origin");
    let policy = loopback_policy(origin.addr().port()).replace(
        "[[rule]]\nid = \"forbidden\"",
        &format!(
            "[[rule]]\nid = \"plain\"\nhost = \"127.0.0.1\"\nport = {}\nmethod = \"read\"\naction = \"pass\"\n\n[[rule]]\nid = \"forbidden\"",
            plain.addr().port()
        ),
    );
    let airlock = fx.start(&policy, &[]);
    let (_run, env) = airlock.create_run().await;
    let https = format!("https://127.0.0.1:{}/", origin.addr().port());
    let http = format!("http://127.0.0.1:{}/", plain.addr().port());
    // (curl 7.88 cannot itself send a head over ~128 KiB through TLS, nor an h2 header
    // block over 64 KiB, so the byte limit inside the tunnel is driven with requests.)
    for (what, url, kb, extra) in [
        ("300 KiB header, HTTP/1.1 in the tunnel", &https, 300, 0),
        ("300 header fields, HTTP/1.1 in the tunnel", &https, 0, 300),
        ("300 KiB header, plain http", &http, 300, 0),
        ("300 header fields, plain http", &http, 0, 300),
    ] {
        let out = airlock_tests::run_client_async(
            "python3",
            &["-c", PY_BIG_HEAD, url, &kb.to_string(), &extra.to_string()],
            &env,
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines = stdout.lines();
        assert_eq!(lines.next(), Some("431"), "{what}: {stdout}");
        assert_eq!(lines.next(), Some("header_fields_too_large"), "{what}");
        let rest: Vec<&str> = lines.collect();
        let body: serde_json::Value = serde_json::from_str(&rest.join("\n")).expect("JSON body");
        assert!(
            body["reason"].as_str().is_some_and(|r| r.contains("limit")),
            "{what}: {body}"
        );
        assert!(body["limit"].as_u64().is_some(), "{what}: {body}");
    }
    // Over h2 (curl, nghttp2): too many fields is the limit curl can reach.
    let many = fx.dir.path().join("many.txt");
    let lines: Vec<String> = (0..600).map(|i| format!("x-h{i}: {i}")).collect();
    std::fs::write(&many, lines.join("\n")).expect("write");
    let out = curl(
        &env,
        &["--http2", "-H", &format!("@{}", many.display()), &https],
    )
    .await;
    assert_eq!(out.status, 431, "h2: {}", out.stderr);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("header_fields_too_large")
    );
    assert!(
        origin.received().is_empty() && plain.received().is_empty(),
        "nothing over a limit reached an origin"
    );
    // Under the limits, the same connection keeps working (a 200 KiB head passes).
    let out =
        airlock_tests::run_client_async("python3", &["-c", PY_BIG_HEAD, &https, "200", "0"], &env)
            .await;
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("200"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
