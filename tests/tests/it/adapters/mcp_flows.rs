//! Issue 42, flows and tool calls, with the official MCP Python SDK on both ends through
//! `airlock serve` in env mode: the agent reads a labelled secret, then files it as an
//! issue's title through an MCP `tools/call`. A `block` flow holds the staged call, so it
//! is rejected at commit and never reaches the server; the same call to the host the flow
//! names in `except` (the agent's "model", here the server reached as `localhost`) is
//! not judged and is released once. The client got a result at once both times.

use std::sync::Arc;

use airlock_tests::mcp_sdk::{python, run_script, SdkServer};
use airlock_tests::{Fixture, Origin, Received, Reply};
use serde_json::{json, Value};

/// The key the vault serves (its JSON answer is the issue's title).
const KEY: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc9f3Q2xZk";

/// The vault (labelled `secret`), the MCP server as `127.0.0.1` and as `localhost` (each
/// staging `create_*` and passing the rest), and a block flow excepting `localhost`.
fn policy(vault: u16, port: u16) -> String {
    let mut text = format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "vault-read"
host = "127.0.0.1"
port = {vault}
method = "read"
action = "pass"
labels = ["secret"]

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
except = ["localhost"]
min_overlap_bytes = 24
action = "block"
reason = "secrets never leave for outside hosts"
"#
    );
    for host in ["127.0.0.1", "localhost"] {
        text.push_str(&format!(
            r#"
[[rule]]
id = "mcp-writes-{host}"
host = "{host}"
port = {port}
method = ["POST"]
path = "/mcp"
jsonrpc = {{ method = "tools/call", tool = "create_*" }}
action = "stage"

[[rule]]
id = "mcp-{host}"
host = "{host}"
port = {port}
path = "/mcp"
action = "pass"
"#
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_blocks_a_tool_call_carrying_a_labelled_read_and_spares_the_except_host() {
    let Some(python) = python("adapters::mcp_flows") else {
        return;
    };
    let fx = Fixture::new();
    let vault = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::json(200, &json!({"service": "payments", "api_key": KEY}))),
    )
    .await
    .expect("vault");
    let server = SdkServer::start(&python, &fx.origin_ca, fx.dir.path());
    let text = policy(vault.addr().port(), server.port);
    let (airlock, run, env) = fx.start_run(&text, &[]).await;
    let vault_url = format!("https://127.0.0.1:{}/v1/secret", vault.addr().port());
    for host in ["127.0.0.1", "localhost"] {
        let args = [
            format!("https://{host}:{}/mcp", server.port),
            format!("--title-from={vault_url}"),
        ];
        let printed = run_script(&python, "client.py", &args, fx.dir.path(), &env, None).await;
        let staged = &printed["calls"]["create_issue"];
        assert_eq!(staged["isError"], false, "{printed:#}");
        assert!(
            staged["text"]
                .as_str()
                .unwrap_or_default()
                .contains("staged by airlock"),
            "{printed:#}"
        );
    }
    // Nothing written reached the server while staged.
    assert!(server.calls().iter().all(|c| c["tool"] == "get_status"));
    let effects = airlock.effects(&run).await;
    let issue_via = |host: &str| -> Value {
        effects
            .iter()
            .find(|e| {
                e["summary"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("mcp issues.create_issue"))
                    && e["url"].as_str().is_some_and(|u| u.contains(host))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no create_issue via {host}: {effects:#?}"))
    };
    let judged = issue_via("127.0.0.1");
    let spared = issue_via("localhost");
    let report = airlock.commit_pending(&run).await;
    let shown = |id: &Value| {
        let id = id.as_str().unwrap_or_default().to_owned();
        let airlock = &airlock;
        async move {
            airlock
                .admin
                .get(&format!("/v1/effects/{id}"))
                .await
                .expect("effect")
        }
    };
    let judged = shown(&judged["id"]).await;
    let spared = shown(&spared["id"]).await;
    assert_eq!(judged["state"], "rejected", "{report:#}\n{judged:#}");
    assert_eq!(spared["state"], "released", "{report:#}\n{spared:#}");
    // The server filed the secret once: the call to the except host.
    let issues: Vec<Value> = server
        .calls()
        .into_iter()
        .filter(|c| c["tool"] == "create_issue")
        .collect();
    assert_eq!(issues.len(), 1, "{issues:?}");
    let title = issues[0]["arguments"]["title"].as_str().unwrap_or_default();
    assert!(title.contains(KEY), "{issues:?}");
}
