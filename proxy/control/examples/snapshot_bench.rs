//! Times the `dir` snapshot driver on a generated workspace and prints each figure beside
//! its target (docs/performance.md, "Snapshots"). Not run by CI.
//!
//! `cargo run --release -p airlock-control --example snapshot_bench -- [FILES] [TOTAL_MB] [DIR]`
//! (defaults 20000 files, 235 MB, under the system temporary directory). DIR on btrfs or
//! XFS shows the reflink figures; on ext4 and tmpfs the driver copies.

use std::path::Path;
use std::time::{Duration, Instant};

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
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let total_mb: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(235);
    let base = args
        .get(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
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
        "dir driver: {files} files of {size} bytes ({total_mb} MB) under {}",
        base.display()
    );
    // Files younger than the racy margin are read again by design; a real workspace is
    // older than that when a run starts.
    std::thread::sleep(RACY_MARGIN);
    let store = Store::new(&data);
    let excludes = [data.clone()];
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
