//! The proxies under test as child processes, their CPU time and memory from `/proc`, and
//! airlock's admin API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::process::{Child, Command};

use crate::load::Route;
use crate::BoxError;

/// CPU time (utime + stime) of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    cpu_seconds_of(&format!("/proc/{pid}/stat"))
}

/// utime + stime of a `stat` file (a process's or a thread's), in seconds.
fn cpu_seconds_of(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return f64::NAN;
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / clock_ticks_per_second()
}

/// Context switches of `pid` so far, voluntary and involuntary, summed over its threads
/// (`voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of each
/// `/proc/PID/task/TID/status`; proc(5)), with the number of threads it has now. `None`
/// when the process is gone. A thread that exits takes its count with it.
pub fn context_switches(pid: u32) -> Option<(u64, usize)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let (mut switches, mut threads) = (0u64, 0usize);
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        threads += 1;
        switches += status
            .lines()
            .filter(|l| {
                l.starts_with("voluntary_ctxt_switches:")
                    || l.starts_with("nonvoluntary_ctxt_switches:")
            })
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Some((switches, threads))
}

/// CPU time (utime + stime) of `pid`'s threads named `name` (`/proc/PID/task/*/comm`), in
/// seconds; `NaN` when none has that name.
pub fn thread_cpu_seconds(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return f64::NAN;
    };
    let mut total = f64::NAN;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let seconds = cpu_seconds_of(&format!("/proc/{pid}/task/{tid}/stat"));
        total = if total.is_nan() {
            seconds
        } else {
            total + seconds
        };
    }
    total
}

/// CPU time the whole machine spent busy (user, nice, system, irq, softirq and steal of
/// every core, from the first line of `/proc/stat`; see proc(5)), in seconds. Idle and
/// iowait are left out.
pub fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return f64::NAN;
    };
    let Some(cpu) = stat.lines().next().and_then(|l| l.strip_prefix("cpu ")) else {
        return f64::NAN;
    };
    let fields: Vec<f64> = cpu
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let ticks: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    ticks / clock_ticks_per_second()
}

/// How many CPUs `/proc/stat` counts (its `cpuN` lines): the cores whose busy time
/// [`machine_busy_seconds`] sums, whatever CPU limits this process has.
pub fn machine_cores() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return f64::NAN;
    };
    stat.lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count() as f64
}

fn clock_ticks_per_second() -> f64 {
    // getconf is in every Debian; USER_HZ is 100 on Linux otherwise.
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `/proc/PID/status` value in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Waits until `pid` is idle (under 2% of a core over 500 ms) or `cap` has passed.
/// Returns (CPU seconds used meanwhile, time waited, drained).
pub async fn quiesce(pid: u32, cap: Duration) -> (f64, Duration, bool) {
    let start = std::time::Instant::now();
    let first = cpu_seconds(pid);
    let mut last = first;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_seconds(pid);
        let busy = now - last;
        last = now;
        if busy < 0.01 {
            return (now - first, start.elapsed(), true);
        }
        if start.elapsed() >= cap {
            return (now - first, start.elapsed(), false);
        }
    }
}

/// A proxy under test.
pub struct Proxy {
    /// Its name in the tables.
    pub name: String,
    /// How clients reach the origin through it.
    pub route: Route,
    /// Its process id, for `/proc`.
    pub pid: u32,
    /// The CA it intercepts with (PEM).
    pub ca_pem: String,
    /// The process.
    pub child: Child,
}

/// airlock, with what the benchmark needs of its admin API.
pub struct Airlock {
    /// The proxy and its process.
    pub proxy: Proxy,
    /// The admin listener.
    pub admin: SocketAddr,
    /// The admin bearer token.
    pub token: String,
    /// The data directory.
    pub data: PathBuf,
}

/// The policy the benchmark gives airlock: reads of the loopback origin's `ports` pass,
/// POSTs to them are staged, reads of `*.bench.test` pass (first contact: CONNECT there
/// mints a leaf).
pub fn policy_text(ports: &[u16]) -> String {
    let ports = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    POLICY.replace("PORTS", &ports)
}

const POLICY: &str = r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "bench-stage"
host = "127.0.0.1"
port = [PORTS]
method = ["POST"]
action = "stage"

[[rule]]
id = "bench-read"
host = "127.0.0.1"
port = [PORTS]
method = "read"
action = "pass"

[[rule]]
id = "bench-first-contact"
host = "*.bench.test"
method = "read"
action = "pass"
"#;

/// Starts `airlock serve` on ephemeral ports and waits for its `addresses.json`.
pub async fn start_airlock(
    binary: &Path,
    dir: &Path,
    data_name: &str,
    upstream_ca: &Path,
    ports: &[u16],
) -> Result<Airlock, BoxError> {
    start_airlock_with(binary, dir, data_name, upstream_ca, ports, &[]).await
}

/// [`start_airlock`] with `extra` arguments to `airlock serve` (a role, a store).
pub async fn start_airlock_with(
    binary: &Path,
    dir: &Path,
    data_name: &str,
    upstream_ca: &Path,
    ports: &[u16],
    extra: &[&str],
) -> Result<Airlock, BoxError> {
    let data = dir.join(data_name);
    std::fs::create_dir_all(&data)?;
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, policy_text(ports))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("airlock.log"))?;
    let child = Command::new(binary)
        .arg("serve")
        .arg("--data")
        .arg(&data)
        .arg("--policy")
        .arg(&policy)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--admin")
        .arg("127.0.0.1:0")
        .arg("--upstream-ca")
        .arg(upstream_ca)
        // The idle section holds 5,000 tunnels of one run open: past both default caps.
        .args([
            "--max-connections",
            "20000",
            "--max-connections-per-run",
            "20000",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("airlock exited at once")?;
    let addresses = data.join("addresses.json");
    let mut parsed = None;
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&addresses) {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                if value["pid"].as_u64() == Some(u64::from(pid)) {
                    parsed = Some(value);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let addresses = parsed.ok_or("airlock wrote no addresses.json (see airlock.log)")?;
    let proxy: SocketAddr = addresses["proxy"]
        .as_str()
        .ok_or("no proxy address")?
        .parse()?;
    let admin: SocketAddr = addresses["admin"]
        .as_str()
        .ok_or("no admin address")?
        .trim_start_matches("http://")
        .parse()?;
    let token = std::fs::read_to_string(data.join("admin.token"))?
        .trim()
        .to_owned();
    let ca_pem = std::fs::read_to_string(data.join("ca.pem"))?;
    Ok(Airlock {
        proxy: Proxy {
            name: "airlock".to_owned(),
            route: Route::Proxy {
                addr: proxy,
                auth: None,
            },
            pid,
            ca_pem,
            child,
        },
        admin,
        token,
        data,
    })
}

impl Airlock {
    /// One admin API call; the JSON answer.
    pub async fn admin(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, BoxError> {
        let tcp = tokio::net::TcpStream::connect(self.admin).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.admin.to_string())
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            return Err(format!("{path}: {status}: {}", String::from_utf8_lossy(&bytes)).into());
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Creates a run; the route through airlock with its credentials.
    pub async fn create_run(&self) -> Result<(String, Route), BoxError> {
        let run = self
            .admin(hyper::Method::POST, "/v1/runs", Some(serde_json::json!({})))
            .await?;
        let id = run["id"].as_str().ok_or("run without id")?.to_owned();
        let token = run["token"].as_str().ok_or("run without token")?;
        let Route::Proxy { addr, .. } = self.proxy.route else {
            return Err("airlock has a proxy route".into());
        };
        Ok((
            id.clone(),
            Route::Proxy {
                addr,
                auth: Some(format!("{id}:{token}")),
            },
        ))
    }
}

/// Starts the no-op hudsucker proxy (this binary's `hudsucker-proxy` subcommand).
pub async fn start_hudsucker(
    dir: &Path,
    ca_cert: &Path,
    ca_key: &Path,
    upstream_ca: &Path,
) -> Result<Proxy, BoxError> {
    let port = crate::origin::free_port()?;
    let child = Command::new(std::env::current_exe()?)
        .arg("hudsucker-proxy")
        .arg(port.to_string())
        .arg(ca_cert)
        .arg(ca_key)
        .arg(upstream_ca)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(dir.join("hudsucker.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("hudsucker exited at once")?;
    crate::origin::wait_for_port(port).await?;
    Ok(Proxy {
        name: "hudsucker 0.25".to_owned(),
        route: Route::Proxy {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            auth: None,
        },
        pid,
        ca_pem: std::fs::read_to_string(ca_cert)?,
        child,
    })
}

/// Starts `mitmdump` when it is on PATH; None (and why) when it is not.
pub async fn start_mitmdump(dir: &Path, upstream_ca: &Path) -> Result<Option<Proxy>, BoxError> {
    let Ok(output) = std::process::Command::new("mitmdump")
        .arg("--version")
        .output()
    else {
        return Ok(None);
    };
    let version = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or("mitmdump")
        .trim()
        .replace("Mitmproxy: ", "mitmdump ");
    let confdir = dir.join("mitmproxy");
    std::fs::create_dir_all(&confdir)?;
    let port = crate::origin::free_port()?;
    let child = Command::new("mitmdump")
        .arg("--listen-host")
        .arg("127.0.0.1")
        .arg("--listen-port")
        .arg(port.to_string())
        .arg("--set")
        .arg(format!("confdir={}", confdir.display()))
        .arg("--set")
        .arg(format!(
            "ssl_verify_upstream_trusted_ca={}",
            upstream_ca.display()
        ))
        .arg("--set")
        .arg("flow_detail=0")
        .arg("-q")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("mitmdump.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("mitmdump exited at once")?;
    crate::origin::wait_for_port(port).await?;
    let ca_pem = std::fs::read_to_string(confdir.join("mitmproxy-ca-cert.pem"))?;
    Ok(Some(Proxy {
        name: version,
        route: Route::Proxy {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            auth: None,
        },
        pid,
        ca_pem,
        child,
    }))
}

/// The hudsucker proxy's main: `hudsucker-proxy PORT CA_CERT CA_KEY UPSTREAM_CA`. No-op
/// handlers, TCP_NODELAY on both sides, upstream TLS verified against the origin's CA.
pub fn hudsucker_main(args: &[String]) -> Result<(), BoxError> {
    let [port, ca_cert, ca_key, upstream_ca] = args else {
        return Err("usage: airlock-bench hudsucker-proxy PORT CA_CERT CA_KEY UPSTREAM_CA".into());
    };
    let port: u16 = port.parse()?;
    let key = hudsucker::rcgen::KeyPair::from_pem(&std::fs::read_to_string(ca_key)?)?;
    let issuer =
        hudsucker::rcgen::Issuer::from_ca_cert_pem(&std::fs::read_to_string(ca_cert)?, key)?;
    let ca = hudsucker::certificate_authority::RcgenAuthority::new(
        issuer,
        1_000,
        rustls::crypto::ring::default_provider(),
    );
    let mut upstream =
        Arc::unwrap_or_clone(crate::tls::client_config(&[std::fs::read_to_string(
            upstream_ca,
        )?])?);
    // hyper-rustls sets ALPN itself.
    upstream.alpn_protocols.clear();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(upstream)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // Accepted sockets inherit TCP_NODELAY from the listening socket on Linux.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_nodelay(true)?;
        socket.set_reuseaddr(true)?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
        let listener = socket.listen(4096)?;
        let proxy = hudsucker::Proxy::builder()
            .with_listener(listener)
            .with_ca(ca)
            .with_http_connector(https)
            .build()?;
        proxy.start().await?;
        Ok::<_, BoxError>(())
    })
}

/// The CPU's model name from /proc/cpuinfo, or `unknown CPU`.
pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}
