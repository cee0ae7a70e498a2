//! Issue 42 inside the fence: the official MCP SDKs' clients (Python, `tests/mcp/client.py`,
//! and TypeScript, `tests/mcp/client.mjs`) under `airlock run --network isolated`,
//! configured by nothing but the fence, against the Python SDK's FastMCP server at
//! [`HOST`]: the staged `tools/call`s are answered at once (structured content, a
//! placeholder number the next call uses), and at commit the restarted server carries
//! each out once in a session airlock opened. Env mode: `adapters::mcp_sdk`.

use airlock_tests::mcp_sdk::{node_sdk, python, scripts, SdkServer};
use airlock_tests::Fixture;

use super::{fence_or_skip, suite_user, Fenced, FENCE_GUARD, HOST};
use crate::adapters::mcp_sdk::{check_client, check_released, policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_inside_the_fence_gets_a_result_for_a_staged_call_released_once() {
    let test = "containment::mcp_sdk";
    if !fence_or_skip(test) {
        return;
    }
    if suite_user().is_some() {
        // The SDK's venv links to root's Python (pyenv, under /root), which the user
        // cannot read; the fence itself is the same for both (containment::user).
        eprintln!("SKIPPED {test}: the MCP SDK's Python is root's");
        return;
    }
    let Some(python) = python(test) else {
        return;
    };
    let fx = Fixture::new();
    let mut server = SdkServer::start(&python, &fx.origin_ca, fx.dir.path());
    let port = server.port;
    let fenced = Fenced::start(fx, &policy(HOST, port));
    let script = format!(
        "{FENCE_GUARD}; '{}' '{}' https://{HOST}:{port}/mcp > mcp.json",
        python.display(),
        scripts().join("client.py").display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let printed = fenced.json("mcp.json", &ran);
    check_client(&printed);
    let calls = server.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "get_status");
    let client_session = printed["session"].as_str().expect("session id").to_owned();
    server.restart();
    let run = ran.run();
    fenced.airlock.commit_pending(&run).await;
    check_released(&server, &client_session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_inside_the_fence_gets_a_result_for_a_staged_call_released_once() {
    let test = "containment::mcp_sdk (TypeScript)";
    if !fence_or_skip(test) {
        return;
    }
    if suite_user().is_some() {
        eprintln!("SKIPPED {test}: the MCP SDKs' installs are root's");
        return;
    }
    let (Some(python), Some(sdk)) = (python(test), node_sdk(test)) else {
        return;
    };
    let fx = Fixture::new();
    let mut server = SdkServer::start(&python, &fx.origin_ca, fx.dir.path());
    let port = server.port;
    let fenced = Fenced::start(fx, &policy(HOST, port));
    let script = format!(
        "{FENCE_GUARD}; MCP_SDK_DIR='{}' /usr/bin/node '{}' https://{HOST}:{port}/mcp > mcp.json",
        sdk.display(),
        scripts().join("client.mjs").display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let printed = fenced.json("mcp.json", &ran);
    check_client(&printed);
    let client_session = printed["session"].as_str().expect("session id").to_owned();
    server.restart();
    fenced.airlock.commit_pending(&ran.run()).await;
    check_released(&server, &client_session).await;
}
