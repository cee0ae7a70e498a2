//! Staging on the PostgreSQL store through two proxies (issue #19's figure): a throwaway
//! PostgreSQL server (`initdb` and `pg_ctl` in a temporary directory, on a free port of
//! 127.0.0.1, as the `postgres` user when run as root, fsync on), airlock A
//! (`--role all`, which also serves the admin API that creates runs) and airlock B
//! (`--role proxy`) on it, B holding copies of A's CA, placeholder key and admin token as
//! a fleet's instances do (docs/fleet.md). Clients are split evenly between A and B.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::load::{self, LoadResult, LoadShape, Route, Target};
use crate::procs::{start_airlock_with, Airlock};
use crate::rounds::{median, median_spread};
use crate::targets::Targets;
use crate::BoxError;

/// A PostgreSQL server of this run; dropping it stops it and removes its files.
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgServer {
    /// Starts one, or `Ok(None)` when `initdb` is not installed (on `PATH` or under
    /// `/usr/lib/postgresql/*/bin`).
    pub fn start() -> Result<Option<Self>, BoxError> {
        let Some(bin) = binaries() else {
            return Ok(None);
        };
        let as_postgres = std::fs::metadata("/proc/self")?.uid() == 0;
        let dir = std::env::temp_dir().join(format!("airlock-bench-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        if as_postgres {
            let (uid, gid) = postgres_user().ok_or("no `postgres` user in /etc/passwd")?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let port = crate::origin::free_port()?;
        let server = Self {
            bin,
            dir,
            port,
            as_postgres,
        };
        let data = server.dir.join("data");
        let data = data.to_str().ok_or("a UTF-8 temporary path")?;
        server.run(
            "initdb",
            &[
                "-D",
                data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c max_connections=200",
            server.dir.display()
        );
        if statement_stats() {
            options.push_str(" -c shared_preload_libraries=pg_stat_statements");
        }
        let log = server.dir.join("server.log");
        let log = log.to_str().ok_or("a UTF-8 temporary path")?;
        server.run(
            "pg_ctl",
            &[
                "-D", data, "-l", log, "-o", &options, "-w", "-t", "60", "start",
            ],
        )?;
        Ok(Some(server))
    }

    /// With `AIRLOCK_BENCH_PG_STATEMENTS=1`: the statements that took the server's time,
    /// from `pg_stat_statements` (calls, total ms, query), most first; else nothing.
    pub fn statement_report(&self) -> Result<Option<String>, BoxError> {
        if !statement_stats() {
            return Ok(None);
        }
        let output = Command::new("psql")
            .arg(self.url())
            .args([
                "-X",
                "-A",
                "-F",
                " | ",
                "-c",
                "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
                "-c",
                "SELECT calls, round(total_exec_time::numeric, 1) AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15",
            ])
            .output()?;
        Ok(Some(String::from_utf8_lossy(&output.stdout).into_owned()))
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), BoxError> {
        let output = self.command(program).args(args).output()?;
        if !output.status.success() {
            return Err(format!(
                "{program} failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `AIRLOCK_BENCH_PG_STATEMENTS=1` asks for the statement report.
fn statement_stats() -> bool {
    std::env::var("AIRLOCK_BENCH_PG_STATEMENTS").is_ok_and(|v| v == "1")
}

/// `initdb` on `PATH`, else the newest `/usr/lib/postgresql/*/bin`.
fn binaries() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// The uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// Two airlock instances on one PostgreSQL store.
pub struct Fleet {
    /// `--role all`: a proxy, and the admin API that creates runs.
    pub a: Airlock,
    /// `--role proxy`.
    pub b: Airlock,
}

/// Starts A, then B on copies of A's shared files.
pub async fn start_fleet(
    binary: &Path,
    dir: &Path,
    upstream_ca: &Path,
    ports: &[u16],
    url: &str,
) -> Result<Fleet, BoxError> {
    let store = ["--store", url, "--store-connections", "16"];
    let mut role_all = vec!["--role", "all"];
    role_all.extend(store);
    let a = start_airlock_with(binary, dir, "pg-a", upstream_ca, ports, &role_all).await?;
    let data_b = dir.join("pg-b");
    std::fs::create_dir_all(&data_b)?;
    for file in [
        "ca.pem",
        "ca-key.pem",
        "placeholder.key",
        "run-token.key",
        "admin.token",
    ] {
        std::fs::copy(a.data.join(file), data_b.join(file))?;
    }
    let mut role_proxy = vec!["--role", "proxy"];
    role_proxy.extend(store);
    let b = start_airlock_with(binary, dir, "pg-b", upstream_ca, ports, &role_proxy).await?;
    Ok(Fleet { a, b })
}

/// The route through `proxy` with `via`'s credentials.
fn through(proxy: &Airlock, via: &Route) -> Result<Route, BoxError> {
    let (Route::Proxy { addr, .. }, Route::Proxy { auth, .. }) = (&proxy.proxy.route, via) else {
        return Err("airlock has a proxy route".into());
    };
    let addr: SocketAddr = *addr;
    Ok(Route::Proxy {
        addr,
        auth: auth.clone(),
    })
}

/// `clients` clients POSTing 1 KiB bodies, alternately through A and B, each client in
/// its own run when `run_each`, else all in one run; the results merged.
pub async fn staging(
    fleet: &Fleet,
    tls: &Arc<rustls::ClientConfig>,
    target: &Target,
    clients: usize,
    run_each: bool,
    shape: &LoadShape,
) -> Result<LoadResult, BoxError> {
    let request = crate::sections::stage_request();
    let one = LoadShape {
        connections: 1,
        ..shape.clone()
    };
    let (_, shared) = fleet.a.create_run().await?;
    let mut loads = Vec::with_capacity(clients);
    for n in 0..clients {
        let run = if run_each {
            fleet.a.create_run().await?.1
        } else {
            shared.clone()
        };
        let proxy = if n % 2 == 0 { &fleet.a } else { &fleet.b };
        let route = through(proxy, &run)?;
        let (target, tls, request, one) =
            (target.clone(), tls.clone(), request.clone(), one.clone());
        loads.push(tokio::spawn(async move {
            load::run(route, target, tls, request, &one, || {}).await
        }));
    }
    let mut merged = LoadResult::default();
    for load in loads {
        let result = load.await?;
        merged.requests += result.requests;
        merged.errors += result.errors;
        merged.elapsed = merged.elapsed.max(result.elapsed);
        merged.latencies_us.extend(result.latencies_us);
        if merged.first_error.is_none() {
            merged.first_error = result.first_error;
        }
    }
    merged.latencies_us.sort_unstable();
    Ok(merged)
}

/// The bench's section `### staging on PostgreSQL`: 1 client, then 64 clients in one run
/// and in a run each, `rounds` times each (issue #19's figure), beside the sled figures
/// of the staging section before it.
#[allow(clippy::too_many_arguments)]
pub async fn section(
    rounds: usize,
    binary: &Path,
    dir: &Path,
    upstream_ca: &Path,
    ports: &[u16],
    target: &Target,
    shape: &LoadShape,
    targets: &mut Targets,
) -> Result<(), BoxError> {
    println!("\n### staging on PostgreSQL, through two instances (A --role all, B --role proxy)\n");
    let Some(server) = PgServer::start()? else {
        println!("not measured: PostgreSQL (initdb, pg_ctl) is not installed");
        return Ok(());
    };
    let fleet = start_fleet(binary, dir, upstream_ca, ports, &server.url()).await?;
    // The fleet's own CA (B holds a copy of A's).
    let tls = &crate::tls::client_config(std::slice::from_ref(&fleet.a.proxy.ca_pem))?;
    println!("| clients | runs | effects/s (spread) | p50 ms | p99 ms | errors |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (clients, run_each) in [(1, false), (64, false), (64, true)] {
        let mut results = Vec::new();
        for _ in 0..rounds {
            results.push(staging(&fleet, tls, target, clients, run_each, shape).await?);
        }
        let rates: Vec<f64> = results.iter().map(LoadResult::rate).collect();
        let (rate, spread) = median_spread(&rates);
        let p50 = median(
            &mut results
                .iter()
                .map(|r| r.quantile_ms(0.5))
                .collect::<Vec<_>>(),
        );
        let p99 = median(
            &mut results
                .iter()
                .map(|r| r.quantile_ms(0.99))
                .collect::<Vec<_>>(),
        );
        let errors: u64 = results.iter().map(|r| r.errors).sum();
        let runs = if run_each { clients } else { 1 };
        if run_each {
            targets.record(crate::targets::name::PG_STAGE_64, rate);
        }
        println!(
            "| {clients} | {runs} | {rate:.0} (±{:.0}%) | {p50:.2} | {p99:.2} | {errors} |",
            spread / 2.0
        );
        if let Some(error) = results.iter().find_map(|r| r.first_error.clone()) {
            println!("first error: {error}");
        }
    }
    if let Some(report) = server.statement_report()? {
        println!("\nPostgreSQL statements by server time (pg_stat_statements):\n{report}");
    }
    drop(fleet);
    drop(server);
    Ok(())
}
