//! Prints how fast content fingerprinting runs (MB/s of input) on JSON rows, prose, and
//! a gzip body, for lineage notes: `cargo run --release -p airlock-ledger --example fingerprint_throughput`.

use std::io::Write as _;
use std::time::Instant;

use airlock_ledger::fingerprint::{analyze, overlap};

fn rows(n: usize) -> Vec<u8> {
    let rows: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "id": i,
                "name": format!("Customer{} Surname{}", i % 977, i * 31 % 1009),
                "email": format!("user{i}@domain{}.example", i % 13),
                "note": "renewal due next quarter; contact before the end of the month",
            })
        })
        .collect();
    serde_json::to_vec(&rows).unwrap_or_default()
}

fn prose(bytes: usize) -> Vec<u8> {
    let words = [
        "the",
        "quarterly",
        "report",
        "shows",
        "growth",
        "in",
        "northern",
        "regions",
        "and",
        "flat",
        "sales",
    ];
    let mut out = String::new();
    let mut i = 0usize;
    while out.len() < bytes {
        out.push_str(words[(i * 7 + i / 11) % words.len()]);
        out.push(' ');
        i += 1;
    }
    out.into_bytes()
}

fn measure(label: &str, body: &[u8], encoding: Option<&str>, rounds: usize) {
    let started = Instant::now();
    let mut fingerprints = 0;
    for _ in 0..rounds {
        fingerprints = analyze(body, encoding).winnowed().len();
    }
    let seconds = started.elapsed().as_secs_f64() / rounds as f64;
    let reference = analyze(body, encoding).winnowed();
    let compare_started = Instant::now();
    let analysis = analyze(body, encoding);
    let found = overlap(&analysis, &reference);
    let compare = compare_started.elapsed().as_secs_f64();
    println!(
        "{label:<28} {:>9} bytes  {:>8.1} MB/s  {:>7.2} ms/body  {fingerprints:>7} fingerprints  analyse+compare {:>7.2} ms  ({} bytes matched)",
        body.len(),
        body.len() as f64 / seconds / 1e6,
        seconds * 1e3,
        compare * 1e3,
        found.map(|f| f.bytes).unwrap_or(0)
    );
}

fn main() {
    println!("content fingerprinting throughput (one thread)");
    measure("JSON rows, 64 KiB", &rows(500)[..], None, 50);
    measure("JSON rows, 1 MiB", &rows(8_000), None, 5);
    measure("JSON rows, 4 MiB", &rows(32_000), None, 2);
    measure("prose, 64 KiB", &prose(64 * 1024), None, 50);
    measure("prose, 1 MiB", &prose(1024 * 1024), None, 5);
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = encoder.write_all(&rows(8_000));
    let gz = encoder.finish().unwrap_or_default();
    measure("gzip JSON rows (1 MiB raw)", &gz, Some("gzip"), 5);
}
