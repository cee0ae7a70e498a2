//! The official MCP SDKs as real servers and clients: the Python SDK (`mcp` 1.x from
//! PyPI) as `tests/mcp/server.py` (FastMCP over streamable HTTP and TLS on 127.0.0.1) and
//! `tests/mcp/client.py`, and the TypeScript SDK (`@modelcontextprotocol/sdk` 1.x from
//! npm) as `tests/mcp/client.mjs`. `.ci/run` installs the Python SDK in a venv and names
//! its interpreter in `AIRLOCK_TEST_MCP_PYTHON`, and the TypeScript SDK in a directory it
//! names in `AIRLOCK_TEST_MCP_NODE_DIR`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{in_ci, OriginCa};

/// The Python that has the SDK: `AIRLOCK_TEST_MCP_PYTHON`, else `python3` when it can
/// import `mcp.server.fastmcp`. `None` (the test prints that it skipped) when neither
/// has it, except under CI, where it panics: `.ci/run` installs the SDK.
pub fn python(test: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os("AIRLOCK_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let has_sdk = Command::new(&candidate)
        .args([
            "-c",
            "import mcp.server.fastmcp, mcp.client.streamable_http",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_sdk {
        return Some(candidate);
    }
    assert!(
        !in_ci(),
        "{test}: {} cannot import the MCP SDK; .ci/run installs it (AIRLOCK_TEST_MCP_PYTHON)",
        candidate.display()
    );
    eprintln!(
        "SKIPPED {test}: no MCP Python SDK (pip install 'mcp>=1.30,<2', then set AIRLOCK_TEST_MCP_PYTHON)"
    );
    None
}

/// The directory whose `node_modules` holds the TypeScript SDK:
/// `AIRLOCK_TEST_MCP_NODE_DIR`. `None` (the test prints that it skipped) when it is unset
/// or lacks the SDK, except under CI, where it panics: `.ci/run` installs the SDK.
pub fn node_sdk(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("AIRLOCK_TEST_MCP_NODE_DIR").map(PathBuf::from);
    if let Some(dir) = dir.filter(|d| {
        d.join("node_modules/@modelcontextprotocol/sdk/package.json")
            .is_file()
    }) {
        return Some(dir);
    }
    assert!(
        !in_ci(),
        "{test}: AIRLOCK_TEST_MCP_NODE_DIR names no directory with @modelcontextprotocol/sdk; .ci/run installs it"
    );
    eprintln!(
        "SKIPPED {test}: no MCP TypeScript SDK (npm install @modelcontextprotocol/sdk@1 in DIR, then set AIRLOCK_TEST_MCP_NODE_DIR=DIR)"
    );
    None
}

/// The directory of the SDK scripts (`tests/mcp`).
pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp")
}

/// The SDK's server, its TLS files and its call log, in `dir`; killed on drop.
pub struct SdkServer {
    /// The program and its arguments before the port (the interpreter and the script).
    command: Vec<std::ffi::OsString>,
    /// Environment the server needs (`MCP_SDK_DIR` for the TypeScript one).
    env: Vec<(String, PathBuf)>,
    dir: PathBuf,
    /// The port it listens on (127.0.0.1), the same after [`SdkServer::restart`].
    pub port: u16,
    /// Whether it speaks the deprecated HTTP+SSE transport.
    legacy: bool,
    child: Option<Child>,
}

impl SdkServer {
    /// Starts `server.py` with a leaf of `ca` on a free loopback port and waits (at most
    /// 30 s) until it accepts connections.
    pub fn start(python: &Path, ca: &OriginCa, dir: &Path) -> Self {
        let command = vec![python.into(), scripts().join("server.py").into()];
        Self::start_with(command, Vec::new(), ca, dir, false)
    }

    /// The TypeScript SDK's server (`server.mjs`: `McpServer` over streamable HTTP, the
    /// same tools and call log as `server.py`), run by `node` with the SDK in
    /// `sdk/node_modules`.
    pub fn start_typescript(node: &Path, sdk: &Path, ca: &OriginCa, dir: &Path) -> Self {
        let command = vec![node.into(), scripts().join("server.mjs").into()];
        let env = vec![("MCP_SDK_DIR".to_owned(), sdk.to_owned())];
        Self::start_with(command, env, ca, dir, false)
    }

    /// [`SdkServer::start`] over the deprecated HTTP+SSE transport (MCP 2024-11-05): the
    /// event stream at `GET /sse`, messages posted to `/messages/?session_id=…`.
    pub fn start_legacy(python: &Path, ca: &OriginCa, dir: &Path) -> Self {
        let command = vec![python.into(), scripts().join("server.py").into()];
        Self::start_with(command, Vec::new(), ca, dir, true)
    }

    fn start_with(
        command: Vec<std::ffi::OsString>,
        env: Vec<(String, PathBuf)>,
        ca: &OriginCa,
        dir: &Path,
        legacy: bool,
    ) -> Self {
        let (cert, key) = ca.leaf_pem().expect("leaf certificate");
        std::fs::write(dir.join("mcp-leaf.pem"), cert).expect("write leaf");
        std::fs::write(dir.join("mcp-leaf.key"), key).expect("write key");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut server = Self {
            command,
            env,
            dir: dir.to_owned(),
            port,
            legacy,
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("mcp-server.log"))
            .expect("server log");
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg(self.port.to_string())
            .arg(self.dir.join("mcp-leaf.pem"))
            .arg(self.dir.join("mcp-leaf.key"))
            .arg(self.calls_path())
            .args(self.legacy.then_some("sse"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the MCP server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the MCP server did not listen in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server and starts it again on the same port: every MCP session it held
    /// is gone.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn calls_path(&self) -> PathBuf {
        self.dir.join("mcp-calls.jsonl")
    }

    /// The tool calls the server carried out, in order: `{tool, arguments, session,
    /// client}` each.
    pub fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.calls_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for SdkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `node` of version 24 or later for the TypeScript SDK's scripts ([`crate::node24`]:
/// Node 24 reads the run's proxy because the run's environment sets `NODE_USE_ENV_PROXY`).
/// `None` (the test prints that it skipped) when there is none, except under CI, where it
/// panics: `.ci/run` provides one.
pub fn node(test: &str) -> Option<PathBuf> {
    let node = crate::node24();
    if node.is_none() {
        assert!(!in_ci(), "{test}: no node 24+; .ci/run provides one");
        eprintln!("SKIPPED {test}: no node 24+ (NODE_USE_ENV_PROXY)");
    }
    node
}

/// Runs the SDK script `script` (in [`scripts`]) with `program` and `args`, configured
/// only by the run's environment `env` (plus `PATH`, `HOME` = `home`, and `MCP_SDK_DIR` =
/// `sdk` for the TypeScript scripts), for at most 90 s. Asserts it exited 0 (its stderr
/// and the server log in `home` in the message) and returns the JSON it printed.
pub async fn run_script(
    program: &Path,
    script: &str,
    args: &[String],
    home: &Path,
    env: &std::collections::BTreeMap<String, String>,
    sdk: Option<&Path>,
) -> Value {
    let mut client = tokio::process::Command::new(program);
    client
        .arg(scripts().join(script))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env)
        .envs(sdk.map(|dir| ("MCP_SDK_DIR", dir)))
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), client.output())
        .await
        .unwrap_or_else(|_| panic!("the SDK's {script} hung"))
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed (a call waits at most 20 s): {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(home.join("mcp-server.log")).unwrap_or_default()
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
