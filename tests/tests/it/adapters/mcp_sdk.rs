//! Issue 42 with the official MCP Python SDK (`mcp` 1.x, PyPI) on both ends, through
//! `airlock serve` in env mode (the client is configured only by the run's environment):
//! the SDK's client gets a result for a staged `tools/call` at once instead of hanging,
//! with structured content of the tool's output schema whose `number` is a placeholder,
//! a second call on that number depends on the first, reviewers see
//! `mcp SERVER.TOOL {arguments}`, and at commit the SDK's FastMCP server,
//! restarted in between so the client's session is gone, carries each call out once (the
//! comment on the real number), in sessions airlock opened with the client's own
//! `clientInfo`. The same in
//! `--network isolated`: `containment::mcp_sdk`.

use std::time::Duration;

use airlock_tests::mcp_sdk::{node, node_sdk, python, run_script, SdkServer};
use airlock_tests::{poll_until, Fixture};
use serde_json::Value;

/// Reads pass on the server's `/mcp`; `tools/call` of `create_*` is staged. `host` is the
/// name the client uses.
pub(crate) fn policy(host: &str, port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "mcp-writes"
host = "{host}"
port = {port}
method = ["POST"]
path = "/mcp"
jsonrpc = {{ method = "tools/call", tool = "create_*" }}
action = "stage"

[[rule]]
id = "mcp"
host = "{host}"
port = {port}
path = "/mcp"
action = "pass"
"#
    )
}

/// What `client.py` printed, checked: the read's answer came from the server, the
/// staged call's from airlock, neither an error.
pub(crate) fn check_client(out: &Value) {
    assert_eq!(out["server"], "issues", "{out:#}");
    assert_eq!(
        out["tools"],
        serde_json::json!(["get_status", "create_issue", "create_comment"])
    );
    assert_eq!(out["calls"]["get_status"]["text"], "all green", "{out:#}");
    let staged = &out["calls"]["create_issue"];
    assert_eq!(staged["isError"], false, "{out:#}");
    let text = staged["text"].as_str().unwrap_or_default();
    assert!(text.contains("staged by airlock"), "{out:#}");
    // The tool has an output schema (from tools/list): the SDK checks the answer has
    // structured content of its shape.
    let structured = &staged["structured"];
    assert!(structured["number"].is_i64(), "{out:#}");
    assert!(structured["title"].is_string(), "{out:#}");
    // The number is airlock's placeholder, not the server's 7, and the comment on it was
    // staged too.
    assert_ne!(structured["number"], 7, "{out:#}");
    assert_eq!(out["calls"]["create_comment"]["isError"], false, "{out:#}");
    assert!(
        out["calls"]["create_comment"]["structured"]["id"].is_i64(),
        "{out:#}"
    );
}

/// After the commit: the server carried `create_issue` and then `create_comment` out
/// exactly once each, the comment on the issue's real number (7), in sessions that are
/// not the client's (`client_session`), opened as the client (`sdk-agent`).
pub(crate) async fn check_released(server: &SdkServer, client_session: &str) {
    let calls = poll_until(Duration::from_secs(20), || async {
        let calls = server.calls();
        calls
            .iter()
            .any(|c| c["tool"] == "create_comment")
            .then_some(calls)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "create_comment never reached the server: {:?}",
            server.calls()
        )
    });
    let written: Vec<&Value> = calls.iter().filter(|c| c["tool"] != "get_status").collect();
    assert_eq!(written.len(), 2, "{calls:?}");
    assert_eq!(written[0]["tool"], "create_issue", "{calls:?}");
    assert_eq!(written[0]["arguments"]["title"], "flaky test");
    assert_eq!(written[1]["tool"], "create_comment", "{calls:?}");
    assert_eq!(
        written[1]["arguments"]["issue"], 7,
        "the real number: {calls:?}"
    );
    for call in written {
        assert_eq!(call["client"], "sdk-agent", "{calls:?}");
        let session = call["session"].as_str().unwrap_or_default();
        assert!(
            !session.is_empty() && session != client_session,
            "{calls:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_gets_a_result_for_a_staged_call_and_the_restarted_server_gets_it_once() {
    let Some(python) = python("adapters::mcp_sdk") else {
        return;
    };
    let fx = Fixture::new();
    let mut server = SdkServer::start(&python, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy("127.0.0.1", server.port), &[]).await;
    let url = format!("https://127.0.0.1:{}/mcp", server.port);
    let printed = run_script(&python, "client.py", &[url], fx.dir.path(), &env, None).await;
    check_client(&printed);
    // The read reached the server in the client's session; the write did not.
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "get_status");
    let client_session = printed["session"].as_str().expect("session id").to_owned();
    assert_eq!(calls[0]["session"], client_session.as_str());
    // Reviewers see the tool and its arguments.
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(
        effects[0]["summary"],
        r#"mcp issues.create_issue {"title":"flaky test"}"#
    );
    let comment = effects[1]["summary"].as_str().unwrap_or_default();
    assert!(
        comment.starts_with("mcp issues.create_comment"),
        "{comment}"
    );
    // The server forgets every session; the commit opens one of its own.
    server.restart();
    let report = airlock.commit_pending(&run).await;
    check_released(&server, &client_session).await;
    let effects = airlock.effects(&run).await;
    for effect in &effects {
        assert_eq!(effect["state"], "released", "{report:#}\n{effects:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_in_env_mode_gets_a_result_for_a_staged_call_and_the_restarted_server_gets_it_once(
) {
    let test = "adapters::mcp_sdk (TypeScript)";
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
    let mut server = SdkServer::start(&python, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy("127.0.0.1", server.port), &[]).await;
    let url = format!("https://127.0.0.1:{}/mcp", server.port);
    let printed = run_script(&node, "client.mjs", &[url], fx.dir.path(), &env, Some(&sdk)).await;
    check_client(&printed);
    let client_session = printed["session"].as_str().expect("session id").to_owned();
    let effects = airlock.effects(&run).await;
    assert_eq!(
        effects[0]["summary"],
        r#"mcp issues.create_issue {"title":"flaky test"}"#
    );
    server.restart();
    airlock.commit_pending(&run).await;
    check_released(&server, &client_session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_server_gets_each_staged_call_once_in_a_session_airlock_opened() {
    // The TypeScript SDK's McpServer (one transport per session, sessions in memory) as
    // the origin, the Python SDK's client as the agent.
    let test = "adapters::mcp_sdk (TypeScript server)";
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
    let mut server = SdkServer::start_typescript(&node, &sdk, &fx.origin_ca, fx.dir.path());
    let (airlock, run, env) = fx.start_run(&policy("127.0.0.1", server.port), &[]).await;
    let url = format!("https://127.0.0.1:{}/mcp", server.port);
    let printed = run_script(&python, "client.py", &[url], fx.dir.path(), &env, None).await;
    check_client(&printed);
    let client_session = printed["session"].as_str().expect("session id").to_owned();
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["session"], client_session.as_str());
    server.restart();
    let report = airlock.commit_pending(&run).await;
    check_released(&server, &client_session).await;
    for effect in airlock.effects(&run).await {
        assert_eq!(effect["state"], "released", "{report:#}\n{effect:#}");
    }
}
