//! Issue 42, the deprecated HTTP+SSE transport (MCP 2024-11-05), with the official SDKs
//! (FastMCP's `sse_app` as the server; the Python SDK's `sse_client` and the TypeScript
//! SDK's `SSEClientTransport` as clients) through `airlock serve` in env mode: results arrive on the client's event stream, not in the POST's answer,
//! and airlock could not release a call it staged there, so a rule that stages one
//! refuses it. The client's call ends at once with a JSON-RPC error injected into its
//! stream (code -32003, the denial as `data`), never hangs; the server never receives
//! it; nothing is staged; the refusal is journaled; reads on the same stream still work.

use std::time::Duration;

use airlock_tests::mcp_sdk::{node_sdk, python, scripts, SdkServer};
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

/// Runs the client `command` (the run's environment only, and `sdk` as `MCP_SDK_DIR`
/// for the TypeScript client) and checks what it printed, what the server received, and
/// what airlock kept.
async fn refused(
    mut client: tokio::process::Command,
    sdk: Option<&std::path::Path>,
    server: &SdkServer,
    airlock: &airlock_tests::Airlock,
    run: &str,
    home: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
) {
    client
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env)
        .envs(sdk.map(|dir| ("MCP_SDK_DIR", dir)))
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), client.output())
        .await
        .expect("the SDK's client hung")
        .expect("run the client");
    assert!(
        out.status.success(),
        "the client failed (a call waits at most 20 s): {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(home.join("mcp-server.log")).unwrap_or_default()
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
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
    let mut client = tokio::process::Command::new(&python);
    client
        .arg(scripts().join("client.py"))
        .arg(format!("https://127.0.0.1:{}/sse", server.port))
        .arg("sse");
    refused(client, None, &server, &airlock, &run, fx.dir.path(), &env).await;
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
    let Some(node) = airlock_tests::node24() else {
        assert!(
            !airlock_tests::in_ci(),
            "{test}: no node 24+; .ci/run provides one"
        );
        eprintln!("SKIPPED {test}: no node 24+ (NODE_USE_ENV_PROXY)");
        return;
    };
    let fx = Fixture::new();
    let server = SdkServer::start_legacy(&python, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy(server.port), &[]).await;
    let mut client = tokio::process::Command::new(&node);
    client
        .arg(scripts().join("client.mjs"))
        .arg(format!("https://127.0.0.1:{}/sse", server.port))
        .arg("sse");
    refused(
        client,
        Some(&sdk),
        &server,
        &airlock,
        &run,
        fx.dir.path(),
        &env,
    )
    .await;
}
