//! Case C22 (docs/cases.md): `airlock run --network isolated|env|offline`, the fence. An
//! agent that walks around the proxy variables — `curl --noproxy`, Node 20's `fetch`,
//! Java's `HttpClient`, raw sockets, DNS, UDP, root tampering with the namespace — still
//! reaches the world only through airlock: writes are staged, unknown addresses and names
//! are refused and journaled, and nothing reaches a loopback origin on the host by any
//! other route.
//!
//! This file is the harness (the fence probe, [`Fenced`], [`Ran`], the policy); the tests
//! are in its submodules, one concern each:
//!
//! - `clients`: git, Python requests, pip and `CONNECT`, unchanged inside the fence;
//! - `bypass`: clients that ignore the proxy variables (Node 20's `fetch`, `curl
//!   --noproxy`, raw TCP);
//! - `java`: Java's `HttpClient` in the fence, and under `env` through the run's bound port;
//! - `dns`: airlock's DNS in the fence, and UDP;
//! - `escapes`: root inside the fence (rules, routes, PID 1, `/proc`, `nsenter`);
//! - `record`: `offline`, the run record, leftovers and each step's counts;
//! - `operator`: a fence an operator builds in front of `airlock serve --transparent`;
//! - `root`: root inside is not root outside (issue 35): sysctls, SysV IPC, writes outside
//!   the workspace, the probe's marker, the command's host uid and the workspace's owner;
//! - `root_writes`: under root, caches and installs land in the run's layer; `--keep-outside`;
//! - `user`: the same fence as an ordinary user (serve and run as the user `.ci/run` makes).
//!
//! Each test starts `airlock serve` (the `Airlock` fixture, `--resolve origin.test=127.0.0.1`)
//! and runs `airlock run --admin URL --token T --network MODE -- sh -c SCRIPT` with a clean
//! environment; the script writes what its clients saw to files in the workspace. The
//! origins listen on the host's 127.0.0.1, which inside the fence is not reachable: the
//! fence's 127.0.0.0/8 is its own loopback.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use airlock_tests::{airlock_bin, in_ci, ok_origin, Airlock, Fixture, Origin, TEST_HOST};
use serde_json::Value;

mod bypass;
mod clients;
mod dns;
mod escapes;
mod java;
mod limits;
mod mcp_sdk;
mod operator;
mod record;
mod root;
mod root_writes;
mod user;

/// The name the origins are reached by inside the fence: airlock's server answers it with
/// 127.0.0.1 (`--resolve`), and its DNS gives the fenced command a pool address for it.
const HOST: &str = TEST_HOST;

/// Shell words that drop every proxy variable for the client that follows (`env -u …`).
const NO_PROXY_VARIABLES: &str = "env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy \
     -u ALL_PROXY -u all_proxy -u NO_PROXY -u no_proxy -u NODE_USE_ENV_PROXY \
     -u npm_config_proxy -u npm_config_https_proxy";

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

/// The user the whole suite runs airlock as, when `AIRLOCK_TEST_FENCE_USER` names one
/// (`.ci/run` runs the suite a second time so, as `airlock-ci`): every [`Fenced`] then
/// starts `airlock serve` and `airlock run` as that user, and the tests of root's fence
/// skip. Panics when the variable names no usable user.
fn suite_user() -> Option<airlock_tests::user::TestUser> {
    static USER: OnceLock<Option<airlock_tests::user::TestUser>> = OnceLock::new();
    USER.get_or_init(|| {
        let name = std::env::var("AIRLOCK_TEST_FENCE_USER").ok()?;
        let user = airlock_tests::user::named(&name)
            .unwrap_or_else(|why| panic!("AIRLOCK_TEST_FENCE_USER={name}: {why}"));
        Some(user)
    })
    .clone()
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
    /// The unprivileged user `airlock serve` and `airlock run` run as (`as_user`).
    user: Option<airlock_tests::user::TestUser>,
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
    /// After [`fence_or_skip`]: a `200 {"ok":true}` HTTPS origin and airlock with
    /// [`policy`] for its port; `None` when `test` is skipped.
    async fn with_ok_origin(test: &str) -> Option<(Self, Origin)> {
        if !fence_or_skip(test) {
            return None;
        }
        let fx = Fixture::new();
        let origin = ok_origin(&fx.origin_ca).await;
        let fenced = Self::start(fx, &policy(origin.addr().port()));
        Some((fenced, origin))
    }

    /// Starts airlock with `policy`, answering [`HOST`] with 127.0.0.1.
    fn start(fx: Fixture, policy: &str) -> Self {
        Self::start_with(fx, policy, &[])
    }

    /// [`Fenced::start`] with `args` added to `airlock serve`; as [`suite_user`] when the
    /// suite runs as an ordinary user.
    fn start_with(fx: Fixture, policy: &str, args: &[&str]) -> Self {
        if let Some(user) = suite_user() {
            return Self::start_as_with(fx, policy, user, args);
        }
        let resolve = format!("{HOST}=127.0.0.1");
        let mut all = vec!["--resolve", &resolve];
        all.extend(args);
        let airlock = fx.start(policy, &all);
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
            user: None,
        }
    }

    /// Starts airlock with `policy` as the unprivileged `user` (the test is root), with
    /// the workspace and HOME the user's.
    fn start_as(fx: Fixture, policy: &str, user: airlock_tests::user::TestUser) -> Self {
        Self::start_as_with(fx, policy, user, &[])
    }

    /// [`Fenced::start_as`] with `args` added to `airlock serve`.
    fn start_as_with(
        fx: Fixture,
        policy: &str,
        user: airlock_tests::user::TestUser,
        args: &[&str],
    ) -> Self {
        let resolve = format!("{HOST}=127.0.0.1");
        let mut all = vec!["--resolve", &resolve];
        all.extend(args);
        let ws = fx.dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("workspace");
        let airlock = fx.start_as(policy, &all, &user);
        let token = std::fs::read_to_string(fx.data_dir().join("admin.token"))
            .expect("admin token")
            .trim()
            .to_owned();
        Self {
            fx,
            airlock,
            ws,
            token,
            user: Some(user),
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
        let mut command = match &self.user {
            Some(user) => {
                use std::os::unix::process::CommandExt as _;
                let mut command = Command::new(airlock_tests::user::user_bin());
                command.uid(user.uid).gid(user.gid);
                command
            }
            None => Command::new(airlock_bin()),
        };
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
