//! Issue 35: root inside the fence is not root outside. When `airlock run` is root, the
//! command runs as the subordinate range (never host uid 0), in IPC and UTS namespaces of
//! its own, with `/proc/sys` read-only and a syscall filter, on an overlay whose writes
//! land in the run's layer and are listed in the run record (`written_outside`), never on
//! the host. One test per finding; each asserts what the host sees afterwards, and puts
//! back anything it changed on the host even when it fails (the [`Restore`] guards).
//!
//! These run as root only (CI is root); as an ordinary user the command already runs as
//! the user's own non-zero uid, and they say so and return.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{fence_or_skip, is_root, policy, Fenced, Ran};
use airlock_tests::{text_origin, Fixture};

/// Puts a host file back as it was when dropped: its old content, or removed when it did
/// not exist.
pub(super) struct Restore {
    pub(super) path: PathBuf,
    pub(super) before: Option<Vec<u8>>,
}

impl Restore {
    pub(super) fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let before = std::fs::read(&path).ok();
        Self { path, before }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        match &self.before {
            Some(bytes) => {
                if std::fs::read(&self.path).ok().as_ref() != Some(bytes) {
                    let _ = std::fs::write(&self.path, bytes);
                }
            }
            None => {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A fence as root, or `None` (with why) when this test cannot apply here.
pub(super) async fn root_fence(test: &str) -> Option<Fenced> {
    if !fence_or_skip(test) {
        return None;
    }
    if !is_root() {
        eprintln!("SKIPPED {test}: not root (the command already runs as this user's uid)");
        return None;
    }
    if super::suite_user().is_some() {
        eprintln!("SKIPPED {test}: the suite runs airlock as an ordinary user");
        return None;
    }
    let origin = text_origin(None, 200, "unused").await;
    Some(Fenced::start(Fixture::new(), &policy(origin.addr().port())))
}

/// The paths of the run record's `written_outside`.
pub(super) fn written(ran: &Ran) -> Vec<String> {
    ran.report["written_outside"]["paths"]
        .as_array()
        .unwrap_or_else(|| panic!("no written_outside in the report: {:#}", ran.report))
        .iter()
        .filter_map(|w| w["path"].as_str().map(str::to_owned))
        .collect()
}

pub(super) fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("airlock-test-{name}-{}-{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_sysctl_writes_from_inside_are_refused_and_the_host_keeps_its_settings() {
    let test = "root_fence_sysctl_writes_from_inside_are_refused_and_the_host_keeps_its_settings";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let _hostname = Restore::new("/proc/sys/kernel/hostname");
    let _core = Restore::new("/proc/sys/kernel/core_pattern");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let core = std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern");
    let script = "echo airlock-evil > /proc/sys/kernel/hostname 2> hostname.err; echo $? > hostname.code; \
         echo '|/tmp/airlock-evil %p' > /proc/sys/kernel/core_pattern 2> core.err; echo $? > core.code; \
         sysctl -w kernel.panic=7 > /dev/null 2>&1; echo $? > panic.code; \
         hostname airlock-uts 2> uts.err; hostname > uts.txt";
    let ran = fenced.run("isolated", &[], script).await;
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname"),
        hostname,
        "the host's hostname changed from inside the fence ({})",
        ran.stderr()
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern"),
        core,
        "the host's core_pattern changed from inside the fence"
    );
    assert_ne!(
        fenced.read("core.code"),
        "0",
        "core_pattern was writable inside"
    );
    assert_ne!(
        fenced.read("hostname.code"),
        "0",
        "/proc/sys/kernel/hostname was writable"
    );
    assert_ne!(fenced.read("panic.code"), "0", "kernel.panic was writable");
    // `hostname NAME` may succeed: it changes the fence's UTS namespace only.
    assert_ne!(
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .expect("hostname")
            .trim(),
        "airlock-uts"
    );
}

fn ipcs() -> String {
    let out = Command::new("ipcs").arg("-m").output().expect("ipcs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes a SysV shared-memory segment of the host when dropped.
struct Segment(String);

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-m", &self.0]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_sysv_shared_memory_is_not_shared_with_the_host_either_way() {
    let test = "root_fence_sysv_shared_memory_is_not_shared_with_the_host_either_way";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let made = Command::new("ipcmk")
        .args(["-M", "4096"])
        .output()
        .expect("ipcmk");
    let text = String::from_utf8_lossy(&made.stdout);
    let id = text
        .split_whitespace()
        .last()
        .expect("ipcmk prints the id")
        .to_owned();
    let _segment = Segment(id.clone());
    let before = ipcs();
    // A size of its own, so the segment made inside can be told from others made on the
    // host meanwhile (other tests' PostgreSQL, for one).
    let size = 63_352 + std::process::id() % 997;
    let script = format!(
        "ipcs -m > inside.txt; ipcs -m -i {id} > seen.txt 2>&1; echo $? > seen.code; \
         ipcmk -M {size} > made.txt; echo $? > made.code"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    // `ipcs -i` prints "not found" (and exits 0 on util-linux 2.38) for an id it cannot see.
    assert!(
        fenced.read("seen.code") != "0" || fenced.read("seen.txt").contains("not found"),
        "the host's segment {id} was reachable inside: {}",
        fenced.read("seen.txt")
    );
    assert!(
        !fenced.read("inside.txt").contains(&format!(" {id} ")),
        "{}",
        fenced.read("inside.txt")
    );
    assert_eq!(fenced.read("made.code"), "0", "{}", ran.stderr());
    let after = ipcs();
    let new: Vec<&str> = after
        .lines()
        .filter(|l| l.contains("0x") && !before.contains(*l))
        .filter(|l| l.split_whitespace().nth(4) == Some(size.to_string().as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "a segment made inside the fence shows on the host: {new:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_a_file_written_in_usr_local_bin_is_listed_and_never_reaches_the_host() {
    let test = "root_fence_a_file_written_in_usr_local_bin_is_listed_and_never_reaches_the_host";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let path = PathBuf::from("/usr/local/bin").join(unique("bin"));
    let _restore = Restore::new(&path);
    let script = format!(
        "printf '#!/bin/sh\\necho planted\\n' > {p} && chmod +x {p} && {p} > ran.txt",
        p = path.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("ran.txt"),
        "planted",
        "the command could write it"
    );
    assert!(!path.exists(), "{} reached the host", path.display());
    let written = written(&ran);
    assert!(
        written.contains(&path.display().to_string()),
        "{} not in written_outside: {written:?}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_a_new_crontab_and_a_user_systemd_unit_are_reported_and_absent_from_the_host() {
    let test =
        "root_fence_a_new_crontab_and_a_user_systemd_unit_are_reported_and_absent_from_the_host";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let crontab = Path::new("/var/spool/cron/crontabs/root");
    let _crontab = Restore::new(crontab);
    let crontab_before = std::fs::read(crontab).ok();
    let spool_existed = Path::new("/var/spool/cron/crontabs").exists();
    let home = fenced.fx.dir.path().join("home");
    let unit = home.join(".config/systemd/user/x.service");
    let script = format!(
        "mkdir -p /var/spool/cron/crontabs && echo '* * * * * /tmp/evil' >> {c} && \
         mkdir -p $HOME/.config/systemd/user && printf '[Service]\\nExecStart=/tmp/evil\\n' > $HOME/.config/systemd/user/x.service",
        c = crontab.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        std::fs::read(crontab).ok(),
        crontab_before,
        "the host's crontab changed"
    );
    if !spool_existed {
        assert!(!Path::new("/var/spool/cron/crontabs").exists());
    }
    assert!(!unit.exists(), "{} reached the host", unit.display());
    let written = written(&ran);
    for path in [crontab.to_path_buf(), unit] {
        assert!(
            written.contains(&path.display().to_string()),
            "{} not in written_outside: {written:?}",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_a_symlink_at_the_old_probe_marker_path_is_not_followed() {
    let test = "root_fence_a_symlink_at_the_old_probe_marker_path_is_not_followed";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let victim = fenced.fx.dir.path().join("victim");
    let mut planted = Vec::new();
    for suffix in ["isolated", "isolated-idmap", "offline", "offline-idmap"] {
        let link =
            std::env::temp_dir().join(format!("airlock-fence-probed-{}-0-{suffix}", boot.trim()));
        if link.symlink_metadata().is_ok() {
            continue; // someone's real marker; never touch it
        }
        std::os::unix::fs::symlink(&victim, &link).expect("plant symlink");
        planted.push(Restore {
            path: link,
            before: None,
        });
    }
    let ran = fenced.run("isolated", &[], "true").await;
    ran.assert_success();
    assert!(
        victim.symlink_metadata().is_err(),
        "the probe followed a planted symlink and created {}",
        victim.display()
    );
    // The probe's memory is kept, if anywhere, in a directory only root can write (no
    // XDG_RUNTIME_DIR here, and this `airlock run` names no data directory of its own), as
    // a regular file.
    let markers: Vec<PathBuf> = std::fs::read_dir(fenced.fx.data_dir())
        .expect("data dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("airlock-fence-probed-"))
        })
        .collect();
    for marker in markers {
        let meta = marker.symlink_metadata().expect("marker");
        assert!(meta.is_file(), "{} is not a regular file", marker.display());
    }
    for link in &planted {
        assert_eq!(
            std::fs::read_link(&link.path).ok().as_deref(),
            Some(victim.as_path()),
            "the planted symlink {} was replaced",
            link.path.display()
        );
    }
}

/// The host uid of the process whose command line is `argv` (NUL-separated in
/// `/proc/PID/cmdline`), polled for up to 10 s.
async fn host_uid_of(argv: &[&str]) -> Option<(u32, u32)> {
    let wanted = argv.join("\0") + "\0";
    for _ in 0..200 {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline == wanted.as_bytes() {
                let status =
                    std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
                let field = |name: &str| {
                    status
                        .lines()
                        .find(|l| l.starts_with(name))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse().ok())
                };
                return Some((field("Uid:")?, field("Gid:")?));
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_the_command_is_a_non_zero_host_uid_and_its_workspace_files_are_the_owners() {
    let test =
        "root_fence_the_command_is_a_non_zero_host_uid_and_its_workspace_files_are_the_owners";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    // The workspace belongs to an ordinary user; the command is root inside.
    std::os::unix::fs::chown(&fenced.ws, Some(1000), Some(1000)).expect("chown workspace");
    let nap = format!("{}.{}", 3, std::process::id() % 1000 + 1000);
    let script = format!(
        "id -u > uid.txt; mkdir made-dir && echo made > made-dir/file; echo x > made; sleep {nap}"
    );
    let argv = ["sleep", nap.as_str()];
    let (ran, uid) = tokio::join!(fenced.run("isolated", &[], &script), host_uid_of(&argv));
    ran.assert_success();
    assert_eq!(fenced.read("uid.txt"), "0", "the command is root inside");
    let (uid, gid) = uid.expect("the fenced sleep was seen from the host");
    assert_ne!(uid, 0, "the fenced command is host uid 0");
    assert_ne!(gid, 0, "the fenced command is host gid 0");
    use std::os::unix::fs::MetadataExt as _;
    for name in ["made", "made-dir", "made-dir/file"] {
        let meta = std::fs::metadata(fenced.ws.join(name)).expect(name);
        assert_eq!(
            (meta.uid(), meta.gid()),
            (1000, 1000),
            "{name} is not the workspace owner's on the host"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_refuses_the_overlay_driver_without_allow_host_root_and_says_why() {
    let test = "root_fence_refuses_the_overlay_driver_without_allow_host_root_and_says_why";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let out = Command::new(airlock_tests::airlock_bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "run",
            "--admin",
            &fenced.airlock.admin_url,
            "--token",
            &fenced.token,
        ])
        .args([
            "--network",
            "isolated",
            "--snapshot",
            "overlay",
            "--workspace",
        ])
        .arg(&fenced.ws)
        .args(["--", "sh", "-c", "echo ran > ran.txt"])
        .output()
        .expect("airlock run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--allow-host-root"), "{stderr}");
    assert!(!fenced.ws.join("ran.txt").exists(), "the command ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_proc_masks_and_read_only_paths_hold_and_cannot_be_unmounted() {
    let test = "root_fence_proc_masks_and_read_only_paths_hold_and_cannot_be_unmounted";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let script = "umount /proc/sys 2> umount.err; echo $? > umount.code; \
         umount -l /proc/timer_list 2>/dev/null; \
         wc -c < /proc/timer_list > timer.txt 2>/dev/null; \
         grep -c . /proc/keys > keys.txt 2>/dev/null; \
         touch /proc/sys/kernel/hostname 2> rosys.err; echo $? > rosys.code; \
         mkdir /sys/airlock-test 2> sys.err; echo $? > sys.code";
    let ran = fenced.run("isolated", &[], script).await;
    ran.assert_success();
    assert_ne!(fenced.read("umount.code"), "0", "/proc/sys was unmounted");
    if Path::new("/proc/timer_list").exists() {
        assert_eq!(
            fenced.read("timer.txt"),
            "0",
            "/proc/timer_list is not masked"
        );
    }
    if Path::new("/proc/keys").exists() {
        assert!(
            ["", "0"].contains(&fenced.read("keys.txt").as_str()),
            "/proc/keys is not masked: {}",
            fenced.read("keys.txt")
        );
    }
    assert_ne!(fenced.read("rosys.code"), "0");
    assert_ne!(fenced.read("sys.code"), "0", "/sys is writable");
}
