//! Protocol cases from docs/cases.md: h2 on either side, re-framing, reserved headers,
//! staging limits.

use std::sync::Arc;

use airlock_tests::{curl, loopback_policy, text_origin, Fixture, Origin, Received, Reply};

fn hello(_: &Received) -> Reply {
    let mut reply = Reply::text(200, "hello");
    reply
        .headers
        .push(("x-origin-version".into(), "yes".into()));
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c04_client_and_origin_disagree_on_h2() {
    let fx = Fixture::new();
    let h1_only = Origin::start_alpn(Some(&fx.origin_ca), Arc::new(hello), &[b"http/1.1"])
        .await
        .expect("origin");
    let h2_only = Origin::start_alpn(Some(&fx.origin_ca), Arc::new(hello), &[b"h2"])
        .await
        .expect("origin");
    let no_alpn = Origin::start_alpn(Some(&fx.origin_ca), Arc::new(hello), &[])
        .await
        .expect("origin");
    let policy = format!(
        "{}\n{}\n{}",
        loopback_policy(h1_only.addr().port()),
        loopback_policy(h2_only.addr().port())
            .split("[[rule]]")
            .skip(1)
            .map(|r| format!("[[rule]]{}", r.replace("id = \"", "id = \"h2-")))
            .collect::<String>(),
        loopback_policy(no_alpn.addr().port())
            .split("[[rule]]")
            .skip(1)
            .map(|r| format!("[[rule]]{}", r.replace("id = \"", "id = \"none-")))
            .collect::<String>(),
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let cases = [
        ("--http2", &h1_only, "2", "HTTP/1.1"),
        ("--http2", &h2_only, "2", "HTTP/2.0"),
        ("--http1.1", &h2_only, "1.1", "HTTP/2.0"),
        ("--http2", &no_alpn, "2", "HTTP/1.1"),
    ];
    for (flag, origin, client_version, origin_version) in cases {
        let url = format!("https://127.0.0.1:{}/get", origin.addr().port());
        let out = curl(&env, &[flag, &url]).await;
        assert!(out.success, "{flag} to {origin_version}: {}", out.stderr);
        assert_eq!(
            out.status,
            200,
            "{flag} -> {origin_version}: {}",
            String::from_utf8_lossy(&out.body)
        );
        assert_eq!(out.body, b"hello");
        assert_eq!(out.header("x-origin-version").as_deref(), Some("yes"));
        let received = origin.received();
        assert_eq!(
            received.last().map(|r| r.version.as_str()),
            Some(origin_version)
        );
        // Staging works from either client protocol too.
        let staged = curl(&env, &[flag, "-X", "POST", "--data", "x", &url]).await;
        assert_eq!(staged.status, 202, "{flag}: {}", staged.stderr);
        assert!(staged.header("airlock-effect").is_some());
        let version = airlock_tests::run_client_async(
            "curl",
            &[
                "-sS",
                flag,
                "-o",
                "/dev/null",
                "-w",
                "%{http_version}",
                &url,
            ],
            &env,
        )
        .await;
        assert_eq!(
            String::from_utf8_lossy(&version.stdout),
            client_version,
            "{flag}: the client spoke its own protocol"
        );
    }
    assert_eq!(airlock.effects(&run).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c05_reframing_for_every_client_version() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| match req.path.as_str() {
            "/not-modified" => Reply {
                status: 304,
                headers: vec![("etag".into(), "\"v1\"".into())],
                body: Vec::new(),
                ..Reply::default()
            },
            _ => Reply::text(200, "body for get"),
        }),
    )
    .await
    .expect("origin");
    let (_airlock, _run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());

    let head = curl(&env, &["-I", &format!("{base}/x")]).await;
    assert_eq!(head.status, 200);
    assert!(
        !String::from_utf8_lossy(&head.body).contains("body for get"),
        "no body on HEAD"
    );
    let not_modified = curl(&env, &[&format!("{base}/not-modified")]).await;
    assert_eq!(not_modified.status, 304);
    assert!(not_modified.body.is_empty());

    // airlock's own answers (stage, deny) are well formed for HTTP/1.0, 1.1 and h2.
    for flag in ["--http1.0", "--http1.1", "--http2"] {
        let staged = curl(
            &env,
            &[flag, "-X", "POST", "--data", "x", &format!("{base}/hook")],
        )
        .await;
        assert_eq!(staged.status, 202, "{flag}: {}", staged.stderr);
        assert!(
            staged.header("content-length").is_some() || flag == "--http2",
            "{flag}: {}",
            staged.headers
        );
        assert_eq!(
            staged.header("content-type").as_deref(),
            Some("application/json")
        );
        let _ = staged.json();
        let denied = curl(
            &env,
            &[
                flag,
                "-X",
                "POST",
                "--data",
                "x",
                &format!("{base}/forbidden/x"),
            ],
        )
        .await;
        assert_eq!(denied.status, 403, "{flag}");
        assert_eq!(denied.json()["reason_code"], "rule_deny");
        let status_line = denied
            .headers
            .split("\r\n\r\n")
            .filter(|h| !h.trim().is_empty())
            .last()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        let expected = match flag {
            "--http1.0" => "HTTP/1.0 403",
            "--http1.1" => "HTTP/1.1 403",
            _ => "HTTP/2 403",
        };
        assert!(
            status_line.starts_with(expected),
            "{flag}: status line {status_line:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c19_origins_cannot_forge_airlock_headers() {
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| {
            let mut reply = Reply::text(200, "ok");
            reply.headers.push((
                "airlock-effect".into(),
                "eff_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            ));
            reply
                .headers
                .push(("airlock-error".into(), "forged".into()));
            reply
        }),
    )
    .await
    .expect("origin");
    let (_airlock, _run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    for flag in ["--http1.1", "--http2"] {
        let out = curl(
            &env,
            &[
                flag,
                &format!("https://127.0.0.1:{}/", origin.addr().port()),
            ],
        )
        .await;
        assert_eq!(out.status, 200);
        assert_eq!(out.header("airlock-effect"), None, "{flag}");
        assert_eq!(out.header("airlock-error"), None, "{flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c20_staged_body_limits_raw_and_decoded() {
    let fx = Fixture::new();
    let origin = text_origin(Some(&fx.origin_ca), 200, "ok").await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/upload", origin.addr().port());

    // 2 GiB streamed chunked: reading stops at the 10 MiB limit with 413; nothing stored.
    let script = format!(
        "head -c 2147483648 /dev/zero | curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}' -X POST -T - {url}"
    );
    let out = airlock_tests::run_client_async("sh", &["-c", &script], &env).await;
    let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        code == "413" || code == "000",
        "2 GiB chunked: {code} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        airlock.effects(&run).await.is_empty(),
        "no partial effect is stored"
    );

    // A small gzip body that expands to 256 MiB: stored as sent (decoding is for lineage
    // only, capped), and the server stays well.
    let bomb = fx.dir.path().join("bomb.gz");
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c 268435456 /dev/zero | gzip -1 > {}",
            bomb.display()
        ))
        .status()
        .expect("gzip");
    assert!(made.success());
    let size = std::fs::metadata(&bomb).expect("bomb").len();
    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-encoding: gzip",
            "--data-binary",
            &format!("@{}", bomb.display()),
            &url,
        ],
    )
    .await;
    assert_eq!(out.status, 202, "{}", out.stderr);
    let effect = out.header("airlock-effect").expect("effect");
    let shown = airlock_tests::poll_until(std::time::Duration::from_secs(20), || async {
        let shown = airlock
            .admin
            .get(&format!("/v1/effects/{effect}"))
            .await
            .expect("show");
        (shown["lineage"]["analyzed"] == true).then_some(shown)
    })
    .await
    .expect("analysed");
    assert_eq!(shown["body_len"], size, "the body is kept exactly as sent");
    assert_eq!(
        shown["lineage"]["truncated"], true,
        "decoding stopped at its cap: {shown}"
    );
    let alive = curl(
        &env,
        &[&format!(
            "https://127.0.0.1:{}/still-alive",
            origin.addr().port()
        )],
    )
    .await;
    assert_eq!(alive.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c11_other_ports_server_speaks_first_and_plain_http_in_connect() {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = Fixture::new();
    let plain = text_origin(None, 200, "plain inside connect").await;
    // A banner-first server: it speaks first and never reads.
    let banner = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let banner_port = banner.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = banner.accept().await {
            let _ = stream.write_all(b"220 smtp.example ESMTP ready\r\n").await;
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        }
    });
    let policy = format!(
        "version = 1\nallow_private = [\"127.0.0.0/8\"]\n[[rule]]\nid = \"other-ports\"\nhost = \"127.0.0.1\"\nport = [{}, {banner_port}]\nmethod = \"read\"\naction = \"pass\"\n",
        plain.addr().port()
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let token = airlock.run_token(&run).await;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{run}:{token}"));

    // Port 443 is the default; a port no rule names is denied: the CONNECT is answered
    // and the request inside gets the 403 (docs/policy.md, "Denied hosts").
    let mut stream = tokio::net::TcpStream::connect(&airlock.proxy)
        .await
        .expect("connect");
    stream
        .write_all(format!("CONNECT 127.0.0.1:2525 HTTP/1.1\r\nHost: 127.0.0.1:2525\r\nProxy-Authorization: Basic {auth}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut answer = vec![0u8; 12];
    stream.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    // The rest of the CONNECT answer's head, then a plain request inside.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.expect("head");
        head.push(byte[0]);
    }
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:2525\r\n\r\n")
        .await
        .expect("write");
    let mut inside = vec![0u8; 12];
    stream.read_exact(&mut inside).await.expect("inner answer");
    assert_eq!(&inside, b"HTTP/1.1 403");

    // Plain HTTP inside a CONNECT to a named port is detected and decided like any request.
    let out = curl(
        &env,
        &[
            "--proxytunnel",
            &format!("http://127.0.0.1:{}/x", plain.addr().port()),
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert_eq!(out.body, b"plain inside connect");
    let staged = curl(
        &env,
        &[
            "--proxytunnel",
            "-X",
            "POST",
            "--data",
            "x",
            &format!("http://127.0.0.1:{}/x", plain.addr().port()),
        ],
    )
    .await;
    assert_eq!(staged.status, 403, "no rule stages here: default deny");

    // A server-speaks-first protocol is closed, never left hanging.
    let started = std::time::Instant::now();
    let mut stream = tokio::net::TcpStream::connect(&airlock.proxy)
        .await
        .expect("connect");
    stream
        .write_all(format!("CONNECT 127.0.0.1:{banner_port} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {auth}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stream.read_to_end(&mut rest),
    )
    .await;
    assert!(read.is_ok(), "the tunnel was closed, not left hanging");
    assert!(String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() < std::time::Duration::from_secs(29));
}

/// Sends one GET through a CONNECT tunnel with a hyper client speaking `alpn`, asking for
/// trailers; returns status, body and trailers.
async fn get_with_trailers(
    airlock: &airlock_tests::Airlock,
    run: &str,
    authority: &str,
    alpn: &[u8],
) -> (u16, Vec<u8>, Option<http::HeaderMap>) {
    use http_body_util::BodyExt;
    let token = airlock.run_token(run).await;
    let stream = airlock_tests::connect_tunnel(&airlock.proxy, run, &token, authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = airlock_tests::tls_trusting(&ca, &[alpn]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, stream).await.expect("tls");
    let io = hyper_util::rt::TokioIo::new(tls);
    let request = http::Request::builder()
        .uri(format!("https://{authority}/stream"))
        .header("te", "trailers")
        .header("host", authority)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = if alpn == b"h2" {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .expect("h2");
        tokio::spawn(conn);
        let mut request = request;
        request.headers_mut().remove("host");
        sender.send_request(request).await.expect("send")
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
        tokio::spawn(conn);
        sender.send_request(request).await.expect("send")
    };
    let status = response.status().as_u16();
    let collected = response.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned();
    (status, collected.to_bytes().to_vec(), trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c03_trailers_reach_the_client() {
    let fx = Fixture::new();
    let with_trailers = |body: &'static str| {
        move |_: &Received| Reply {
            status: 200,
            body: body.as_bytes().to_vec(),
            trailers: vec![
                ("grpc-status".into(), "0".into()),
                ("x-checksum".into(), "abc123".into()),
            ],
            ..Reply::default()
        }
    };
    let h1 = Origin::start_alpn(
        Some(&fx.origin_ca),
        Arc::new(with_trailers("chunked body")),
        &[b"http/1.1"],
    )
    .await
    .expect("origin");
    // An h2 origin answering trailers-only, as gRPC errors do.
    let h2 = Origin::start_alpn(Some(&fx.origin_ca), Arc::new(with_trailers("")), &[b"h2"])
        .await
        .expect("origin");
    let policy = format!(
        "version = 1\nallow_private = [\"127.0.0.0/8\"]\n[[rule]]\nid = \"reads\"\nhost = \"127.0.0.1\"\nport = [{}, {}]\nmethod = \"read\"\naction = \"pass\"\n",
        h1.addr().port(),
        h2.addr().port()
    );
    let (airlock, run, _) = fx.start_run(&policy, &[]).await;
    for (origin, body) in [(&h1, &b"chunked body"[..]), (&h2, &b""[..])] {
        for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
            let authority = format!("127.0.0.1:{}", origin.addr().port());
            let (status, got, trailers) = get_with_trailers(&airlock, &run, &authority, alpn).await;
            let label = format!(
                "client {} -> origin {}",
                String::from_utf8_lossy(alpn),
                origin
                    .received()
                    .last()
                    .map(|r| r.version.clone())
                    .unwrap_or_default()
            );
            assert_eq!(status, 200, "{label}");
            assert_eq!(got, body, "{label}");
            let trailers =
                trailers.unwrap_or_else(|| panic!("{label}: trailers reached the client"));
            assert_eq!(
                trailers.get("grpc-status").and_then(|v| v.to_str().ok()),
                Some("0"),
                "{label}"
            );
            assert_eq!(
                trailers.get("x-checksum").and_then(|v| v.to_str().ok()),
                Some("abc123"),
                "{label}"
            );
        }
    }
}

/// docs/policy.md invariant 4 over h2: a GET whose HEADERS frame does not end the stream and
/// whose DATA frames carry a body (no `content-length`) is a write, staged like any write,
/// never passed as a read with its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_get_with_data_frames_is_a_write() {
    use http_body_util::BodyExt;
    let fx = Fixture::new();
    let origin = Origin::start_alpn(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::text(200, "read")),
        &[b"h2"],
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, _env) = fx.start_run(&loopback_policy(port), &[]).await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let stream = airlock_tests::connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = airlock_tests::tls_trusting(&ca, &[b"h2"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, stream).await.expect("tls");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("h2");
    tokio::spawn(conn);
    // A body of unknown length: hyper sends no content-length and DATA frames follow.
    let chunks: Vec<Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>> =
        vec![Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
            b'X';
            100
        ])))];
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let request = http::Request::get(format!("https://{authority}/smuggle"))
        .body(body)
        .expect("request");
    let response = sender.send_request(request).await.expect("answered");
    let status = response.status().as_u16();
    let effect = response
        .headers()
        .get("airlock-effect")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let _ = response.into_body().collect().await;
    assert_eq!(status, 202, "the GET with a body is staged as a write");
    assert!(effect.is_some_and(|e| e.starts_with("eff_")));
    assert!(origin.received().is_empty(), "nothing reached the origin");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["method"], "GET");
    assert_eq!(effects[0]["body_len"], 100);
}

/// Only WebSocket is relayed as an upgrade: an `Upgrade: h2c` (or any other token) on a
/// passed request is an ordinary request with the Upgrade header dropped, so no 101 can
/// turn it into a pipe of undecided bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_websocket_upgrade_is_an_ordinary_request() {
    let fx = Fixture::new();
    let origin = Origin::start(
        None,
        Arc::new(|req: &Received| {
            Reply::text(200, req.header("upgrade").unwrap_or("no upgrade header"))
        }),
    )
    .await
    .expect("origin");
    let (_airlock, _run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let out = curl(
        &env,
        &[
            "--http1.1",
            "-H",
            "Connection: Upgrade, HTTP2-Settings",
            "-H",
            "Upgrade: h2c",
            "-H",
            "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA",
            &format!("http://127.0.0.1:{}/read", origin.addr().port()),
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.body), "no upgrade header");
    assert_eq!(origin.received()[0].header("upgrade"), None);
}
