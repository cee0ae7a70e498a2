//! `action = "tunnel"` (CONNECT spliced without interception) and the operator baseline.

use std::time::Duration;

use airlock_tests::{curl, ok_origin, poll_until, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_rule_lets_curl_see_the_origins_own_certificate_and_is_journaled() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"

[[rule]]
id = "pinned"
host = "127.0.0.1"
port = {port}
action = "tunnel"
allow_private = ["127.0.0.1"]
reason = "a certificate-pinned client"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let origin_ca = fx.dir.path().join("origin-ca.pem");
    let url = format!("https://127.0.0.1:{port}/through?x=1");
    // Trusting only the origin's CA: this succeeds only if no airlock leaf is in the way.
    let out = curl(
        &env,
        &["--cacert", origin_ca.to_str().expect("utf-8 path"), &url],
    )
    .await;
    assert!(out.success, "curl failed: {}", out.stderr);
    assert_eq!(out.status, 200);
    assert_eq!(out.json()["ok"], true);
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/through?x=1");
    assert_eq!(received[0].header("proxy-authorization"), None);

    // With airlock's CA only, the handshake fails: the certificate is the origin's.
    let out = curl(
        &env,
        &[
            "--cacert",
            airlock.ca_file().to_str().expect("utf-8 path"),
            &url,
        ],
    )
    .await;
    assert!(!out.success, "airlock must not intercept a tunnel");

    let read = poll_until(Duration::from_secs(10), || async {
        airlock
            .reads(&run)
            .await?
            .iter()
            .find(|r| r["method"] == "CONNECT" && r["response_bytes"].as_u64() > Some(0))
            .cloned()
    })
    .await
    .expect("the tunnel is journaled as a read");
    assert_eq!(read["rule"], "pinned");
    assert!(read["request_bytes"].as_u64() > Some(0));

    // A CONNECT to another port is still denied.
    let other = curl(&env, &["https://127.0.0.1:1/"]).await;
    assert!(!other.success || other.status != 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_denies_win_over_project_rules() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
allow_private = ["127.0.0.0/8"]
[[rule]]
id = "everything"
host = "127.0.0.1"
port = {port}
action = "pass"
"#
    );
    let baseline = fx.dir.path().join("baseline.toml");
    std::fs::write(
        &baseline,
        "version = 1\n[[rule]]\nid = \"no-secrets\"\nhost = \"127.0.0.1\"\nport = [1, 65535]\npath = \"/secrets/**\"\naction = \"deny\"\nreason = \"operator baseline: never\"\n",
    )
    .expect("write baseline");
    // The baseline names other ports; a second rule covers the origin's.
    let text = std::fs::read_to_string(&baseline).expect("read");
    std::fs::write(
        &baseline,
        format!("{text}\n[[rule]]\nid = \"no-secrets-here\"\nhost = \"127.0.0.1\"\nport = {port}\npath = \"/secrets/**\"\naction = \"deny\"\n"),
    )
    .expect("write baseline");
    let (_airlock, _run, env) = fx
        .start_run(
            &policy,
            &["--baseline", baseline.to_str().expect("utf-8 path")],
        )
        .await;
    let out = curl(&env, &[&format!("https://127.0.0.1:{port}/secrets/key")]).await;
    assert_eq!(out.status, 403);
    let body = out.json();
    assert_eq!(body["reason_code"], "baseline_deny", "{body}");
    assert_eq!(body["rule"], "no-secrets-here");
    let out = curl(&env, &[&format!("https://127.0.0.1:{port}/public")]).await;
    assert_eq!(out.status, 200);
    let manifest = curl(&env, &["http://airlock.invalid/.well-known/airlock/policy"]).await;
    let manifest = manifest.json();
    assert_eq!(manifest["baseline"][0]["id"], "no-secrets", "{manifest}");
    assert_eq!(manifest["baseline"][1]["id"], "no-secrets-here");
    assert_eq!(origin.received().len(), 1);
}
