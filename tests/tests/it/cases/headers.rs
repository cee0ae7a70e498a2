//! docs/cases.md headers: C07 Content-Encoding kept as sent, C08 large header sections and the 431.

use std::sync::Arc;

use airlock_tests::{curl, loopback_policy, text_origin, Fixture, Origin, Received, Reply};

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
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
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
    let (_airlock, _run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
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
    let plain = text_origin(None, 200, "plain").await;
    let policy = loopback_policy(origin.addr().port()).replace(
        "[[rule]]\nid = \"forbidden\"",
        &format!(
            "[[rule]]\nid = \"plain\"\nhost = \"127.0.0.1\"\nport = {}\nmethod = \"read\"\naction = \"pass\"\n\n[[rule]]\nid = \"forbidden\"",
            plain.addr().port()
        ),
    );
    let (_airlock, _run, env) = fx.start_run(&policy, &[]).await;
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
