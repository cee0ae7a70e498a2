//! Times the `dir` and `overlay` snapshot drivers on a generated workspace and prints each
//! figure beside its target (docs/performance.md, "Snapshots"). Not run by CI.
//!
//! `cargo run --release -p airlock-control --example snapshot_bench -- [FILES] [TOTAL_MB] [DIR] [DRIVERS]`
//! (defaults 20000 files, 235 MB, under the system temporary directory, `dir,overlay`;
//! `overlay-root` times the overlay driver under `--scope root`, every writable mount
//! overlaid, with one write outside the workspace in each step).
//! DIR on btrfs or XFS shows the reflink figures; on ext4 and tmpfs the driver copies.
//! The overlay figures need root (the driver mounts overlayfs in a mount namespace of
//! each step's own).

use std::path::Path;
use std::time::{Duration, Instant};

use airlock_control::snapshot::overlay::StepMount;
use airlock_control::snapshot::{index::RACY_MARGIN, Driver, Step, Store};

fn step(name: &'static str) -> Step {
    Step::new(name, Duration::from_secs(600))
}

fn fill(path: &Path, size: usize, seed: u64) {
    let mut content = vec![0u8; size];
    let mut x = seed | 1;
    for chunk in content.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(path, content).expect("write");
}

/// CPU time of this (single-threaded) process so far, in ms: the first field of
/// `/proc/self/schedstat` (ns on a CPU). Steadier than wall time on a shared machine.
fn cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e6)
}

fn timed<T>(what: &str, target_ms: Option<f64>, f: impl FnOnce() -> T) -> T {
    timed_ms(what, target_ms, f).0
}

/// [`timed`], also returning the wall time in ms.
fn timed_ms<T>(what: &str, target_ms: Option<f64>, f: impl FnOnce() -> T) -> (T, f64) {
    let (start, cpu) = (Instant::now(), cpu_ms());
    let out = f();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let cpu = cpu_ms() - cpu;
    match target_ms {
        Some(target) => println!(
            "{what:<52} {ms:>9.1} ms wall {cpu:>8.1} ms CPU   target ≤ {target} ms  {}",
            if ms <= target { "PASS" } else { "MISS" }
        ),
        None => println!("{what:<52} {ms:>9.1} ms wall {cpu:>8.1} ms CPU"),
    }
    (out, ms)
}

/// The target of one overlay snapshot plus its rollback, in ms (issue #22).
const OVERLAY_TARGET_MS: f64 = 50.0;

/// Runs `script` on run `run`'s overlay of `ws`, as `airlock run` runs a step.
fn overlay_step(store: &Store, ws: &Path, run: &str, script: &str) {
    let mount = StepMount::prepare(&store.overlay_state(run), ws).expect("prepare the mount");
    let (program, args) = mount
        .command_line("sh", &["-c".to_owned(), script.to_owned()])
        .expect("command line");
    let status = std::process::Command::new(program)
        .args(args)
        .current_dir(ws)
        .status()
        .expect("run the step");
    assert!(status.success(), "the step failed");
}

/// The overlay driver's figures: each round a fresh run snapshots (the checks and the
/// probe mount; the stamp walk runs behind the step), a step rewrites files on the
/// overlay, and the rollback drops them.
fn overlay(
    store: &Store,
    ws: &Path,
    excludes: &[std::path::PathBuf],
    files: usize,
    driver: Driver,
) {
    let root = driver == Driver::OverlayRoot;
    println!(
        "{} driver: same workspace",
        if root {
            "overlay --scope root"
        } else {
            "overlay"
        }
    );
    // Stands for `/opt/cache`: each step of the root scope writes there too.
    let outside = ws.with_file_name("opt-cache");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let also = match root {
        true => format!(" && echo c > {}/c", outside.display()),
        false => String::new(),
    };
    for round in 0..3 {
        let run = format!("run_bench_{}{round}", driver.as_str());
        let (manifest, snap_ms) = timed_ms("overlay snapshot (checks + probe mount)", None, || {
            store
                .take(driver, ws, &run, excludes, None, &step("snapshot"))
                .expect("overlay snapshot")
        });
        let script = if round == 2 {
            // Every file rewritten: the rollback drops 20,000 copied-up files.
            format!("for f in d*/f*.bin; do echo x >> \"$f\"; done{also}")
        } else {
            format!(
                "echo x >> d007/f7.bin && rm d008/f8.bin && mkdir -p new && echo n > new/n{also}"
            )
        };
        let what = if round == 2 {
            format!("all {files} files")
        } else {
            "3 paths".into()
        };
        timed(
            &format!("a step on the overlay ({what} written)"),
            None,
            || overlay_step(store, ws, &run, &script),
        );
        let (_, rollback_ms) = timed_ms(
            &format!("overlay rollback, {what} (drop the upper)"),
            None,
            || {
                store
                    .restore(&manifest, excludes, &step("rollback"))
                    .expect("overlay rollback")
            },
        );
        let total = snap_ms + rollback_ms;
        println!(
            "{:<52} {total:>9.1} ms wall                target ≤ {OVERLAY_TARGET_MS} ms  {}",
            format!("overlay snapshot + rollback, {what}"),
            if total <= OVERLAY_TARGET_MS {
                "PASS"
            } else {
                "MISS"
            }
        );
        timed(
            "overlay residue check (waits for the stamps, walks again)",
            None,
            || {
                let residue = store
                    .residue(
                        &manifest,
                        excludes,
                        &Default::default(),
                        &step("residue check"),
                    )
                    .expect("residue");
                assert!(
                    residue.is_empty(),
                    "residue after the overlay rollback: {residue:?}"
                );
            },
        );
        if root {
            assert!(
                !outside.join("c").exists(),
                "the root scope's write outside the workspace reached the host"
            );
        }
        if round == 0 {
            timed("overlay savepoint (freeze the upper)", None, || {
                store
                    .take(driver, ws, &run, excludes, None, &step("snapshot"))
                    .expect("overlay savepoint")
            });
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let total_mb: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(235);
    let base = args
        .get(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let drivers: Vec<String> = args
        .get(3)
        .map_or("dir,overlay", String::as_str)
        .split(',')
        .map(str::to_owned)
        .collect();
    let dir = tempfile::tempdir_in(&base).expect("tempdir");
    let (data, ws) = (dir.path().join("data"), dir.path().join("ws"));
    std::fs::create_dir_all(&data).expect("mkdir");
    let size = total_mb * 1_000_000 / files.max(1);
    for i in 0..files {
        let sub = ws.join(format!("d{:03}", i % 200));
        std::fs::create_dir_all(&sub).expect("mkdir");
        fill(&sub.join(format!("f{i}.bin")), size, i as u64 + 1);
    }
    println!(
        "workspace: {files} files of {size} bytes ({total_mb} MB) under {}",
        base.display()
    );
    // Files younger than the racy margin are read again by design; a real workspace is
    // older than that when a run starts.
    std::thread::sleep(RACY_MARGIN);
    let store = Store::new(&data);
    let excludes = [data.clone()];
    for (name, driver) in [
        ("overlay", Driver::Overlay),
        ("overlay-root", Driver::OverlayRoot),
    ] {
        if drivers.iter().any(|d| d == name) {
            // A real workspace was not written a second ago: its writeback is done first,
            // so the first mount does not wait on the journal behind 235 MB of fresh data.
            let _ = std::process::Command::new("sync").status();
            overlay(&store, &ws, &excludes, files, driver);
        }
    }
    if !drivers.iter().any(|d| d == "dir") {
        return;
    }
    println!("dir driver: same workspace");
    let take = |what: &str, target| {
        timed(what, target, || {
            store
                .take(
                    Driver::Dir,
                    &ws,
                    "run_bench",
                    &excludes,
                    None,
                    &step("snapshot"),
                )
                .expect("snapshot")
        })
    };
    let manifest = take("first snapshot", None);
    for _ in 0..3 {
        take("snapshot, nothing changed", Some(300.0));
    }
    let rollback = |what: &str| {
        timed(what, None, || {
            let not_restored = store
                .restore(&manifest, &excludes, &step("rollback"))
                .expect("restore");
            let residue = store
                .residue(&manifest, &excludes, &not_restored, &step("residue check"))
                .expect("residue");
            assert!(residue.is_empty(), "residue after rollback: {residue:?}");
        })
    };
    timed("diff, nothing changed", None, || {
        store
            .changes(&manifest, &excludes, &step("diff"))
            .expect("diff")
    });
    fill(&ws.join("d007/f7.bin"), size, 99);
    rollback("rollback (restore + residue check), one file changed");
    for i in 0..files {
        fill(
            &ws.join(format!("d{:03}/f{i}.bin", i % 200)),
            size,
            i as u64 + 7,
        );
    }
    rollback("rollback (restore + residue check), all rewritten");
    // The files the rollback rewrote are younger than the racy margin when its residue
    // check records them, so this snapshot reads them once more (docs/run.md).
    std::thread::sleep(RACY_MARGIN);
    take(
        "snapshot after the rollback (re-reads what it rewrote)",
        None,
    );
    take("snapshot after that, nothing changed", Some(300.0));
}
