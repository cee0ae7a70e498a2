//! The read log under concurrent use and odd inputs: cases that tried to break it
//! (a break-it session); each asserts what a caller must be able to rely on.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::Ledger;

use super::tests::{content, read};

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

/// Writers on more runs than stay open ([`OPEN_RUNS`]), several of them on the same runs
/// at once (the lineage worker and a `submit` that journals itself when the queue is
/// full), while readers read runs whose files are closed and reopened under them: every
/// run ends numbered 1..=n with each read once, and no read of the journal fails.
#[test]
fn writers_and_readers_on_more_runs_than_stay_open_number_every_run_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    let runs: Vec<RunId> = (0..OPEN_RUNS + 64).map(|_| RunId::generate()).collect();
    let (writers, rounds) = (3usize, 6usize);
    let done = AtomicBool::new(false);
    let failures = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (ledger, runs) = (&ledger, &runs);
                s.spawn(move || {
                    for round in 0..rounds {
                        for (i, run) in runs.iter().enumerate() {
                            // Batches of 1..=3 of two runs at once, in a different order per writer.
                            let other = &runs[(i * 7 + w + round) % runs.len()];
                            let batch = vec![
                                read(run, &format!("https://o.test/{w}/{round}/a")),
                                read(other, &format!("https://o.test/{w}/{round}/b")),
                                read(run, &format!("https://o.test/{w}/{round}/c")),
                            ];
                            ledger.journal_reads(batch).expect("journal");
                        }
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (ledger, runs, done) = (&ledger, &runs, &done);
                s.spawn(move || {
                    let mut failures = Vec::new();
                    let mut i = r;
                    while !done.load(Ordering::SeqCst) {
                        let run = &runs[(i * 13) % runs.len()];
                        i += 1;
                        match ledger.reads(run) {
                            Ok(reads) => {
                                if !reads.iter().enumerate().all(|(i, r)| r.seq == i as u64 + 1) {
                                    failures.push(format!("{run}: a gap or a repeat"));
                                }
                            }
                            Err(e) => failures.push(format!("reads: {}", chain(&e))),
                        }
                        if let Err(e) = ledger.read_count(run) {
                            failures.push(format!("read_count: {}", chain(&e)));
                        }
                    }
                    failures
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("writer");
        }
        done.store(true, Ordering::SeqCst);
        readers
            .into_iter()
            .flat_map(|r| r.join().expect("reader"))
            .collect::<Vec<_>>()
    });
    assert!(failures.is_empty(), "{failures:?}");
    let mut total = 0;
    for run in &runs {
        let reads = ledger.reads(run).expect("reads");
        let seqs: Vec<u64> = reads.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{run}");
        assert_eq!(ledger.read_count(run).expect("count"), seqs.len() as u64);
        total += seqs.len();
    }
    assert_eq!(total, writers * rounds * runs.len() * 3);
    assert!(ledger.read_log.lock().runs.len() <= OPEN_RUNS);
}

/// Two different run ids never share a file: `x2f` is a plain id, `/` is hex-encoded as
/// `x2f`.
#[test]
fn a_plain_id_that_looks_like_a_hex_name_has_a_journal_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    let (plain, odd) = (RunId("x2f".into()), RunId("/".into()));
    ledger
        .journal_read(read(&plain, "https://plain/"))
        .expect("journal");
    ledger
        .journal_read(read(&odd, "https://odd/"))
        .expect("journal");
    let plain_reads = ledger.reads(&plain).expect("reads");
    assert_eq!(
        plain_reads
            .iter()
            .map(|r| r.url.as_str())
            .collect::<Vec<_>>(),
        ["https://plain/"]
    );
    let odd_reads = ledger.reads(&odd).expect("reads");
    assert_eq!(
        odd_reads
            .iter()
            .map(|r| (r.seq, r.url.as_str()))
            .collect::<Vec<_>>(),
        [(1, "https://odd/")]
    );
}

/// A long run id (RunId is a plain `String`) is journaled like any other: its file name
/// stays within a file system's 255 bytes.
#[test]
fn a_long_run_id_is_journaled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    for id in ["r".repeat(129), "é".repeat(100), "a/".repeat(200)] {
        let run = RunId(id);
        let journaled = ledger
            .journal_read(read(&run, "https://a/"))
            .expect("journal");
        assert_eq!(journaled.seq, 1);
        assert_eq!(ledger.reads(&run).expect("reads").len(), 1);
    }
}

/// Odd files found at open: empty, only garbage, and one whose last record is an
/// analysis: each numbers on from its last whole record or the floor sled keeps, whichever
/// is higher (the read numbered 1 was handed out, so an emptied file goes on at 2).
#[test]
fn an_empty_a_garbage_and_an_analysis_last_file_number_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (empty, garbage, analysed) = (RunId::generate(), RunId::generate(), RunId::generate());
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        for run in [&empty, &garbage, &analysed] {
            ledger
                .journal_read(read(run, "https://a/1"))
                .expect("journal");
        }
        ledger
            .store_read_content(&analysed, &content(1), &[5])
            .expect("content");
    }
    let file = |run: &RunId| dir.path().join("reads").join(format!("{run}.log"));
    std::fs::write(file(&empty), b"").expect("empty");
    std::fs::write(file(&garbage), vec![0xa5u8; 3000]).expect("garbage");
    let ledger = Ledger::open(dir.path()).expect("reopen");
    assert!(ledger.reads(&empty).expect("reads").is_empty());
    assert!(ledger.reads(&garbage).expect("reads").is_empty());
    assert_eq!(ledger.read_count(&garbage).expect("count"), 0);
    assert_eq!(
        ledger
            .journal_read(read(&empty, "https://a/"))
            .expect("j")
            .seq,
        2
    );
    assert_eq!(
        ledger
            .journal_read(read(&garbage, "https://a/"))
            .expect("j")
            .seq,
        2
    );
    assert_eq!(
        ledger
            .journal_read(read(&analysed, "https://a/2"))
            .expect("j")
            .seq,
        2
    );
    assert_eq!(ledger.read_contents(&analysed).expect("contents").len(), 1);
    assert_eq!(ledger.read_count(&analysed).expect("count"), 2);
}

/// A tmpfs mounted for one test (`None` unless root), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(parent: &Path, size: &str) -> Option<Self> {
        use std::process::Command;
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        if !root {
            return None;
        }
        let at = parent.join("mnt");
        std::fs::create_dir_all(&at).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&at)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount tmpfs at {}", at.display());
        Some(Self(at))
    }

    /// Fills it with `filler` until it refuses another byte, then gives `back` bytes back.
    fn fill(&self, back: u64) -> PathBuf {
        let filler = self.0.join("filler");
        let mut file = File::create(&filler).expect("filler");
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let len = file.metadata().expect("stat").len();
        file.set_len(len.saturating_sub(back)).expect("give back");
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A full disk in the middle of an append (a small tmpfs; needs root to mount, skipped
/// otherwise): the append fails, nothing of the record stays, and once space returns the
/// next reads take the numbers the failed ones would have had, before and after a reopen.
#[test]
fn a_full_disk_in_the_middle_of_an_append_leaves_whole_records_that_number_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(tmpfs) = Tmpfs::mount(dir.path(), "1m") else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let mnt = tmpfs.0.clone();
    let counters = || {
        sled::Config::new()
            .temporary(true)
            .open()
            .expect("sled")
            .open_tree("counters")
            .expect("tree")
    };
    let run = RunId::generate();
    let log = ReadLog::new(&mnt, READS, counters());
    log.append_reads(&run, vec![read(&run, "https://a/1")])
        .expect("first");
    let whole = std::fs::metadata(log.path(&run)).expect("stat").len();
    // Fill the file system, then give 8 KiB back: the next record (bigger) is written in
    // part before the disk refuses the rest.
    let filler = tmpfs.fill(8192);
    let big: Vec<Read> = (0..200)
        .map(|i| read(&run, &format!("https://a/big/{i}/{}", "p".repeat(200))))
        .collect();
    let error = log
        .append_reads(&run, big.clone())
        .expect_err("the disk is full");
    assert_eq!(error.raw_os_error(), Some(28), "ENOSPC: {error}");
    assert_eq!(
        std::fs::metadata(log.path(&run)).expect("stat").len(),
        whole,
        "the part written was cut off"
    );
    assert_eq!(log.reads(&run).expect("reads").len(), 1);
    std::fs::remove_file(&filler).expect("space returns");
    let again = log.append_reads(&run, big).expect("space again");
    assert_eq!((again[0].seq, again[199].seq), (2, 201));
    drop(log);
    let log = ReadLog::new(&mnt, READS, counters());
    let seqs: Vec<u64> = log
        .reads(&run)
        .expect("reads")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, (1..=201).collect::<Vec<_>>());
    let next = log
        .append_reads(&run, vec![read(&run, "https://a/next")])
        .expect("next");
    assert_eq!(next[0].seq, 202);
}

/// A run's file removed (a prune) while writers journal to it and readers read it: no
/// read of the journal fails, and whatever the file holds at any time is numbered
/// 1, 2, 3, … from its last removal, without a gap or a repeat.
#[test]
fn removing_a_run_under_writers_and_readers_leaves_a_journal_numbered_from_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    let run = RunId::generate();
    let done = AtomicBool::new(false);
    let failures = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (ledger, run) = (&ledger, &run);
                s.spawn(move || {
                    for i in 0..2000 {
                        let batch = (0..3)
                            .map(|j| read(run, &format!("https://o.test/{w}/{i}/{j}")))
                            .collect();
                        ledger.journal_reads(batch).expect("journal");
                        if i % 5 == 0 {
                            ledger
                                .store_read_content(run, &content(1), &[9])
                                .expect("content");
                        }
                    }
                })
            })
            .collect();
        let remover = s.spawn(|| {
            let mut removed = 0;
            while !done.load(Ordering::SeqCst) {
                ledger.read_log.remove(&run).expect("remove");
                removed += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            removed
        });
        let reader = s.spawn(|| {
            let mut failures = Vec::new();
            while !done.load(Ordering::SeqCst) {
                match ledger.reads(&run) {
                    Ok(reads) => {
                        if !reads.iter().enumerate().all(|(i, r)| r.seq == i as u64 + 1) {
                            failures.push("a gap or a repeat".to_owned());
                        }
                    }
                    Err(e) => failures.push(format!("reads: {}", chain(&e))),
                }
                if let Err(e) = ledger.read_contents(&run) {
                    failures.push(format!("read_contents: {}", chain(&e)));
                }
                let _ = ledger.read_log.sync();
            }
            failures
        });
        for writer in writers {
            writer.join().expect("writer");
        }
        done.store(true, Ordering::SeqCst);
        assert!(remover.join().expect("remover") > 0);
        reader.join().expect("reader")
    });
    assert!(failures.is_empty(), "{failures:?}");
    let seqs: Vec<u64> = ledger
        .reads(&run)
        .expect("reads")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    ledger.flush().expect("flush");
}

/// A full disk under the read journal of a [`crate::HealingLedger`] (a tmpfs; needs
/// root): the failed journal degrades the ledger, it heals once space returns, and the
/// reopened store numbers the run's reads on from the last one kept.
#[test]
fn a_full_disk_under_the_read_journal_degrades_and_heals_and_reads_number_on() {
    use crate::{JournalStore as _, RunStore as _};
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(tmpfs) = Tmpfs::mount(dir.path(), "16m") else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let ledger = crate::HealingLedger::open(&tmpfs.0.join("ledger"), 1 << 20, 0).expect("open");
    let run = ledger.create_run(None).expect("run").id;
    assert_eq!(
        ledger
            .journal_read(read(&run, "https://a/1"))
            .expect("one")
            .seq,
        1
    );
    let filler = tmpfs.fill(8192);
    let big: Vec<Read> = (0..200)
        .map(|i| read(&run, &format!("https://a/big/{i}/{}", "p".repeat(200))))
        .collect();
    let error = ledger
        .journal_reads(big.clone())
        .expect_err("the disk is full");
    assert!(
        matches!(error, crate::LedgerError::Storage { .. }),
        "{error:?}"
    );
    assert!(!ledger.health().writable, "{:?}", ledger.health());
    std::fs::remove_file(&filler).expect("space returns");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ledger.health().writable {
        assert!(
            std::time::Instant::now() < deadline,
            "never healed: {:?}",
            ledger.health()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let again = ledger.journal_reads(big).expect("space again");
    assert_eq!((again[0].seq, again[199].seq), (2, 201));
    let seqs: Vec<u64> = ledger
        .reads(&run)
        .expect("reads")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, (1..=201).collect::<Vec<_>>());
}
