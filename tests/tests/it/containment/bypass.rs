//! Case C22: clients that ignore the proxy variables, in the fence. Node 20's `fetch` and
//! `curl --noproxy` by name are captured and their writes staged; the same curl to a
//! literal IP gets `403 unresolved_address`; raw TCP to a port no rule names is closed
//! before any byte reaches the listener, and journaled.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use airlock_tests::{in_ci, ok_origin, Fixture};

use super::{
    denial, fence_or_skip, policy, requests, Fenced, FENCE_GUARD, HOST, NO_PROXY_VARIABLES,
};

/// `/usr/bin/node`'s version when it is Node 20, whose `fetch` ignores the proxy
/// variables (`NODE_USE_ENV_PROXY` arrived in 24 and 22.21). `None`, with a message,
/// when it is missing or another version outside CI; under CI either fails.
fn node20(test: &str) -> Option<String> {
    let node = Path::new("/usr/bin/node");
    let version = Command::new(node)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match version {
        Some(version) if version.starts_with("v20.") => Some(version),
        other => {
            let found = other.unwrap_or_else(|| "no /usr/bin/node".to_owned());
            assert!(
                !in_ci(),
                "{test} needs the machine's Node 20 at /usr/bin/node in CI: found {found}"
            );
            eprintln!(
                "SKIPPED {test}: it drives the machine's Node 20 at /usr/bin/node (a fetch that \
                 ignores proxy variables); found {found}"
            );
            None
        }
    }
}

/// Node 20's `fetch`: POSTs `argv[2]` and writes `{status, body}` to `argv[3]`, with the
/// proxy variables it could see.
const NODE_CLIENT: &str = r#"
const fs = require('fs');
const [url, out] = process.argv.slice(2);
const proxyVariables = Object.keys(process.env).filter(k => /proxy/i.test(k));
fetch(url, { method: 'POST', body: 'from node 20', headers: { 'content-type': 'text/plain' } })
  .then(async r => {
    const body = await r.json();
    fs.writeFileSync(out, JSON.stringify({ status: r.status, body, proxyVariables, node: process.version }));
  })
  .catch(e => { console.error('node fetch failed:', e, e.cause); process.exit(2); });
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_node20_fetch_without_proxy_variables_is_captured_and_staged() {
    let test = "case_c22_node20_fetch_without_proxy_variables_is_captured_and_staged";
    if !fence_or_skip(test) {
        return;
    }
    let Some(version) = node20(test) else { return };
    eprintln!("{test}: /usr/bin/node {version}");
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let client = fenced.helper("fetch.js", NODE_CLIENT);
    let script = format!(
        "{NO_PROXY_VARIABLES} /usr/bin/node {} https://{HOST}:{port}/hook node.json",
        client.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let node = fenced.json("node.json", &ran);
    assert_eq!(node["status"], 202, "{node:#}");
    assert_eq!(node["body"]["status"], "staged", "{node:#}");
    assert_eq!(
        node["proxyVariables"],
        serde_json::json!([]),
        "node ran with no proxy variable at all"
    );
    assert_eq!(ran.containment()["network"], "isolated");
    assert!(ran.count("connections_captured") >= 1, "{:#}", ran.report);
    assert_eq!(ran.count("proxy_connections"), 0, "{:#}", ran.report);
    assert!(ran.count("dns_answered") >= 1, "{:#}", ran.report);
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{:#}", ran.report);
    assert_eq!(effects[0]["state"], "staged");
    assert_eq!(effects[0]["url"], format!("https://{HOST}:{port}/hook"));
    assert!(
        origin.received().is_empty(),
        "staged: the origin got nothing"
    );

    let run = ran.run();
    for _ in 0..2 {
        let report = fenced.airlock.commit_pending(&run).await;
        assert_eq!(report["state"], "committed", "{report:#}");
    }
    let received = origin.received();
    assert_eq!(
        received.len(),
        1,
        "released exactly once: {:?}",
        requests(&origin)
    );
    assert_eq!(
        (received[0].method.as_str(), received[0].path.as_str()),
        ("POST", "/hook")
    );
    assert_eq!(received[0].body, b"from node 20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_curl_noproxy_by_name_is_staged_and_by_literal_ip_is_refused() {
    let test = "case_c22_curl_noproxy_by_name_is_staged_and_by_literal_ip_is_refused";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    // 1.2.3.4 is never dialed: inside the fence the connection is captured by airlock,
    // which refuses an address its DNS never gave (the guard stops the script otherwise).
    let script = format!(
        "env -u HTTPS_PROXY -u https_proxy curl --noproxy '*' -sS -o by-name.json -w '%{{http_code}}' \
           -X POST --data from-curl https://{HOST}:{port}/hook > by-name.code; \
         {FENCE_GUARD}; \
         env -u HTTPS_PROXY -u https_proxy curl --noproxy '*' -sS -o by-ip.json -w '%{{http_code}}' \
           -X POST --data to-an-ip https://1.2.3.4:{port}/hook > by-ip.code"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(fenced.read("by-name.code"), "202", "{}", ran.stderr());
    assert_eq!(fenced.json("by-name.json", &ran)["status"], "staged");
    assert_eq!(fenced.read("by-ip.code"), "403", "{}", ran.stderr());
    let refused = fenced.json("by-ip.json", &ran);
    assert_eq!(refused["reason_code"], "unresolved_address", "{refused:#}");
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("1.2.3.4:{port}"))),
        "the reason names the address: {refused:#}"
    );
    let denials = fenced.denials(&ran.run()).await;
    let journaled = denial(&denials, "CONNECT", &format!("tcp://1.2.3.4:{port}"));
    assert_eq!(journaled["reason_code"], "unresolved_address");
    assert!(ran.count("connections_refused") >= 1, "{:#}", ran.report);
    assert!(ran.count("connections_captured") >= 1, "{:#}", ran.report);
    assert_eq!(ran.count("proxy_connections"), 0, "{:#}", ran.report);
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(
        effects.len(),
        1,
        "only the POST by name is staged: {effects:#?}"
    );
    assert_eq!(effects[0]["url"], format!("https://{HOST}:{port}/hook"));
    assert!(origin.received().is_empty());

    let report = fenced.airlock.commit_pending(&ran.run()).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    let received = origin.received();
    assert_eq!(received.len(), 1, "{:?}", requests(&origin));
    assert_eq!(
        received[0].body, b"from-curl",
        "the refused POST never left"
    );
}

/// A raw TCP listener on the host's 127.0.0.1 that counts connections and greets each
/// with a banner (so a client that reached it would see `RAW-ORIGIN`).
async fn raw_listener() -> (u16, Arc<AtomicUsize>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind raw listener");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(b"RAW-ORIGIN banner\r\n").await;
        }
    });
    (port, accepted)
}

/// A raw TCP client: connects to `argv[1]:argv[2]`, sends an SSH banner, reads until the
/// connection closes, and writes `{connected, received, closed}` or `{error}` to `argv[3]`.
const RAW_CLIENT: &str = r#"
import json, socket, sys
host, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    s = socket.create_connection((host, port), timeout=20)
    s.sendall(b"SSH-2.0-agent\r\n")
    got = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    result = {"connected": True, "received": got.decode("latin-1"), "closed": True}
except OSError as e:
    result = {"connected": False, "error": type(e).__name__, "errno": e.errno}
json.dump(result, open(out, "w"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_raw_tcp_to_a_port_no_rule_names_is_refused_and_journaled() {
    let test = "case_c22_raw_tcp_to_a_port_no_rule_names_is_refused_and_journaled";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (raw_port, accepted) = raw_listener().await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    let client = fenced.helper("raw.py", RAW_CLIENT);
    let client = client.display();
    // The name is allowed on the origin's port only; the raw listener's port is named by
    // no rule. The same port on 127.0.0.1 is the fence's own loopback.
    let script = format!(
        "python3 {client} {HOST} {raw_port} by-name.json; \
         python3 {client} 127.0.0.1 {raw_port} loopback.json"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let by_name = fenced.json("by-name.json", &ran);
    assert_eq!(by_name["connected"], true, "{by_name:#}");
    assert_eq!(by_name["closed"], true, "airlock closed the connection");
    assert!(
        !by_name["received"]
            .as_str()
            .unwrap_or_default()
            .contains("RAW-ORIGIN"),
        "the client never reached the listener: {by_name:#}"
    );
    let loopback = fenced.json("loopback.json", &ran);
    assert_eq!(
        loopback["error"], "ConnectionRefusedError",
        "127.0.0.1 in the fence is the fence's own: {loopback:#}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the raw listener saw nothing"
    );
    let denials = fenced.denials(&ran.run()).await;
    let journaled = denial(&denials, "CONNECT", &format!("https://{HOST}:{raw_port}"));
    assert_eq!(journaled["reason_code"], "default_deny", "{journaled:#}");
    assert!(ran.count("connections_refused") >= 1, "{:#}", ran.report);
    assert!(origin.received().is_empty());
}
