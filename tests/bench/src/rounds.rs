//! One contestant's measured round of the pass workloads and the tables that summarise the
//! rounds: req/s, latency, proxy and machine CPU per request, the ratios and the CPU budget.

use std::sync::Arc;

use crate::load::{self, LoadResult, LoadShape, Request, Route, Target};
use crate::procs::{self, cpu_seconds, status_kib};

/// A load measurement of one contestant in one round.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    pub(crate) result: LoadResult,
    pub(crate) cpu_per_request_us: Option<f64>,
    pub(crate) peak_rss_kib: Option<u64>,
    /// The proxy's file-backed resident memory at the round's end (`RssFile`: its
    /// executable's and libraries' pages mapped from the page cache; clean, shared and
    /// reclaimable, unlike the heap), KiB.
    pub(crate) rss_file_kib: Option<u64>,
    /// CPU the whole machine spent per request in the window (load generator, origin,
    /// proxy and kernel), in microseconds.
    pub(crate) machine_us: f64,
    /// The fraction of the machine's cores that were busy in the window (0..=1).
    pub(crate) machine_busy: f64,
    /// CPU the proxy spent after the window on work the window left behind (airlock's
    /// lineage worker), per request; and whether it finished within the cap.
    pub(crate) deferred_us: Option<(f64, bool)>,
    /// The share (0..=1) of the proxy's CPU in the window spent by its thread named
    /// [`LINEAGE_THREAD`] (airlock's read journal and lineage analysis, off the request
    /// path); `None` for a proxy without that thread.
    pub(crate) lineage_share: Option<f64>,
    /// The proxy's context switches per request in the window (all its threads), and its
    /// thread count at the window's end.
    pub(crate) switches: Option<(f64, usize)>,
}

/// airlock's lineage worker thread (`proxy/dataplane/src/lineage.rs`): it journals every
/// passed read and analyses it.
pub(crate) const LINEAGE_THREAD: &str = "airlock-lineage";

pub(crate) async fn measure(
    route: &Route,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
    request: &Request,
    shape: &LoadShape,
    pid: Option<u32>,
) -> Sample {
    // (proxy CPU, machine CPU) when the measured window starts.
    let start_cpu = Arc::new(std::sync::Mutex::new((f64::NAN, f64::NAN, f64::NAN)));
    let start_switches = Arc::new(std::sync::Mutex::new(None::<u64>));
    let marker = {
        let start_cpu = start_cpu.clone();
        let start_switches = start_switches.clone();
        move || {
            let proxy = pid.map_or(f64::NAN, cpu_seconds);
            let lineage = pid.map_or(f64::NAN, |p| procs::thread_cpu_seconds(p, LINEAGE_THREAD));
            *start_cpu.lock().unwrap_or_else(|e| e.into_inner()) =
                (proxy, procs::machine_busy_seconds(), lineage);
            *start_switches.lock().unwrap_or_else(|e| e.into_inner()) =
                pid.and_then(procs::context_switches).map(|(n, _)| n);
        }
    };
    let result = load::run(
        route.clone(),
        target.clone(),
        tls.clone(),
        request.clone(),
        shape,
        marker,
    )
    .await;
    let machine_end = procs::machine_busy_seconds();
    let (start_proxy, start_machine, start_lineage) =
        *start_cpu.lock().unwrap_or_else(|e| e.into_inner());
    let end_proxy = pid.map_or(f64::NAN, cpu_seconds);
    let switches = match (
        *start_switches.lock().unwrap_or_else(|e| e.into_inner()),
        pid.and_then(procs::context_switches),
    ) {
        (Some(start), Some((end, threads))) if result.requests > 0 => Some((
            end.saturating_sub(start) as f64 / result.requests as f64,
            threads,
        )),
        _ => None,
    };
    let lineage_share = pid
        .map(|pid| {
            (procs::thread_cpu_seconds(pid, LINEAGE_THREAD) - start_lineage)
                / (end_proxy - start_proxy)
        })
        .filter(|share| share.is_finite());
    let cpu_per_request_us =
        pid.map(|_| (end_proxy - start_proxy) * 1e6 / result.requests.max(1) as f64);
    let machine_cpu = machine_end - start_machine;
    // No request completed: no per-request figure (rather than the whole window's CPU).
    let machine_us = if result.requests == 0 {
        f64::NAN
    } else {
        machine_cpu * 1e6 / result.requests as f64
    };
    let machine_busy =
        machine_cpu / (result.elapsed.as_secs_f64().max(1e-9) * procs::machine_cores());
    Sample {
        result,
        cpu_per_request_us,
        peak_rss_kib: pid.and_then(|pid| status_kib(pid, "VmHWM")),
        rss_file_kib: pid.and_then(|pid| status_kib(pid, "RssFile")),
        machine_us,
        machine_busy,
        deferred_us: None,
        lineage_share,
        switches,
    }
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Median and spread ((max - min) / median, percent) of `values`.
pub(crate) fn median_spread(values: &[f64]) -> (f64, f64) {
    let mut sorted = values.to_vec();
    let m = median(&mut sorted);
    let spread = match (sorted.first(), sorted.last()) {
        (Some(min), Some(max)) if m > 0.0 => (max - min) / m * 100.0,
        _ => 0.0,
    };
    (m, spread)
}

/// Medians of one contestant over the rounds of one workload.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    pub(crate) name: String,
    pub(crate) rate: (f64, f64),
    p50: (f64, f64),
    pub(crate) p99: (f64, f64),
    pub(crate) cpu_us: Option<(f64, f64)>,
    /// Median CPU per request including deferred work; true when every round drained.
    pub(crate) cpu_total_us: Option<(f64, bool)>,
    pub(crate) peak_rss_mib: Option<f64>,
    /// The largest file-backed part of the proxy's RSS at a round's end, MiB.
    pub(crate) rss_file_mib: Option<f64>,
    /// Median share of the proxy's CPU spent by its lineage thread (0..=1), with its spread.
    pub(crate) lineage_share: Option<(f64, f64)>,
    /// Median context switches per request, and the most threads seen.
    pub(crate) switches: Option<(f64, usize)>,
    /// Median CPU of the whole machine per request, µs, with its spread.
    pub(crate) machine_us: (f64, f64),
    /// Median fraction of the machine's cores busy (0..=1).
    pub(crate) machine_busy: f64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) fn summarise(name: &str, samples: &[Sample]) -> Summary {
    let collect =
        |f: &dyn Fn(&Sample) -> f64| median_spread(&samples.iter().map(f).collect::<Vec<_>>());
    let cpu: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.cpu_per_request_us)
        .collect();
    Summary {
        name: name.to_owned(),
        rate: collect(&|s| s.result.rate()),
        p50: collect(&|s| s.result.quantile_ms(0.50)),
        p99: collect(&|s| s.result.quantile_ms(0.99)),
        cpu_us: (!cpu.is_empty()).then(|| median_spread(&cpu)),
        cpu_total_us: {
            let totals: Vec<f64> = samples
                .iter()
                .filter_map(|s| Some(s.cpu_per_request_us? + s.deferred_us?.0))
                .collect();
            let drained = samples.iter().all(|s| s.deferred_us.is_none_or(|d| d.1));
            (!totals.is_empty()).then(|| (median_spread(&totals).0, drained))
        },
        lineage_share: {
            let shares: Vec<f64> = samples.iter().filter_map(|s| s.lineage_share).collect();
            (!shares.is_empty()).then(|| median_spread(&shares))
        },
        switches: {
            let per_request: Vec<f64> = samples
                .iter()
                .filter_map(|s| s.switches.map(|(n, _)| n))
                .collect();
            let threads = samples
                .iter()
                .filter_map(|s| s.switches.map(|(_, t)| t))
                .max();
            threads.map(|t| (median_spread(&per_request).0, t))
        },
        peak_rss_mib: samples
            .iter()
            .filter_map(|s| s.peak_rss_kib)
            .max()
            .map(|k| k as f64 / 1024.0),
        rss_file_mib: samples
            .iter()
            .filter_map(|s| s.rss_file_kib)
            .max()
            .map(|k| k as f64 / 1024.0),
        machine_us: collect(&|s| s.machine_us),
        machine_busy: collect(&|s| s.machine_busy).0,
        errors: samples.iter().map(|s| s.result.errors).sum(),
        first_error: samples.iter().find_map(|s| s.result.first_error.clone()),
    }
}

/// What a proxy may cost for req/s of 0.6× and 0.7× direct, from this run's figures.
///
/// req/s is busy core-seconds per second ÷ machine CPU per request. If a proxy leaves the
/// rest of the machine's work per request as in the direct round (`d` µs; the extra hop
/// only adds to it) and the cores are busy a fraction `u` of the time (`u_d` in the direct
/// round), it reaches `r`× direct only if its own CPU per request is at most
/// `d × (u / (u_d × r) − 1)`. Printed for `u = u_d` and for `u = 1` (cores fully busy, the
/// most generous case). Nothing is printed when a figure is missing.
fn print_budget(direct: &Summary, airlock: &Summary) {
    let (d, u_d) = (direct.machine_us.0, direct.machine_busy);
    if !(d.is_finite() && d > 0.0 && u_d.is_finite() && u_d > 0.0) {
        return;
    }
    let budget = |u: f64, r: f64| d * (u / (u_d * r) - 1.0);
    let outside = match airlock.cpu_us {
        Some((cpu, _)) if airlock.machine_us.0.is_finite() => format!(
            ", {:.1} µs of it outside airlock's process (other processes, and kernel work such as softirq not charged to a process)",
            airlock.machine_us.0 - cpu
        ),
        _ => String::new(),
    };
    println!(
        "\nCPU budget: direct used {d:.1} µs of the machine per request with {:.0}% of {} cores busy; \
         a proxy that adds nothing to the rest of the machine's work per request reaches 0.6× direct \
         only at ≤ {:.1} µs of its own CPU per request at that utilisation (≤ {:.1} µs with the cores fully busy), \
         0.7× at ≤ {:.1} µs (≤ {:.1} µs). Airlock's round: {:.1} µs of the machine per request, {:.0}% busy{outside}",
        u_d * 100.0,
        procs::machine_cores(),
        budget(u_d, 0.6),
        budget(1.0, 0.6),
        budget(u_d, 0.7),
        budget(1.0, 0.7),
        airlock.machine_us.0,
        airlock.machine_busy * 100.0,
    );
}

pub(crate) fn print_table(workload: &str, summaries: &[Summary]) {
    println!("\n### {workload}\n");
    println!("| contestant | req/s (spread) | p50 ms (spread) | p99 ms (spread) | proxy CPU µs/req (spread) | incl. deferred | machine CPU µs/req (spread) | proxy peak RSS MiB (file-backed) | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in summaries {
        let cpu = s
            .cpu_us
            .map(|(m, sp)| format!("{m:.1} (±{:.0}%)", sp / 2.0))
            .unwrap_or("–".into());
        let rss = match (s.peak_rss_mib, s.rss_file_mib) {
            (Some(m), Some(file)) => format!("{m:.1} ({file:.1})"),
            (Some(m), None) => format!("{m:.1}"),
            _ => "–".into(),
        };
        let total = s
            .cpu_total_us
            .map(|(m, drained)| format!("{}{m:.1}", if drained { "" } else { "≥" }))
            .unwrap_or("–".into());
        println!(
            "| {} | {:.0} (±{:.0}%) | {:.2} (±{:.0}%) | {:.2} (±{:.0}%) | {cpu} | {total} | {:.1} (±{:.0}%) | {rss} | {} |",
            s.name,
            s.rate.0,
            s.rate.1 / 2.0,
            s.p50.0,
            s.p50.1 / 2.0,
            s.p99.0,
            s.p99.1 / 2.0,
            s.machine_us.0,
            s.machine_us.1 / 2.0,
            s.errors
        );
    }
    let find = |prefix: &str| summaries.iter().find(|s| s.name.starts_with(prefix));
    if let Some(airlock) = find("airlock") {
        let mut ratios = Vec::new();
        for other in [
            "direct",
            "airlock baseline",
            "hudsucker",
            "squid",
            "mitmdump",
        ] {
            if let Some(o) = find(other) {
                let cpu = match (airlock.cpu_us, o.cpu_us) {
                    (Some(a), Some(b)) => format!(
                        ", CPU/req {:.2}× (incl. deferred {:.2}×)",
                        a.0 / b.0,
                        airlock.cpu_total_us.map_or(a.0, |t| t.0) / b.0
                    ),
                    _ => String::new(),
                };
                ratios.push(format!(
                    "airlock/{other}: req/s {:.2}×, p99 {:.2}×{cpu}",
                    airlock.rate.0 / o.rate.0,
                    airlock.p99.0 / o.p99.0
                ));
            }
        }
        println!("\n{}", ratios.join("; "));
        let structure: Vec<String> = summaries
            .iter()
            .filter_map(|s| {
                let (switches, threads) = s.switches?;
                Some(format!(
                    "{} {switches:.1} context switches/req, {threads} threads",
                    s.name
                ))
            })
            .collect();
        if !structure.is_empty() {
            println!(
                "\nstructure (the proxy process, all threads, /proc/PID/task/*/status): {}",
                structure.join("; ")
            );
        }
        for s in summaries.iter().filter(|s| s.name.starts_with("airlock")) {
            if let Some((share, spread)) = s.lineage_share {
                println!(
                    "\n{}: its `{LINEAGE_THREAD}` thread (the read journal and lineage analysis, off the request path) used {:.1}% (±{:.0}%) of its CPU in the window",
                    s.name,
                    share * 100.0,
                    spread / 2.0
                );
            }
        }
        if let Some(direct) = find("direct") {
            print_budget(direct, airlock);
        }
    }
    for s in summaries.iter().filter(|s| s.errors > 0) {
        println!(
            "\n{}: {} errors, first: {}",
            s.name,
            s.errors,
            s.first_error.as_deref().unwrap_or("?")
        );
    }
}
