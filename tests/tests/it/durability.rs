//! Durability (#20 items 4 and 5): every acknowledged staging is on disk by `fdatasync`
//! before its 202, and a full disk degrades airlock until space returns, then it heals
//! without a restart and never lists an effect whose client was told it failed.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use airlock_tests::{curl, in_ci, loopback_policy, poll_until, strace, text_origin, Fixture};

mod cut_read;
mod floor;
mod heal;
mod repair;

/// The `/healthz` status code and body, asked without any proxy.
async fn healthz(admin_url: &str) -> (u16, String) {
    let out = curl(&BTreeMap::new(), &[&format!("{admin_url}/healthz")]).await;
    (out.status, String::from_utf8_lossy(&out.body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_202_follows_an_fdatasync_of_the_ledger() {
    if let Err(why) = strace::available() {
        assert!(!in_ci(), "CI installs strace: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    let fx = Fixture::new();
    // Plain http, so that the 202 is readable in the trace of the client socket.
    let origin = text_origin(None, 200, "ok").await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("http://127.0.0.1:{}/hook", origin.addr().port());
    let trace_file = fx.dir.path().join("trace.txt");
    let traced = strace::Strace::attach(
        airlock.pid().expect("airlock runs"),
        "fdatasync,fsync,pwrite64,write,writev,sendto,sendmsg",
        1 << 20,
        &trace_file,
    )
    .expect("strace attaches (needs ptrace: run as root or with ptrace_scope 0)");
    let mut staged = Vec::new();
    for i in 0..12 {
        let marker = format!("durable-marker-{i}-{}", std::process::id());
        let out = curl(&env, &["-X", "POST", "--data", &marker, &url]).await;
        assert_eq!(out.status, 202, "{}", String::from_utf8_lossy(&out.body));
        staged.push((marker, out.header("airlock-effect").expect("effect id")));
    }
    let calls = traced.finish().expect("the trace");
    let ledger_db = "/ledger/db>";
    for (marker, effect) in &staged {
        let written = calls
            .iter()
            .find(|c| c.name == "pwrite64" && c.args.contains(ledger_db) && c.args.contains(marker))
            .unwrap_or_else(|| panic!("no write of {marker} to the ledger in the trace"));
        let answered = calls
            .iter()
            .find(|c| {
                matches!(c.name.as_str(), "write" | "writev" | "sendto" | "sendmsg")
                    && c.args.contains("HTTP/1.1 202")
                    && c.args.contains(effect.as_str())
            })
            .unwrap_or_else(|| panic!("no 202 for {effect} in the trace"));
        assert!(
            written.exit < answered.entry,
            "{effect}: 202 before its write returned"
        );
        let synced = calls.iter().any(|c| {
            matches!(c.name.as_str(), "fdatasync" | "fsync")
                && c.args.contains(ledger_db)
                && c.ret == "0"
                && c.entry > written.exit
                && c.exit < answered.entry
        });
        let between: Vec<String> = calls
            .iter()
            .filter(|c| c.entry > written.exit && c.entry < answered.entry)
            .map(|c| {
                let args: String = c.args.chars().take(120).collect();
                format!("{} {}({args}) = {}", c.tid, c.name, c.ret)
            })
            .collect();
        assert!(
            synced,
            "{effect} ({marker}) was acknowledged with no fdatasync/fsync of the ledger's db file between its write (trace line {}) and its 202 (line {}); between them:\n{}",
            written.exit + 1,
            answered.entry + 1,
            between.join("\n")
        );
    }
    let listed = airlock.effects(&run).await;
    assert_eq!(listed.len(), staged.len());
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Self {
        std::fs::create_dir_all(at).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount tmpfs at {}", at.display());
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Fills the file system holding `dir` with `dir/filler` until it refuses another byte.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("filler");
    let chunk = vec![0u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    let small = [0u8; 512];
    while file.write_all(&small).is_ok() {}
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_degrades_airlock_until_space_returns_then_it_heals_without_restart() {
    if !is_root() {
        assert!(!in_ci(), "CI runs as root, which mounting a tmpfs needs");
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let fx = Fixture::new();
    let _tmpfs = Tmpfs::mount(&fx.data_dir(), "24m");
    let origin = text_origin(None, 200, "ok").await;
    // No free-space floor: this test drives the ledger into the real ENOSPC.
    let (airlock, run, env) = fx
        .start_run(
            &loopback_policy(origin.addr().port()),
            &["--ledger-min-free-mib", "0"],
        )
        .await;
    let url = format!("http://127.0.0.1:{}/hook", origin.addr().port());
    let before = curl(&env, &["-X", "POST", "--data", "before-the-fill", &url]).await;
    assert_eq!(before.status, 202);
    let mut acked = vec![before.header("airlock-effect").expect("effect id")];
    assert_eq!(healthz(&airlock.admin_url).await.0, 200);

    let filler = fill(&fx.data_dir());
    // Stage until the ledger refuses: a write may still fit in a page already allocated.
    let body = "x".repeat(32 << 10);
    let mut refused = None;
    for _ in 0..64 {
        let out = curl(&env, &["-X", "POST", "--data", &body, &url]).await;
        if out.status == 202 {
            acked.push(out.header("airlock-effect").expect("effect id"));
        } else {
            refused = Some(out);
            break;
        }
    }
    let refused = refused.expect("staging on a full disk is refused");
    assert!(
        matches!(refused.status, 500 | 503),
        "{} {}",
        refused.status,
        String::from_utf8_lossy(&refused.body)
    );
    let (status, health) = healthz(&airlock.admin_url).await;
    assert_eq!(status, 503, "{health}");
    assert!(health.contains("ledger_degraded"), "{health}");
    // While degraded, staging answers 503 with the reason, and nothing is written.
    let degraded = curl(&env, &["-X", "POST", "--data", "while-full", &url]).await;
    assert_eq!(
        degraded.status,
        503,
        "{}",
        String::from_utf8_lossy(&degraded.body)
    );
    assert_eq!(degraded.json()["reason_code"], "ledger_degraded");

    std::fs::remove_file(&filler).expect("free the space");
    let healed = poll_until(Duration::from_secs(60), || async {
        let (status, _) = healthz(&airlock.admin_url).await;
        (status == 200).then_some(())
    })
    .await;
    assert!(healed.is_some(), "airlock never healed: {}", airlock.log());
    let after = curl(&env, &["-X", "POST", "--data", "after-the-fill", &url]).await;
    assert_eq!(
        after.status,
        202,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    acked.push(after.header("airlock-effect").expect("effect id"));

    // Exactly the acknowledged effects are listed: none whose client got an error.
    let listed: Vec<String> = airlock
        .effects(&run)
        .await
        .iter()
        .map(|e| e["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut expected = acked.clone();
    expected.sort();
    let mut got = listed.clone();
    got.sort();
    assert_eq!(got, expected, "listed {listed:?}, acknowledged {acked:?}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("\nairlock_ledger_writable 1\n"),
        "{metrics}"
    );
    let recoveries = metrics
        .lines()
        .find_map(|l| l.strip_prefix("airlock_ledger_recoveries_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("airlock_ledger_recoveries_total");
    assert!(recoveries >= 1, "{metrics}");
}
