//! The git adapter's pack reader on packs real git builds (`git pack-objects` in a temp
//! repository), and on truncated and garbage packs, which must never panic.

use std::path::Path;
use std::process::{Command, Stdio};

use airlock_adapters::git::pack::{self, Limits};
use airlock_adapters::git::review::Change;
use airlock_adapters::git::{pkt_line, review_of};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Ada Lovelace")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada Lovelace")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `git pack-objects --revs` of `revs` (lines such as `NEW` and `^OLD`), with `extra` flags.
fn pack_objects(dir: &Path, revs: &str, extra: &[&str]) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(["pack-objects", "--revs", "--stdout", "-q"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pack-objects");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(revs.as_bytes())
        .expect("revs");
    let out = child.wait_with_output().expect("pack");
    assert!(out.status.success());
    out.stdout
}

/// A repository with a base commit (the "server's" state) and two commits on top.
struct Repo {
    dir: tempfile::TempDir,
    base: String,
    head: String,
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    let big: String = (0..200)
        .map(|i| format!("line {i} of the notes\n"))
        .collect();
    std::fs::write(d.join("README.md"), "hello\n").expect("write");
    std::fs::write(d.join("notes.txt"), &big).expect("write");
    std::fs::write(d.join("gone.txt"), "bye\n").expect("write");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "base"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    std::fs::create_dir_all(d.join("src")).expect("mkdir");
    std::fs::write(d.join("src/lib.rs"), "pub fn a() {}\npub fn b() {}\n").expect("write");
    std::fs::write(d.join("notes.txt"), format!("{big}one more line\n")).expect("write");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "Add lib and a note"]);
    std::fs::write(
        d.join("src/lib.rs"),
        "pub fn a() {}\npub fn c() {}\npub fn d() {}\n",
    )
    .expect("write");
    git(d, &["rm", "-q", "gone.txt"]);
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "Rework lib\n\nLonger body."]);
    let head = git(d, &["rev-parse", "HEAD"]);
    Repo { dir, base, head }
}

fn request(old: &str, new: &str, pack: &[u8]) -> Vec<u8> {
    let mut body =
        pkt_line(format!("{old} {new} refs/heads/main\0report-status side-band-64k\n").as_bytes());
    body.extend_from_slice(b"0000");
    body.extend_from_slice(pack);
    body
}

#[test]
fn a_real_pack_names_commits_authors_paths_and_a_diffstat() {
    let r = repo();
    let data = pack_objects(r.dir.path(), &format!("{}\n^{}\n", r.head, r.base), &[]);
    let read = pack::read(&data, Limits::default());
    assert_eq!(read.error, None);
    assert!(read.unresolved.is_empty());
    assert_eq!(
        read.objects.len() as u32,
        read.announced,
        "every object resolved, deltas too"
    );
    let review = review_of(&request(&r.base, &r.head, &data)).expect("a push");
    let subjects: Vec<&str> = review.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["Rework lib", "Add lib and a note"]);
    assert!(review
        .commits
        .iter()
        .all(|c| c.author == "Ada Lovelace <ada@example.com>"));
    let paths = |i: usize| -> Vec<String> {
        review.commits[i]
            .paths
            .iter()
            .map(|p| format!("{} {:?} {}", p.path, p.change, p.stat()))
            .collect()
    };
    // Against a parent in the pack, changes are exact; against the server's, A/M.
    assert_eq!(
        paths(0),
        ["gone.txt Deleted +0 -?", "src/lib.rs Modified +2 -1"]
    );
    assert_eq!(
        paths(1),
        ["notes.txt Changed +201 -?", "src/lib.rs Changed +2 -?"]
    );
    let stat = |path: &str| {
        review
            .paths
            .iter()
            .find(|p| p.path == path)
            .cloned()
            .expect(path)
    };
    let lib = stat("src/lib.rs");
    assert_eq!(
        (lib.change, lib.added, lib.removed),
        (Change::Changed, Some(3), None)
    );
    assert_eq!(stat("gone.txt").change, Change::Deleted);
    assert_eq!(review.paths.len(), 3);
    let line = review.line(1000);
    assert!(
        line.contains("'Rework lib' (Ada Lovelace <ada@example.com>)"),
        "{line}"
    );
    assert!(line.contains("src/lib.rs +3 -?"), "{line}");

    // To an empty remote everything is in the pack: a new file is A with its lines, a
    // file added and removed within the push is not listed.
    let all = pack_objects(r.dir.path(), &format!("{}\n", r.head), &[]);
    let zero = "0".repeat(40);
    let review = review_of(&request(&zero, &r.head, &all)).expect("a push");
    assert_eq!(review.commits.len(), 3);
    let shown: Vec<String> = review
        .paths
        .iter()
        .map(|p| format!("{} {:?} {}", p.path, p.change, p.stat()))
        .collect();
    assert_eq!(
        shown,
        [
            "README.md Added +1 -0",
            "notes.txt Added +201 -0",
            "src/lib.rs Added +3 -0"
        ]
    );
}

#[test]
fn a_thin_pack_says_which_base_it_could_not_resolve() {
    let r = repo();
    let data = pack_objects(
        r.dir.path(),
        &format!("{}\n^{}\n", r.head, r.base),
        &["--thin"],
    );
    let read = pack::read(&data, Limits::default());
    assert_eq!(read.error, None);
    let review = review_of(&request(&r.base, &r.head, &data)).expect("a push");
    assert_eq!(
        review.commits.len(),
        2,
        "commits are whole objects even in a thin pack"
    );
    // The new notes.txt is a delta against the base's, which only the server has.
    assert_eq!(read.unresolved.len(), 1, "{:?}", read.unresolved);
    assert!(
        review
            .notes
            .iter()
            .any(|n| n.contains("thin pack delta against base")),
        "{:?}",
        review.notes
    );
    assert!(
        review.paths.iter().all(|p| p.path != "notes.txt"),
        "no line counts are made up for content that is not in the pack"
    );
    assert!(review.paths.iter().any(|p| p.path == "src/lib.rs"));
}

#[test]
fn limits_stop_the_walk_with_a_note() {
    let r = repo();
    let data = pack_objects(r.dir.path(), &format!("{}\n^{}\n", r.head, r.base), &[]);
    let read = pack::read(
        &data,
        Limits {
            max_objects: 2,
            ..Limits::default()
        },
    );
    assert!(
        matches!(read.error, Some(pack::PackError::Limit { index: 2, .. })),
        "{:?}",
        read.error
    );
    let read = pack::read(
        &data,
        Limits {
            max_total_bytes: 64,
            ..Limits::default()
        },
    );
    assert!(
        matches!(read.error, Some(pack::PackError::Limit { .. })),
        "{:?}",
        read.error
    );
}

#[test]
fn truncated_and_garbage_packs_never_panic() {
    let r = repo();
    let data = pack_objects(r.dir.path(), &format!("{}\n^{}\n", r.head, r.base), &[]);
    for cut in 0..data.len() {
        let review = review_of(&request(&r.base, &r.head, &data[..cut])).expect("a push");
        if cut < data.len() - 20 {
            assert!(
                !review.notes.is_empty(),
                "a pack cut at {cut} says it is incomplete"
            );
        }
    }
    // Flip bytes everywhere, and feed noise after a valid header.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let mut bad = data.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % bad.len();
            bad[at] ^= 1 << (next() % 8);
        }
        let _ = review_of(&request(&r.base, &r.head, &bad));
        let mut noise = b"PACK\0\0\0\x02\0\0\0\x09".to_vec();
        noise.extend((0..next() % 300).map(|_| next() as u8));
        let _ = review_of(&request(&r.base, &r.head, &noise));
    }
    // A delta that claims a huge target size is refused by the limit, not allocated.
    assert_eq!(
        pack::apply_delta(b"abc", &[3, 0xff, 0xff, 0xff, 0xff, 0x0f], 1 << 20),
        None
    );
}
