//! Issue 42: a server-assigned id nested in a tool's structured result
//! (`{"issue": {"number": …, "html_url": …}}`, as the tool's `outputSchema` says) is
//! answered as a placeholder, so a later call that carries it depends on the staged call
//! and is released with the real value; reviewers read the tool and its arguments in
//! `airlock show` and on the effect page, not the JSON-RPC envelope.

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Reply};
use serde_json::{json, Value};

use crate::ui::{get, sign_in, text};

/// The documented MCP rules on 127.0.0.1:`port` (`adapters::mcp_sdk::policy`).
fn policy(port: u16) -> String {
    super::mcp_sdk::policy("127.0.0.1", port)
}

/// The output schemas of the server's two tools, as pydantic writes nested models.
fn tools() -> Value {
    json!([
        {"name": "create_issue", "inputSchema": {"type": "object"}, "outputSchema": {
            "type": "object",
            "$defs": {"Issue": {"type": "object", "properties": {
                "number": {"type": "integer"},
                "html_url": {"type": "string", "format": "uri"},
                "title": {"type": "string"}}, "required": ["number", "html_url", "title"]}},
            "properties": {"issue": {"$ref": "#/$defs/Issue"}}, "required": ["issue"]}},
        {"name": "create_comment", "inputSchema": {"type": "object"}, "outputSchema": {
            "type": "object",
            "properties": {"comment": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "required": ["comment"]}}
    ])
}

/// A streamable-HTTP MCP server: issue 7, comment 70.
fn server() -> airlock_tests::Handler {
    Arc::new(move |req| {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let id = body["id"].clone();
        let result = match (body["method"].as_str(), body["params"]["name"].as_str()) {
            (Some("initialize"), _) => {
                json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "tracker", "version": "1"}})
            }
            (Some("tools/list"), _) => json!({"tools": tools()}),
            (Some("tools/call"), Some("create_issue")) => json!({
                "content": [{"type": "text", "text": "issue 7"}], "isError": false,
                "structuredContent": {"issue": {"number": 7, "html_url": "https://tracker.test/issues/7", "title": body["params"]["arguments"]["title"]}}}),
            (Some("tools/call"), Some("create_comment")) => json!({
                "content": [{"type": "text", "text": "comment 70"}], "isError": false,
                "structuredContent": {"comment": {"id": 70}}}),
            _ => return Reply::json(202, &Value::Null),
        };
        let mut reply = Reply::json(200, &json!({"jsonrpc": "2.0", "id": id, "result": result}));
        if body["method"] == "initialize" {
            reply.headers.push(("mcp-session-id".into(), "s-1".into()));
        }
        reply
    })
}

async fn rpc(
    env: &std::collections::BTreeMap<String, String>,
    url: &str,
    message: &Value,
) -> Value {
    let body = message.to_string();
    let out = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
            "--data-binary",
            &body,
            url,
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{}", String::from_utf8_lossy(&out.body));
    out.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_nested_in_structured_content_links_a_later_call_and_is_real_at_commit() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), server())
        .await
        .expect("MCP server");
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    let url = format!("https://127.0.0.1:{port}/mcp");
    rpc(
        &env,
        &url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "curl-agent", "version": "1"}}}),
    )
    .await;
    rpc(
        &env,
        &url,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let issue = rpc(
        &env,
        &url,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "create_issue", "arguments": {"title": "flaky test"}}}),
    )
    .await;
    let staged = &issue["result"]["structuredContent"]["issue"];
    let number = staged["number"]
        .as_i64()
        .expect("a number in the nested object");
    assert_ne!(
        number, 7,
        "a placeholder, not the server's value: {issue:#}"
    );
    assert!(staged["html_url"].is_string(), "{issue:#}");
    assert!(staged["title"].is_string(), "{issue:#}");
    let comment = rpc(
        &env,
        &url,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "create_comment", "arguments": {"issue": number, "body": "seen in CI"}}}),
    )
    .await;
    assert!(
        comment["result"]["structuredContent"]["comment"]["id"].is_i64(),
        "{comment:#}"
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 2, "{effects:#?}");
    let (first, second) = (
        effects[0]["id"].as_str().expect("id").to_owned(),
        effects[1]["id"].as_str().expect("id").to_owned(),
    );
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{second}"))
        .await
        .expect("effect");
    assert_eq!(
        shown["depends_on"][0]["effect"],
        first.as_str(),
        "the comment depends on the issue through the nested placeholder: {shown:#}"
    );

    // Reviewers read the tool and its arguments.
    let (ok, out, err) = crate::cli::cli(&fx, &["show", &first]);
    assert!(ok, "{err}");
    assert!(out.contains("server   tracker (127.0.0.1:"), "{out}");
    assert!(
        out.contains(r#"tool     create_issue {"title":"flaky test"}"#),
        "{out}"
    );
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = sign_in(&airlock.admin_url, token.trim()).await;
    let page = text(
        &get(
            &format!("{}/effects/{second}", airlock.admin_url),
            Some(&cookie),
        )
        .await,
    );
    assert!(page.contains("Tool call"), "{page}");
    assert!(page.contains("<code>create_comment</code>"), "{page}");
    assert!(
        page.contains("&quot;body&quot;: &quot;seen in CI&quot;"),
        "{page}"
    );

    // At commit the comment carries the issue's real number.
    for effect in [&first, &second] {
        airlock.approve(effect).await;
    }
    let report = airlock.commit(&run).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    let released: Vec<Value> = origin
        .received()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|b| b["method"] == "tools/call")
        .collect();
    assert_eq!(released.len(), 2, "{released:#?}");
    assert_eq!(released[0]["params"]["name"], "create_issue");
    assert_eq!(released[1]["params"]["name"], "create_comment");
    assert_eq!(
        released[1]["params"]["arguments"]["issue"], 7,
        "{released:#?}"
    );
}
