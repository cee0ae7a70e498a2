//! Run identity and policy denials at the proxy listener (docs/cases.md C15).

use airlock_tests::{curl, loopback_policy, ok_origin, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c15_missing_or_wrong_credentials_get_407_with_the_challenge() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, mut env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/", origin.addr().port());

    for proxy in [
        format!("http://{}", airlock.proxy),
        format!("http://{run}:wrongtoken@{}", airlock.proxy),
        format!("http://run_nobody:x@{}", airlock.proxy),
    ] {
        for key in [
            "https_proxy",
            "HTTPS_PROXY",
            "http_proxy",
            "HTTP_PROXY",
            "all_proxy",
            "ALL_PROXY",
        ] {
            env.insert(key.into(), proxy.clone());
        }
        let out = curl(&env, &["--proxy-basic", &url]).await;
        assert!(
            out.headers.contains("407"),
            "{proxy}: expected 407 on CONNECT, got headers {:?}, stderr {}",
            out.headers,
            out.stderr
        );
        assert!(
            out.headers
                .to_ascii_lowercase()
                .contains("proxy-authenticate: basic realm=\"airlock\""),
            "{}",
            out.headers
        );
    }
    // Plain http with no credentials: the JSON body says why.
    let out = curl(
        &env,
        &[&format!("http://127.0.0.1:{}/", origin.addr().port())],
    )
    .await;
    assert_eq!(out.status, 407);
    assert_eq!(out.json()["reason_code"], "proxy_auth_required");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_token_cannot_act_on_another_run() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run_a, env_a) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let (run_b, _) = airlock.create_run().await;
    let token_a = airlock.run_token(&run_a).await;
    let mut env = env_a.clone();
    let forged = format!("http://{run_b}:{token_a}@{}", airlock.proxy);
    for key in ["https_proxy", "HTTPS_PROXY"] {
        env.insert(key.into(), forged.clone());
    }
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    let out = curl(&env, &["-X", "POST", "--data", "x", &url]).await;
    assert!(out.headers.contains("407"), "{}", out.headers);
    assert!(airlock.effects(&run_b).await.is_empty());
    // With its own credentials, run A stages into run A only.
    let out = curl(&env_a, &["-X", "POST", "--data", "x", &url]).await;
    assert_eq!(out.status, 202);
    assert_eq!(airlock.effects(&run_a).await.len(), 1);
    assert!(airlock.effects(&run_b).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_host_and_path_get_403_json_without_reaching_the_origin() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;

    // A host no rule names: the CONNECT is answered and every request inside gets the
    // 403 with its reason (docs/policy.md, "Denied hosts"); nothing is dialed.
    let out = curl(
        &env,
        &[&format!("https://localhost:{}/", origin.addr().port())],
    )
    .await;
    assert_eq!(out.status, 403, "{}", out.headers);
    assert_eq!(out.header("airlock-error").as_deref(), Some("default_deny"));
    assert_eq!(out.json()["reason_code"], "default_deny");

    // A denied path inside an intercepted tunnel: 403 with the rule and reason.
    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("https://127.0.0.1:{}/forbidden/thing", origin.addr().port()),
        ],
    )
    .await;
    assert_eq!(out.status, 403);
    let body = out.json();
    assert_eq!(body["rule"], "forbidden");
    assert_eq!(body["reason"], "nothing under /forbidden leaves");
    assert_eq!(body["reason_code"], "rule_deny");
    assert!(body["policy_revision"].is_string());
    assert!(body["hint"].is_string());
    assert_eq!(out.header("airlock-error").as_deref(), Some("rule_deny"));
    assert!(origin.received().is_empty());
    assert!(airlock.effects(&run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_requires_the_bearer_token_and_the_proxy_never_reaches_it() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let wrong = airlock_tests::AdminClient::new(&airlock.admin_url, "not-the-token");
    for path in [
        "/v1/runs",
        &format!("/v1/runs/{run}"),
        &format!("/v1/runs/{run}/env"),
    ] {
        let err = wrong.get(path).await.expect_err("refused");
        assert!(
            matches!(err, airlock_tests::ClientError::Api { status: 401, .. }),
            "{path}: {err}"
        );
    }
    drop(airlock);

    // Through the proxy, airlock's own admin listener is refused even with a rule that
    // passes loopback on its port.
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let policy = format!(
        "{}\n[[rule]]\nid = \"mapped\"\nhost = \"::ffff:127.0.0.1\"\nport = {admin_port}\nscheme = \"http\"\naction = \"pass\"\n",
        loopback_policy(admin_port).replace("[[rule]]", "[[rule]]\nscheme = \"http\"")
    );
    let admin_addr = format!("127.0.0.1:{admin_port}");
    let (_airlock, _, env) = fx.start_run(&policy, &["--admin", &admin_addr]).await;
    for url in [
        format!("http://{admin_addr}/v1/runs"),
        format!("http://[::ffff:127.0.0.1]:{admin_port}/v1/runs"),
    ] {
        let out = curl(&env, &[&url]).await;
        assert_eq!(
            out.status,
            403,
            "{url}: {}",
            String::from_utf8_lossy(&out.body)
        );
        assert_eq!(out.json()["reason_code"], "airlock_listener", "{url}");
    }
    let _ = env;
}
