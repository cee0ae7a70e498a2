//! Prints what analysing one request URL costs (`fingerprint::analyze_request`, the pass
//! path's first step under flows; docs/performance.md): a 300-byte API URL with paging,
//! filters and tracking fields, median of many calls:
//! `cargo run --release -p airlock-ledger --example analyze_url_cost [ITERATIONS]`.

use std::time::{Duration, Instant};

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let mut url = "https://docs.example.com/api/v2/articles/search?q=quarterly+renewal+report&page=2&per_page=25&lang=en-GB&sort=relevance&order=desc&include=summary,author,tags&since=2026-11-01T00:00:00Z&utm_source=newsletter&utm_medium=email&utm_campaign=winter_digest".to_owned();
    let mut n = 0;
    while url.len() + 8 <= 300 {
        url.push_str(&format!("&f{n}=on"));
        n += 1;
    }
    let extra = [
        ("url", url.as_str()),
        ("user-agent", "curl/8.5.0"),
        ("accept", "application/json"),
    ];
    let mut samples: Vec<Duration> = (0..iterations.div_ceil(100).max(1))
        .map(|_| {
            let started = Instant::now();
            for _ in 0..100 {
                std::hint::black_box(airlock_ledger::fingerprint::analyze_request(
                    b"", None, &extra,
                ));
            }
            started.elapsed() / 100
        })
        .collect();
    samples.sort();
    let analysis = airlock_ledger::fingerprint::analyze_request(b"", None, &extra);
    println!(
        "analyze_url_cost: {}-byte URL and 2 headers: {:.2} us per analysis (median of {iterations}), {} views",
        url.len(),
        samples[samples.len() / 2].as_secs_f64() * 1e6,
        analysis.views.len()
    );
}
