//! Issue 37 item 3: WebSocket messages are judged by flows. After a read labelled `secret`
//! under a `block` flow, a client message that carries the secret is never forwarded: the
//! client gets a Close 1008 naming `flow_blocked`, the refusal is journaled as a
//! `WEBSOCKET` denial, and an ordinary message on the same kind of connection is echoed.

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Received, Reply};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::{echo_origin_logging, tunnel};

/// The credential-looking key the vault serves.
const KEY: &str = "sk_live_9fQ2xZk4eC39HqLyjWDarjtT1zdp7dc";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_message_carrying_a_labelled_read_is_refused_by_a_block_flow() {
    let fx = Fixture::new();
    let vault = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|_: &Received| Reply::json(200, &json!({"service": "payments", "api_key": KEY}))),
    )
    .await
    .expect("vault");
    let (ws_port, _seen, messages) = echo_origin_logging(None).await;
    let vault_port = vault.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "vault-read"
host = "127.0.0.1"
port = {vault_port}
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "ws-pass"
host = "127.0.0.1"
port = {ws_port}
method = "read"
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
action = "block"
reason = "secrets never leave for outside hosts"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{ws_port}");

    let read = curl(
        &env,
        &[&format!("https://127.0.0.1:{vault_port}/v1/secret")],
    )
    .await;
    assert_eq!(read.status, 200, "the labelled read passes");
    assert!(String::from_utf8_lossy(&read.body).contains(KEY));

    let stream = tunnel(&airlock, &run, &token, &authority).await;
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{authority}/chat"), stream)
        .await
        .expect("the handshake passes: its URL and headers carry nothing guarded");
    ws.send(Message::text("status: build green"))
        .await
        .expect("send");
    assert_eq!(
        ws.next().await.and_then(Result::ok),
        Some(Message::text("status: build green")),
        "an ordinary message is echoed"
    );
    ws.send(Message::text(format!(r#"{{"debug": "key is {KEY}"}}"#)))
        .await
        .expect("send");
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1008, "a policy close code");
            assert!(
                frame.reason.starts_with("flow_blocked"),
                "the reason names the flow's code: {}",
                frame.reason
            );
        }
        other => panic!("expected a Close 1008, got {other:?}"),
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        *messages.lock().expect("messages"),
        vec!["status: build green".to_owned()],
        "the origin never received the key"
    );

    // The refusal is journaled as a denial of the run.
    let found = airlock_tests::poll_until(std::time::Duration::from_secs(10), || async {
        let list = airlock
            .admin
            .get(&format!("/v1/runs/{run}/denials"))
            .await
            .ok()?;
        list["denials"]
            .as_array()?
            .iter()
            .find(|d| d["method"] == "WEBSOCKET")
            .cloned()
    })
    .await
    .expect("a WEBSOCKET denial is journaled");
    assert_eq!(found["reason_code"], "flow_blocked", "{found:#}");
    assert_eq!(found["rule"], "ws-pass", "{found:#}");
    assert_eq!(
        found["url"],
        format!("http://{authority}/chat"),
        "{found:#}"
    );
}
