//! Prints what the pass-path flow check costs per request (docs/performance.md, "Flows on
//! the pass path"): `flows::pass::decide` for a GET with a 300-byte URL and ordinary
//! headers, against a run holding 0, 100 and 1,000 analysed reads of a `secret`-labelled
//! rule (about 2 KB each, on a sled ledger), median of many calls, for two URLs (one
//! padded with a long run of letters, the decoders' worst case, and one as API clients
//! write them), each benign and carrying a labelled value, which the check refuses; and
//! what preparing the index costs once per new read (`Index::prepare`):
//! `cargo run --release -p airlock-dataplane --example pass_flow_cost [ITERATIONS]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_dataplane::flows::pass::{decide, Index, PassRequest};
use airlock_dataplane::lineage::{Job, LineageWorker};
use airlock_ledger::{Ledger, Read, Store};
use airlock_policy::Policy;
use bytes::Bytes;

const POLICY: &str = r#"version = 1
[[rule]]
id = "vault-read"
host = "vault.internal.example"
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "docs-read"
host = "docs.example.com"
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
min_overlap_bytes = 24
action = "block"
"#;

/// A labelled read's body of about 2 KB: twelve customer rows with a per-read token.
fn read_body(read: usize) -> Vec<u8> {
    let rows: Vec<serde_json::Value> = (0..12)
        .map(|row| {
            let i = read * 12 + row;
            serde_json::json!({
                "id": i,
                "name": format!("Customer{} Surname{}", i % 977, i * 31 % 1009),
                "token": format!("tok_{:016x}{:016x}", i * 2_654_435_761, i * 40_503),
                "note": format!("renewal {} due; account manager {}", i % 4, i * 7 % 101),
            })
        })
        .collect();
    serde_json::to_vec(&rows).unwrap_or_default()
}

/// A URL of about `len` bytes on the docs host as a client writes one: an API search
/// whose query carries `carried`, with paging, filters, a timestamp and tracking fields.
fn ordinary_url_of(len: usize, carried: &str) -> String {
    let mut url = format!(
        "https://docs.example.com/api/v2/articles/search?q={carried}&page=2&per_page=25&lang=en-GB&sort=relevance&order=desc&include=summary,author,tags&since=2026-11-01T00:00:00Z&utm_source=newsletter&utm_medium=email&utm_campaign=winter_digest"
    );
    let mut n = 0;
    while url.len() + 8 <= len {
        url.push_str(&format!("&f{n}=on"));
        n += 1;
    }
    url
}

/// A URL of `len` bytes on the docs host: a search whose query carries `carried`, padded
/// with one run of letters (`abc…z` repeated): a worst case for the decoders, which try
/// the run as base32 and base64.
fn url_of(len: usize, carried: &str) -> String {
    let mut url = format!("https://docs.example.com/search?q={carried}&page=2&lang=en&pad=");
    while url.len() < len {
        url.push(char::from(b'a' + (url.len() % 26) as u8));
    }
    url
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let dir = tempfile::tempdir()?;
    let ledger: Arc<dyn Store> = Arc::new(Ledger::open(dir.path())?);
    let policy = Policy::from_toml_str(POLICY, "<pass_flow_cost>")?;
    let run = ledger.create_run(None)?;
    let worker = LineageWorker::start(ledger.clone());
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, "application/json".parse()?);
    const READS: usize = 1000;
    for i in 0..READS {
        if i % 100 == 99 {
            while ledger.read_contents(&run.id)?.len() + 200 < i {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        worker.submit(Job::Read {
            read: Box::new(Read {
                run_id: run.id.clone(),
                seq: 0,
                method: "GET".into(),
                url: format!("https://vault.internal.example/rows/{i}"),
                status: Some(200),
                request_bytes: 0,
                response_bytes: 0,
                response_digest: None,
                rule: Some("vault-read".into()),
                created_at_ms: airlock_ledger::now_ms(),
                error: None,
                audit: Vec::new(),
                labels: vec!["secret".to_owned()],
            }),
            body: vec![Bytes::from(read_body(i))],
            headers: headers.clone(),
            digest_pending: true,
        });
    }
    while ledger.read_contents(&run.id)?.len() < READS {
        std::thread::sleep(Duration::from_millis(5));
    }
    let reads = ledger.reads(&run.id)?;
    let mut contents = ledger.read_contents(&run.id)?;
    contents.sort_by_key(|(c, _)| c.seq);

    let mut request_headers = http::HeaderMap::new();
    request_headers.insert(http::header::USER_AGENT, "curl/8.5.0".parse()?);
    request_headers.insert(http::header::ACCEPT, "application/json".parse()?);
    request_headers.insert(
        "x-request-id",
        "3f6c1a2e-9b4d-4c1e-8f7a-2d5e6b7c8d9e".parse()?,
    );
    // The token of read 3's first row (row 36): the check must find it.
    let token = format!("tok_{:016x}{:016x}", 36 * 2_654_435_761_usize, 36 * 40_503);
    let urls = [
        (
            "padded URL, benign",
            url_of(300, "quarterly+renewal+report"),
        ),
        ("padded URL, carrying a labelled token", url_of(300, &token)),
        (
            "ordinary URL, benign",
            ordinary_url_of(300, "quarterly+renewal+report"),
        ),
        (
            "ordinary URL, carrying a labelled token",
            ordinary_url_of(300, &token),
        ),
    ];
    println!(
        "pass_flow_cost: a GET with a {}-byte URL and 3 headers, median of {iterations} calls, sled, one [[flow]]",
        urls[0].1.len()
    );
    for held in [0usize, 100, 1000] {
        let index = Index::new(reads.clone(), contents[..held].to_vec());
        let started = Instant::now();
        index.prepare(&policy);
        let prepare = started.elapsed();
        println!(
            "  {held:>5} analysed labelled reads, preparing the index once: {:.2} ms",
            prepare.as_secs_f64() * 1e3
        );
        for (what, url) in &urls {
            let request = PassRequest {
                url,
                target: url,
                host: "docs.example.com",
                port: 443,
                headers: &request_headers,
                body: None,
            };
            let refused = !decide(&policy, &index, &request).is_empty();
            let median = median_of(iterations, || {
                std::hint::black_box(decide(&policy, &index, &request));
            });
            println!(
                "  {held:>5} analysed labelled reads, {what:<40}: {:>8.2} us per request ({})",
                median.as_secs_f64() * 1e6,
                if refused { "refused" } else { "passes" }
            );
        }
    }
    Ok(())
}

/// The median time of `f` over `iterations` calls, timed in batches of 100.
fn median_of(iterations: usize, mut f: impl FnMut()) -> Duration {
    const BATCH: usize = 100;
    let mut samples: Vec<Duration> = (0..iterations.div_ceil(BATCH).max(1))
        .map(|_| {
            let started = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            started.elapsed() / BATCH as u32
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}
