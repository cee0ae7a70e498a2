//! Prints staged effects/s of the PostgreSQL store beside the sled ledger, store calls
//! only (no proxy): 1 client, then 64 clients in one run and 64 clients in 64 runs, 1 KiB
//! bodies, each `stage` durable on return. PostgreSQL is a throwaway server started here
//! (initdb/pg_ctl on a loopback port, fsync on). No timed assertions: figures only.
//!
//! `cargo run --release -p airlock-ledger --features conformance --example pg_stage_rate [SECONDS]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_ledger::conformance::contracts::new_effect;
use airlock_ledger::conformance::postgres::TestServer;
use airlock_ledger::{Ledger, PgStore, RunId, Store};

/// `clients` threads stage into `runs` for `seconds`; returns (effects/s, p50 ms, p99 ms).
fn rate(store: &Arc<dyn Store>, clients: usize, runs: usize, seconds: f64) -> (f64, f64, f64) {
    let ids: Vec<RunId> = (0..runs)
        .map(|_| store.create_run(None).expect("run").id)
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let body = vec![b'x'; 1024];
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|n| {
            let (store, stop, body) = (store.clone(), stop.clone(), body.clone());
            let run = ids[n % runs].clone();
            std::thread::spawn(move || {
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    store
                        .stage(new_effect(&run, &body, Vec::new()))
                        .expect("stage");
                    took.push(t.elapsed());
                }
                took
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client"))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let q = |q: f64| all[((all.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    (all.len() as f64 / elapsed, q(0.5), q(0.99))
}

fn report(name: &str, store: &Arc<dyn Store>, seconds: f64) {
    for (clients, runs) in [(1, 1), (64, 1), (64, 64)] {
        let (per_s, p50, p99) = rate(store, clients, runs, seconds);
        println!(
            "{name:<10} {clients:>2} client(s), {runs:>2} run(s): {per_s:>7.0} effects/s, p50 {p50:.2} ms, p99 {p99:.2} ms"
        );
    }
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let sled: Arc<dyn Store> = Arc::new(Ledger::open(dir.path()).expect("sled"));
    report("sled", &sled, seconds);
    drop(sled);
    let Some(server) = TestServer::start() else {
        return;
    };
    let pg: Arc<dyn Store> = Arc::new(PgStore::open(&server.database(), 16).expect("pg"));
    report("postgres", &pg, seconds);
}
