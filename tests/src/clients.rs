//! Real clients (curl, python, any program) run with only a run's environment, and what
//! curl answered.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs a program with exactly `env` added to a minimal environment (PATH, HOME), so the
/// client is configured only by the run's environment.
pub fn run_client(program: &str, args: &[&str], env: &BTreeMap<String, String>) -> Output {
    let mut command = Command::new(program);
    command.args(args).env_clear();
    for key in ["PATH", "HOME", "LANG"] {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command.envs(env);
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// Runs curl with the run's environment on a blocking thread (so loopback origins in the
/// test's runtime keep serving).
pub async fn curl(env: &BTreeMap<String, String>, args: &[&str]) -> CurlResult {
    let env = env.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl_blocking(&env, &args)
    })
    .await
    .expect("curl task")
}

/// Runs a client program on a blocking thread; see [`run_client`].
pub async fn run_client_async(
    program: &str,
    args: &[&str],
    env: &BTreeMap<String, String>,
) -> Output {
    let env = env.clone();
    let program = program.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_client(&program, &args, &env)
    })
    .await
    .expect("client task")
}

/// Runs curl with the run's environment; returns its status code, body and headers from
/// `-w`/`-D` output.
pub fn curl_blocking(env: &BTreeMap<String, String>, args: &[&str]) -> CurlResult {
    let dir = tempfile::tempdir().expect("tempdir");
    let headers = dir.path().join("headers");
    let body = dir.path().join("body");
    let mut all = vec![
        "-sS",
        "--max-time",
        "30",
        "-D",
        headers.to_str().expect("utf-8 path"),
        "-o",
        body.to_str().expect("utf-8 path"),
        "-w",
        "%{http_code}",
    ];
    all.extend_from_slice(args);
    let out = run_client("curl", &all, env);
    let status: u16 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    CurlResult {
        status,
        body: std::fs::read(&body).unwrap_or_default(),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
    }
}

/// What curl saw.
#[derive(Debug)]
pub struct CurlResult {
    /// The final status code (0 when there was none).
    pub status: u16,
    /// The final response body.
    pub body: Vec<u8>,
    /// Every response head curl received (CONNECT's included), raw.
    pub headers: String,
    /// curl's stderr.
    pub stderr: String,
    /// curl exited 0.
    pub success: bool,
}

impl CurlResult {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The value of `name` in the last response head (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        let last = self
            .headers
            .split("\r\n\r\n")
            .filter(|h| !h.trim().is_empty())
            .last()?;
        last.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// A `node` of version 24 or later (whose fetch honours `NODE_USE_ENV_PROXY`, which
/// `airlock env` sets): the one on PATH, or the one `.ci/run` unpacks under
/// `$CARGO_TARGET_DIR/node24`.
pub fn node24() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let candidates = [
        PathBuf::from("node"),
        target.join("node24/package/bin/node"),
    ];
    candidates.into_iter().find(|node| {
        Command::new(node)
            .args([
                "-e",
                "process.exit(+process.versions.node.split('.')[0] >= 24 ? 0 : 1)",
            ])
            .status()
            .is_ok_and(|s| s.success())
    })
}
