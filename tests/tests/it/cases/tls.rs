//! docs/cases.md "TLS and certificates": C10 IP literals and IPv6, C13 clients with their own roots.

use std::sync::Arc;

use airlock_tests::{curl, loopback_policy, text_origin, Fixture, Origin, Received, Reply};

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
    let (_airlock, _run, env) = fx.start_run(&policy, &[]).await;
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
    let origin = text_origin(Some(&fx.origin_ca), 200, "ok").await;
    let (airlock, _run, mut env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
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
