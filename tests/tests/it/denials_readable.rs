//! Refusals an agent can read and act on (issue 21, items 1 and 7): a host the policy
//! denies outright answers each request inside its tunnel with the 403 JSON reason, for
//! curl, Python requests and Node fetch alike; every refusal links the manifest, which
//! the environment names; a hint names the condition the nearest rule missed.

use std::collections::BTreeMap;

use airlock_tests::{curl, ok_origin, run_client_async, Fixture};

/// A policy where `127.0.0.1:{port}` is denied outright (rule `no-origin`, no condition
/// beyond host and port) and every other host falls to the default deny.
fn host_denied_policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "no-origin"
host = "127.0.0.1"
port = {port}
action = "deny"
reason = "the test origin is off limits"
"#
    )
}

fn assert_denial_body(body: &serde_json::Value, client: &str) {
    assert_eq!(body["rule"], "no-origin", "{client}: {body}");
    assert_eq!(
        body["reason"], "the test origin is off limits",
        "{client}: {body}"
    );
    assert_eq!(body["reason_code"], "rule_deny", "{client}: {body}");
    assert_eq!(
        body["manifest"], "http://airlock.invalid/.well-known/airlock/policy",
        "{client}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item1_host_level_denial_reaches_curl_requests_and_node_fetch() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&host_denied_policy(port), &[]).await;
    let url = format!("https://127.0.0.1:{port}/anything?q=1");

    // curl: the CONNECT is answered 200 and the request inside gets the 403 and its body.
    let seen = curl(&env, &["-X", "POST", "--data", "x", &url]).await;
    assert_eq!(seen.status, 403, "curl saw: {seen:?}");
    assert_denial_body(&seen.json(), "curl");
    assert!(
        !seen.stderr.contains("CONNECT tunnel failed"),
        "{}",
        seen.stderr
    );

    // Python requests: a response with the reason, not "Tunnel connection failed".
    let script = format!(
        "import requests, json, sys\nr = requests.get('{url}')\nprint(json.dumps({{'status': r.status_code, 'body': r.json()}}))\n"
    );
    let out = run_client_async("python3", &["-c", &script], &env).await;
    assert!(
        out.status.success(),
        "requests failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).expect("requests output");
    assert_eq!(seen["status"], 403, "{seen}");
    assert_denial_body(&seen["body"], "requests");

    // Node fetch (NODE_USE_ENV_PROXY, Node 24+).
    match airlock_tests::node24() {
        Some(node) => {
            let script = format!(
                "fetch('{url}').then(async r => console.log(JSON.stringify({{status: r.status, body: await r.json()}}))).catch(e => {{ console.error(e); process.exit(2) }})"
            );
            let node = node.to_string_lossy().into_owned();
            let out = run_client_async(&node, &["-e", &script], &env).await;
            assert!(
                out.status.success(),
                "node failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let seen: serde_json::Value = serde_json::from_slice(&out.stdout).expect("node output");
            assert_eq!(seen["status"], 403, "{seen}");
            assert_denial_body(&seen["body"], "node");
        }
        None => {
            assert!(
                !airlock_tests::in_ci(),
                "item1 needs node 24+ in CI (.ci/run installs it)"
            );
            eprintln!("SKIPPED the node part of item1: no node 24+");
        }
    }

    // Nothing was dialed for the denied host; the CONNECTs are journaled as denials.
    assert!(origin.received().is_empty(), "the origin was reached");
    let denials = airlock
        .admin
        .get(&format!("/v1/runs/{run}/denials"))
        .await
        .expect("denials");
    assert!(
        denials.to_string().contains("no-origin"),
        "the denial is journaled: {denials}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item1_default_denied_host_names_the_host_in_its_hint() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (_airlock, _run, env) = fx
        .start_run(&host_denied_policy(origin.addr().port()), &[])
        .await;
    // `.invalid` never resolves (RFC 6761 §6.4): airlock must answer without dialing.
    let seen = curl(&env, &["https://nothing-names-this.invalid/x"]).await;
    assert_eq!(seen.status, 403, "curl saw: {seen:?}");
    let body = seen.json();
    assert_eq!(body["reason_code"], "default_deny", "{body}");
    assert!(
        body["hint"]
            .as_str()
            .unwrap_or("")
            .contains("nothing-names-this.invalid:443"),
        "{body}"
    );
    assert_eq!(
        body["manifest"],
        "http://airlock.invalid/.well-known/airlock/policy"
    );
}

/// Rules that pass only GET under /api on the origin, with small limits for 413 and 429.
fn narrow_policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "api-reads"
host = "127.0.0.1"
port = {port}
method = "GET"
path = "/api/**"
action = "pass"

[[rule]]
id = "slow-hook"
host = "127.0.0.1"
port = {port}
method = "POST"
path = "/hook"
action = "stage"
limit = {{ requests_per_minute = 1 }}

[[rule]]
id = "small-upload"
host = "127.0.0.1"
port = {port}
method = "POST"
path = "/upload"
action = "stage"
limit = {{ body_bytes = 16 }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item7_hints_name_the_actual_mismatch() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (_airlock, _run, env) = fx.start_run(&narrow_policy(port), &[]).await;

    let wrong_method = curl(
        &env,
        &["-X", "DELETE", &format!("https://127.0.0.1:{port}/api/x")],
    )
    .await;
    assert_eq!(wrong_method.status, 403);
    let body = wrong_method.json();
    let hint = body["hint"].as_str().unwrap_or("");
    assert!(
        hint.contains("api-reads") && hint.contains("method DELETE"),
        "{body}"
    );
    assert!(
        !hint.contains("allow_private") && !hint.contains("`port`"),
        "{body}"
    );
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or("")
            .contains("method (DELETE)"),
        "{body}"
    );

    let wrong_path = curl(&env, &[&format!("https://127.0.0.1:{port}/other")]).await;
    assert_eq!(wrong_path.status, 403);
    let body = wrong_path.json();
    let hint = body["hint"].as_str().unwrap_or("");
    assert!(
        hint.contains("api-reads") && hint.contains("path /other"),
        "{body}"
    );
    assert!(!hint.contains("allow_private"), "{body}");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item7_manifest_in_the_environment_and_every_refusal() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&narrow_policy(port), &[]).await;
    let manifest = "http://airlock.invalid/.well-known/airlock/policy";
    assert_eq!(
        env.get("AIRLOCK_MANIFEST_URL").map(String::as_str),
        Some(manifest)
    );

    // The URL in the environment answers the manifest through the proxy.
    let read = curl(&env, &[&env["AIRLOCK_MANIFEST_URL"]]).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.json()["run"], run);

    let hook = format!("https://127.0.0.1:{port}/hook");
    let mut refusals: BTreeMap<u16, serde_json::Value> = BTreeMap::new();
    // 403: no rule allows it.
    let seen = curl(&env, &["-X", "PUT", &hook]).await;
    refusals.insert(seen.status, seen.json());
    // 413: over the rule's body_bytes.
    let upload = format!("https://127.0.0.1:{port}/upload");
    let seen = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "much more than sixteen bytes",
            &upload,
        ],
    )
    .await;
    refusals.insert(seen.status, seen.json());
    // 429: the second POST within the minute.
    assert_eq!(
        curl(&env, &["-X", "POST", "--data", "a", &hook])
            .await
            .status,
        202
    );
    let seen = curl(&env, &["-X", "POST", "--data", "b", &hook]).await;
    refusals.insert(seen.status, seen.json());
    // 409: the run is sealed.
    airlock
        .post(&format!("/v1/runs/{run}/seal"), None)
        .await
        .expect("seal");
    let seen = curl(&env, &["-X", "POST", "--data", "c", &upload]).await;
    refusals.insert(seen.status, seen.json());
    for status in [403, 409, 413, 429] {
        let body = refusals
            .get(&status)
            .unwrap_or_else(|| panic!("no {status} among {refusals:?}"));
        assert_eq!(body["manifest"], manifest, "{status}: {body}");
    }
}
