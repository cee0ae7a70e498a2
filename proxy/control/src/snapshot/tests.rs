//! The snapshot drivers with what a workspace may hold besides files, directories and
//! links (issue #20, item 6): a FIFO, a Unix socket, a device node, an unreadable file,
//! symlink loops and a file that changes while it is read, each through the real driver,
//! and each step's time limit. Every driver call runs on a thread of its own, awaited
//! for at most two minutes, so a hang fails the test instead of stalling the suite.

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Driver, Entry, Manifest, SnapshotError, Step, Store};

/// Runs `f` on its own thread; panics when it gives no answer within two minutes.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(answer) => answer,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} hung: no answer in 120 s")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

fn step(name: &'static str) -> Step {
    Step::new(name, Duration::from_secs(60))
}

struct Fx {
    _dir: tempfile::TempDir,
    data: PathBuf,
    ws: PathBuf,
}

impl Fx {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::create_dir_all(ws.join("src")).expect("mkdir");
        std::fs::write(ws.join("README"), "read me\n").expect("write");
        std::fs::write(ws.join("src/main.txt"), "fn main() {}\n").expect("write");
        Self {
            _dir: dir,
            data,
            ws,
        }
    }

    fn take(&self, driver: Driver) -> Result<Manifest, SnapshotError> {
        let (data, ws) = (self.data.clone(), self.ws.clone());
        within("taking the snapshot", move || {
            Store::new(&data).take(
                driver,
                &ws,
                "run_t",
                std::slice::from_ref(&data),
                None,
                &step("snapshot"),
            )
        })
    }

    fn changes(&self, manifest: &Manifest) -> airlock_ledger::Changes {
        let (data, manifest) = (self.data.clone(), manifest.clone());
        within("the diff", move || {
            Store::new(&data)
                .changes(&manifest, std::slice::from_ref(&data), &step("diff"))
                .expect("diff")
                .0
        })
    }

    /// Rolls back to `manifest`: the paths not restored, then the residue.
    fn rollback(&self, manifest: &Manifest) -> (super::Notes, Vec<String>) {
        let (data, manifest) = (self.data.clone(), manifest.clone());
        within("the rollback", move || {
            let store = Store::new(&data);
            let exclude = [data.clone()];
            let not_restored = store
                .restore(&manifest, &exclude, &step("rollback"))
                .expect("restore");
            let residue = store
                .residue(&manifest, &exclude, &not_restored, &step("residue check"))
                .expect("residue");
            (not_restored, residue)
        })
    }
}

fn mkfifo(path: &Path, mode: u32) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(mode))
        .expect("mkfifo");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn item6_a_fifo_is_recorded_never_opened_and_recreated_by_the_dir_driver() {
    let fx = Fx::new();
    mkfifo(&fx.ws.join("pipe"), 0o640);
    let manifest = fx.take(Driver::Dir).expect("snapshot");
    assert_eq!(manifest.entries["pipe"], Entry::Fifo { mode: 0o640 });
    assert!(
        manifest.describe().contains("1 FIFOs"),
        "{}",
        manifest.describe()
    );
    assert!(manifest.notes.is_empty(), "{:?}", manifest.notes);

    // The command removes the FIFO, puts a file in its place elsewhere, makes another.
    std::fs::remove_file(fx.ws.join("pipe")).expect("rm");
    mkfifo(&fx.ws.join("src/new-pipe"), 0o600);
    std::fs::write(fx.ws.join("added.txt"), "new\n").expect("write");
    let changes = fx.changes(&manifest);
    assert_eq!(changes.deleted, ["pipe"]);
    assert_eq!(changes.added, ["added.txt", "src/new-pipe"]);

    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(not_restored.is_empty(), "{not_restored:?}");
    assert!(residue.is_empty(), "{residue:?}");
    assert!(is_fifo(&fx.ws.join("pipe")), "the FIFO is recreated");
    assert_eq!(mode(&fx.ws.join("pipe")), 0o640);
    assert!(!fx.ws.join("src/new-pipe").exists());
    assert!(!fx.ws.join("added.txt").exists());
}

#[test]
fn item6_a_unix_socket_is_recorded_and_reported_as_not_restored() {
    let fx = Fx::new();
    let listener = std::os::unix::net::UnixListener::bind(fx.ws.join("agent.sock")).expect("bind");
    let manifest = fx.take(Driver::Dir).expect("snapshot");
    assert!(
        matches!(manifest.entries["agent.sock"], Entry::Socket { .. }),
        "{:?}",
        manifest.entries
    );
    assert!(
        manifest.notes["agent.sock"].contains("cannot recreate"),
        "{:?}",
        manifest.notes
    );
    // Still there: nothing to restore, and the rollback is verified.
    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(
        not_restored.is_empty() && residue.is_empty(),
        "{not_restored:?} {residue:?}"
    );

    // Gone, and another socket made: the new one is removed, the old one reported.
    drop(listener);
    std::fs::remove_file(fx.ws.join("agent.sock")).expect("rm");
    let _other = std::os::unix::net::UnixListener::bind(fx.ws.join("other.sock")).expect("bind");
    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(
        not_restored["agent.sock"].contains("not restored"),
        "{not_restored:?}"
    );
    assert_eq!(residue.len(), 1, "{residue:?}");
    assert!(
        residue[0].starts_with("missing: agent.sock (not restored: a socket"),
        "{residue:?}"
    );
    assert!(
        !fx.ws.join("other.sock").exists(),
        "the new socket is removed"
    );
}

#[test]
fn item6_a_device_node_is_recorded_never_read_and_reported_as_not_restored() {
    let fx = Fx::new();
    let node = fx.ws.join("null");
    // /dev/null's numbers: making one needs CAP_MKNOD (root; CI runs as root).
    if let Err(e) = rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    ) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must make a device node: {e}"
        );
        eprintln!("skipped: cannot make a device node here ({e}); CI runs this as root");
        return;
    }
    let manifest = fx.take(Driver::Dir).expect("snapshot");
    assert!(
        matches!(
            manifest.entries["null"],
            Entry::Device {
                block: false,
                major: 1,
                minor: 3,
                ..
            }
        ),
        "{:?}",
        manifest.entries
    );
    assert!(manifest.notes["null"].contains("character device node (1:3)"));
    std::fs::remove_file(&node).expect("rm");
    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(
        not_restored["null"].contains("not restored"),
        "{not_restored:?}"
    );
    assert!(
        residue == ["missing: null (not restored: a device node is not recreated by a rollback)"],
        "{residue:?}"
    );
    assert!(!node.exists(), "no device node is made by a rollback");
}

/// Drops the calling thread's capabilities to read any file, so that a mode-000 file is
/// unreadable even for root. Returns false when that cannot be done here.
fn drop_read_override() -> bool {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    let Ok(mut sets) = capabilities(None) else {
        return false;
    };
    sets.effective
        .remove(CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH);
    set_capabilities(None, sets).is_ok()
}

#[test]
fn item6_an_unreadable_file_is_recorded_reported_and_left_alone_by_a_rollback() {
    let fx = Fx::new();
    let secret = fx.ws.join("secret");
    std::fs::write(&secret, "top secret\n").expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let (data, ws) = (fx.data.clone(), fx.ws.clone());
    // As root (CI), permission bits do not stop a read: the driver runs on a thread
    // without the capabilities that override them.
    let taken = within("taking the snapshot", move || {
        if !drop_read_override() || std::fs::read(ws.join("secret")).is_ok() {
            return None;
        }
        Some(Store::new(&data).take(Driver::Dir, &ws, "run_t", &[], None, &step("snapshot")))
    });
    let Some(taken) = taken else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to make a file unreadable"
        );
        eprintln!("skipped: cannot make a file unreadable here");
        return;
    };
    let manifest = taken.expect("snapshot");
    assert_eq!(
        manifest.entries["secret"],
        Entry::Unreadable { mode: 0, size: 11 }
    );
    assert!(
        manifest.notes["secret"].contains("cannot be read"),
        "{:?}",
        manifest.notes
    );
    assert!(manifest.describe().contains("1 unreadable files"));

    // The command rewrites it (this thread can): the rollback cannot put the old content
    // back, so it leaves the new one and says so.
    std::fs::write(&secret, "rewritten by the command\n").expect("write");
    std::fs::write(fx.ws.join("README"), "changed\n").expect("write");
    let (data, manifest2) = (fx.data.clone(), manifest.clone());
    let (not_restored, residue) = within("the rollback", move || {
        assert!(drop_read_override());
        let store = Store::new(&data);
        let not_restored = store
            .restore(&manifest2, &[], &step("rollback"))
            .expect("restore");
        let residue = store
            .residue(&manifest2, &[], &not_restored, &step("residue check"))
            .expect("residue");
        (not_restored, residue)
    });
    assert!(
        not_restored["secret"].contains("not restored"),
        "{not_restored:?}"
    );
    assert_eq!(residue.len(), 1, "{residue:?}");
    assert!(
        residue[0].starts_with("differs: secret (not restored"),
        "{residue:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&secret).expect("read"),
        "rewritten by the command\n",
        "the unreadable file is left alone, never deleted"
    );
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("README")).expect("read"),
        "read me\n"
    );
}

#[test]
fn item6_symlink_loops_are_recorded_as_links_and_restored() {
    let fx = Fx::new();
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(target, fx.ws.join(name)).expect("symlink")
    };
    link("self", "self");
    link("b", "a");
    link("a", "b");
    link("..", "src/up");
    let manifest = fx.take(Driver::Dir).expect("snapshot");
    for (name, target) in [("self", "self"), ("a", "b"), ("b", "a"), ("src/up", "..")] {
        assert_eq!(
            manifest.entries[name],
            Entry::Symlink {
                target: target.into()
            }
        );
    }
    for name in ["self", "a", "src/up"] {
        std::fs::remove_file(fx.ws.join(name)).expect("rm");
    }
    link("b", "c");
    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(
        not_restored.is_empty() && residue.is_empty(),
        "{not_restored:?} {residue:?}"
    );
    assert_eq!(
        std::fs::read_link(fx.ws.join("self")).expect("link"),
        Path::new("self")
    );
    assert_eq!(
        std::fs::read_link(fx.ws.join("a")).expect("link"),
        Path::new("b")
    );
    assert_eq!(
        std::fs::read_link(fx.ws.join("src/up")).expect("link"),
        Path::new("..")
    );
    assert!(std::fs::symlink_metadata(fx.ws.join("c")).is_err());
}

/// Takes a `dir` snapshot while `writes` appends to `README` during the first chunk of
/// each of its first `writes` reads (as a writer running beside the snapshot would).
fn take_while_written(fx: &Fx, writes: usize) -> Manifest {
    let (data, ws) = (fx.data.clone(), fx.ws.clone());
    within("taking the snapshot", move || {
        let mut left = writes;
        super::walk::DURING_READ.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move |path: &Path| {
                if path.ends_with("README") && left > 0 {
                    left -= 1;
                    let mut file = std::fs::OpenOptions::new()
                        .append(true)
                        .open(path)
                        .expect("open");
                    std::io::Write::write_all(&mut file, b"more\n").expect("append");
                }
            }))
        });
        let taken = Store::new(&data).take(Driver::Dir, &ws, "run_t", &[], None, &step("snapshot"));
        super::walk::DURING_READ.with(|hook| hook.borrow_mut().take());
        taken.expect("snapshot")
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn item6_a_file_changing_while_read_is_read_again_then_reported() {
    // Changed during the first read only: read again, recorded as it is now.
    let fx = Fx::new();
    let manifest = take_while_written(&fx, 1);
    let now = std::fs::read(fx.ws.join("README")).expect("read");
    assert_eq!(now, b"read me\nmore\n");
    assert_eq!(
        manifest.entries["README"],
        Entry::File {
            mode: mode(&fx.ws.join("README")),
            size: now.len() as u64,
            sha256: sha256_hex(&now),
        }
    );
    assert!(manifest.notes.is_empty(), "{:?}", manifest.notes);

    // Changed during every read: recorded with a note saying so.
    let fx = Fx::new();
    let manifest = take_while_written(&fx, super::READS);
    assert!(
        manifest.notes["README"].contains("changed while being read, 3 times"),
        "{:?}",
        manifest.notes
    );
    assert!(matches!(manifest.entries["README"], Entry::File { .. }));
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn item6_the_git_driver_never_hangs_on_a_fifo_and_recreates_it() {
    let fx = Fx::new();
    git(&fx.ws, &["init", "-q", "-b", "main"]);
    std::fs::write(fx.ws.join(".gitignore"), "*.ignored\n").expect("write");
    git(&fx.ws, &["add", "-A"]);
    git(&fx.ws, &["commit", "-qm", "first"]);
    mkfifo(&fx.ws.join("pipe"), 0o644);
    mkfifo(&fx.ws.join("src/pipe.ignored"), 0o644);
    let manifest = fx.take(Driver::Git).expect("snapshot");
    assert_eq!(manifest.entries["pipe"], Entry::Fifo { mode: 0o644 });
    assert!(
        !manifest.entries.contains_key("src/pipe.ignored"),
        "an ignored FIFO is left out, like any ignored file"
    );
    assert!(manifest.notes["pipe"].contains("git does not track"));

    // The command removes the FIFO and makes another, a file and a socket.
    std::fs::remove_file(fx.ws.join("pipe")).expect("rm");
    mkfifo(&fx.ws.join("src/new-pipe"), 0o600);
    let _sock = std::os::unix::net::UnixListener::bind(fx.ws.join("new.sock")).expect("bind");
    std::fs::write(fx.ws.join("added.txt"), "new\n").expect("write");
    let changes = fx.changes(&manifest);
    assert_eq!(changes.deleted, ["pipe"]);
    assert_eq!(changes.added, ["added.txt", "new.sock", "src/new-pipe"]);

    let (not_restored, residue) = fx.rollback(&manifest);
    assert!(
        not_restored.is_empty() && residue.is_empty(),
        "{not_restored:?} {residue:?}"
    );
    assert!(is_fifo(&fx.ws.join("pipe")));
    assert_eq!(mode(&fx.ws.join("pipe")), 0o644);
    assert!(
        is_fifo(&fx.ws.join("src/pipe.ignored")),
        "ignored: untouched"
    );
    for gone in ["src/new-pipe", "new.sock", "added.txt"] {
        assert!(
            std::fs::symlink_metadata(fx.ws.join(gone)).is_err(),
            "{gone}"
        );
    }
}

#[test]
fn item6_each_step_times_out_with_an_error_naming_the_step_and_what_it_processed() {
    // A walk past its deadline names the path it was at.
    let fx = Fx::new();
    let (data, ws) = (fx.data.clone(), fx.ws.clone());
    let error = within("the diff", move || {
        Store::new(&data)
            .take(
                Driver::Dir,
                &ws,
                "run_t",
                &[],
                None,
                &Step::new("diff", Duration::ZERO),
            )
            .expect_err("timed out")
    });
    let text = error.to_string();
    assert!(
        text.starts_with("the workspace diff step timed out after 0 s while processing /")
            && text.contains("--workspace-step-timeout"),
        "{text}"
    );

    // A snapshot command that never ends is killed at the deadline, with its group.
    let (data, ws) = (fx.data.clone(), fx.ws.clone());
    let command = "sleep 30 && echo never".to_owned();
    let commands = super::Commands {
        snapshot: command.clone(),
        rollback: "true".into(),
    };
    let error = within("the snapshot", move || {
        Store::new(&data)
            .take(
                Driver::Cmd,
                &ws,
                "run_t",
                &[],
                Some(&commands),
                &Step::new("snapshot", Duration::from_secs(1)),
            )
            .expect_err("timed out")
    });
    assert_eq!(
        error.to_string(),
        format!(
            "the workspace snapshot step timed out after 1 s while processing the snapshot \
             command `{command}` (the limit is --workspace-step-timeout)"
        )
    );

    // A git clean filter that never ends stops the git driver the same way.
    let fx = Fx::new();
    git(&fx.ws, &["init", "-q", "-b", "main"]);
    git(&fx.ws, &["config", "filter.slow.clean", "sleep 30"]);
    std::fs::write(fx.ws.join(".gitattributes"), "*.txt filter=slow\n").expect("write");
    let (data, ws) = (fx.data.clone(), fx.ws.clone());
    let error = within("the git snapshot", move || {
        Store::new(&data)
            .take(
                Driver::Git,
                &ws,
                "run_t",
                &[],
                None,
                &Step::new("snapshot", Duration::from_secs(1)),
            )
            .expect_err("timed out")
    });
    assert!(
        error.to_string().starts_with(
            "the workspace snapshot step timed out after 1 s while processing git add -A"
        ),
        "{error}"
    );
}
