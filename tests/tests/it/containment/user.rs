//! Issue 35, as an ordinary user: `airlock serve` and `airlock run` started by the
//! unprivileged user `.ci/run` creates ([`airlock_tests::user`]). The fence holds as it
//! does under root: reads pass and writes stage through airlock and nothing else leaves;
//! the command's host uid is the user's; writes outside the workspace land in the run's
//! layer (the skeleton and overlays of `airlock_fence::root`) and never on the host; the
//! kernel's settings, the host name and SysV IPC are the fence's own.

use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_tests::user::{test_user, TestUser};
use airlock_tests::{in_ci, ok_origin, Fixture, Origin};

use super::root::{unique, written, Restore};
use super::{fence_or_skip, policy, requests, Fenced, FENCE_GUARD, HOST};

/// A server and a fence as the test user, with a `200 {"ok":true}` origin; `None` when
/// `test` is skipped (no fence, or no user to switch to: a failure under CI, where
/// `.ci/run` makes both).
async fn user_fence(test: &str) -> Option<(Fenced, Origin, TestUser)> {
    if !fence_or_skip(test) {
        return None;
    }
    let user = match test_user() {
        Ok(user) => user,
        Err(why) => {
            assert!(!in_ci(), "{test} needs an unprivileged user in CI: {why}");
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
    };
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let fenced = Fenced::start_as(fx, &policy(origin.addr().port()), user.clone());
    Some((fenced, origin, user))
}

fn owner(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .uid()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_fence_passes_reads_stages_writes_and_nothing_reaches_the_hosts_loopback() {
    let test = "user_fence_passes_reads_stages_writes_and_nothing_reaches_the_hosts_loopback";
    let Some((fenced, origin, _user)) = user_fence(test).await else {
        return;
    };
    let port = origin.addr().port();
    let script = format!(
        "curl -sS -o read.json -w '%{{http_code}}' https://{HOST}:{port}/status > read.code; \
         curl -sS -o write.json -w '%{{http_code}}' -X POST --data from-user https://{HOST}:{port}/hook > write.code; \
         {FENCE_GUARD}; \
         curl --noproxy '*' -sS -m 5 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/direct > direct.code 2> direct.err; \
         echo $? > direct.exit"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(ran.containment()["network"], "isolated", "{:#}", ran.report);
    assert_eq!(fenced.read("read.code"), "200", "{}", ran.stderr());
    assert_eq!(fenced.read("write.code"), "202", "{}", ran.stderr());
    assert_ne!(
        fenced.read("direct.exit"),
        "0",
        "the host's loopback answered a direct connection from the fence"
    );
    let received = requests(&origin);
    assert_eq!(
        received,
        vec!["GET /status".to_owned()],
        "the origin got the read only: the write is staged, the direct request never arrived"
    );
    let run = ran.run();
    let report = fenced.airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    let received = origin.received();
    assert_eq!(received.len(), 2, "{:?}", requests(&origin));
    assert_eq!(received[1].body, b"from-user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_fence_writes_outside_the_workspace_land_in_the_layer_and_never_reach_the_host() {
    let test = "user_fence_writes_outside_the_workspace_land_in_the_layer_and_never_reach_the_host";
    let Some((fenced, _origin, user)) = user_fence(test).await else {
        return;
    };
    let home = fenced.fx.dir.path().join("home");
    let unit = home.join(".config/systemd/user/x.service");
    let cache = home.join(".cache/agent/x");
    let tmp = std::env::temp_dir().join(unique("user-tmp"));
    let _tmp = Restore::new(&tmp);
    let bin = PathBuf::from("/usr/local/bin").join(unique("user-bin"));
    let _bin = Restore::new(&bin);
    let script = format!(
        "mkdir -p $HOME/.config/systemd/user && printf '[Service]\\nExecStart=/tmp/evil\\n' > {unit}; \
         mkdir -p $HOME/.cache/agent && echo cached > {cache} && cat {cache} > cache.txt; \
         echo outside > {tmp} && cat {tmp} > tmp.txt; \
         echo planted > {bin} 2> bin.err; echo $? > bin.code; \
         echo inside > made-here.txt",
        unit = unit.display(),
        cache = cache.display(),
        tmp = tmp.display(),
        bin = bin.display(),
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(fenced.read("cache.txt"), "cached", "{}", ran.stderr());
    assert_eq!(fenced.read("tmp.txt"), "outside", "{}", ran.stderr());
    assert_ne!(
        fenced.read("bin.code"),
        "0",
        "the user wrote /usr/local/bin from inside"
    );
    for path in [&unit, &cache, &tmp, &bin] {
        assert!(
            path.symlink_metadata().is_err(),
            "{} reached the host",
            path.display()
        );
    }
    let written = written(&ran);
    for path in [&unit, &cache, &tmp] {
        assert!(
            written.contains(&path.display().to_string()),
            "{} not in written_outside: {written:?}",
            path.display()
        );
    }
    assert!(
        ran.report["written_outside"]["not_captured"].is_null(),
        "{:#}",
        ran.report["written_outside"]
    );
    // The layer's copies of the host's directories are not writes.
    assert!(
        !written
            .iter()
            .any(|p| p == "/usr" || p == "/etc" || p == "/bin"),
        "{written:?}"
    );
    assert_eq!(
        owner(&fenced.ws.join("made-here.txt")),
        user.uid,
        "the workspace file is the user's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_fence_sysctls_the_host_name_and_sysv_ipc_are_the_fences_own() {
    let test = "user_fence_sysctls_the_host_name_and_sysv_ipc_are_the_fences_own";
    let Some((fenced, _origin, user)) = user_fence(test).await else {
        return;
    };
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
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
    let _segment = RemoveSegment(id.clone());
    let script = format!(
        "echo airlock-evil > /proc/sys/kernel/hostname 2> hostname.err; echo $? > hostname.code; \
         hostname airlock-user-uts 2> uts.err; hostname > uts.txt; \
         ipcs -m -i {id} > seen.txt 2>&1; echo $? > seen.code; id -u > uid.txt"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_ne!(fenced.read("hostname.code"), "0", "a sysctl was writable");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname"),
        hostname,
        "the host's name changed"
    );
    assert!(
        fenced.read("seen.code") != "0" || fenced.read("seen.txt").contains("not found"),
        "the host's segment {id} was visible inside: {}",
        fenced.read("seen.txt")
    );
    // Root inside the fence is the user outside: uid 0 in its namespace, files the user's.
    assert_eq!(fenced.read("uid.txt"), "0");
    assert_eq!(owner(&fenced.ws.join("uid.txt")), user.uid);
}

/// Removes a SysV shared-memory segment of the host when dropped.
struct RemoveSegment(String);

impl Drop for RemoveSegment {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-m", &self.0]).output();
    }
}
