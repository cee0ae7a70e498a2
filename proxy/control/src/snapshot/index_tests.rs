//! The `dir` driver's stamp index (issue #22, snapshots): a snapshot of an unchanged
//! workspace reads no file, a changed file is read again even when its size stays the same,
//! a racily clean file is never trusted, and a rollback is still verified by a full read.
//! Driver calls run on the test's own thread, where the read hook counts the files read.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use super::index::{Index, RACY_MARGIN};
use super::{Driver, Entry, Manifest, Step, Store};

fn step(name: &'static str) -> Step {
    Step::new(name, Duration::from_secs(60))
}

/// Counts the files read (each non-empty file's first chunk) while `f` runs.
fn reads<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let count = Rc::new(Cell::new(0));
    let seen = count.clone();
    super::walk::DURING_READ.with(|hook| {
        *hook.borrow_mut() = Some(Box::new(move |_: &Path| seen.set(seen.get() + 1)));
    });
    let out = f();
    super::walk::DURING_READ.with(|hook| hook.borrow_mut().take());
    (out, count.get())
}

struct Ws {
    _dir: tempfile::TempDir,
    data: PathBuf,
    ws: PathBuf,
}

impl Ws {
    /// A workspace of `n` small files in 10 directories, older than the racy margin.
    fn new(n: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&data).expect("mkdir");
        for i in 0..n {
            let sub = ws.join(format!("d{}", i % 10));
            std::fs::create_dir_all(&sub).expect("mkdir");
            std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i:05}\n")).expect("write");
        }
        std::thread::sleep(RACY_MARGIN + Duration::from_millis(100));
        Self {
            _dir: dir,
            data,
            ws,
        }
    }

    fn store(&self) -> Store {
        Store::new(&self.data)
    }

    fn take(&self) -> Manifest {
        self.store()
            .take(
                Driver::Dir,
                &self.ws,
                "run_t",
                std::slice::from_ref(&self.data),
                None,
                &step("snapshot"),
            )
            .expect("snapshot")
    }

    fn sha_of(manifest: &Manifest, path: &str) -> String {
        match manifest.entries.get(path) {
            Some(Entry::File { sha256, .. }) => sha256.clone(),
            other => panic!("{path} is {other:?} in the manifest"),
        }
    }
}

#[test]
fn a_dir_snapshot_of_an_unchanged_workspace_reads_no_file() {
    let ws = Ws::new(50);
    let (first, read_first) = reads(|| ws.take());
    assert_eq!(read_first, 50, "the first snapshot reads every file");
    let (second, read_second) = reads(|| ws.take());
    assert_eq!(
        read_second, 0,
        "an unchanged workspace is snapshotted from the index"
    );
    assert_eq!(first.entries, second.entries);
}

#[test]
fn a_file_rewritten_with_the_same_size_is_read_again_and_its_new_hash_recorded() {
    let ws = Ws::new(20);
    let first = ws.take();
    let path = "d3/f3.txt";
    std::fs::write(ws.ws.join(path), "FILE 00003\n").expect("rewrite");
    let (second, read) = reads(|| ws.take());
    assert_eq!(read, 1, "only the rewritten file is read");
    assert_ne!(Ws::sha_of(&first, path), Ws::sha_of(&second, path));
    let expected = {
        use sha2::Digest as _;
        sha2::Sha256::digest(b"FILE 00003\n")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(Ws::sha_of(&second, path), expected);
    let changes = ws
        .store()
        .changes(&first, std::slice::from_ref(&ws.data), &step("diff"))
        .expect("diff")
        .0;
    assert_eq!(changes.modified, vec![path.to_owned()]);
}

#[test]
fn a_racily_clean_file_is_not_trusted() {
    let ws = Ws::new(5);
    // Written just before the snapshot: its change time lies within the racy margin of
    // the walk, so the next walk must read it again, even if its stamp were unchanged.
    std::fs::write(ws.ws.join("d1/f1.txt"), "file 99999\n").expect("write");
    let _ = ws.take();
    std::fs::write(ws.ws.join("d1/f1.txt"), "file 88888\n").expect("write");
    let (second, read) = reads(|| ws.take());
    assert_eq!(read, 1, "the racily clean file is read again");
    let index = Index::load(&ws.data.join(super::SNAPSHOTS_DIR), &ws.ws);
    assert_eq!(index.len(), 5);
    assert!(matches!(
        second.entries.get("d1/f1.txt"),
        Some(Entry::File { size: 11, .. })
    ));
}

#[test]
fn a_rollback_reads_only_the_changed_file_and_its_residue_check_reads_everything() {
    let ws = Ws::new(30);
    let manifest = ws.take();
    std::fs::write(ws.ws.join("d4/f4.txt"), "changed by the run\n").expect("write");
    std::fs::write(ws.ws.join("new.txt"), "left by the run\n").expect("write");
    let store = ws.store();
    let excludes = [ws.data.clone()];
    let (not_restored, read) = reads(|| store.restore(&manifest, &excludes, &step("rollback")));
    assert!(not_restored.expect("restore").is_empty());
    assert_eq!(
        read, 2,
        "the restore reads the two files the run wrote, no other"
    );
    let (residue, read) = reads(|| {
        store.residue(
            &manifest,
            &excludes,
            &Default::default(),
            &step("residue check"),
        )
    });
    assert_eq!(residue.expect("residue"), Vec::<String>::new());
    assert_eq!(read, 30, "the residue check reads every file");
    assert_eq!(
        std::fs::read_to_string(ws.ws.join("d4/f4.txt")).expect("read"),
        "file 00004\n"
    );
    assert!(!ws.ws.join("new.txt").exists());
}

#[test]
fn a_corrupt_or_missing_index_only_costs_reading_again() {
    let ws = Ws::new(10);
    let first = ws.take();
    let path = Index::path(&ws.data.join(super::SNAPSHOTS_DIR), &ws.ws);
    std::fs::write(&path, b"{not json").expect("corrupt the index");
    let (second, read) = reads(|| ws.take());
    assert_eq!(read, 10);
    assert_eq!(first.entries, second.entries);
    std::fs::remove_file(&path).expect("remove the index");
    let (third, read) = reads(|| ws.take());
    assert_eq!(read, 10);
    assert_eq!(first.entries, third.entries);
}

#[test]
fn an_indexed_file_whose_object_is_gone_is_read_and_stored_again() {
    let ws = Ws::new(3);
    let first = ws.take();
    let sha = Ws::sha_of(&first, "d0/f0.txt");
    std::fs::remove_file(ws.store().object_path(&sha)).expect("remove the object");
    let (_, read) = reads(|| ws.take());
    assert_eq!(read, 1, "the file whose object is gone is read again");
    assert!(ws.store().object_path(&sha).exists());
}
