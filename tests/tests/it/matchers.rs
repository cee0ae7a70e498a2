//! The policy's content matchers and obligations through the real proxy: GraphQL query
//! vs mutation, JSON webhook payloads, limits (413/429), strip, review = auto, redact,
//! profiles, audit mode.

use std::collections::BTreeMap;

use std::time::Duration;

use airlock_tests::{curl, ok_origin, poll_until, Airlock, Fixture};
use serde_json::{json, Value};

/// Creates a run with `profile`; returns `(id, env)`.
async fn create_run_with_profile(
    airlock: &Airlock,
    profile: &str,
) -> (String, BTreeMap<String, String>) {
    let run = airlock
        .post("/v1/runs", Some(json!({ "profile": profile })))
        .await
        .expect("create run");
    let env = run["env"]
        .as_object()
        .expect("env block")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    (run["id"].as_str().expect("run id").to_owned(), env)
}

fn header(port: u16) -> String {
    format!(
        "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n# origin port {port}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_query_passes_while_a_mutation_is_staged_in_the_same_run() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "gql-mutations"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/graphql"
graphql = {{ operation = "mutation" }}
limit = {{ body_bytes = 65536 }}
action = "stage"

[[rule]]
id = "gql-queries"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/graphql"
graphql = {{ operation = "query" }}
limit = {{ body_bytes = 65536 }}
action = "pass"
"#,
        header(port)
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let url = format!("https://127.0.0.1:{port}/graphql");
    let query = r#"{"query":"query Viewer { viewer { login } }"}"#;
    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            query,
            &url,
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{}", String::from_utf8_lossy(&out.body));
    assert_eq!(out.json()["ok"], true);

    let mutation = r#"{"query":"mutation CreatePR($i: In!) { createPullRequest(input: $i) { pullRequest { id } } }","variables":{"i":{"title":"x"}}}"#;
    let out = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            mutation,
            &url,
        ],
    )
    .await;
    assert_eq!(out.status, 202, "{}", String::from_utf8_lossy(&out.body));
    assert!(out.header("airlock-effect").is_some());

    let garbage = "not json at all";
    let out = curl(&env, &["-X", "POST", "--data", garbage, &url]).await;
    assert_eq!(out.status, 403);
    let body = out.json();
    assert_eq!(body["reason_code"], "body_unparseable", "{body}");
    assert_eq!(body["rule"], "gql-mutations");

    // Only the query reached the origin, with its body intact.
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, query.as_bytes());
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["rule"], "gql-mutations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_header_matchers_stage_only_matching_webhooks_with_strip_redact_and_auto_review() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "main-pushes"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks"
headers = {{ "X-Event" = "push" }}
json = {{ "/ref" = "refs/heads/main", "/forced" = false }}
limit = {{ body_bytes = 4096 }}
strip = ["cookie", "x-forwarded-for"]
redact = ["/password", "header:x-secret-note"]
review = "auto"
action = "stage"

[[rule]]
id = "other-hooks"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks"
action = "deny"
reason = "only pushes to main are delivered"
"#,
        header(port)
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let url = format!("https://127.0.0.1:{port}/hooks");
    let matching = r#"{"ref":"refs/heads/main","forced":false,"password":"hunter2"}"#;
    let send = |event: &'static str, body: &'static str| {
        let env = env.clone();
        let url = url.clone();
        async move {
            curl(
                &env,
                &[
                    "-X",
                    "POST",
                    "-H",
                    &format!("x-event: {event}"),
                    "-H",
                    "cookie: session=abc",
                    "-H",
                    "x-forwarded-for: 10.1.2.3",
                    "-H",
                    "x-secret-note: keep-me",
                    "-H",
                    "content-type: application/json",
                    "--data",
                    body,
                    &url,
                ],
            )
            .await
        }
    };
    let staged = send("push", matching).await;
    assert_eq!(
        staged.status,
        202,
        "{}",
        String::from_utf8_lossy(&staged.body)
    );
    let effect = staged.header("airlock-effect").expect("effect");
    let dev = send("push", r#"{"ref":"refs/heads/dev","forced":false}"#).await;
    assert_eq!(dev.status, 403);
    assert_eq!(dev.json()["rule"], "other-hooks");
    let ping = send("ping", matching).await;
    assert_eq!(ping.status, 403);

    // review = "auto": approved at once, still held until commit.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["state"], "approved");
    assert!(origin.received().is_empty());

    // redact: the admin view masks, the stored bytes do not change.
    let view = airlock
        .admin
        .get(&format!("/v1/effects/{effect}"))
        .await
        .expect("effect view");
    let text = view["body"]["text"].as_str().expect("text body");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("[redacted]"));
    let note = view["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .find(|h| h["name"] == "x-secret-note")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(note["value"], "[redacted]");
    // strip: gone before staging.
    assert!(!view["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .any(|h| h["name"] == "cookie" || h["name"] == "x-forwarded-for"));

    let report = airlock.commit(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].body,
        matching.as_bytes(),
        "released bytes unchanged"
    );
    assert_eq!(received[0].header("x-secret-note"), Some("keep-me"));
    assert_eq!(received[0].header("cookie"), None);
    assert_eq!(received[0].header("x-forwarded-for"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_429_and_413_naming_the_rule_and_strip_reaches_the_origin() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "slow-reads"
host = "127.0.0.1"
port = {port}
method = "read"
path = "/slow/**"
limit = {{ requests_per_minute = 2, query_bytes = 16 }}
strip = ["cookie"]
action = "pass"

[[rule]]
id = "small-uploads"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/upload"
limit = {{ body_bytes = 100, upload_bytes_per_run = 150 }}
action = "pass"
"#,
        header(port)
    );
    let (_airlock, _run, env) = fx.start_run(&policy, &[]).await;
    let slow = format!("https://127.0.0.1:{port}/slow/a");
    for _ in 0..2 {
        let out = curl(&env, &["-H", "cookie: a=b", &slow]).await;
        assert_eq!(out.status, 200);
    }
    let third = curl(&env, &[&slow]).await;
    assert_eq!(third.status, 429);
    let body = third.json();
    assert_eq!(body["rule"], "slow-reads");
    assert_eq!(body["limit"], "requests_per_minute");
    assert_eq!(body["reason_code"], "limit_requests_per_minute");
    assert_eq!(
        third.header("airlock-error").as_deref(),
        Some("limit_requests_per_minute")
    );
    for got in origin.received() {
        assert_eq!(got.header("cookie"), None, "strip removes the cookie");
    }

    let upload = format!("https://127.0.0.1:{port}/upload");
    let big = "x".repeat(101);
    let out = curl(&env, &["-X", "POST", "--data", &big, &upload]).await;
    assert_eq!(out.status, 413);
    assert_eq!(out.json()["limit"], "body_bytes");
    assert_eq!(out.json()["rule"], "small-uploads");
    let eighty = "y".repeat(80);
    let out = curl(&env, &["-X", "POST", "--data", &eighty, &upload]).await;
    assert_eq!(out.status, 200);
    let out = curl(&env, &["-X", "POST", "--data", &eighty, &upload]).await;
    assert_eq!(out.status, 413, "160 bytes in the run is over 150");
    assert_eq!(out.json()["limit"], "upload_bytes_per_run");
    let uploads = origin
        .received()
        .into_iter()
        .filter(|r| r.path == "/upload")
        .count();
    assert_eq!(uploads, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_scoped_rules_and_audit_rules() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "would-block-admin"
host = "127.0.0.1"
port = {port}
path = "/admin/**"
action = "deny"
mode = "audit"

[[rule]]
id = "ci-reads"
host = "127.0.0.1"
port = {port}
method = "read"
profiles = ["ci"]
action = "pass"
"#,
        header(port)
    );
    let airlock = fx.start(&policy, &[]);
    let (ci, ci_env) = create_run_with_profile(&airlock, "ci").await;
    let (_dev, dev_env) = create_run_with_profile(&airlock, "dev").await;
    let url = format!("https://127.0.0.1:{port}/admin/x");
    let out = curl(&ci_env, &[&url]).await;
    assert_eq!(out.status, 200, "the audit rule logs but does not decide");
    // ci-reads applies to ci runs only: a dev run's host is denied outright (the
    // CONNECT is answered, and the request inside gets the 403 with its reason).
    let out = curl(&dev_env, &[&url]).await;
    assert_eq!(
        out.status, 403,
        "a dev run must not get through: {}",
        out.stderr
    );
    assert_eq!(out.json()["reason_code"], "default_deny");
    assert_eq!(origin.received().len(), 1);
    assert!(
        airlock.log().contains("would-block-admin"),
        "audit line logged"
    );
    let recorded = poll_until(Duration::from_secs(10), || async {
        airlock
            .reads(&ci)
            .await?
            .iter()
            .any(|r| r["audit"][0] == "would-block-admin would deny (rule_deny)")
            .then_some(())
    })
    .await;
    assert!(recorded.is_some(), "the read records the audit match");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_in_audit_mode_passes_what_it_would_deny_and_says_so() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"
mode = "audit"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "no-deletes"
host = "127.0.0.1"
port = {port}
method = ["DELETE"]
action = "deny"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let url = format!("https://127.0.0.1:{port}/items/1");
    let out = curl(&env, &["-X", "DELETE", &url]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let out = curl(&env, &[&url]).await;
    assert_eq!(out.status, 200, "the default deny is audited too");
    assert_eq!(origin.received().len(), 2);
    let log = airlock.log();
    assert!(log.contains("audit") && log.contains("no-deletes"), "{log}");
    // The read names the rule that would have denied it.
    let found = poll_until(Duration::from_secs(10), || async {
        airlock
            .reads(&run)
            .await?
            .iter()
            .any(|r| {
                r["rule"] == "no-deletes"
                    && r["audit"][0] == "no-deletes would deny (rule_deny)"
                    && r["method"] == "DELETE"
            })
            .then_some(())
    })
    .await;
    assert!(found.is_some());
}

const PYTHON_MCP_CLIENT: &str = r#"
import sys, requests
url = sys.argv[1]
r = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=20)
print(r.status_code)
r = requests.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                             "params": {"name": "create_issue", "arguments": {"title": "t"}}}, timeout=20)
print(r.status_code)
print(r.headers.get("airlock-effect"))
print(r.json()["id"], r.json()["result"]["isError"])
"#;

/// The adapter of `run`'s first effect.
async fn effects_adapter(airlock: &airlock_tests::Airlock, run: &str) -> String {
    airlock.effects(run).await[0]["adapter"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_mcp_tool_calls_are_staged_by_tool_name_while_listing_passes() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "mcp-create"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/mcp"
jsonrpc = {{ method = "tools/call", tool = "create_*" }}
limit = {{ body_bytes = 65536 }}
action = "stage"

[[rule]]
id = "mcp-rest"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/mcp"
action = "pass"
"#,
        header(port)
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let out = airlock_tests::run_client_async(
        "python3",
        &[
            "-c",
            PYTHON_MCP_CLIENT,
            &format!("https://127.0.0.1:{port}/mcp"),
        ],
        &env,
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // The staged call is answered by the mcp adapter (a jsonrpc rule's default): a
    // JSON-RPC response, 200, not the webhook's 202 a streamable-HTTP client takes for
    // "no response" (issue 42).
    assert_eq!(lines[..2], ["200", "200"], "{stdout}");
    assert!(lines[2].starts_with("eff_"), "{stdout}");
    assert_eq!(
        lines[3], "2 False",
        "the response carries the call's id: {stdout}"
    );
    assert_eq!(effects_adapter(&airlock, &run).await, "mcp");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["rule"], "mcp-create");
    let received = origin.received();
    assert_eq!(received.len(), 1, "only tools/list reached the origin");
    assert!(String::from_utf8_lossy(&received[0].body).contains("tools/list"));
}
