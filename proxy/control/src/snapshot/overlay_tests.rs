//! The `overlay` driver on real overlayfs mounts (issue #22, "Snapshots"): each step runs
//! in a mount namespace of its own made by the driver's own command line, so nothing
//! here mounts anything in the test's namespace except the tmpfs and overlay of the
//! check test, on its own temporary directories. Needs root, as the driver does.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::overlay::{check, StepMount, OPAQUE_XATTR};
use super::{Driver, Manifest, SnapshotError, Step, Store};

pub(super) fn step(name: &'static str) -> Step {
    Step::new(name, Duration::from_secs(60))
}

/// A path of a tree as a test compares it: kind, permission bits, owner, and the content
/// or link target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) kind: &'static str,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) bytes: Vec<u8>,
}

pub(super) fn tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for item in std::fs::read_dir(&dir).expect("list") {
            let path = item.expect("entry").path();
            let m = std::fs::symlink_metadata(&path).expect("stat");
            let rel = path
                .strip_prefix(root)
                .expect("the test's own setup or step")
                .display()
                .to_string();
            let (kind, bytes) = if m.is_dir() {
                pending.push(path.clone());
                ("dir", Vec::new())
            } else if m.file_type().is_symlink() {
                let target = std::fs::read_link(&path).expect("readlink");
                ("symlink", target.display().to_string().into_bytes())
            } else if m.is_file() {
                ("file", std::fs::read(&path).expect("read"))
            } else {
                ("special", m.rdev().to_le_bytes().to_vec())
            };
            let mode = if kind == "symlink" {
                0
            } else {
                m.permissions().mode() & 0o7777
            };
            out.insert(
                rel,
                Node {
                    kind,
                    mode,
                    uid: m.uid(),
                    bytes,
                },
            );
        }
    }
    out
}

/// What the step of the keep and rollback tests does: creates, modifies, deletes,
/// changes a mode, replaces a directory (`rm -rf` then `mkdir`), replaces a symlink, and
/// renames a directory (a redirect, if redirects were on).
pub(super) const STEP: &str = "set -e
printf 'new content\\n' > a.txt
rm del.txt
chmod 600 keep.txt
rm -rf dir && mkdir dir && printf 'zed\\n' > dir/z
printf 'fresh\\n' > new.txt && chmod 751 new.txt
rm link && ln -s keep.txt link
ln -s new.txt link2
mkdir -p fresh/inner && printf 'q\\n' > fresh/inner/q
mv moved renamed
printf 'more\\n' >> sub/deep/f";

struct Fx {
    _dir: tempfile::TempDir,
    data: PathBuf,
    ws: PathBuf,
    /// The same starting tree, for the expected outcome of a step run on it plainly.
    twin: PathBuf,
}

pub(super) fn seed(ws: &Path) {
    std::fs::create_dir_all(ws.join("dir")).expect("the test's own setup or step");
    std::fs::create_dir_all(ws.join("sub/deep")).expect("the test's own setup or step");
    std::fs::create_dir_all(ws.join("moved/in")).expect("the test's own setup or step");
    for (path, content) in [
        ("a.txt", "old content\n"),
        ("keep.txt", "kept\n"),
        ("del.txt", "to delete\n"),
        ("dir/x", "x\n"),
        ("dir/y", "y\n"),
        ("sub/deep/f", "deep\n"),
        ("moved/in/m", "m\n"),
        ("exe.sh", "#!/bin/sh\n"),
    ] {
        std::fs::write(ws.join(path), content).expect("the test's own setup or step");
    }
    std::fs::set_permissions(ws.join("exe.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("the test's own setup or step");
    std::os::unix::fs::symlink("a.txt", ws.join("link")).expect("the test's own setup or step");
}

impl Fx {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let ws = dir.path().join("ws");
        let twin = dir.path().join("twin");
        std::fs::create_dir_all(&data).expect("the test's own setup or step");
        seed(&ws);
        seed(&twin);
        Self {
            _dir: dir,
            data,
            ws,
            twin,
        }
    }

    fn store(&self) -> Store {
        Store::new(&self.data)
    }

    fn take(&self) -> Result<Manifest, SnapshotError> {
        self.store().take(
            Driver::Overlay,
            &self.ws,
            "run_o",
            &[],
            None,
            &step("snapshot"),
        )
    }

    /// Runs `script` with `sh -c` in the workspace on the run's overlay, as `airlock run`
    /// runs a step; returns its stdout.
    fn step(&self, script: &str) -> String {
        let state = self.store().overlay_state("run_o");
        let mount = StepMount::prepare(&state, &self.ws).expect("prepare the mount");
        let (program, args) = mount
            .command_line("sh", &["-c".to_owned(), script.to_owned()])
            .expect("command line");
        let out = Command::new(program)
            .args(args)
            .current_dir(&self.ws)
            .output()
            .expect("run the step");
        assert!(
            out.status.success(),
            "the step failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn expected_after_step(&self) -> BTreeMap<String, Node> {
        let out = Command::new("sh")
            .args(["-c", STEP])
            .current_dir(&self.twin)
            .output()
            .expect("run on the twin");
        assert!(out.status.success());
        tree(&self.twin)
    }
}

pub(super) fn overlay_xattrs(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, _) in tree(root) {
        let path = root.join(&rel);
        let mut names = vec![0u8; 4096];
        if let Ok(n) = rustix::fs::llistxattr(&path, &mut names[..]) {
            for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
                if name.starts_with(b"trusted.overlay.") {
                    found.push(format!("{rel}: {}", String::from_utf8_lossy(name)));
                }
            }
        }
    }
    found
}

#[test]
fn overlay_keep_merges_creates_modifies_deletes_and_a_replaced_directory() {
    let fx = Fx::new();
    let start = tree(&fx.ws);
    let manifest = fx.take().expect("take an overlay snapshot");
    // The step sees its own writes; the host's view of the workspace is untouched.
    let seen = fx.step(&format!("{STEP}\ncat a.txt; ls dir"));
    assert_eq!(seen, "new content\nz\n");
    assert_eq!(
        tree(&fx.ws),
        start,
        "the step wrote through to the workspace"
    );
    // What the keep must apply: a whiteout for the deleted file, an opaque directory for
    // the replaced one, and no redirect for the renamed one.
    let upper = fx.store().overlay_state("run_o").join("upper");
    let whiteout = std::fs::symlink_metadata(upper.join("del.txt")).expect("a whiteout");
    assert!(whiteout.file_type().is_char_device() && whiteout.rdev() == 0);
    let mut value = [0u8; 8];
    let n = rustix::fs::lgetxattr(upper.join("dir"), OPAQUE_XATTR, &mut value[..])
        .expect("dir is opaque");
    assert_eq!(&value[..n], b"y");
    assert!(
        rustix::fs::lgetxattr(
            upper.join("renamed"),
            "trusted.overlay.redirect",
            &mut value[..]
        )
        .is_err(),
        "a redirect with redirect_dir=off"
    );
    let (changes, _) = fx
        .store()
        .changes(&manifest, &[], &step("diff"))
        .expect("diff");
    assert!(changes.added.contains(&"new.txt".to_owned()), "{changes:?}");
    assert!(
        changes.modified.contains(&"a.txt".to_owned()),
        "{changes:?}"
    );
    assert!(
        changes.deleted.contains(&"del.txt".to_owned()),
        "{changes:?}"
    );
    assert!(changes.deleted.contains(&"dir/x".to_owned()), "{changes:?}");
    let kept = fx
        .store()
        .keep(&manifest, &step("keep"))
        .expect("keep")
        .expect("an overlay keep");
    assert!(kept.residue.is_empty(), "keep residue: {:?}", kept.residue);
    assert_eq!(tree(&fx.ws), fx.expected_after_step());
    assert_eq!(overlay_xattrs(&fx.ws), Vec::<String>::new());
    assert!(
        !fx.store().overlay_state("run_o").exists(),
        "the run's overlay state stayed after the keep"
    );
}

#[test]
fn overlay_rollback_leaves_the_workspace_byte_identical_and_verified() {
    let fx = Fx::new();
    let start = tree(&fx.ws);
    let manifest = fx.take().expect("take an overlay snapshot");
    fx.step(STEP);
    let store = fx.store();
    let not_restored = store
        .restore(&manifest, &[], &step("rollback"))
        .expect("rollback");
    let residue = store
        .residue(&manifest, &[], &not_restored, &step("residue check"))
        .expect("residue check");
    assert_eq!(residue, Vec::<String>::new());
    assert_eq!(tree(&fx.ws), start);
    // The next step starts from the snapshot again.
    assert_eq!(
        fx.step("cat a.txt; ls"),
        "old content\na.txt\ndel.txt\ndir\nexe.sh\nkeep.txt\nlink\nmoved\nsub\n"
    );
}

#[test]
fn overlay_savepoints_stack_as_layers_and_roll_back_to_the_first() {
    let fx = Fx::new();
    let start = tree(&fx.ws);
    let first = fx.take().expect("take the starting snapshot");
    fx.step("printf one > one.txt && rm del.txt");
    let sp1 = fx.take().expect("savepoint 1");
    fx.step("printf two > two.txt && rm one.txt && printf changed > a.txt");
    let sp2 = fx.take().expect("savepoint 2");
    fx.step("printf three > three.txt");
    assert_eq!(
        fx.step("ls | tr '\\n' ' '"),
        "a.txt dir exe.sh keep.txt link moved sub three.txt two.txt "
    );
    let store = fx.store();
    store
        .restore(&sp1, &[], &step("rollback"))
        .expect("roll back to savepoint 1");
    let residue = store
        .residue(&sp1, &[], &Default::default(), &step("residue check"))
        .expect("residue check");
    assert_eq!(residue, Vec::<String>::new());
    assert_eq!(
        fx.step("cat one.txt a.txt; ls | tr '\\n' ' '"),
        "oneold content\na.txt dir exe.sh keep.txt link moved one.txt sub "
    );
    assert_eq!(tree(&fx.ws), start, "a rollback touched the workspace");
    // Savepoint 2's layer was dropped with everything after savepoint 1.
    let error = store
        .restore(&sp2, &[], &step("rollback"))
        .expect_err("savepoint 2 is gone");
    assert!(error.to_string().contains("is gone"), "{error}");
    // Keeping now merges savepoint 1's layer.
    let kept = store
        .keep(&first, &step("keep"))
        .expect("the test's own setup or step")
        .expect("the test's own setup or step");
    assert!(kept.residue.is_empty(), "{:?}", kept.residue);
    let now = tree(&fx.ws);
    assert_eq!(now["one.txt"].bytes, b"one");
    assert!(!now.contains_key("del.txt") && !now.contains_key("two.txt"));
    assert_eq!(now["a.txt"].bytes, b"old content\n");
}

#[test]
fn overlay_residue_check_reports_a_planted_residue() {
    let fx = Fx::new();
    let manifest = fx.take().expect("take an overlay snapshot");
    fx.step(STEP);
    let store = fx.store();
    // As a decision does: the diff (which waits for the snapshot's stamp walk), then the
    // rollback.
    store
        .changes(&manifest, &[], &step("diff"))
        .expect("the test's own setup or step");
    store
        .restore(&manifest, &[], &step("rollback"))
        .expect("the test's own setup or step");
    // Something wrote to the host's workspace, and into the upper directory, behind the
    // driver's back.
    std::fs::write(fx.ws.join("planted"), "residue").expect("the test's own setup or step");
    std::fs::write(fx.ws.join("keep.txt"), "kept\n").expect("the test's own setup or step");
    std::fs::write(store.overlay_state("run_o").join("upper/sneaky"), "x")
        .expect("the test's own setup or step");
    let residue = store
        .residue(&manifest, &[], &Default::default(), &step("residue check"))
        .expect("the test's own setup or step");
    assert!(
        residue.contains(&"left behind: planted".to_owned()),
        "{residue:?}"
    );
    // Same content, but rewritten: the change time gives it away.
    assert!(
        residue.contains(&"differs: keep.txt".to_owned()),
        "{residue:?}"
    );
    assert!(
        residue.contains(&"left behind: sneaky (in the overlay's upper directory)".to_owned()),
        "{residue:?}"
    );
}

#[test]
fn overlay_savepoint_and_rollback_are_refused_under_a_live_mount() {
    let fx = Fx::new();
    let manifest = fx.take().expect("take an overlay snapshot");
    let live = StepMount::prepare(&fx.store().overlay_state("run_o"), &fx.ws)
        .expect("the test's own setup or step");
    let error = fx.take().expect_err("a savepoint under a live mount");
    assert!(error.to_string().contains("while a step"), "{error}");
    let error = fx
        .store()
        .restore(&manifest, &[], &step("rollback"))
        .expect_err("a rollback under a live mount");
    assert!(error.to_string().contains("while a step"), "{error}");
    let error = fx
        .store()
        .ready_to_restore(&manifest)
        .expect_err("a rollback-to is refused before its decision");
    assert!(error.to_string().contains("while a step"), "{error}");
    drop(live);
    fx.store()
        .ready_to_restore(&manifest)
        .expect("ready once the step ended");
    fx.take().expect("a savepoint once the step ended");
}

#[test]
fn overlay_savepoint_after_a_step_is_not_refused_for_a_child_another_thread_spawned() {
    // Another thread spawns children all along: each holds a copy of every descriptor,
    // the step's lock among them, from its fork to its exec.
    let fx = Fx::new();
    fx.take().expect("take an overlay snapshot");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new("true").status();
            }
        })
    };
    let mut outcome = Ok(());
    for round in 0..30 {
        let state = fx.store().overlay_state("run_o");
        drop(StepMount::prepare(&state, &fx.ws).expect("prepare the mount"));
        if let Err(error) = fx.take() {
            outcome = Err(format!("savepoint {round}: {error}"));
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spawner.join().expect("the spawner");
    outcome.expect("every savepoint between steps is taken");
}

/// Held by every test that mounts in the test process's own namespace or reads its
/// mount table (`--scope root` plans every mount), so neither sees the other's mount
/// come and go.
pub(super) static MOUNT_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`MOUNT_TABLE`], whether or not a test that held it failed.
pub(super) fn mount_table() -> std::sync::MutexGuard<'static, ()> {
    MOUNT_TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Unmounts `0` when dropped (lazily, so a failed test leaves nothing mounted).
pub(super) struct Mounted(pub(super) PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

#[test]
fn overlay_check_refuses_another_filesystem_and_a_nested_overlay_naming_dir() {
    let _table = mount_table();
    let dir = tempfile::tempdir().expect("the test's own setup or step");
    let (data, ws) = (dir.path().join("data"), dir.path().join("ws"));
    std::fs::create_dir_all(&data).expect("the test's own setup or step");
    std::fs::create_dir_all(&ws).expect("the test's own setup or step");
    check(&ws, &data).expect("same filesystem");
    rustix::mount::mount(
        "tmpfs",
        &ws,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .expect("mount a tmpfs on the test's own directory");
    let tmpfs = Mounted(ws.clone());
    let error = check(&ws, &data).expect_err("another filesystem");
    let text = error.to_string();
    assert!(text.contains("different filesystem"), "{text}");
    assert!(text.contains("--snapshot dir"), "{text}");
    drop(tmpfs);
    // A workspace that is itself an overlay.
    for d in ["l", "u", "w"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("the test's own setup or step");
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        dir.path().join("l").display(),
        dir.path().join("u").display(),
        dir.path().join("w").display()
    );
    let options = std::ffi::CString::new(options).expect("the test's own setup or step");
    rustix::mount::mount(
        "overlay",
        &ws,
        "overlay",
        rustix::mount::MountFlags::empty(),
        options.as_c_str(),
    )
    .expect("mount an overlay on the test's own directory");
    let _overlay = Mounted(ws.clone());
    let error = check(&ws, &data).expect_err("a nested overlay");
    let text = error.to_string();
    assert!(text.contains("nested overlay"), "{text}");
    assert!(text.contains("--snapshot dir"), "{text}");
}

#[test]
fn overlay_driver_parses_and_btrfs_still_names_the_others() {
    assert_eq!(
        Driver::parse("overlay").expect("the test's own setup or step"),
        Driver::Overlay
    );
    let error = Driver::parse("btrfs").expect_err("an error").to_string();
    assert!(error.contains("dir, overlay"), "{error}");
}
