//! Start-up time and idle RSS of `airlock serve` over a ledger of many finished runs,
//! before and after `POST /v1/runs/prune` removes them (issue 19 item 5; figures in
//! docs/performance.md, "Retention"). Not a timed test: it prints what it measured.
//!
//! ```text
//! cargo build -p airlock && cargo run -p airlock-tests --example retention_bench -- RUNS EFFECTS_PER_RUN READS_PER_RUN
//! ```
//!
//! It fills a sled ledger directly (the store's own API, 8 threads): RUNS finished runs
//! (one in ten committed with every effect released and a 200-byte answer, the rest
//! aborted) with EFFECTS_PER_RUN effects of ~1 KiB each and READS_PER_RUN reads, plus 10
//! open runs that stay. Then, each time as `airlock serve` (the binary beside this one,
//! or `$AIRLOCK_BIN`): start-up (spawn until it listens, recovery included), idle RSS
//! 2 s later, `GET /v1/runs` (first page) and RSS after paging through every run; the
//! prune; and the same after a restart, and after a second restart (sled reclaims
//! segments lazily), with the ledger's size on disk at each step. A first start (which
//! makes the CA, tokens and truststore) is not measured. With `BASELINE_BIN=PATH` (an
//! `airlock` built from before the retention change) it also measures that binary's
//! start on the same ledger before the prune, for comparison.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock::client::AdminClient;
use airlock_ledger::{Ledger, NewEffect, Read, ReleaseOutcome, RunId};
use airlock_tests::Fixture;

/// An `airlock serve` process of binary `bin` on the fixture's data directory.
struct Serve {
    child: std::process::Child,
    admin: AdminClient,
}

impl Serve {
    /// Starts `bin serve` on ephemeral loopback ports and waits until it listens
    /// (`DATA/addresses.json` names its pid).
    // The child is waited for in `stop`, or killed and waited for when it never listens.
    #[allow(clippy::zombie_processes)]
    fn start(bin: &std::path::Path, fx: &Fixture, policy: &std::path::Path) -> Self {
        let data = fx.data_dir();
        let addresses = data.join("addresses.json");
        let _ = std::fs::remove_file(&addresses);
        let mut child = std::process::Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .arg("--data")
            .arg(&data)
            .arg("--policy")
            .arg(policy)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn airlock");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listening = std::fs::read_to_string(&addresses)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .filter(|v| v["pid"].as_u64() == Some(u64::from(child.id())));
            if let Some(value) = listening {
                let token = std::fs::read_to_string(data.join("admin.token")).expect("token");
                let admin = AdminClient::new(value["admin"].as_str().expect("admin"), token.trim());
                return Self { child, admin };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("airlock did not start in 60 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then waits for it to exit.
    fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn dir_mib(path: &std::path::Path) -> f64 {
    fn walk(path: &std::path::Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(path) else {
            return std::fs::metadata(path).map_or(0, |m| m.len());
        };
        entries
            .flatten()
            .map(|e| {
                let p = e.path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    e.metadata().map_or(0, |m| m.len())
                }
            })
            .sum()
    }
    walk(path) as f64 / (1024.0 * 1024.0)
}

fn fill(ledger: Arc<Ledger>, runs: usize, effects: usize, reads: usize) {
    let body: Vec<u8> = (0..1024).map(|i| b'a' + (i % 26) as u8).collect();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (ledger, next, body) = (ledger.clone(), next.clone(), body.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= runs {
                    return;
                }
                let run = ledger.create_run(Some("bench".into())).expect("run").id;
                let journal: Vec<Read> = (0..reads)
                    .map(|r| Read {
                        run_id: run.clone(),
                        seq: 0,
                        method: "GET".into(),
                        url: format!("https://example.test/page/{r}"),
                        status: Some(200),
                        request_bytes: 0,
                        response_bytes: 2048,
                        response_digest: None,
                        rule: Some("reads".into()),
                        created_at_ms: airlock_ledger::now_ms(),
                        error: None,
                        audit: Vec::new(),
                        labels: Vec::new(),
                    })
                    .collect();
                ledger.journal_reads(journal).expect("reads");
                let mut staged = Vec::new();
                for e in 0..effects {
                    let mut unique = body.clone();
                    unique.extend_from_slice(format!("{run}/{e}").as_bytes());
                    staged.push(
                        ledger
                            .stage(NewEffect {
                                run_id: &run,
                                method: "POST",
                                url: "https://example.test/hook",
                                headers: Vec::new(),
                                body: &unique,
                                rule: Some("writes"),
                                policy_revision: "bench",
                                placeholders: Vec::new(),
                                depends_on: Vec::new(),
                                inject: None,
                            })
                            .expect("stage"),
                    );
                }
                if i % 10 == 0 {
                    ledger.begin_commit(&run, true, "bench").expect("commit");
                    for effect in &staged {
                        ledger.mark_releasing(&effect.id).expect("releasing");
                        let answer = format!("{{\"ok\":true,\"id\":\"{}\"}}", effect.id);
                        ledger
                            .record_release(
                                &effect.id,
                                ReleaseOutcome {
                                    status: Some(200),
                                    body: answer.as_bytes(),
                                    body_len: answer.len() as u64,
                                    ..ReleaseOutcome::default()
                                },
                            )
                            .expect("release");
                    }
                    ledger.finish_commit(&run).expect("finish");
                } else {
                    ledger.abort(&run, "bench").expect("abort");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("filler");
    }
    for _ in 0..10 {
        let run: RunId = ledger.create_run(Some("kept".into())).expect("run").id;
        ledger
            .stage(NewEffect {
                run_id: &run,
                method: "POST",
                url: "https://example.test/hook",
                headers: Vec::new(),
                body: b"open",
                rule: Some("writes"),
                policy_revision: "bench",
                placeholders: Vec::new(),
                depends_on: Vec::new(),
                inject: None,
            })
            .expect("stage");
    }
    ledger.flush().expect("flush");
}

/// Starts `bin`, prints start-up, idle RSS and the listing figures; returns it.
async fn measure(
    bin: &std::path::Path,
    fx: &Fixture,
    policy: &std::path::Path,
    label: &str,
) -> Serve {
    let ledger_dir = fx.data_dir().join("ledger");
    let started = Instant::now();
    let airlock = Serve::start(bin, fx, policy);
    let startup = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = airlock.child.id();
    let idle = rss_mib(pid);
    let listed = Instant::now();
    let first = airlock.admin.get("/v1/runs").await.expect("runs");
    let first_page = listed.elapsed();
    let mut after = first["next"].as_str().map(str::to_owned);
    let mut runs = first["runs"].as_array().map_or(0, Vec::len);
    while let Some(cursor) = after {
        let page = airlock
            .admin
            .get(&format!("/v1/runs?limit=1000&after={cursor}"))
            .await
            .expect("page");
        runs += page["runs"].as_array().map_or(0, Vec::len);
        after = page["next"].as_str().map(str::to_owned);
    }
    let all_pages = listed.elapsed();
    println!(
        "{label:<26} start-up {:>6.0} ms  idle RSS {idle:>6.1} MiB  GET /v1/runs {:>5.0} ms  all {runs} runs {:>6.0} ms, RSS then {:>6.1} MiB  ledger {:>7.1} MiB on disk",
        startup.as_secs_f64() * 1000.0,
        first_page.as_secs_f64() * 1000.0,
        all_pages.as_secs_f64() * 1000.0,
        rss_mib(pid),
        dir_mib(&ledger_dir),
    );
    airlock
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("RUNS EFFECTS_PER_RUN READS_PER_RUN"))
        .collect();
    let (runs, effects, reads) = match args[..] {
        [r, e, d] => (r, e, d),
        _ => (1000, 20, 40),
    };
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.data_dir()).expect("data dir");
    let policy = fx.dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"deny\"\n").expect("policy");
    let filled = Instant::now();
    {
        let ledger = Arc::new(Ledger::open(&fx.data_dir().join("ledger")).expect("ledger"));
        fill(ledger.clone(), runs, effects, reads);
        println!(
            "filled {runs} finished runs x {effects} effects (~1 KiB) and {reads} reads, + 10 open runs: {} effects, {} reads in {:.1} s",
            runs * effects + 10,
            runs * reads,
            filled.elapsed().as_secs_f64()
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ours = airlock_tests::airlock_bin();
    // The first start makes the CA, tokens and truststore: not measured.
    Serve::start(&ours, &fx, &policy).stop();
    if let Some(baseline) = std::env::var_os("BASELINE_BIN") {
        let baseline = std::path::PathBuf::from(baseline);
        measure(&baseline, &fx, &policy, "before prune, BASELINE")
            .await
            .stop();
    }
    let airlock = measure(&ours, &fx, &policy, "before prune").await;
    let pruning = Instant::now();
    let report = airlock
        .admin
        .post(
            "/v1/runs/prune",
            Some(serde_json::json!({ "finished_before_s": 0 })),
        )
        .await
        .expect("prune");
    println!(
        "prune: {} runs removed in {:.1} s ({} kept); RSS then {:.1} MiB; ledger {:.1} MiB on disk",
        report["pruned"].as_array().map_or(0, Vec::len),
        pruning.elapsed().as_secs_f64(),
        report["kept"].as_array().map_or(0, Vec::len),
        rss_mib(airlock.child.id()),
        dir_mib(&fx.data_dir().join("ledger")),
    );
    airlock.stop();
    measure(&ours, &fx, &policy, "after prune, restarted")
        .await
        .stop();
    measure(&ours, &fx, &policy, "restarted again").await.stop();
    // sled keeps its file's size and reuses the freed space: fill as much again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let ledger = Arc::new(Ledger::open(&fx.data_dir().join("ledger")).expect("ledger"));
        fill(ledger, runs, effects, reads);
    }
    println!(
        "filled as much again after the prune: ledger {:.1} MiB on disk",
        dir_mib(&fx.data_dir().join("ledger"))
    );
}
