//! Issue 42: the `mcp` adapter. Through a stage rule with a `jsonrpc` matcher and no
//! `respond`, a staged MCP `tools/call` gets a JSON-RPC response with its own `id` (as JSON,
//! or as one server-sent event when the client accepts only a stream), a notification gets
//! `202` with no body, `initialize` and `tools/list` pass; reviewers see the tool and its
//! arguments; and the call reaches the MCP server once, at commit.

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Reply};
use serde_json::{json, Value};

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "mcp-writes"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/mcp"
jsonrpc = {{ method = "tools/call", tool = "create_*" }}
action = "stage"

[[rule]]
id = "mcp"
host = "127.0.0.1"
port = {port}
path = "/mcp"
action = "pass"
"#
    )
}

/// A streamable-HTTP MCP server's answers: `initialize`, `tools/list`, and `tools/call`.
fn server() -> airlock_tests::Handler {
    Arc::new(|req| {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let id = body["id"].clone();
        match body["method"].as_str() {
            Some("initialize") => Reply::json(
                200,
                &json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "issues", "version": "1"}}}),
            ),
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
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
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
    assert!(
        summary.contains("create_issue") && summary.contains("flaky test"),
        "{summary}"
    );
    assert_eq!(effects[0]["adapter"], "mcp");
    // At commit each call reaches the server once.
    for effect in &effects {
        airlock.approve(effect["id"].as_str().expect("id")).await;
    }
    airlock.commit(&run).await;
    assert_eq!(
        methods(&origin),
        ["initialize", "tools/list", "tools/call", "tools/call"]
    );
}
