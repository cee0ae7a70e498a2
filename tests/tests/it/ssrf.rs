//! docs/policy.md invariant 1, end to end with a stubbed resolver (`--resolve`): host names that
//! resolve to loopback, metadata, RFC 1918, CGNAT, ULA or IPv6 forms embedding IPv4 are
//! refused after resolution even though a rule passes the host; a rule's `allow_private`
//! opens exactly its range; airlock's own listeners stay refused.

use airlock_tests::{curl, text_origin, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_resolving_to_private_addresses_are_refused_unless_allowed() {
    let fx = Fixture::new();
    let origin = text_origin(None, 200, "origin").await;
    let port = origin.addr().port();
    let policy = |ports: &str| {
        format!(
            r#"version = 1
default = "deny"

[[rule]]
id = "opted-in"
host = "allowed.ok.test"
port = [{ports}]
method = "read"
action = "pass"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "anything-under-ssrf"
host = "*.ssrf.test"
port = [{ports}]
method = "read"
action = "pass"

[[rule]]
id = "writes-under-ssrf"
host = "*.ssrf.test"
port = [{ports}]
method = "write"
action = "stage"
"#
        )
    };
    let refused = [
        ("loopback", "127.0.0.1"),
        ("mapped", "::ffff:127.0.0.1"),
        ("nat64", "64:ff9b::7f00:1"),
        ("sixtofour", "2002:7f00:1::1"),
        ("teredo", "2001:0:4136:e378:8000:63bf:80ff:fffe"),
        ("metadata", "169.254.169.254"),
        ("tenant", "10.1.2.3"),
        ("cgnat", "100.64.0.1"),
        ("ula", "fd00::1"),
        ("unspecified", "0.0.0.0"),
    ];
    let mut args: Vec<String> = refused
        .iter()
        .flat_map(|(name, ip)| ["--resolve".to_owned(), format!("{name}.ssrf.test={ip}")])
        .collect();
    args.extend(["--resolve".into(), "allowed.ok.test=127.0.0.1".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (airlock, run, env) = fx.start_run(&policy(&port.to_string()), &args).await;

    for (name, ip) in refused {
        let out = curl(&env, &[&format!("http://{name}.ssrf.test:{port}/")]).await;
        assert_eq!(
            out.status, 403,
            "{name} ({ip}) must be refused: {}",
            out.stderr
        );
        assert_eq!(
            out.header("airlock-error").as_deref(),
            Some("private_address"),
            "{name} ({ip})"
        );
    }
    assert!(
        origin.received().is_empty(),
        "no refused name reached the origin"
    );
    // A write to such a name is refused at once too, not staged for a commit to fail.
    let out = curl(
        &env,
        &["-d", "x=1", &format!("http://tenant.ssrf.test:{port}/hook")],
    )
    .await;
    assert_eq!(out.status, 403, "{}", out.stderr);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("private_address")
    );
    assert!(airlock.effects(&run).await.is_empty(), "nothing staged");

    // The rule that names the range opens it: the same loopback origin, reached by name.
    let out = curl(&env, &[&format!("http://allowed.ok.test:{port}/x")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert_eq!(out.body, b"origin");
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].header("host"),
        Some(format!("allowed.ok.test:{port}").as_str())
    );

    // Even opted in, airlock's own listeners are never dialed.
    let proxy_port = airlock.proxy.rsplit(':').next().expect("port");
    airlock
        .admin
        .post_text(
            "/v1/policy",
            "application/toml",
            policy(&format!("{port}, {proxy_port}")),
        )
        .await
        .expect("policy naming the proxy's port");
    let out = curl(&env, &[&format!("http://allowed.ok.test:{proxy_port}/")]).await;
    assert_eq!(out.status, 403);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("airlock_listener")
    );
}

#[test]
fn a_bad_resolve_argument_is_refused_at_start_with_the_reason() {
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .args(["serve", "--resolve", "api.example.com=not-an-ip"])
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an IP address"), "{stderr}");
}

/// Sends `CONNECT authority` with `auth` and returns airlock's answer (head and body) and
/// the stream.
async fn connect_answer(
    proxy: &str,
    auth: &str,
    authority: &str,
) -> (String, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect");
    stream
        .write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: {auth}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("send CONNECT");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The head, and the JSON body when one is announced.
    loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer to the CONNECT")
            .expect("read");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
        if n == 0 {
            break;
        }
    }
    (String::from_utf8_lossy(&answer).into_owned(), stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_to_a_special_purpose_ip_no_allow_private_names_is_refused_at_the_connect() {
    use base64::Engine as _;
    let fx = Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    // A rule passes the loopback origin's address, but no allow_private names loopback.
    let policy = |allow: &str| {
        format!(
            r#"version = 1
default = "deny"
{allow}

[[rule]]
id = "loopback-reads"
host = "127.0.0.1"
port = {port}
action = "pass"

[[rule]]
id = "v6-loopback-reads"
host = "::1"
port = {port}
action = "pass"
"#
        )
    };
    let (airlock, run, env) = fx.start_run(&policy(""), &[]).await;
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{run}:{}", airlock.run_token(&run).await))
    );
    for authority in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let (answer, _) = connect_answer(&airlock.proxy, &auth, &authority).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{authority}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("airlock-error: private_address"),
            "{authority}: {answer}"
        );
        let body: serde_json::Value =
            serde_json::from_str(answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(""))
                .unwrap_or_else(|e| panic!("{authority}: a JSON body ({e}): {answer}"));
        assert_eq!(body["reason_code"], "private_address", "{body}");
        assert!(
            body["reason"]
                .as_str()
                .is_some_and(|r| r.contains("allow_private")),
            "{body}"
        );
        assert!(
            body["hint"]
                .as_str()
                .is_some_and(|h| h.contains("allow_private")),
            "{body}"
        );
    }
    // curl sees the refusal at the CONNECT, not a tunnel that then refuses every request.
    let out = curl(&env, &[&format!("https://127.0.0.1:{port}/x")]).await;
    assert!(!out.success);
    assert!(out.headers.starts_with("HTTP/1.1 403"), "{}", out.headers);
    assert_eq!(
        out.header("airlock-error").as_deref(),
        Some("private_address")
    );
    assert!(origin.received().is_empty(), "nothing reached the origin");

    // With allow_private naming loopback, the same CONNECT opens and the read passes.
    airlock
        .admin
        .post_text(
            "/v1/policy",
            "application/toml",
            policy(r#"allow_private = ["127.0.0.0/8"]"#),
        )
        .await
        .expect("policy with allow_private");
    let out = curl(&env, &[&format!("https://127.0.0.1:{port}/x")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert_eq!(origin.received().len(), 1);
}
