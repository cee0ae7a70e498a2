//! Issue 42, the deprecated HTTP+SSE transport (MCP 2024-11-05), with the official SDKs
//! (FastMCP's `sse_app` as the server; the Python SDK's `sse_client` and the TypeScript
//! SDK's `SSEClientTransport` as clients) through `airlock serve` in env mode: results arrive on the client's event stream, not in the POST's answer,
//! and airlock could not release a call it staged there, so a rule that stages one
//! refuses it. The client's call ends at once with a JSON-RPC error injected into its
//! stream (code -32003, the denial as `data`), never hangs; the server never receives
//! it; nothing is staged; the refusal is journaled; reads on the same stream still work.

use airlock_tests::mcp_sdk::{node, node_sdk, python, run_script, SdkServer};
use airlock_tests::Fixture;
use serde_json::Value;

/// Everything on the server passes, except `tools/call` of `create_*` posted to the
/// legacy message URL, which is staged.
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
path = "/messages/"
jsonrpc = {{ method = "tools/call", tool = "create_*" }}
action = "stage"

[[rule]]
id = "mcp"
host = "127.0.0.1"
port = {port}
action = "pass"
"#
    )
}

/// Checks what a client printed (`printed`), what the server received, and what airlock
/// kept.
async fn refused(printed: &Value, server: &SdkServer, airlock: &airlock_tests::Airlock, run: &str) {
    // Reads over the stream work: initialize, tools/list, a read tool.
    assert_eq!(printed["server"], "issues", "{printed:#}");
    assert_eq!(
        printed["calls"]["get_status"]["text"], "all green",
        "{printed:#}"
    );
    // The staged call got a readable JSON-RPC error at once.
    let error = &printed["calls"]["create_issue"]["error"];
    assert_eq!(error["code"], -32003, "{printed:#}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("deprecated HTTP+SSE transport"),
        "{printed:#}"
    );
    assert_eq!(
        error["data"]["reason_code"], "mcp_legacy_transport",
        "{printed:#}"
    );
    assert_eq!(error["data"]["rule"], "mcp-writes", "{printed:#}");
    assert!(error["data"]["manifest"].is_string(), "{printed:#}");
    assert!(error["data"]["hint"].is_string(), "{printed:#}");
    // No number came back, so no second call was made.
    assert!(printed["calls"]["create_comment"].is_null(), "{printed:#}");
    // The server carried out the reads only.
    let calls = server.calls();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c["tool"] == "get_status"),
        "{calls:?}"
    );
    // Nothing was staged; each refusal is journaled.
    assert!(airlock.effects(run).await.is_empty());
    let denials = airlock
        .admin
        .get(&format!("/v1/runs/{run}/denials"))
        .await
        .expect("denials");
    let codes: Vec<&str> = denials["denials"]
        .as_array()
        .map(|d| d.iter().filter_map(|d| d["reason_code"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        !codes.is_empty() && codes.iter().all(|c| *c == "mcp_legacy_transport"),
        "{denials:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_staged_over_the_legacy_sse_transport_is_refused_in_the_stream_and_never_sent()
{
    let Some(python) = python("adapters::mcp_legacy") else {
        return;
    };
    let fx = Fixture::new();
    let server = SdkServer::start_legacy(&python, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy(server.port), &[]).await;
    let url = format!("https://127.0.0.1:{}/sse", server.port);
    let args = [url, "sse".to_owned()];
    let printed = run_script(&python, "client.py", &args, fx.dir.path(), &env, None).await;
    refused(&printed, &server, &airlock, &run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_over_the_legacy_sse_transport_gets_the_refusal_in_its_stream() {
    let test = "adapters::mcp_legacy (TypeScript)";
    let Some(python) = python(test) else {
        return;
    };
    let Some(sdk) = node_sdk(test) else {
        return;
    };
    let Some(node) = node(test) else {
        return;
    };
    let fx = Fixture::new();
    let server = SdkServer::start_legacy(&python, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy(server.port), &[]).await;
    let url = format!("https://127.0.0.1:{}/sse", server.port);
    let args = [url, "sse".to_owned()];
    let printed = run_script(&node, "client.mjs", &args, fx.dir.path(), &env, Some(&sdk)).await;
    refused(&printed, &server, &airlock, &run).await;
}
