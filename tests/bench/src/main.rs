//! Benchmark of airlock (issue 8): pass-through cost against a direct connection,
//! hudsucker and mitmdump, plus staging, first contact, streaming, release, idle
//! memory and the fence (`airlock run --network isolated`). Loopback only. Run from the
//! repository root:
//!
//! ```sh
//! cargo run --release --manifest-path tests/bench/Cargo.toml -- [--quick] [--skip-SECTION…]
//! ```

mod fence;
mod load;
mod options;
mod origin;
mod pgstage;
mod procs;
mod rounds;
mod sections;
mod squid;
mod targets;
mod tls;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use load::{Request, Route, Target};
use options::Options;
use procs::{status_kib, Proxy};
use rounds::{measure, print_table, summarise, Sample, Summary};
use targets::{name, Targets};

/// Errors of the benchmark: reported, never recovered from.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("hudsucker-proxy") => procs::hudsucker_main(&args[1..]),
        Some("origin") => origin::main(&args[1..]),
        Some("fence-client") => fence::client_main(&args[1..]),
        _ => Options::parse(&args).and_then(|options| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(bench(options))
        }),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("airlock-bench: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The repository root (this crate is `tests/bench`).
fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds airlock and returns the binary: with the `dist` profile (the build to deploy,
/// README "Use it") when this benchmark is a release build, else debug.
fn build_airlock() -> Result<PathBuf, BoxError> {
    let root = repository_root();
    // (cargo's profile, the directory under the target directory it builds into)
    let (profile, dir) = if cfg!(debug_assertions) {
        ("dev", "debug")
    } else {
        ("dist", "dist")
    };
    let mut command = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()));
    command.current_dir(&root).args([
        "build",
        "--locked",
        "-q",
        "-p",
        "airlock",
        "--profile",
        profile,
    ]);
    eprintln!("building airlock ({profile})…");
    if !command.status()?.success() {
        return Err("cargo build -p airlock failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join(dir).join("airlock"))
}

fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    f64::from(sorted_us[((sorted_us.len() - 1) as f64 * q).round() as usize]) / 1000.0
}

async fn bench(options: Options) -> Result<(), BoxError> {
    let airlock_binary = match &options.airlock {
        Some(path) => path.clone(),
        None => build_airlock()?,
    };
    let dir = std::env::temp_dir().join(format!("airlock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = bench_in(&options, &airlock_binary, &dir).await;
    match &outcome {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Err(_) => eprintln!("logs kept in {}", dir.display()),
    }
    outcome
}

async fn bench_in(options: &Options, airlock_binary: &Path, dir: &Path) -> Result<(), BoxError> {
    let shape = options.shape();
    let (contact_count, stream_bytes, release_count, idle_count) = options.counts();

    // The origin's throwaway CA and certificate.
    let origin_ca = tls::ThrowawayCa::new("airlock-bench origin CA")?;
    let (leaf_pem, leaf_key) = origin_ca.origin_leaf()?;
    let ca_path = dir.join("origin-ca.pem");
    let cert_path = dir.join("origin.pem");
    let key_path = dir.join("origin-key.pem");
    std::fs::write(&ca_path, &origin_ca.cert_pem)?;
    std::fs::write(&cert_path, format!("{leaf_pem}{}", origin_ca.cert_pem))?;
    std::fs::write(&key_path, &leaf_key)?;
    let mut origin = origin::start(
        dir,
        &cert_path,
        &key_path,
        8,
        stream_bytes,
        options.hyper_origin,
    )
    .await?;
    let target = Target {
        host: "127.0.0.1".to_owned(),
        port: origin.ports[0],
    };

    let mut airlock =
        procs::start_airlock(airlock_binary, dir, "airlock-data", &ca_path, &origin.ports).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_start_kib = status_kib(airlock.proxy.pid, "VmRSS");
    let (_, mut airlock_route) = airlock.create_run().await?;
    // How long to wait for airlock to finish work a round left behind before the next
    // contestant runs; past it, airlock is restarted on the same data (same CA, same run).
    let drain_cap = if options.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(60)
    };
    let mut restarts = 0;

    let mut peers: Vec<Proxy> = Vec::new();
    if options.hudsucker && options.pass {
        let hs_ca = tls::ThrowawayCa::new("airlock-bench hudsucker CA")?;
        let hs_cert = dir.join("hudsucker-ca.pem");
        let hs_key = dir.join("hudsucker-ca-key.pem");
        std::fs::write(&hs_cert, &hs_ca.cert_pem)?;
        std::fs::write(&hs_key, &hs_ca.key_pem)?;
        peers.push(procs::start_hudsucker(dir, &hs_cert, &hs_key, &ca_path).await?);
    }
    let mut mitm_note = String::new();
    if options.mitmdump && options.pass {
        match procs::start_mitmdump(dir, &ca_path).await {
            Ok(Some(proxy)) => peers.push(proxy),
            Ok(None) => mitm_note = "mitmdump is not installed: skipped".to_owned(),
            Err(error) => mitm_note = format!("mitmdump did not start: {error}: skipped"),
        }
    }
    let mut squid_note = String::new();
    if options.squid && options.pass {
        match squid::start_squid(dir, &ca_path).await {
            Ok(Some(proxy)) => peers.push(proxy),
            Ok(None) => squid_note = "squid (squid-openssl) is not installed: skipped".to_owned(),
            Err(error) => squid_note = format!("squid did not start: {error}: skipped"),
        }
    }
    let mut roots = vec![origin_ca.cert_pem.clone(), airlock.proxy.ca_pem.clone()];
    roots.extend(peers.iter().map(|p| p.ca_pem.clone()));
    // A second build measured beside the first (pass rounds only; no restarts).
    let mut baseline = None;
    if let (Some(path), true) = (&options.baseline, options.pass) {
        let other =
            procs::start_airlock(path, dir, "baseline-data", &ca_path, &origin.ports).await?;
        let (_, route) = other.create_run().await?;
        roots.push(other.proxy.ca_pem.clone());
        baseline = Some((other, route));
    }
    let client_tls = tls::client_config(&roots)?;
    let mut targets = Targets::default();

    println!("# airlock benchmark\n");
    println!(
        "origin: {} on 127.0.0.1; load: this crate's closed-loop generator, {} connections, HTTP/1.1 keep-alive; {} round(s) of {:.1} s after {:.1} s warm-up",
        origin.kind,
        shape.connections,
        options.rounds,
        shape.duration.as_secs_f64(),
        shape.warmup.as_secs_f64()
    );
    println!(
        "machine: {} cores, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        procs::cpu_model()
    );
    for note in [&mitm_note, &squid_note] {
        if !note.is_empty() {
            println!("{note}");
        }
    }

    if options.pass {
        for (workload, path) in [
            ("pass, 2-byte body", "/small"),
            ("pass, 64 KiB body", "/64k"),
        ] {
            let request = Request {
                method: hyper::Method::GET,
                path: path.to_owned(),
                body: Bytes::new(),
                status: 200,
            };
            let mut contestants: Vec<(String, Route, Option<u32>, Target)> =
                vec![("direct".to_owned(), Route::Direct, None, target.clone())];
            contestants.push((
                "airlock".to_owned(),
                airlock_route.clone(),
                Some(airlock.proxy.pid),
                target.clone(),
            ));
            if let Some((other, route)) = &baseline {
                contestants.push((
                    "airlock baseline".to_owned(),
                    route.clone(),
                    Some(other.proxy.pid),
                    target.clone(),
                ));
            }
            for peer in &peers {
                // hudsucker mints a DNS SAN for an IP host, which rustls refuses
                // (docs/performance.md): it is asked for `localhost` (the origin's leaf names it).
                // squid 5 checks no IP SANs either: it is asked for `localhost` too.
                let peer_target =
                    if peer.name.starts_with("hudsucker") || peer.name.starts_with("squid") {
                        Target {
                            host: "localhost".to_owned(),
                            port: target.port,
                        }
                    } else {
                        target.clone()
                    };
                contestants.push((
                    peer.name.clone(),
                    peer.route.clone(),
                    Some(peer.pid),
                    peer_target,
                ));
            }
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); contestants.len()];
            for round in 0..options.rounds {
                for (index, (name, route, pid, target)) in contestants.iter_mut().enumerate() {
                    let mut sample =
                        measure(route, target, &client_tls, &request, &shape, *pid).await;
                    if name == "airlock baseline" {
                        let pid = pid.unwrap_or_default();
                        let (cpu, _, drained) = procs::quiesce(pid, drain_cap).await;
                        let per_request = cpu * 1e6 / sample.result.requests.max(1) as f64;
                        sample.deferred_us = Some((per_request, drained));
                    }
                    if name == "airlock" {
                        let (cpu, waited, drained) =
                            procs::quiesce(airlock.proxy.pid, drain_cap).await;
                        let per_request = cpu * 1e6 / sample.result.requests.max(1) as f64;
                        sample.deferred_us = Some((per_request, drained));
                        eprintln!(
                            "  airlock: {per_request:.1} µs/req of deferred CPU over {:.1} s after the round{}",
                            waited.as_secs_f64(),
                            if drained { "" } else { " (still busy: restarting it)" }
                        );
                        if !drained {
                            let _ = airlock.proxy.child.kill().await;
                            restarts += 1;
                            airlock = procs::start_airlock(
                                airlock_binary,
                                dir,
                                "airlock-data",
                                &ca_path,
                                &origin.ports,
                            )
                            .await?;
                            airlock_route = airlock.create_run().await?.1;
                            *route = airlock_route.clone();
                            *pid = Some(airlock.proxy.pid);
                        }
                    }
                    eprintln!(
                        "{workload} round {} {name}: {:.0} req/s, p99 {:.2} ms, {} errors",
                        round + 1,
                        sample.result.rate(),
                        sample.result.quantile_ms(0.99),
                        sample.result.errors
                    );
                    samples[index].push(sample);
                }
            }
            let summaries: Vec<Summary> = contestants
                .iter()
                .zip(&samples)
                .map(|((name, _, _, _), s)| summarise(name, s))
                .collect();
            print_table(workload, &summaries);
            targets.record_pass(path, &summaries);
        }
        if restarts > 0 {
            println!(
                "\nairlock was restarted {restarts} time(s) because it was still busy {:.0} s after a round (peak RSS is then per process)",
                drain_cap.as_secs_f64()
            );
        }
    }
    for peer in &mut peers {
        let _ = peer.child.kill().await;
    }
    if let Some((mut other, _)) = baseline {
        let _ = other.proxy.child.kill().await;
    }
    // The sections start from a fresh airlock and ledger, so nothing the pass rounds left
    // behind (journal, lineage backlog) is measured with them.
    let _ = airlock.proxy.child.kill().await;
    airlock = procs::start_airlock(
        airlock_binary,
        dir,
        "airlock-data-sections",
        &ca_path,
        &origin.ports,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_start_kib = status_kib(airlock.proxy.pid, "VmRSS").or(idle_start_kib);
    roots.push(airlock.proxy.ca_pem.clone());
    let mut client_tls = tls::client_config(&roots)?;

    if options.staging {
        sections::staging_section(
            options.rounds,
            &airlock,
            &client_tls,
            &target,
            &shape,
            &mut targets,
        )
        .await?;
    }

    if options.pg_staging {
        pgstage::section(
            options.rounds,
            airlock_binary,
            dir,
            &ca_path,
            &origin.ports,
            &target,
            &shape,
            &mut targets,
        )
        .await?;
    }

    // First contact and streaming each get a fresh airlock and ledger, so that their
    // memory figures are their own, not what staging left (docs/performance.md, "Seventh
    // round").
    let fresh = |name: &'static str| {
        let (ca_path, ports) = (ca_path.clone(), origin.ports.clone());
        async move {
            let started = procs::start_airlock(airlock_binary, dir, name, &ca_path, &ports).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, BoxError>(started)
        }
    };
    if options.first_contact {
        let _ = airlock.proxy.child.kill().await;
        airlock = fresh("airlock-data-contact").await?;
        roots.push(airlock.proxy.ca_pem.clone());
        client_tls = tls::client_config(&roots)?;
    }
    if options.first_contact {
        println!("\n### first contact (TCP + CONNECT + TLS handshake through airlock)\n");
        let contact =
            sections::first_contact(&airlock, &client_tls, contact_count, 500.min(contact_count))
                .await?;
        let row = |name: &str, us: &[u32]| {
            println!(
                "| {name} | {} | {:.3} | {:.3} |",
                us.len(),
                quantile_ms(us, 0.5),
                quantile_ms(us, 0.99)
            )
        };
        println!("| host | handshakes | p50 ms | p99 ms |\n|---|---:|---:|---:|");
        row("new name (leaf minted)", &contact.new_us);
        row("cached name", &contact.cached_us);
        let new_over_cached =
            quantile_ms(&contact.new_us, 0.5) - quantile_ms(&contact.cached_us, 0.5);
        println!("\nnew - cached at p50: {new_over_cached:.3} ms");
        targets.record(name::NEW_HOST, new_over_cached);
        if let Some(kib) = contact.rss_kib.iter().map(|(_, kib)| *kib).max() {
            targets.record(name::CONTACT_RSS, kib as f64 / 1024.0);
        }
        let rss: Vec<String> = contact
            .rss_kib
            .iter()
            .map(|(n, kib)| format!("{n} names: {:.1} MiB", *kib as f64 / 1024.0))
            .collect();
        println!(
            "airlock VmRSS (leaf cache bounded at 10,000): {}",
            rss.join(", ")
        );
    }

    if options.streaming {
        let _ = airlock.proxy.child.kill().await;
        airlock = fresh("airlock-data-streaming").await?;
        roots.push(airlock.proxy.ca_pem.clone());
        client_tls = tls::client_config(&roots)?;
        let (_, airlock_route) = airlock.create_run().await?;
        println!(
            "\n### streaming ({} MiB GET, one connection)\n",
            stream_bytes >> 20
        );
        let direct = sections::stream(&Route::Direct, &target, &client_tls, None).await?;
        let through = sections::stream(
            &airlock_route,
            &target,
            &client_tls,
            Some(airlock.proxy.pid),
        )
        .await?;
        println!("| route | bytes | MiB/s | airlock VmRSS min–max MiB |\n|---|---:|---:|---:|");
        for (name, s) in [("direct", &direct), ("airlock", &through)] {
            let rss = s
                .rss_kib
                .map(|(a, b)| format!("{:.1}–{:.1}", a as f64 / 1024.0, b as f64 / 1024.0))
                .unwrap_or("–".into());
            println!(
                "| {name} | {} | {:.0} | {rss} |",
                s.bytes,
                s.rate / 1048576.0
            );
        }
        if let Some((_, peak)) = through.rss_kib {
            targets.record(name::STREAM_RSS, peak as f64 / 1024.0);
        }
        println!(
            "\nairlock/direct throughput: {:.2}×; RSS samples: {}",
            through.rate / direct.rate,
            through.samples.len()
        );
    }

    if options.release {
        println!("\n### release (commit of approved independent effects)\n");
        println!("| effects | origins | commit s | effects/s | released | run state |\n|---:|---:|---:|---:|---:|---|");
        for ports in [&origin.ports[..1], &origin.ports[..]] {
            let r = sections::release(&airlock, &client_tls, ports, release_count).await?;
            if ports.len() == 1 {
                targets.record(name::RELEASE, r.elapsed.as_secs_f64());
            }
            println!(
                "| {} | {} | {:.3} | {:.0} | {} | {} |",
                r.effects,
                r.origins,
                r.elapsed.as_secs_f64(),
                r.effects as f64 / r.elapsed.as_secs_f64(),
                r.released,
                r.state
            );
        }
    }

    if options.idle {
        println!("\n### idle memory (airlock VmRSS)\n");
        if let Some(kib) = idle_start_kib {
            println!("after start: {:.1} MiB", kib as f64 / 1024.0);
        }
        let (opened, before, kib) =
            sections::idle(&airlock, &client_tls, &target, idle_count).await?;
        println!(
            "before the tunnels (what earlier sections left): {:.1} MiB",
            before as f64 / 1024.0
        );
        let per_tunnel = kib.saturating_sub(before) as f64 / opened.max(1) as f64;
        println!(
            "with {opened} idle intercepted tunnels (CONNECT + TLS, no request): {:.1} MiB, \
             {per_tunnel:.1} KiB per tunnel above the line before",
            kib as f64 / 1024.0,
        );
        targets.record(name::IDLE_TUNNEL, per_tunnel);
        println!(
            "airlock peak RSS over the whole run (VmHWM): {:.1} MiB",
            status_kib(airlock.proxy.pid, "VmHWM").unwrap_or(0) as f64 / 1024.0
        );
    }

    let _ = airlock.proxy.child.kill().await;
    if options.fence {
        let counts = fence::Counts::new(options.quick, options.fence_runs, options.fence_requests);
        fence::section(counts, airlock_binary, dir, &ca_path, target.port).await?;
    }
    let _ = origin.child.kill().await;
    let debug = airlock_binary
        .components()
        .any(|c| c.as_os_str() == "debug");
    targets.print((options.quick || debug).then_some(
        "not the targets' conditions (a debug build or --quick's reduced counts): the verdicts only show the table works",
    ));
    Ok(())
}
