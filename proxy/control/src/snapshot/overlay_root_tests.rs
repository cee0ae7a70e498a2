//! The `overlay` driver over the whole filesystem (`--scope root`, issue #22) on real
//! mounts: each step runs in a mount namespace of its own made by the driver's command
//! line, with the machine's filesystems overlaid and `pivot_root` into them, so what the
//! step writes outside the workspace (a directory of the test standing for `/opt/cache`)
//! never reaches the host. The only mount made in the test's own namespace is the tmpfs
//! of the separate-filesystem test, on its own temporary directory, unmounted when it
//! ends. Needs root, as the driver does.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::overlay::root::{key_of, parse_mountinfo, path_of, plan_of, How};
use super::overlay::StepMount;
use super::overlay_tests::{mount_table, seed, step, tree, Mounted, STEP};
use super::{Driver, Manifest, SnapshotError, Store};

struct Fx {
    dir: tempfile::TempDir,
    data: PathBuf,
    ws: PathBuf,
    /// Stands for `/opt/cache`: outside the workspace, on the host's filesystems.
    outside: PathBuf,
}

impl Fx {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let ws = dir.path().join("ws");
        let outside = dir.path().join("opt-cache");
        std::fs::create_dir_all(&data).expect("the test's own setup");
        std::fs::create_dir_all(&outside).expect("the test's own setup");
        std::fs::write(outside.join("old"), "old cache\n").expect("the test's own setup");
        seed(&ws);
        Self {
            dir,
            data,
            ws,
            outside,
        }
    }

    fn store(&self) -> Store {
        Store::new(&self.data)
    }

    fn take(&self) -> Result<Manifest, SnapshotError> {
        self.store().take(
            Driver::OverlayRoot,
            &self.ws,
            "run_r",
            &[],
            None,
            &step("snapshot"),
        )
    }

    fn mount(&self, pass: &[&Path]) -> StepMount {
        let state = self.store().overlay_state("run_r");
        let mut mount = StepMount::prepare(&state, &self.ws).expect("prepare the mount");
        assert!(mount.is_root_scope());
        for path in pass {
            mount.pass_through(path);
        }
        mount
    }

    /// Runs `script` with `sh -c` on the run's root overlay, as `airlock run` runs a
    /// step. When the script reads a line from stdin, `paused` runs first (with the
    /// step alive, its writes made) and the line is sent after it. Returns stdout.
    fn step_paused(&self, script: &str, pass: &[&Path], paused: impl FnOnce()) -> String {
        let mount = self.mount(pass);
        let (program, args) = mount
            .command_line("sh", &["-c".to_owned(), script.to_owned()])
            .expect("command line");
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&self.ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the step");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("the step's first line");
        paused();
        let mut stdin = child.stdin.take().expect("stdin");
        let _ = stdin.write_all(b"go\n");
        drop(stdin);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).expect("the step's output");
        let status = child.wait_with_output().expect("the step ends");
        assert!(
            status.status.success(),
            "the step failed: {first}{rest} {}",
            String::from_utf8_lossy(&status.stderr)
        );
        first + &rest
    }

    fn step(&self, script: &str) -> String {
        self.step_paused(&format!("echo start; {script}"), &[], || {})
    }

    fn upper(&self) -> PathBuf {
        self.store().overlay_state("run_r").join("upper")
    }
}

/// Where `path` (on the host) lands in the run's upper directories, if anywhere.
fn in_upper(upper: &Path, path: &Path) -> Option<PathBuf> {
    let mut best: Option<(String, PathBuf)> = None;
    for item in std::fs::read_dir(upper).ok()?.flatten() {
        let Some(mount) = item.file_name().to_str().and_then(path_of) else {
            continue;
        };
        if path.starts_with(&mount) && best.as_ref().is_none_or(|(b, _)| mount.len() > b.len()) {
            best = Some((mount.clone(), item.path()));
        }
    }
    let (mount, dir) = best?;
    let found = dir.join(path.strip_prefix(&mount).ok()?);
    std::fs::symlink_metadata(&found).is_ok().then_some(found)
}

/// What the steps write outside the workspace: a new file, a new tree, and a deletion.
fn outside_script(outside: &Path) -> String {
    let o = outside.display();
    format!(
        "set -e; printf 'cached\\n' > {o}/x; mkdir -p {o}/new/deep; printf y > {o}/new/deep/y; \
         rm {o}/old"
    )
}

#[test]
fn root_scope_rollback_drops_writes_outside_the_workspace_that_the_host_never_saw() {
    let _table = mount_table();
    let fx = Fx::new();
    let start = tree(&fx.ws);
    let manifest = fx.take().expect("take a root-scope overlay snapshot");
    let o = fx.outside.display();
    let script = format!(
        "{}\n{STEP}\necho start; read line; cat {o}/x; ls {o} | tr '\\n' ' '",
        outside_script(&fx.outside)
    );
    let seen = fx.step_paused(&script, &[], || {
        // The step is alive, its writes made: none of them is on the host.
        assert!(
            !fx.outside.join("x").exists(),
            "the step's write outside the workspace reached the host"
        );
        assert!(!fx.outside.join("new").exists());
        assert_eq!(
            std::fs::read_to_string(fx.outside.join("old")).expect("the host's file"),
            "old cache\n",
            "the step's deletion outside the workspace reached the host"
        );
        assert_eq!(
            tree(&fx.ws),
            start,
            "the step wrote through to the workspace"
        );
    });
    // The step saw its own writes.
    assert_eq!(seen, "start\ncached\nnew x ");
    let x = in_upper(&fx.upper(), &fx.outside.join("x")).expect("x is in the upper directory");
    assert_eq!(std::fs::read(&x).expect("read"), b"cached\n");
    let store = fx.store();
    let not_restored = store
        .restore(&manifest, &[], &step("rollback"))
        .expect("rollback");
    let residue = store
        .residue(&manifest, &[], &not_restored, &step("residue check"))
        .expect("residue check");
    assert_eq!(residue, Vec::<String>::new());
    assert_eq!(tree(&fx.ws), start);
    assert!(!fx.outside.join("x").exists() && !fx.outside.join("new").exists());
    assert!(fx.outside.join("old").exists());
    assert_eq!(in_upper(&fx.upper(), &fx.outside.join("x")), None);
    // The next step starts from the host's files again.
    assert_eq!(fx.step(&format!("ls {o}")), "start\nold\n");
}

#[test]
fn root_scope_keep_merges_the_workspace_and_reports_writes_outside_it_unapplied() {
    let _table = mount_table();
    let fx = Fx::new();
    let manifest = fx.take().expect("take a root-scope overlay snapshot");
    fx.step(&format!(
        "{}\nprintf 'new content\\n' > a.txt; rm del.txt; mkdir -p fresh && printf q > fresh/q",
        outside_script(&fx.outside)
    ));
    let (changes, _) = fx
        .store()
        .changes(&manifest, &[], &step("diff"))
        .expect("diff");
    assert!(
        changes.modified.contains(&"a.txt".to_owned()),
        "{changes:?}"
    );
    assert!(
        changes.deleted.contains(&"del.txt".to_owned()),
        "{changes:?}"
    );
    assert!(changes.added.contains(&"fresh/q".to_owned()), "{changes:?}");
    assert!(
        changes.added.iter().all(|p| !p.contains("opt-cache")),
        "the diff holds paths outside the workspace: {changes:?}"
    );
    let kept = fx
        .store()
        .keep(&manifest, &step("keep"))
        .expect("keep")
        .expect("an overlay keep");
    assert!(kept.residue.is_empty(), "keep residue: {:?}", kept.residue);
    let now = tree(&fx.ws);
    assert_eq!(now["a.txt"].bytes, b"new content\n");
    assert_eq!(now["fresh/q"].bytes, b"q");
    assert!(!now.contains_key("del.txt"));
    let o = fx.outside.display();
    for line in [
        format!("not applied: {o}/x (written outside the workspace)"),
        format!("not applied: {o}/new (written outside the workspace)"),
        format!("not applied: {o}/new/deep/y (written outside the workspace)"),
        format!("not applied: {o}/old (deleted outside the workspace)"),
    ] {
        assert!(
            kept.outside.contains(&line),
            "{line} not in {:?}",
            kept.outside
        );
    }
    assert!(
        kept.outside.iter().all(|l| !l.contains("/ws/")),
        "a workspace path reported as outside: {:?}",
        kept.outside
    );
    // Nothing outside the workspace was applied, and the run's state went.
    assert!(!fx.outside.join("x").exists() && !fx.outside.join("new").exists());
    assert!(fx.outside.join("old").exists());
    assert!(!fx.store().overlay_state("run_r").exists());
}

#[test]
fn root_scope_gives_another_writable_filesystem_an_overlay_of_its_own() {
    let _table = mount_table();
    let fx = Fx::new();
    let tmpfs = fx.dir.path().join("tmpfs");
    std::fs::create_dir_all(&tmpfs).expect("the test's own setup");
    rustix::mount::mount(
        "tmpfs",
        &tmpfs,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .expect("mount a tmpfs on the test's own directory");
    let _mounted = Mounted(tmpfs.clone());
    std::fs::write(tmpfs.join("g"), "g\n").expect("the test's own setup");
    let manifest = fx.take().expect("take a root-scope overlay snapshot");
    let t = tmpfs.display();
    let seen = fx.step(&format!("printf f > {t}/f; rm {t}/g; ls {t}"));
    assert_eq!(seen, "start\nf\n");
    assert_eq!(
        std::fs::read_dir(&tmpfs)
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect::<Vec<_>>(),
        vec!["g".to_owned()],
        "the step's writes on the tmpfs reached the host"
    );
    // Its upper directory is the tmpfs's own, not the root filesystem's.
    let own = fx.upper().join(key_of(&tmpfs.display().to_string()));
    assert!(
        own.join("f").is_file(),
        "no upper directory of the tmpfs's own"
    );
    // A savepoint's layer of the tmpfs lies on another filesystem: it stacks over it.
    fx.take().expect("a savepoint");
    assert_eq!(
        fx.step(&format!("printf h > {t}/h; ls {t} | tr '\\n' ' '")),
        "start\nf h "
    );
    let store = fx.store();
    store
        .restore(&manifest, &[], &step("rollback"))
        .expect("rollback");
    let residue = store
        .residue(&manifest, &[], &Default::default(), &step("residue check"))
        .expect("residue check");
    assert_eq!(residue, Vec::<String>::new());
    assert_eq!(fx.step(&format!("ls {t}")), "start\ng\n");
}

#[test]
fn root_scope_passes_a_host_directory_through_as_it_is() {
    let _table = mount_table();
    let fx = Fx::new();
    let through = fx.dir.path().join("fence-dir");
    std::fs::create_dir_all(&through).expect("the test's own setup");
    fx.take().expect("take a root-scope overlay snapshot");
    let script = format!(
        "printf report > {}/report.json; printf x > {}/x; echo start; read line",
        through.display(),
        fx.outside.display()
    );
    fx.step_paused(&script, &[&through], || {
        // Written through while the step is alive, as the fence's report must be…
        assert_eq!(
            std::fs::read(through.join("report.json")).expect("the report reached the host"),
            b"report"
        );
        // …and only there.
        assert!(
            !fx.outside.join("x").exists(),
            "a write outside reached the host"
        );
    });
}

#[test]
fn root_scope_refuses_what_it_cannot_capture() {
    let _table = mount_table();
    let fx = Fx::new();
    // The data directory inside the workspace.
    let inside = fx.ws.join("data");
    std::fs::create_dir_all(&inside).expect("the test's own setup");
    let error = Store::new(&inside)
        .take(
            Driver::OverlayRoot,
            &fx.ws,
            "run_r",
            &[],
            None,
            &step("snapshot"),
        )
        .expect_err("the data directory inside the workspace");
    let text = error.to_string();
    assert!(text.contains("inside the workspace"), "{text}");
    assert!(text.contains("--snapshot dir"), "{text}");
    // The mounts changed under the run: the workspace is now on another filesystem.
    fx.take().expect("take a root-scope overlay snapshot");
    rustix::mount::mount(
        "tmpfs",
        &fx.ws,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .expect("mount a tmpfs on the test's own directory");
    let _mounted = Mounted(fx.ws.clone());
    let error = StepMount::prepare(&fx.store().overlay_state("run_r"), &fx.ws)
        .expect_err("a step whose workspace moved to another mount");
    assert!(error.to_string().contains("mounts changed"), "{error}");
}

const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
28 27 0:25 / /mnt/tools ro,nosuid,nodev,relatime - tmpfs tools ro,size=4k
40 27 0:40 / /tmp rw,nosuid - tmpfs tmpfs rw
41 27 254:1 / /home/a\\040b rw - ext4 /dev/vdb rw
42 41 254:1 /x /home/a\\040b/y rw - ext4 /dev/vdb rw
43 27 0:41 / /run/netns/n rw - nsfs nsfs rw
";

#[test]
fn root_scope_plan_overlays_writable_mounts_and_passes_the_rest_through() {
    let lines = parse_mountinfo(MOUNTINFO);
    let plan = plan_of(
        lines.clone(),
        Path::new("/home/a b/y/ws"),
        |_| true,
        |path| path != "/run/netns/n",
    )
    .expect("a plan");
    let got: Vec<(String, How)> = plan
        .mounts
        .iter()
        .map(|m| (m.path.clone(), m.how.clone()))
        .collect();
    let overlay = |p: &str| How::Overlay { key: key_of(p) };
    let bind = |recursive| How::Bind { recursive };
    assert_eq!(
        got,
        vec![
            ("/".to_owned(), overlay("/")),
            ("/dev".into(), bind(true)),
            ("/home/a b".into(), overlay("/home/a b")),
            ("/home/a b/y".into(), overlay("/home/a b/y")),
            ("/mnt/tools".into(), bind(false)),
            ("/proc".into(), bind(true)),
            ("/run/netns/n".into(), bind(false)),
            ("/sys".into(), bind(true)),
            ("/tmp".into(), overlay("/tmp")),
        ]
    );
    assert_eq!(plan.workspace_key, key_of("/home/a b/y"));
    assert_eq!(plan.workspace_rel, "ws");
    assert_eq!(key_of("/"), "%2F");
    assert_eq!(path_of(&key_of("/a%2Fb/c")).as_deref(), Some("/a%2Fb/c"));
    assert_eq!(path_of("lock"), None);
    // A workspace on a read-only mount cannot be captured.
    let error = plan_of(
        lines.clone(),
        Path::new("/mnt/tools/ws"),
        |_| true,
        |_| true,
    )
    .expect_err("a read-only workspace");
    assert!(error.to_string().contains("passes through"), "{error}");
    // A mount hidden under another at the same place is left out.
    let plan = plan_of(lines, Path::new("/tmp/ws"), |l| l.id != 40, |_| true).expect("a plan");
    assert!(plan.mounts.iter().all(|m| m.path != "/tmp"));
    assert_eq!(plan.workspace_key, key_of("/"));
    assert_eq!(plan.workspace_rel, "tmp/ws");
}

#[test]
fn root_scope_savepoints_stack_layers_of_every_mount_and_roll_back_to_the_first() {
    let _table = mount_table();
    let fx = Fx::new();
    let o = fx.outside.display();
    let first = fx.take().expect("take a root-scope overlay snapshot");
    fx.step(&format!("printf one > one.txt; printf 1 > {o}/one"));
    let sp1 = fx.take().expect("savepoint 1");
    fx.step(&format!(
        "printf two > two.txt; printf 2 > {o}/two; rm {o}/one"
    ));
    // A second layer: the step's view stacks both over the host's files.
    fx.take().expect("savepoint 2");
    fx.step(&format!("printf 3 > {o}/three"));
    assert_eq!(
        fx.step(&format!("cat two.txt; ls {o} | tr '\\n' ' '")),
        "start\ntwoold three two "
    );
    let store = fx.store();
    store
        .restore(&sp1, &[], &step("rollback"))
        .expect("roll back to savepoint 1");
    let residue = store
        .residue(&sp1, &[], &Default::default(), &step("residue check"))
        .expect("residue check");
    assert_eq!(residue, Vec::<String>::new());
    // Savepoint 1's writes, outside the workspace too, are the next step's again.
    assert_eq!(
        fx.step(&format!("cat one.txt; ls {o} | tr '\\n' ' '")),
        "start\noneold one "
    );
    assert!(!fx.outside.join("one").exists() && !fx.outside.join("two").exists());
    let kept = store
        .keep(&first, &step("keep"))
        .expect("keep")
        .expect("an overlay keep");
    assert!(kept.residue.is_empty(), "{:?}", kept.residue);
    assert_eq!(
        kept.outside,
        vec![format!(
            "not applied: {o}/one (written outside the workspace)"
        )]
    );
    assert_eq!(
        std::fs::read(fx.ws.join("one.txt")).expect("merged from the layer"),
        b"one"
    );
    assert!(!fx.ws.join("two.txt").exists() && !fx.outside.join("one").exists());
}
