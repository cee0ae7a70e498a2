//! Issue 42: the `mcp` adapter. Through a stage rule with a `jsonrpc` matcher and no
//! `respond`, a staged MCP `tools/call` gets a JSON-RPC response with its own `id` (as JSON,
//! or as one server-sent event when the client accepts only a stream), a notification gets
//! `202` with no body, `initialize` and `tools/list` pass; reviewers see
//! `mcp SERVER.TOOL {arguments}`; and at commit each call reaches the MCP server once, in a
//! session airlock opened for it (`initialize` with the client's parameters,
//! `notifications/initialized`, the call, `DELETE`).

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Reply};
use serde_json::{json, Value};

/// The documented MCP rules on 127.0.0.1:`port` (`adapters::mcp_sdk::policy`).
fn policy(port: u16) -> String {
    super::mcp_sdk::policy("127.0.0.1", port)
}

/// A streamable-HTTP MCP server's answers: `initialize` (with a new `Mcp-Session-Id`
/// each time, `s-1`, `s-2`, …), `tools/list`, and `tools/call`.
fn server() -> airlock_tests::Handler {
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Arc::new(move |req| {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let id = body["id"].clone();
        match body["method"].as_str() {
            Some("initialize") => {
                let n = sessions.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let mut reply = Reply::json(
                    200,
                    &json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "issues", "version": "1"}}}),
                );
                reply
                    .headers
                    .push(("mcp-session-id".into(), format!("s-{n}")));
                reply
            }
            Some("tools/list") => Reply::json(
                200,
                &json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": "create_issue", "inputSchema": {"type": "object"}}]}}),
            ),
            Some("tools/call") => Reply::json(
                200,
                &json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "created issue #7"}], "isError": false}}),
            ),
            _ => Reply::json(202, &Value::Null),
        }
    })
}

async fn rpc(
    env: &std::collections::BTreeMap<String, String>,
    url: &str,
    accept: &str,
    message: &Value,
) -> airlock_tests::CurlResult {
    let body = message.to_string();
    curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
            &format!("accept: {accept}"),
            "-H",
            "mcp-session-id: s-1",
            "--data-binary",
            &body,
            url,
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_mcp_tool_call_is_answered_with_its_id_and_released_once_at_commit() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), server())
        .await
        .expect("MCP server");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    let url = format!("https://127.0.0.1:{port}/mcp");
    let both = "application/json, text/event-stream";
    // initialize and tools/list pass to the server.
    let init = rpc(
        &env,
        &url,
        both,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
            "clientInfo": {"name": "curl-agent", "version": "9.1"}}}),
    )
    .await;
    assert_eq!(init.status, 200);
    assert_eq!(init.json()["result"]["serverInfo"]["name"], "issues");
    let list = rpc(
        &env,
        &url,
        both,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(list.json()["result"]["tools"][0]["name"], "create_issue");
    // The staged call: a JSON-RPC response with its id, not a bare 202.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "create_issue", "arguments": {"title": "flaky test", "labels": ["ci"]}}});
    let staged = rpc(&env, &url, both, &call).await;
    assert_eq!(staged.status, 200, "{}", staged.headers);
    assert!(
        staged
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{}",
        staged.headers
    );
    let answer = staged.json();
    assert_eq!(answer["jsonrpc"], "2.0");
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["result"]["isError"], false);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.contains("staged by airlock"), "{text}");
    // A client that takes only a stream gets one event carrying the response.
    let streamed = rpc(
        &env,
        &url,
        "text/event-stream",
        &json!({"jsonrpc": "2.0", "id": "four", "method": "tools/call", "params": {"name": "create_label", "arguments": {"name": "ci"}}}),
    )
    .await;
    assert_eq!(streamed.status, 200);
    assert!(
        streamed
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{}",
        streamed.headers
    );
    let events = String::from_utf8_lossy(&streamed.body).into_owned();
    let data = events
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("an event with data: {events}"));
    let event: Value = serde_json::from_str(data).expect("JSON in the event");
    assert_eq!(event["id"], "four");
    // Nothing reached the server but initialize and tools/list.
    let methods = |origin: &Origin| -> Vec<String> {
        origin
            .received()
            .iter()
            .map(|r| {
                let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                body["method"].as_str().unwrap_or("").to_owned()
            })
            .collect()
    };
    assert_eq!(methods(&origin), ["initialize", "tools/list"]);
    // Reviewers see the tool and its arguments.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 2);
    let summary = effects[0]["summary"].as_str().unwrap_or("");
    assert_eq!(
        summary,
        r#"mcp issues.create_issue {"labels":["ci"],"title":"flaky test"}"#
    );
    assert_eq!(effects[0]["adapter"], "mcp");
    // At commit each call reaches the server once.
    for effect in &effects {
        airlock.approve(effect["id"].as_str().expect("id")).await;
    }
    airlock.commit(&run).await;
    // Each call in a session of its own: initialize with the client's recorded
    // parameters, notifications/initialized and the call under the new session id.
    let received = origin.received();
    let released: Vec<(String, String, Option<String>)> = received[2..]
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            (
                body["method"].as_str().unwrap_or("").to_owned(),
                body["params"]["name"].as_str().unwrap_or("").to_owned(),
                r.header("mcp-session-id").map(str::to_owned),
            )
        })
        .collect();
    let expected: Vec<(String, String, Option<String>)> = [
        ("initialize", "", None),
        ("notifications/initialized", "", Some("s-2")),
        ("tools/call", "create_issue", Some("s-2")),
        ("initialize", "", None),
        ("notifications/initialized", "", Some("s-3")),
        ("tools/call", "create_label", Some("s-3")),
    ]
    .iter()
    .map(|(m, t, s)| ((*m).to_owned(), (*t).to_owned(), s.map(str::to_owned)))
    .collect();
    assert_eq!(released, expected);
    let first_init: Value = serde_json::from_slice(&received[2].body).expect("JSON");
    assert_eq!(
        first_init["params"]["clientInfo"],
        json!({"name": "curl-agent", "version": "9.1"})
    );
    assert_eq!(first_init["params"]["capabilities"], json!({"roots": {}}));
    let call = received
        .iter()
        .find(|r| {
            r.header("mcp-session-id") == Some("s-2")
                && r.body.windows(9).any(|w| w == b"tools/cal")
        })
        .expect("the released call");
    assert_eq!(call.header("mcp-protocol-version"), Some("2025-06-18"));
    // Each session is closed with DELETE (sent after the call's answer, in the background).
    let mut deleted = Vec::new();
    for _ in 0..200 {
        deleted = origin
            .received()
            .iter()
            .filter(|r| r.method == "DELETE")
            .filter_map(|r| r.header("mcp-session-id").map(str::to_owned))
            .collect();
        if deleted.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    deleted.sort();
    assert_eq!(deleted, ["s-2", "s-3"]);
    // The origin's answer is the release's.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects[0]["state"], "released", "{}", effects[0]);
    assert!(
        effects[0]["released"]["answer"]["excerpt"]
            .as_str()
            .is_some_and(|e| e.contains("created issue #7")),
        "{}",
        effects[0]
    );
}

/// `airlock policy check FILE`: exit success, stdout, stderr.
fn policy_check(policy: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, policy).expect("policy");
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .args(["policy", "check"])
        .arg(&file)
        .output()
        .expect("run airlock");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 42 item 4: the documented MCP rule (a `jsonrpc` stage rule without
/// `limit.body_bytes`, then a pass rule for the rest of the host) decides as written, so
/// `policy check` accepts it and prints the body-limit note as a warning; a rule that
/// truly cannot decide (behind one that matches everything it could) still fails it.
#[test]
fn policy_check_accepts_the_documented_mcp_rule_and_still_refuses_a_rule_that_cannot_decide() {
    let (ok, out, err) = policy_check(&policy(8443));
    assert!(
        ok,
        "policy check refused the documented MCP rule:\n{out}\n{err}"
    );
    let note = out
        .lines()
        .find(|l| l.contains("mcp-writes") && l.contains("limit.body_bytes"))
        .unwrap_or_else(|| panic!("no body-limit note for mcp-writes:\n{out}"));
    assert!(note.contains("warning"), "{note}");
    assert!(out.contains("0 lint(s)"), "{out}");
    // The same rules in the other order: the pass rule matches every POST the stage rule
    // could, so the stage rule never decides anything.
    let swapped = r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "mcp"
host = "127.0.0.1"
port = 8443
path = "/mcp"
action = "pass"

[[rule]]
id = "mcp-writes"
host = "127.0.0.1"
port = 8443
method = ["POST"]
path = "/mcp"
jsonrpc = { method = "tools/call", tool = "create_*" }
action = "stage"
"#;
    let (ok, out, err) = policy_check(swapped);
    assert!(
        !ok,
        "policy check accepted a rule that never decides:\n{out}"
    );
    assert!(
        err.contains("1 rule(s) can never decide a request"),
        "{err}"
    );
    assert!(
        out.contains("rule \"mcp-writes\" (#2): never reached"),
        "{out}"
    );
}
