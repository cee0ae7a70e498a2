//! Support for airlock's end-to-end tests: spawn the real `airlock` binary on loopback,
//! start loopback origins, and run real clients (curl, python, openssl) configured only by
//! a run's environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod review;

pub use airlock::client::{AdminClient, ClientError};
pub use airlock_origin::{Handler, Origin, OriginCa, Received, Reply};
use anyhow::{bail, Context as _};
use serde_json::Value;

mod clients;
pub mod git_http;
pub mod github;
pub mod lineage_corpus;
pub mod mcp_sdk;
mod origins;
pub mod strace;
pub mod tunnel;
pub mod user;

pub use clients::{curl, curl_blocking, node24, run_client, run_client_async, CurlResult};
pub use origins::{ok_origin, slow_text_origin, text_origin};
pub use tunnel::{connect_tunnel, tls_trusting};

/// The `airlock` binary under test: `$AIRLOCK_BIN`, or `target/<profile>/airlock` beside
/// this test executable (built by `cargo test --workspace`, which builds the `airlock`
/// package's binary for its own integration tests).
pub fn airlock_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("AIRLOCK_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    // target/<profile>/deps/it-<hash> -> target/<profile>/airlock
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executables live in target/<profile>/deps");
    let bin = profile_dir.join("airlock");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds the airlock binary) or set AIRLOCK_BIN",
        bin.display()
    );
    bin
}

/// A throwaway directory, an origin CA, and a policy file: what one test's airlock needs.
pub struct Fixture {
    /// Holds every file of the test; removed on drop.
    pub dir: tempfile::TempDir,
    /// The CA origins use; airlock trusts it through `--upstream-ca`.
    pub origin_ca: OriginCa,
}

impl Fixture {
    /// A fresh directory and origin CA.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let origin_ca = OriginCa::new().expect("origin CA");
        std::fs::write(dir.path().join("origin-ca.pem"), origin_ca.cert_pem())
            .expect("write origin CA");
        Self { dir, origin_ca }
    }

    /// The data directory airlock uses.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes `policy` and starts airlock with it (extra `args` appended to `serve`).
    pub fn start(&self, policy: &str, args: &[&str]) -> Airlock {
        self.start_with_env(policy, args, &[])
    }

    /// Like [`Fixture::start`], with `env` added to airlock's own environment (how a test
    /// hands airlock credential values; the test process's environment is never changed).
    pub fn start_with_env(&self, policy: &str, args: &[&str], env: &[(&str, &str)]) -> Airlock {
        let policy_path = self.dir.path().join("policy.toml");
        std::fs::write(&policy_path, policy).expect("write policy");
        Airlock::spawn_with_env(
            &self.data_dir(),
            &policy_path,
            &self.dir.path().join("origin-ca.pem"),
            args,
            env,
        )
        .expect("airlock starts")
    }
}

impl Fixture {
    /// Writes `policy` and starts airlock as the unprivileged `user`
    /// ([`user::test_user`]) with HOME `DIR/home`: the fixture's directory (the data
    /// directory, the workspace a test makes there) becomes the user's first.
    pub fn start_as(&self, policy: &str, args: &[&str], user: &user::TestUser) -> Airlock {
        let policy_path = self.dir.path().join("policy.toml");
        std::fs::write(&policy_path, policy).expect("write policy");
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(self.data_dir()).expect("data directory");
        user::give(self.dir.path(), user);
        Airlock::spawn_as(
            &self.data_dir(),
            &policy_path,
            &self.dir.path().join("origin-ca.pem"),
            args,
            user,
            &home,
        )
        .expect("airlock starts as the test user")
    }

    /// Like [`Fixture::start`], then creates a run; returns airlock, the run's id and its
    /// environment.
    pub async fn start_run(
        &self,
        policy: &str,
        args: &[&str],
    ) -> (Airlock, String, BTreeMap<String, String>) {
        let airlock = self.start(policy, args);
        let (run, env) = airlock.create_run().await;
        (airlock, run, env)
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

/// A policy that passes reads and stages POST/PUT/PATCH/DELETE on 127.0.0.1 (any port),
/// with loopback allowed.
pub fn loopback_policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "forbidden"
host = "127.0.0.1"
port = {port}
path = "/forbidden/**"
action = "deny"
reason = "nothing under /forbidden leaves"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "127.0.0.1"
port = {port}
method = "write"
action = "stage"
"#
    )
}

/// A running `airlock serve` process.
pub struct Airlock {
    child: Option<Child>,
    data: PathBuf,
    policy: PathBuf,
    upstream_ca: PathBuf,
    args: Vec<String>,
    /// The proxy listener, `127.0.0.1:PORT`.
    pub proxy: String,
    /// The admin client.
    pub admin: AdminClient,
    /// The admin base URL.
    pub admin_url: String,
    /// Variables added to airlock's environment.
    env: Vec<(String, String)>,
    /// The unprivileged user it runs as (uid, gid, home), when not the test's own.
    user: Option<(u32, u32, PathBuf)>,
}

impl Drop for Airlock {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Airlock {
    /// Starts `airlock serve` on ephemeral loopback ports and waits until it listens.
    pub fn spawn(
        data: &Path,
        policy: &Path,
        upstream_ca: &Path,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::spawn_with_env(data, policy, upstream_ca, args, &[])
    }

    /// [`Airlock::spawn`] with `env` added to airlock's environment.
    pub fn spawn_with_env(
        data: &Path,
        policy: &Path,
        upstream_ca: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut airlock = Self {
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            child: None,
            data: data.to_owned(),
            policy: policy.to_owned(),
            upstream_ca: upstream_ca.to_owned(),
            args: args.iter().map(|s| s.to_string()).collect(),
            proxy: String::new(),
            admin: AdminClient::new("http://127.0.0.1:1", ""),
            admin_url: String::new(),
            user: None,
        };
        airlock.boot()?;
        Ok(airlock)
    }

    /// [`Airlock::spawn`] as the unprivileged `user` (the test is root): the data
    /// directory's parent must be the user's ([`user::give`]); HOME is `home`.
    pub fn spawn_as(
        data: &Path,
        policy: &Path,
        upstream_ca: &Path,
        args: &[&str],
        user: &user::TestUser,
        home: &Path,
    ) -> anyhow::Result<Self> {
        let mut airlock = Self {
            env: Vec::new(),
            child: None,
            data: data.to_owned(),
            policy: policy.to_owned(),
            upstream_ca: upstream_ca.to_owned(),
            args: args.iter().map(|s| s.to_string()).collect(),
            proxy: String::new(),
            admin: AdminClient::new("http://127.0.0.1:1", ""),
            admin_url: String::new(),
            user: Some((user.uid, user.gid, home.to_owned())),
        };
        airlock.boot()?;
        Ok(airlock)
    }

    fn boot(&mut self) -> anyhow::Result<()> {
        let addresses = self.data.join("addresses.json");
        let _ = std::fs::remove_file(&addresses);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))?;
        let mut command = match &self.user {
            Some((uid, gid, home)) => {
                use std::os::unix::process::CommandExt as _;
                let mut command = Command::new(user::user_bin());
                command.uid(*uid).gid(*gid).env("HOME", home);
                command.env_remove("XDG_RUNTIME_DIR");
                command
            }
            None => Command::new(airlock_bin()),
        };
        let child = command
            .arg("serve")
            .arg("--data")
            .arg(&self.data)
            .arg("--policy")
            .arg(&self.policy)
            // A control instance has no proxy listener and refuses --listen.
            .args(
                if self.args.iter().any(|a| a == "--listen") || self.is_control() {
                    &[][..]
                } else {
                    &["--listen", "127.0.0.1:0"][..]
                },
            )
            .args(if self.args.iter().any(|a| a == "--admin") {
                &[][..]
            } else {
                &["--admin", "127.0.0.1:0"][..]
            })
            .arg("--upstream-ca")
            .arg(&self.upstream_ca)
            .args(&self.args)
            .env("AIRLOCK_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawn airlock")?;
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = std::fs::read_to_string(&addresses) {
                if let Ok(value) = serde_json::from_str::<Value>(&text) {
                    if value["pid"].as_u64() == Some(u64::from(pid)) {
                        self.proxy = value["proxy"].as_str().unwrap_or_default().to_owned();
                        self.admin_url = value["admin"].as_str().unwrap_or_default().to_owned();
                        let token = std::fs::read_to_string(self.data.join("admin.token"))?;
                        self.admin = AdminClient::new(&self.admin_url, token.trim());
                        return Ok(());
                    }
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "airlock exited with {status} before listening; log: {}",
                    self.log()
                );
            }
            if Instant::now() > deadline {
                bail!("airlock did not start within 20 s; log: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether this airlock runs `--role control` (so it has no proxy listener).
    fn is_control(&self) -> bool {
        self.args
            .windows(2)
            .any(|pair| pair[0] == "--role" && pair[1] == "control")
            || self.args.iter().any(|a| a == "--role=control")
    }

    /// The running airlock's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// airlock's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default()
    }

    /// Kills the process with SIGKILL (no chance to clean up) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit; returns its status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGKILLs the process and starts it again on the same data directory.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.boot()
    }

    /// The CA file clients must trust.
    pub fn ca_file(&self) -> PathBuf {
        self.data.join("ca.pem")
    }

    /// Creates a run; returns `(id, env)`.
    pub async fn create_run(&self) -> (String, BTreeMap<String, String>) {
        let run = self.admin.post("/v1/runs", None).await.expect("create run");
        let env = run["env"]
            .as_object()
            .expect("env block")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        (run["id"].as_str().expect("run id").to_owned(), env)
    }

    /// The token of a run (from its proxy URL).
    pub async fn run_token(&self, run: &str) -> String {
        let env = self
            .admin
            .get(&format!("/v1/runs/{run}/env"))
            .await
            .expect("env");
        let url = env["env"]["HTTPS_PROXY"]
            .as_str()
            .expect("proxy url")
            .to_owned();
        url.trim_start_matches("http://")
            .split('@')
            .next()
            .and_then(|creds| creds.split(':').nth(1))
            .expect("token in proxy url")
            .to_owned()
    }

    /// A run's effects (summaries), in staging order.
    pub async fn effects(&self, run: &str) -> Vec<Value> {
        let list = self
            .admin
            .get(&format!("/v1/runs/{run}/effects"))
            .await
            .expect("effects");
        list["effects"].as_array().cloned().unwrap_or_default()
    }

    /// A run's reads (the admin API's `/v1/runs/{run}/reads`), or `None` when the call
    /// fails or the answer has no list: made for [`poll_until`] probes.
    pub async fn reads(&self, run: &str) -> Option<Vec<Value>> {
        let reads = self
            .admin
            .get(&format!("/v1/runs/{run}/reads"))
            .await
            .ok()?;
        reads["reads"].as_array().cloned()
    }

    /// Approves a staged effect (panics when the admin API refuses).
    pub async fn approve(&self, effect: &str) -> Value {
        self.post(&format!("/v1/effects/{effect}/approve"), None)
            .await
            .expect("approve")
    }

    /// Commits a run as decided so far: `POST /v1/runs/{run}/commit` with no body; returns
    /// the report (panics when the admin API refuses).
    pub async fn commit(&self, run: &str) -> Value {
        self.post(&format!("/v1/runs/{run}/commit"), None)
            .await
            .expect("commit")
    }

    /// Commits a run approving every pending effect, bound to the effects listed just
    /// before ([`Airlock::approve_pending_body`]); returns the report (panics when the
    /// admin API refuses).
    pub async fn commit_pending(&self, run: &str) -> Value {
        let body = self.approve_pending_body(run).await;
        self.post(&format!("/v1/runs/{run}/commit"), Some(body))
            .await
            .expect("commit")
    }

    /// The body of a commit that approves the run's pending effects as they are listed
    /// now: `{"approve_pending": true, "expect": …}`, the `expect` of `GET
    /// /v1/runs/{run}/effects`.
    pub async fn approve_pending_body(&self, run: &str) -> Value {
        let listed = self
            .admin
            .get(&format!("/v1/runs/{run}/effects"))
            .await
            .expect("effects");
        serde_json::json!({"approve_pending": true, "expect": listed["expect"]})
    }

    /// `POST path` on the admin API, returning the JSON or the error.
    pub async fn post(&self, path: &str, body: Option<Value>) -> Result<Value, ClientError> {
        self.admin.post(path, body).await
    }
}

/// Polls `check` every 20 ms until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// Calls `probe` every 20 ms until it yields a value or `timeout` passes.
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `state` of each effect in a commit report, in order.
pub fn effect_states(report: &Value) -> Vec<Value> {
    report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].clone())
        .collect()
}

pub use airlock_origin::TEST_HOST;

/// Whether the tests run under CI (`CI` set, not empty, `false` or `0`): there a test whose
/// tool is missing fails instead of skipping, since `.ci/run` installs every tool.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}
