//! The fence section (`airlock run --network isolated`, docs/containment.md), in one run:
//!
//! - **Setup**: the wall time of `airlock run … -- true` in a fence against the same
//!   command with `--network env` (proxy variables only), interleaved, with the same
//!   embedded server and a `cmd` snapshot driver that runs `true` (so the snapshot costs
//!   little and the same in both); and the fence's own `containment.setup_us` from
//!   `--json` (PID 1's start to the command's start).
//! - **Per request**: inside one fence, this binary's hidden `fence-client` makes
//!   sequential HTTPS GETs over one keep-alive connection per path: straight to
//!   `https://origin.test:PORT/` (captured: the transparent path) and through
//!   `HTTPS_PROXY` (the relay's proxy port, then CONNECT), request by request in turn.
//!
//! Skipped, saying why, when airlock can make no fence here (no `nft`, no namespaces).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};

use crate::load::{self, Request, Route, Target};
use crate::rounds::median;
use crate::BoxError;

/// The origin's name inside the fence; airlock's embedded server resolves it to 127.0.0.1.
pub const ORIGIN_NAME: &str = "origin.test";

/// How much the section measures.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// `airlock run -- true` invocations of each mode.
    pub runs: usize,
    /// Rounds of the per-request part (each path once per round).
    pub rounds: usize,
    /// Requests per path per round.
    pub requests: usize,
}

impl Counts {
    /// Tiny with `--quick`; else 30 runs and 5 rounds of 300 requests, unless given.
    pub fn new(quick: bool, runs: Option<usize>, requests: Option<usize>) -> Self {
        let (default_runs, rounds, default_requests) =
            if quick { (2, 1, 20) } else { (30, 5, 300) };
        Self {
            runs: runs.unwrap_or(default_runs).max(1),
            rounds,
            requests: requests.unwrap_or(default_requests).max(1),
        }
    }
}

/// `--network` of one invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Isolated,
    Env,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Isolated => "isolated",
            Mode::Env => "env",
        }
    }
}

/// One `airlock run` invocation's outcome.
struct Invocation {
    wall: Duration,
    success: bool,
    /// The `--json` report (Null when stdout was not JSON).
    report: Value,
    stderr: String,
}

impl Invocation {
    /// airlock's reason when it could make no fence, or the fence could not be set up.
    fn unavailable(&self) -> Option<String> {
        if self.success {
            return None;
        }
        self.stderr
            .lines()
            .find(|l| l.contains("none can be made here") || l.contains("fence setup:"))
            .map(|l| l.trim().trim_start_matches("error: ").to_owned())
    }

    /// Fails unless the run succeeded in `mode`.
    fn check(&self, mode: Mode) -> Result<(), BoxError> {
        let network = self.report["containment"]["network"].as_str();
        if self.success && network == Some(mode.as_str()) {
            return Ok(());
        }
        let tail: Vec<&str> = self.stderr.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "airlock run --network {} failed (network in the report: {network:?}):\n{}",
            mode.as_str(),
            tail.join("\n")
        )
        .into())
    }

    fn setup_us(&self) -> Option<f64> {
        self.report["containment"]["setup_us"].as_f64()
    }
}

/// What every invocation shares: the binary, the embedded server's files, the workspace.
struct Setup {
    airlock: PathBuf,
    dir: PathBuf,
    policy: PathBuf,
    origin_ca: PathBuf,
    workspace: PathBuf,
}

impl Setup {
    fn new(airlock: &Path, dir: &Path, origin_ca: &Path, port: u16) -> Result<Self, BoxError> {
        let policy = dir.join("fence-policy.toml");
        std::fs::write(
            &policy,
            format!(
                "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n\n\
                 [[rule]]\nid = \"fence-reads\"\nhost = \"{ORIGIN_NAME}\"\nport = {port}\n\
                 method = \"read\"\naction = \"pass\"\n"
            ),
        )?;
        let workspace = dir.join("fence-workspace");
        std::fs::create_dir_all(&workspace)?;
        Ok(Self {
            airlock: airlock.to_owned(),
            dir: dir.to_owned(),
            policy,
            origin_ca: origin_ca.to_owned(),
            workspace,
        })
    }

    /// `airlock run` with an embedded server (one data directory per mode) and `command`.
    async fn run(&self, mode: Mode, command: &[String]) -> Result<Invocation, BoxError> {
        let data = self.dir.join(format!("fence-data-{}", mode.as_str()));
        let mut child = tokio::process::Command::new(&self.airlock);
        child
            .arg("run")
            .arg("--data")
            .arg(&data)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--resolve")
            .arg(format!("{ORIGIN_NAME}=127.0.0.1"))
            .arg("--upstream-ca")
            .arg(&self.origin_ca)
            .arg("--workspace")
            .arg(&self.workspace)
            .args(["--snapshot", "cmd", "--snapshot-cmd", "true"])
            .args([
                "--rollback-cmd",
                "true",
                "--on-pass",
                "commit",
                "--approve-all",
            ])
            .args(["--network", mode.as_str(), "--json", "--"])
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let start = Instant::now();
        let output = child.output().await?;
        let wall = start.elapsed();
        Ok(Invocation {
            wall,
            success: output.status.success(),
            report: serde_json::from_slice(&output.stdout).unwrap_or(Value::Null),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn min_max(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// Runs the section against the origin on 127.0.0.1:`port` (its CA at `origin_ca`).
pub async fn section(
    counts: Counts,
    airlock: &Path,
    dir: &Path,
    origin_ca: &Path,
    port: u16,
) -> Result<(), BoxError> {
    println!("\n### fence (`airlock run --network isolated`)\n");
    let load_before = loadavg();
    let setup = Setup::new(airlock, dir, origin_ca, port)?;
    let true_cmd = vec!["true".to_owned()];
    // Warm-up: each data directory's first run makes its CA and ledger.
    let first = setup.run(Mode::Isolated, &true_cmd).await?;
    if let Some(why) = first.unavailable() {
        println!("skipped: airlock can make no fence on this machine: {why}");
        return Ok(());
    }
    first.check(Mode::Isolated)?;
    setup.run(Mode::Env, &true_cmd).await?.check(Mode::Env)?;

    // Setup: interleaved, the order alternating, so both modes see the same machine.
    let (mut env_ms, mut isolated_ms, mut setup_ms, mut added_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..counts.runs {
        let order = if i % 2 == 0 {
            [Mode::Isolated, Mode::Env]
        } else {
            [Mode::Env, Mode::Isolated]
        };
        let mut walls = [0.0; 2];
        for mode in order {
            let invocation = setup.run(mode, &true_cmd).await?;
            invocation.check(mode)?;
            let wall = ms(invocation.wall);
            if mode == Mode::Isolated {
                walls[0] = wall;
                isolated_ms.push(wall);
                setup_ms.extend(invocation.setup_us().map(|us| us / 1000.0));
            } else {
                walls[1] = wall;
                env_ms.push(wall);
            }
        }
        added_ms.push(walls[0] - walls[1]);
    }
    println!(
        "`airlock run --data DIR --policy FILE --resolve {ORIGIN_NAME}=127.0.0.1 --upstream-ca CA \
         --workspace EMPTY --snapshot cmd --snapshot-cmd true --rollback-cmd true --on-pass commit \
         --approve-all --network MODE --json -- true`, embedded server, one data directory per \
         mode (warmed up by one run each), {} runs of each mode interleaved\n",
        counts.runs
    );
    println!("| --network | runs | wall ms, median | min | max |\n|---|---:|---:|---:|---:|");
    for (name, values) in [("env", &env_ms), ("isolated", &isolated_ms)] {
        let (min, max) = min_max(values);
        let m = median(&mut values.clone());
        println!(
            "| {name} | {} | {m:.1} | {min:.1} | {max:.1} |",
            values.len()
        );
    }
    let (setup_min, setup_max) = min_max(&setup_ms);
    println!(
        "\nadded by the fence (median of the paired differences isolated − env): **{:.1} ms** \
         (target ≤ 50 ms; difference of the medians {:.1} ms); the fence's own setup \
         (`containment.setup_us`, PID 1's start to the command's start): median **{:.1} ms** \
         ({setup_min:.1}–{setup_max:.1}, {} runs)",
        median(&mut added_ms),
        median(&mut isolated_ms.clone()) - median(&mut env_ms.clone()),
        median(&mut setup_ms.clone()),
        setup_ms.len()
    );

    per_request(counts, &setup, port).await?;
    println!(
        "\nload average (1 min) of the machine: {load_before} before the section, {} after",
        loadavg()
    );
    Ok(())
}

/// The 1-minute load average (`/proc/loadavg`): other processes' load shows in both figures.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The per-request part: one fenced run of `fence-client`, then its figures.
async fn per_request(counts: Counts, setup: &Setup, port: u16) -> Result<(), BoxError> {
    // In the workspace: under root, what the fenced command writes anywhere else lands in
    // the run's layer and is discarded when the run ends (docs/containment.md).
    let out = setup.workspace.join("fence-client.json");
    let command = vec![
        std::env::current_exe()?.display().to_string(),
        "fence-client".to_owned(),
        out.display().to_string(),
        format!("https://{ORIGIN_NAME}:{port}/small"),
        counts.rounds.to_string(),
        counts.requests.to_string(),
    ];
    let invocation = setup.run(Mode::Isolated, &command).await?;
    invocation.check(Mode::Isolated)?;
    let result: Value = serde_json::from_slice(&std::fs::read(&out)?)?;
    let containment = &invocation.report["containment"];
    println!(
        "\nper request, inside one fence: `airlock-bench fence-client` GETs `/small` (2 bytes) \
         from `https://{ORIGIN_NAME}:{port}` over one keep-alive connection per path, \
         sequentially, {} round(s) of {} requests per path, the paths taking turns request by \
         request (the first alternating by round), after {} warm-up requests each; transparent: no proxy, `{ORIGIN_NAME}` resolved by airlock's \
         DNS to {}; CONNECT: `HTTPS_PROXY` (the relay's port {})\n",
        counts.rounds,
        counts.requests,
        result["warmup"],
        result["address"].as_str().unwrap_or("?"),
        result["proxy"].as_str().unwrap_or("?"),
    );
    println!(
        "| path | requests | p50 ms | p99 ms | per-round p50 ms | opening ms (DNS, TCP, TLS) |\n\
         |---|---:|---:|---:|---|---:|"
    );
    let mut p50 = [f64::NAN; 2];
    let mut round_p50: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for (index, (name, key)) in [
        ("transparent (captured)", "transparent"),
        ("CONNECT (proxy variable)", "connect"),
    ]
    .into_iter()
    .enumerate()
    {
        let rounds: Vec<Vec<u32>> = result["rounds"]
            .as_array()
            .ok_or("fence-client wrote no rounds")?
            .iter()
            .map(|r| {
                r[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_u64())
                            .map(|v| v as u32)
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        for round in &rounds {
            let mut values: Vec<f64> = round.iter().map(|&us| f64::from(us) / 1000.0).collect();
            round_p50[index].push(median(&mut values));
        }
        let mut all: Vec<u32> = rounds.concat();
        all.sort_unstable();
        p50[index] = crate::quantile_ms(&all, 0.5);
        let per_round: Vec<String> = round_p50[index].iter().map(|m| format!("{m:.3}")).collect();
        println!(
            "| {name} | {} | {:.3} | {:.3} | {} | {:.2} |",
            all.len(),
            p50[index],
            crate::quantile_ms(&all, 0.99),
            per_round.join(", "),
            result["open_us"][key].as_f64().unwrap_or(f64::NAN) / 1000.0
        );
    }
    let ratios: Vec<String> = round_p50[0]
        .iter()
        .zip(&round_p50[1])
        .map(|(t, c)| format!("{:.2}×", t / c))
        .collect();
    println!(
        "\ntransparent/CONNECT at p50: **{:.2}×** (target ≤ 1.10×; per round {}); the run's \
         containment: {} captured connection(s), {} proxy connection(s), {} DNS answer(s), {} \
         relay failure(s)",
        p50[0] / p50[1],
        ratios.join(", "),
        containment["connections_captured"],
        containment["proxy_connections"],
        containment["dns_answered"],
        containment["relay_failures"],
    );
    Ok(())
}

/// `fence-client OUT URL ROUNDS REQUESTS`, run inside a fence by [`section`]: writes the
/// per-request latencies of both paths to OUT as JSON.
pub fn client_main(args: &[String]) -> Result<(), BoxError> {
    let [out, url, rounds, requests] = args else {
        return Err("usage: airlock-bench fence-client OUT URL ROUNDS REQUESTS".into());
    };
    let (rounds, requests) = (rounds.parse()?, requests.parse()?);
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(client(url, rounds, requests))?;
    std::fs::write(out, result.to_string())?;
    Ok(())
}

/// `https://HOST:PORT/PATH` → (target, path).
fn parse_url(url: &str) -> Result<(Target, String), BoxError> {
    let rest = url
        .strip_prefix("https://")
        .ok_or("the URL is not https://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = authority.rsplit_once(':').ok_or("the URL has no port")?;
    let path = if path.is_empty() { "/" } else { path };
    Ok((
        Target {
            host: host.to_owned(),
            port: port.parse()?,
        },
        path.to_owned(),
    ))
}

/// `http://USER:PASSWORD@HOST:PORT[/]` (the run's proxy variable) → the CONNECT route.
fn proxy_route(url: &str) -> Result<(SocketAddr, Route), BoxError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("HTTPS_PROXY is not http://")?;
    let rest = rest.trim_end_matches('/');
    let (auth, addr) = match rest.rsplit_once('@') {
        Some((auth, addr)) => (Some(auth.to_owned()), addr),
        None => (None, rest),
    };
    let addr: SocketAddr = addr.parse()?;
    Ok((addr, Route::Proxy { addr, auth }))
}

/// Trust as a fenced client has it: every certificate of the bundle at `$SSL_CERT_FILE`
/// (the system roots and airlock's CA) that parses as a trust anchor.
fn fenced_trust() -> Result<Arc<rustls::ClientConfig>, BoxError> {
    let path = std::env::var("SSL_CERT_FILE").map_err(|_| "SSL_CERT_FILE is not set")?;
    let pem = std::fs::read(&path)?;
    let mut store = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("no certificate in {path}").into());
    }
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn client(url: &str, rounds: usize, requests: usize) -> Result<Value, BoxError> {
    let (target, path) = parse_url(url)?;
    let tls = fenced_trust()?;
    let proxy_url = std::env::var("HTTPS_PROXY")
        .or_else(|_| std::env::var("https_proxy"))
        .map_err(|_| "HTTPS_PROXY is not set in the fence")?;
    let (proxy_addr, connect) = proxy_route(&proxy_url)?;
    // The name must resolve to airlock's pool (198.18.0.0/15): else this is no
    // transparent path.
    let address = tokio::net::lookup_host(target.authority())
        .await?
        .next()
        .ok_or("no address")?;
    let in_pool = matches!(address.ip(), std::net::IpAddr::V4(ip) if ip.octets()[0] == 198 && ip.octets()[1] & 0xfe == 18);
    if !in_pool {
        return Err(format!("{} resolved to {address}, not airlock's pool", target.host).into());
    }
    let routes = [Route::Direct, connect];
    let mut senders = Vec::new();
    let mut open_us = Vec::new();
    for route in &routes {
        let start = Instant::now();
        senders.push(load::open(route, &target, &tls).await?);
        open_us.push(start.elapsed().as_micros() as u64);
    }
    let request = Request {
        method: hyper::Method::GET,
        path,
        body: Bytes::new(),
        status: 200,
    };
    let warmup = requests.min(50);
    for sender in &mut senders {
        for _ in 0..warmup {
            load::send(sender, &target, &request).await?;
        }
    }
    let mut measured = Vec::new();
    for round in 0..rounds {
        let mut latencies = [Vec::with_capacity(requests), Vec::with_capacity(requests)];
        // Request by request, the first path alternating by round: both paths see the
        // same machine (other processes' load comes and goes within a round).
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for _ in 0..requests {
            for index in order {
                let start = Instant::now();
                load::send(&mut senders[index], &target, &request).await?;
                latencies[index].push(start.elapsed().as_micros() as u64);
            }
        }
        measured.push(json!({ "transparent": latencies[0], "connect": latencies[1] }));
    }
    Ok(json!({
        "address": address.to_string(),
        "proxy": proxy_addr.to_string(),
        "warmup": warmup,
        "open_us": { "transparent": open_us[0], "connect": open_us[1] },
        "rounds": measured,
    }))
}
