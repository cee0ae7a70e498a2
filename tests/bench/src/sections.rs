//! The sections beside the pass table: staging, first contact, streaming, release, idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;

use crate::load::{self, LoadShape, Request, Route, Target};
use crate::procs::{status_kib, Airlock};
use crate::BoxError;

/// The staging sections' request: a POST of a 1 KiB JSON body to the staged path
/// `/stage`, answered 202.
pub fn stage_request() -> Request {
    let body = format!("{{\"event\":\"bench\",\"pad\":\"{}\"}}", "x".repeat(1000));
    Request {
        method: hyper::Method::POST,
        path: "/stage".to_owned(),
        body: Bytes::from(body),
        status: 202,
    }
}

/// Staging: `clients` concurrent clients POSTing 1 KiB bodies to a staged path.
pub async fn staging(
    airlock: &Airlock,
    tls: &Arc<rustls::ClientConfig>,
    target: &Target,
    clients: usize,
    shape: &LoadShape,
) -> Result<load::LoadResult, BoxError> {
    let (_, route) = airlock.create_run().await?;
    let request = stage_request();
    let shape = LoadShape {
        connections: clients,
        ..shape.clone()
    };
    Ok(load::run(route, target.clone(), tls.clone(), request, &shape, || {}).await)
}

/// The bench's section `### staging`: 1 and 64 clients, `rounds` times each, beside the
/// raw sync rates of the ledger's disk; records the staging targets.
pub async fn staging_section(
    rounds: usize,
    airlock: &Airlock,
    client_tls: &Arc<rustls::ClientConfig>,
    target: &Target,
    shape: &LoadShape,
    targets: &mut crate::targets::Targets,
) -> Result<(), BoxError> {
    use crate::rounds::{median, median_spread};
    use crate::targets::name;
    println!("\n### staging (POST 1 KiB to a staged path, flushed before the 202)\n");
    let (fsync, fdatasync) = raw_fsync_rate(&airlock.data, Duration::from_secs(2))?;
    println!("raw disk, same file system as the ledger: {fsync:.0}/s appending 4 KiB + fsync; {fdatasync:.0}/s overwriting 4 KiB in a preallocated file + fdatasync\n");
    println!(
        "| clients | effects/s (spread) | p50 ms | p99 ms | effects per fdatasync-time | errors |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for clients in [1, 64] {
        let mut runs = Vec::new();
        for _ in 0..rounds {
            runs.push(staging(airlock, client_tls, target, clients, shape).await?);
        }
        let rates: Vec<f64> = runs.iter().map(load::LoadResult::rate).collect();
        let (rate, spread) = median_spread(&rates);
        let p50 = median(&mut runs.iter().map(|r| r.quantile_ms(0.5)).collect::<Vec<_>>());
        let p99 = median(&mut runs.iter().map(|r| r.quantile_ms(0.99)).collect::<Vec<_>>());
        let errors: u64 = runs.iter().map(|r| r.errors).sum();
        match clients {
            1 => targets.record(name::STAGE_1_P50, p50),
            _ => targets.record(name::STAGE_64, rate),
        }
        println!(
            "| {clients} | {rate:.0} (±{:.0}%) | {p50:.2} | {p99:.2} | {:.1} | {errors} |",
            spread / 2.0,
            rate / fdatasync
        );
        if let Some(error) = runs.iter().find_map(|r| r.first_error.clone()) {
            println!("first error: {error}");
        }
    }
    Ok(())
}

/// The raw sync rates of the disk under `dir`, per second: (appending 4 KiB + fsync,
/// overwriting 4 KiB of a preallocated file + fdatasync), each for `duration`.
pub fn raw_fsync_rate(dir: &std::path::Path, duration: Duration) -> Result<(f64, f64), BoxError> {
    use std::io::{Seek as _, Write as _};
    let path = dir.join("fsync-probe");
    let block = [0x5au8; 4096];
    let mut rates = [0.0; 2];
    for (index, overwrite) in [false, true].into_iter().enumerate() {
        let mut file = std::fs::File::create(&path)?;
        if overwrite {
            file.write_all(&vec![0u8; 4 << 20])?;
            file.sync_all()?;
        }
        let start = Instant::now();
        let mut count = 0u64;
        while start.elapsed() < duration {
            if overwrite {
                file.seek(std::io::SeekFrom::Start((count % 1024) * 4096))?;
                file.write_all(&block)?;
                file.sync_data()?;
            } else {
                file.write_all(&block)?;
                file.sync_all()?;
            }
            count += 1;
        }
        rates[index] = count as f64 / start.elapsed().as_secs_f64();
        drop(file);
        std::fs::remove_file(&path)?;
    }
    Ok((rates[0], rates[1]))
}

/// First contact: CONNECT + TLS handshake times to new host names (a leaf is minted for
/// each) and to one cached name; airlock's RSS before and after the new names.
pub struct FirstContact {
    /// Handshake times to new names, sorted, microseconds.
    pub new_us: Vec<u32>,
    /// Handshake times to the cached name, sorted, microseconds.
    pub cached_us: Vec<u32>,
    /// (names minted so far, VmRSS KiB) samples.
    pub rss_kib: Vec<(usize, u64)>,
}

/// Measures first contact with `count` new names.
pub async fn first_contact(
    airlock: &Airlock,
    tls: &Arc<rustls::ClientConfig>,
    count: usize,
    cached_count: usize,
) -> Result<FirstContact, BoxError> {
    let (_, route) = airlock.create_run().await?;
    let pid = airlock.proxy.pid;
    let nonce = std::process::id();
    let cached = Target {
        host: format!("cached-{nonce}.bench.test"),
        port: 443,
    };
    handshake(&route, &cached, tls).await?;
    let mut result = FirstContact {
        new_us: Vec::with_capacity(count),
        cached_us: Vec::with_capacity(cached_count),
        rss_kib: vec![(0, status_kib(pid, "VmRSS").unwrap_or(0))],
    };
    // Interleave cached and new contacts so both see the same machine load.
    let every = (count / cached_count.max(1)).max(1);
    for i in 0..count {
        let target = Target {
            host: format!("h{i}-{nonce}.bench.test"),
            port: 443,
        };
        result.new_us.push(handshake(&route, &target, tls).await?);
        if i % every == 0 && result.cached_us.len() < cached_count {
            result
                .cached_us
                .push(handshake(&route, &cached, tls).await?);
        }
        if (i + 1) % 2_000 == 0 || i + 1 == count {
            result
                .rss_kib
                .push((i + 1, status_kib(pid, "VmRSS").unwrap_or(0)));
        }
    }
    result.new_us.sort_unstable();
    result.cached_us.sort_unstable();
    Ok(result)
}

/// TCP connect + CONNECT + TLS handshake, microseconds.
async fn handshake(
    route: &Route,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<u32, BoxError> {
    let start = Instant::now();
    let stream = load::open_tls(route, target, tls).await?;
    let micros = start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
    drop(stream);
    Ok(micros)
}

/// One streamed download: bytes/s and the proxy's VmRSS range while it ran.
pub struct Stream {
    /// Bytes received.
    pub bytes: u64,
    /// Throughput, bytes per second.
    pub rate: f64,
    /// (min, max) VmRSS of the proxy while streaming, KiB; None when direct.
    pub rss_kib: Option<(u64, u64)>,
    /// VmRSS samples (every 100 ms), KiB.
    pub samples: Vec<u64>,
}

/// Downloads `/stream` once over `route`, sampling `pid`'s RSS every 100 ms.
pub async fn stream(
    route: &Route,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
    pid: Option<u32>,
) -> Result<Stream, BoxError> {
    let mut sender = load::open(route, target, tls).await?;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while let Some(pid) = pid {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                samples.extend(status_kib(pid, "VmRSS"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        })
    };
    let start = Instant::now();
    sender.ready().await?;
    let request = hyper::Request::builder()
        .uri("/stream")
        .header(hyper::header::HOST, target.authority())
        .body(http_body_util::Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    if !response.status().is_success() {
        return Err(format!("GET /stream answered {}", response.status()).into());
    }
    let mut body = response.into_body();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
        }
    }
    let elapsed = start.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await.unwrap_or_default();
    let rss_kib = match (samples.iter().min(), samples.iter().max()) {
        (Some(min), Some(max)) => Some((*min, *max)),
        _ => None,
    };
    Ok(Stream {
        bytes,
        rate: bytes as f64 / elapsed.as_secs_f64(),
        rss_kib,
        samples,
    })
}

/// One release measurement.
pub struct Release {
    /// Effects committed.
    pub effects: usize,
    /// Origins (ports) they were spread over.
    pub origins: usize,
    /// Time of the commit call.
    pub elapsed: Duration,
    /// Effects the report says were released.
    pub released: u64,
    /// The run's final state.
    pub state: String,
}

/// Stages `count` POSTs spread over `ports`, approves them all, then times the commit.
pub async fn release(
    airlock: &Airlock,
    tls: &Arc<rustls::ClientConfig>,
    ports: &[u16],
    count: usize,
) -> Result<Release, BoxError> {
    let (run, route) = airlock.create_run().await?;
    let request = Request {
        method: hyper::Method::POST,
        path: "/stage".to_owned(),
        body: Bytes::from_static(b"{\"event\":\"release\"}"),
        status: 202,
    };
    // Stage: one connection per port, effects spread round-robin.
    let mut tasks = Vec::new();
    for (index, port) in ports.iter().enumerate() {
        let share = count / ports.len() + usize::from(index < count % ports.len());
        let (route, tls, request) = (route.clone(), tls.clone(), request.clone());
        let target = Target {
            host: "127.0.0.1".to_owned(),
            port: *port,
        };
        tasks.push(tokio::spawn(async move {
            let mut sender = load::open(&route, &target, &tls).await?;
            for _ in 0..share {
                load::send(&mut sender, &target, &request).await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let effects = airlock
        .admin(hyper::Method::GET, &format!("/v1/runs/{run}/effects"), None)
        .await?;
    let ids: Vec<String> = effects["effects"]
        .as_array()
        .ok_or("no effects list")?
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    if ids.len() != count {
        return Err(format!("staged {} effects, expected {count}", ids.len()).into());
    }
    for chunk in ids.chunks(16) {
        let mut approvals = Vec::new();
        for id in chunk {
            let path = format!("/v1/effects/{id}/approve");
            approvals.push(async move { airlock.admin(hyper::Method::POST, &path, None).await });
        }
        for approval in approvals {
            approval.await?;
        }
    }
    let start = Instant::now();
    let report = airlock
        .admin(hyper::Method::POST, &format!("/v1/runs/{run}/commit"), None)
        .await?;
    let elapsed = start.elapsed();
    Ok(Release {
        effects: count,
        origins: ports.len(),
        elapsed,
        released: report["counts"]["released"].as_u64().unwrap_or(0),
        state: report["state"].as_str().unwrap_or("?").to_owned(),
    })
}

/// Idle: airlock's VmRSS with `count` idle intercepted tunnels open (CONNECT + TLS done,
/// no request yet). Returns (tunnels opened, VmRSS KiB just before opening them, VmRSS KiB
/// with them open): the per-tunnel cost is the difference over the count, because what
/// the earlier sections left in airlock's heap (first contact, streaming) is in both.
pub async fn idle(
    airlock: &Airlock,
    tls: &Arc<rustls::ClientConfig>,
    target: &Target,
    count: usize,
) -> Result<(usize, u64, u64), BoxError> {
    let (_, route) = airlock.create_run().await?;
    let before = status_kib(airlock.proxy.pid, "VmRSS").unwrap_or(0);
    let streams = Arc::new(tokio::sync::Mutex::new(Vec::with_capacity(count)));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..32 {
        let (route, target, tls, streams, next) = (
            route.clone(),
            target.clone(),
            tls.clone(),
            streams.clone(),
            next.clone(),
        );
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                let stream = load::open_tls(&route, &target, &tls).await?;
                streams.lock().await.push(stream);
            }
            Ok::<_, BoxError>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = status_kib(airlock.proxy.pid, "VmRSS").unwrap_or(0);
    let opened = streams.lock().await.len();
    drop(streams);
    Ok((opened, before, rss))
}
