//! The read log's own cases: numbering across reopen, a torn tail, a damaged record,
//! removal, and a data directory from before the log.

use std::io::Write as _;

use super::*;
use crate::sled_store::{encode, index_key};
use crate::Ledger;

pub(super) use crate::conformance::contracts::new_read as read;

fn urls(reads: &[Read]) -> Vec<(u64, String)> {
    reads.iter().map(|r| (r.seq, r.url.clone())).collect()
}

pub(super) fn content(seq: u64) -> ReadContent {
    ReadContent {
        seq,
        notable: Vec::new(),
        fingerprints: 2,
        truncated: false,
        skipped: None,
    }
}

fn log_file(dir: &Path, run: &RunId) -> PathBuf {
    dir.join("reads").join(format!("{}.log", run.as_str()))
}

#[test]
fn reads_keep_their_numbers_across_a_reopen_and_nothing_of_them_is_in_sled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = RunId::generate();
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        let first = ledger
            .journal_reads(vec![read(&run, "https://a/1"), read(&run, "https://a/2")])
            .expect("journal");
        assert_eq!(first.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        ledger
            .store_read_content(&run, &content(2), &[7, 9])
            .expect("content");
        assert!(ledger.reads.is_empty(), "no read went into sled's tree");
        assert!(ledger.read_content.is_empty() && ledger.read_hashes.is_empty());
        assert!(dir
            .path()
            .join(ANALYSES)
            .join(format!("{run}.log"))
            .exists());
    }
    let ledger = Ledger::open(dir.path()).expect("reopen");
    let third = ledger
        .journal_read(read(&run, "https://a/3"))
        .expect("journal");
    assert_eq!(
        third.seq, 3,
        "numbering continues from the file's last record"
    );
    assert_eq!(
        urls(&ledger.reads(&run).expect("reads")),
        [
            (1, "https://a/1".to_owned()),
            (2, "https://a/2".to_owned()),
            (3, "https://a/3".to_owned())
        ]
    );
    let contents = ledger.read_contents(&run).expect("contents");
    assert_eq!(contents.len(), 1);
    assert_eq!((contents[0].0.seq, contents[0].1.clone()), (2, vec![7, 9]));
    assert_eq!(ledger.read_count(&run).expect("count"), 3);
}

#[test]
fn a_torn_last_record_is_cut_off_and_its_numbers_are_not_handed_out_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = RunId::generate();
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        ledger.journal_read(read(&run, "https://a/1")).expect("one");
        ledger.journal_read(read(&run, "https://a/2")).expect("two");
    }
    // A crash in the middle of the second record's write: cut it in half.
    let path = log_file(dir.path(), &run);
    let len = std::fs::metadata(&path).expect("stat").len();
    let whole_first = {
        let bytes = std::fs::read(&path).expect("read");
        parse_record(&bytes).expect("first record").1 as u64
    };
    let file = OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(whole_first + (len - whole_first) / 2)
        .expect("truncate");
    drop(file);

    let ledger = Ledger::open(dir.path()).expect("reopen");
    assert_eq!(
        urls(&ledger.reads(&run).expect("reads")),
        [(1, "https://a/1".to_owned())]
    );
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        whole_first,
        "the torn record was cut off"
    );
    let next = ledger
        .journal_read(read(&run, "https://a/2b"))
        .expect("again");
    assert_eq!(
        next.seq, 3,
        "the lost read's number is not handed out again (sled's floor says 2 was given)"
    );
    let seqs: Vec<u64> = ledger
        .reads(&run)
        .expect("reads")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, [1, 3]);
    assert_eq!(ledger.read_count(&run).expect("count"), 2);
}

#[test]
fn a_damaged_record_in_the_middle_is_an_error_not_a_silent_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = RunId::generate();
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        for i in 0..3 {
            ledger
                .journal_read(read(&run, &format!("https://a/{i}")))
                .expect("journal");
        }
    }
    let path = log_file(dir.path(), &run);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[HEADER + 5] ^= 0xff; // inside the first record's payload
    std::fs::write(&path, &bytes).expect("write");
    let ledger = Ledger::open(dir.path()).expect("reopen");
    let error = ledger
        .reads(&run)
        .expect_err("a damaged record is reported");
    assert!(
        matches!(&error, crate::LedgerError::Corrupt { key, .. } if *key == format!("reads/{run}")),
        "{error:?}"
    );
    let source = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        source
            .as_deref()
            .is_some_and(|s| s.contains("damaged at byte 0")),
        "{source:?}"
    );
}

#[test]
fn a_directory_from_before_the_log_keeps_its_reads_and_new_numbers_continue_after_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = RunId::generate();
    {
        // What an older airlock wrote: reads in the `reads` tree, the counter in `counters`.
        let ledger = Ledger::open(dir.path()).expect("open");
        let mut old = read(&run, "https://old/1");
        old.seq = 1;
        let mut batch = vec![read(&run, "https://old/2"), read(&run, "https://old/3")];
        batch[0].seq = 2;
        batch[1].seq = 3;
        ledger
            .reads
            .insert(index_key(&run, 1), encode(&old))
            .expect("insert");
        ledger
            .reads
            .insert(index_key(&run, 2), encode(&batch))
            .expect("insert");
        ledger
            .counters
            .insert(
                format!("reads/{run}").as_bytes(),
                3u64.to_be_bytes().to_vec(),
            )
            .expect("counter");
        ledger.flush().expect("flush");
    }
    let ledger = Ledger::open(dir.path()).expect("reopen");
    let new = ledger
        .journal_read(read(&run, "https://new/4"))
        .expect("journal");
    assert_eq!(new.seq, 4);
    let seqs: Vec<u64> = ledger
        .reads(&run)
        .expect("reads")
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(ledger.read_count(&run).expect("count"), 4);
}

#[test]
fn removing_a_run_removes_its_file_and_a_flush_syncs_what_was_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ReadLog::new(
        dir.path(),
        READS,
        sled::Config::new()
            .temporary(true)
            .open()
            .expect("sled")
            .open_tree("counters")
            .expect("tree"),
    );
    let run = RunId("not a plain id/..".into());
    log.append_reads(&run, vec![read(&run, "https://a/")])
        .expect("append");
    let path = log.path(&run);
    assert!(
        path.starts_with(dir.path().join("reads")) && path.exists(),
        "{}",
        path.display()
    );
    assert!(log.lock().runs.values().all(|e| e.dirty));
    assert_eq!(
        log.size_on_disk().expect("size"),
        std::fs::metadata(&path).expect("stat").len()
    );
    log.sync().expect("sync");
    assert!(log.lock().runs.values().all(|e| !e.dirty));
    log.remove(&run).expect("remove");
    assert!(!path.exists());
    assert!(log.reads(&run).expect("reads").is_empty());
}

#[test]
fn more_runs_than_stay_open_are_each_numbered_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    let runs: Vec<RunId> = (0..OPEN_RUNS + 10).map(|_| RunId::generate()).collect();
    for round in 1..=2u64 {
        for run in &runs {
            let read = ledger
                .journal_read(read(run, "https://a/"))
                .expect("journal");
            assert_eq!(read.seq, round);
        }
    }
    assert!(ledger.read_log.lock().runs.len() <= OPEN_RUNS);
    for run in &runs {
        assert_eq!(ledger.reads(run).expect("reads").len(), 2);
    }
    // An appended garbage tail (not a record) on a closed file is cut at the next touch.
    let closed = runs
        .iter()
        .find(|r| !ledger.read_log.lock().runs.contains_key(*r))
        .expect("a closed run");
    let mut file = OpenOptions::new()
        .append(true)
        .open(log_file(dir.path(), closed))
        .expect("open");
    file.write_all(b"garbage").expect("write");
    drop(file);
    assert_eq!(ledger.reads(closed).expect("reads").len(), 2);
    assert_eq!(
        ledger
            .journal_read(read(closed, "https://a/"))
            .expect("j")
            .seq,
        3
    );
}

#[test]
fn a_read_analysed_again_answers_with_its_last_analysis_only() {
    // The conformance model's case 7c03694c: two analyses of one read, then a query.
    let dir = tempfile::tempdir().expect("tempdir");
    let run = RunId::generate();
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        ledger
            .journal_reads(vec![read(&run, "https://a/1"), read(&run, "https://a/2")])
            .expect("journal");
        ledger
            .store_read_content(&run, &content(1), &[1])
            .expect("content");
        ledger
            .store_read_content(&run, &content(2), &[3])
            .expect("content");
        let mut again = content(1);
        again.fingerprints = 5;
        ledger
            .store_read_content(&run, &again, &[4, 6])
            .expect("the same read analysed again");
    }
    let ledger = Ledger::open(dir.path()).expect("reopen");
    let contents = ledger.read_contents(&run).expect("contents");
    let seen: Vec<(u64, usize, Vec<u64>)> = contents
        .into_iter()
        .map(|(c, prints)| (c.seq, c.fingerprints, prints))
        .collect();
    assert_eq!(seen, [(1, 5, vec![4, 6]), (2, 2, vec![3])]);
}
