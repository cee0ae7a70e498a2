//! docs/cases.md framing: C01 Expect: 100-continue, C02 chunked bodies without a length.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_tests::{curl, run_client_async, text_origin, Fixture, Origin, Received, Reply};
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
    let tls_origin = text_origin(Some(&fx.origin_ca), 201, "stored").await;
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
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
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
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
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
    airlock.commit_pending(&run).await;
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
