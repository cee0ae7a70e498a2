//! Bad input gets a clear error and loses nothing already staged.

use airlock_tests::{airlock_bin, curl, loopback_policy, ok_origin, Fixture};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(proxy: &str, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut out),
    )
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_clear_errors_and_staged_effects_survive() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    assert_eq!(
        curl(&env, &["-X", "POST", "--data", "keep me", &url])
            .await
            .status,
        202
    );
    let token = airlock.run_token(&run).await;
    let auth = base64_basic(&run, &token);

    // A CONNECT target without a port, and one that is not an authority.
    for target in ["127.0.0.1", "exa mple.com:443", ":443"] {
        let answer = raw(
            &airlock.proxy,
            &format!("CONNECT {target} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: {auth}\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
    }
    // An origin-form request is not a proxy request.
    let answer = raw(&airlock.proxy, &format!("GET /v1/runs HTTP/1.1\r\nHost: x\r\nProxy-Authorization: {auth}\r\nConnection: close\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("not_a_proxy_request"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{answer}"
    );
    // Garbage instead of HTTP.
    let answer = raw(&airlock.proxy, "\x16\x03\x01garbage\r\n\r\n").await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    // A Host header that names another host than the CONNECT target.
    let out = curl(
        &env,
        &[
            "-H",
            "host: other.example",
            &format!("https://127.0.0.1:{}/", origin.addr().port()),
        ],
    )
    .await;
    assert_eq!(out.status, 421);
    assert_eq!(out.json()["reason_code"], "authority_mismatch");

    // Two Host headers: 400 (RFC 9112 §3.2), never a guess at which one the origin reads.
    let answer = raw(
        &airlock.proxy,
        &format!(
            "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\nProxy-Authorization: {auth}\r\nConnection: close\r\n\r\n",
            port = origin.addr().port()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("duplicate_host"), "{answer}");

    // Ids are case-insensitive ULIDs.
    let lower = run.to_ascii_lowercase();
    let shown = airlock
        .admin
        .get(&format!("/v1/runs/{lower}"))
        .await
        .expect("lower-case id");
    assert_eq!(shown["id"], run.as_str());

    // Unknown ids on the admin API.
    let err = airlock
        .admin
        .get("/v1/runs/run_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .await
        .expect_err("404");
    assert!(
        matches!(err, airlock_tests::ClientError::Api { status: 404, .. }),
        "{err}"
    );
    let err = airlock
        .admin
        .get("/v1/effects/nonsense")
        .await
        .expect_err("400");
    assert!(
        matches!(err, airlock_tests::ClientError::Api { status: 400, .. }),
        "{err}"
    );
    let err = airlock
        .post("/v1/runs", Some(serde_json::json!({"bogus": 1})))
        .await
        .expect_err("400");
    assert!(
        matches!(err, airlock_tests::ClientError::Api { status: 400, .. }),
        "{err}"
    );

    // Nothing staged was lost.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["state"], "staged");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_whose_target_is_not_host_port_alone_gets_a_json_400() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, _) = fx.start_run(&loopback_policy(port), &[]).await;
    let auth = base64_basic(&run, &airlock.run_token(&run).await);
    // RFC 9110 §9.3.6: authority-form only. An absolute URI is not a CONNECT target, even
    // though it holds one. (hyper itself refuses `host:port/path` with a bare 400.)
    for target in [
        format!("http://127.0.0.1:{port}"),
        format!("https://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}/path?q=1"),
    ] {
        let answer = raw(
            &airlock.proxy,
            &format!("CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{target}: {answer}"
        );
        assert!(
            answer.contains("\"bad_connect_target\""),
            "{target}: {answer}"
        );
        assert!(answer.contains("authority-form"), "{target}: {answer}");
    }
    // The authority-form CONNECT to the same origin still opens.
    let answer = raw(
        &airlock.proxy,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_post_v1_policy_gets_a_json_413_and_the_policy_in_force_stays() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = loopback_policy(origin.addr().port());
    let airlock = fx.start(&policy, &[]);
    let before = airlock.admin.get("/v1/policy").await.expect("policy");
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    // A valid policy padded with a comment to 3 MiB, past the admin API's 2 MiB.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.toml");
    let padding = format!("# {}\n", "x".repeat(1024));
    std::fs::write(&file, format!("{policy}{}", padding.repeat(3 * 1024))).expect("write");
    let out = curl(
        &std::collections::BTreeMap::new(),
        &[
            "-H",
            &format!("Authorization: Bearer {}", token.trim()),
            "-H",
            "Content-Type: application/toml",
            "--data-binary",
            &format!("@{}", file.display()),
            &format!("{}/v1/policy", airlock.admin_url),
        ],
    )
    .await;
    assert_eq!(out.status, 413, "{}", String::from_utf8_lossy(&out.body));
    assert_eq!(
        out.header("content-type").as_deref(),
        Some("application/json")
    );
    let body = out.json();
    assert_eq!(body["reason_code"], "body_too_large", "{body}");
    assert_eq!(body["details"]["limit"], 2 * 1024 * 1024, "{body}");
    assert!(body["hint"].is_string(), "{body}");
    let after = airlock.admin.get("/v1/policy").await.expect("policy");
    assert_eq!(after["revision"], before["revision"]);
    assert_eq!(after["generation"], before["generation"]);
}

/// Writes `request` on `stream` and reads until the peer closes (at most 10 s): what came
/// back, and whether the connection was closed.
async fn exchange<S>(stream: &mut S, request: &[u8]) -> (String, bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request).await.expect("write");
    let mut out = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut out),
    )
    .await
    .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_with_a_bare_lf_gets_a_json_400_and_the_connection_closes() {
    let fx = Fixture::new();
    let plain = airlock_tests::text_origin(None, 200, "plain origin").await;
    let tls = ok_origin(&fx.origin_ca).await;
    let policy = format!(
        "{}\n{}",
        loopback_policy(plain.addr().port()),
        loopback_policy(tls.addr().port())
            .replace(
                "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n",
                ""
            )
            .replace("id = \"", "id = \"tls-")
    );
    let (airlock, run, _) = fx.start_run(&policy, &[]).await;
    let token = airlock.run_token(&run).await;
    let auth = base64_basic(&run, &token);
    let host = format!("127.0.0.1:{}", plain.addr().port());
    let url = format!("http://{host}");

    // Plain proxy requests: a good one (with bare LFs in its body, which are content),
    // then, pipelined on the same connection, heads whose lines end in LF alone.
    for bad in [
        format!("GET {url}/bad HTTP/1.1\nHost: {host}\r\nProxy-Authorization: {auth}\r\n\r\n"),
        format!("GET {url}/bad HTTP/1.1\r\nHost: {host}\nProxy-Authorization: {auth}\r\n\r\n"),
        format!("GET {url}/bad HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\n\n"),
    ] {
        let good = format!(
            "POST {url}/hook HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\nContent-Length: 8\r\n\r\none\ntwo\n"
        );
        let mut stream = tokio::net::TcpStream::connect(&airlock.proxy)
            .await
            .expect("connect");
        let (answer, closed) = exchange(&mut stream, format!("{good}{bad}").as_bytes()).await;
        assert!(
            closed,
            "the connection is closed after the refusal: {answer}"
        );
        assert!(
            answer.starts_with("HTTP/1.1 202"),
            "the good request is staged: {answer}"
        );
        let refusal = answer
            .find("HTTP/1.1 400")
            .map(|at| &answer[at..])
            .unwrap_or_else(|| panic!("a 400 after the 202: {answer:?}"));
        assert!(
            refusal.contains("content-type: application/json"),
            "{refusal}"
        );
        assert!(
            refusal.contains("airlock-error: bare_lf_in_head"),
            "{refusal}"
        );
        let body: serde_json::Value =
            serde_json::from_str(refusal.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(""))
                .unwrap_or_else(|e| panic!("a JSON body ({e}): {refusal}"));
        assert_eq!(body["reason_code"], "bare_lf_in_head", "{body}");
        assert!(
            body["reason"]
                .as_str()
                .is_some_and(|r| r.contains("RFC 9112")),
            "{body}"
        );
    }
    let staged = airlock.effects(&run).await;
    assert_eq!(staged.len(), 3, "one good request staged per connection");
    assert!(staged.iter().all(|e| e["body_len"] == 8), "{staged:?}");
    assert!(plain.received().is_empty(), "no /bad reached the origin");

    // Inside an intercepted CONNECT tunnel, after TLS.
    let authority = format!("127.0.0.1:{}", tls.addr().port());
    let stream = airlock_tests::connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    let connector = airlock_tests::tls_trusting(&ca, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut stream = connector.connect(name, stream).await.expect("tls");
    let (answer, closed) = exchange(
        &mut stream,
        format!(
            "GET /ok HTTP/1.1\r\nHost: {authority}\r\n\r\nGET /bad HTTP/1.1\nHost: {authority}\n\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(closed, "{answer}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("bare_lf_in_head"), "{answer}");
    let received: Vec<String> = tls.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        received,
        ["/ok"],
        "only the CRLF request reached the origin"
    );
}

fn base64_basic(run: &str, token: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{run}:{token}"))
    )
}

#[test]
fn invalid_policy_is_a_one_line_error_naming_file_rule_and_field() {
    let fx = Fixture::new();
    let policy = fx.dir.path().join("bad.toml");
    std::fs::write(
        &policy,
        "version = 1\n[[rule]]\nid = \"too-wide\"\nhost = \"*\"\naction = \"pass\"\n",
    )
    .expect("write");
    let out = std::process::Command::new(airlock_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(fx.data_dir())
        .arg("--policy")
        .arg(&policy)
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(first.contains("bad.toml"), "{first}");
    assert!(first.contains("too-wide"), "{first}");
    assert!(first.contains("host"), "{first}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("hint:") && l.contains("policy")),
        "the hint is about the policy file: {stderr}"
    );
}
