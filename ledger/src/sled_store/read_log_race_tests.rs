//! The read log under concurrent use and odd inputs: cases that tried to break it
//! (a break-it session); each asserts what a caller must be able to rely on.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::model::now_ms;
use crate::Ledger;

fn read(run: &RunId, url: &str) -> Read {
    Read {
        run_id: run.clone(),
        seq: 0,
        method: "GET".into(),
        url: url.into(),
        status: Some(200),
        request_bytes: 0,
        response_bytes: 2,
        response_digest: None,
        rule: Some("pass".into()),
        created_at_ms: now_ms(),
        error: None,
        audit: Vec::new(),
        labels: Vec::new(),
    }
}

fn content(seq: u64) -> ReadContent {
    ReadContent {
        seq,
        notable: Vec::new(),
        fingerprints: 2,
        truncated: false,
        skipped: None,
    }
}

/// `error: cause`, to say which check failed.
fn chain(error: &crate::LedgerError) -> String {
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// Readers of a run that a writer appends to at the same time (the admin API and the UI
/// read while the lineage worker journals): every read of the journal succeeds and is a
/// prefix of it, numbered 1, 2, 3, … without a gap, never shorter than one before it.
#[test]
fn readers_of_a_run_being_written_see_a_whole_growing_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    let run = RunId::generate();
    // A journal of some size first, so that reading it takes many read(2) calls.
    for i in 0..200 {
        let batch = (0..20)
            .map(|j| read(&run, &format!("https://origin.test/{i}/{j}")))
            .collect();
        ledger.journal_reads(batch).expect("journal");
    }
    let done = AtomicBool::new(false);
    let failures = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 0..5000 {
                let batch = (0..4)
                    .map(|j| read(&run, &format!("https://origin.test/w/{i}/{j}")))
                    .collect();
                ledger.journal_reads(batch).expect("journal");
                if i % 3 == 0 {
                    ledger
                        .store_read_content(&run, &content(i), &[1, 2, 3])
                        .expect("content");
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        let readers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut failures = Vec::new();
                    let mut longest = 0;
                    while !done.load(Ordering::SeqCst) {
                        match ledger.reads(&run) {
                            Ok(reads) => {
                                let numbered =
                                    reads.iter().enumerate().all(|(i, r)| r.seq == i as u64 + 1);
                                if !numbered || reads.len() < longest {
                                    failures.push(format!(
                                        "{} reads (numbered on: {numbered}) after {longest}",
                                        reads.len()
                                    ));
                                }
                                longest = longest.max(reads.len());
                            }
                            Err(e) => failures.push(format!("reads: {}", chain(&e))),
                        }
                        if let Err(e) = ledger.read_contents(&run) {
                            failures.push(format!("read_contents: {}", chain(&e)));
                        }
                    }
                    failures
                })
            })
            .collect();
        writer.join().expect("writer");
        readers
            .into_iter()
            .flat_map(|r| r.join().expect("reader"))
            .collect::<Vec<_>>()
    });
    assert!(
        failures.is_empty(),
        "{} reads of the journal went wrong, the first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(
        ledger.reads(&run).expect("reads").len(),
        200 * 20 + 5000 * 4
    );
}
