//! Issue #38 item 3: nothing on disk stops a start. Torn files a full disk or a crash
//! leaves in sled's directory are set aside at open, and airlock starts and stages.

use airlock_tests::{curl, loopback_policy, text_origin, Fixture};

/// A snapshot `ENOSPC` left empty (sled would refuse to open: "Read corrupted data") and
/// a blob cut short (a value's write that never finished) are moved to
/// `ledger/quarantine/<ms>/` at the next start, which then stages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_snapshot_and_a_torn_blob_are_set_aside_and_the_next_start_stages() {
    let fx = Fixture::new();
    let origin = text_origin(None, 200, "ok").await;
    let (mut airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("http://127.0.0.1:{}/hook", origin.addr().port());
    let out = curl(&env, &["-X", "POST", "--data", "before", &url]).await;
    assert_eq!(out.status, 202);
    airlock
        .terminate(std::time::Duration::from_secs(10))
        .expect("airlock stops on SIGTERM");

    let ledger = fx.data_dir().join("ledger");
    assert!(
        ledger.join("db").is_file(),
        "sled's log at {}",
        ledger.display()
    );
    // Sorts after any finished snapshot, so sled would read it first.
    let snapshot = "snap.FFFFFFFFFFFFFFFF.generating";
    std::fs::write(ledger.join(snapshot), b"").expect("plant the torn snapshot");
    // Its CRC (4 bytes) and kind byte, and none of the bytes the CRC covers.
    let blob = "999999999999";
    std::fs::write(ledger.join("blobs").join(blob), [1, 2, 3, 4, 5, 6]).expect("plant the blob");

    airlock
        .restart()
        .expect("airlock starts on the repaired directory");
    // The proxy's port is new: a new run's environment names it.
    let (again, env) = airlock.create_run().await;
    let out = curl(&env, &["-X", "POST", "--data", "after", &url]).await;
    assert_eq!(
        out.status,
        202,
        "{}\n{}",
        String::from_utf8_lossy(&out.body),
        airlock.log()
    );
    assert_eq!(
        airlock.effects(&run).await.len(),
        1,
        "the first start's effect"
    );
    assert_eq!(airlock.effects(&again).await.len(), 1);

    let quarantine = ledger.join("quarantine");
    let moved: Vec<_> = std::fs::read_dir(&quarantine)
        .expect("the quarantine directory")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(moved.len(), 1, "one folder per repairing open: {moved:?}");
    assert!(moved[0].join(snapshot).is_file(), "{}", moved[0].display());
    assert!(moved[0].join("blobs").join(blob).is_file());
    assert!(!ledger.join(snapshot).exists());
    let log = airlock.log();
    assert!(
        log.contains("set aside a torn file") && log.contains(snapshot) && log.contains(blob),
        "{log}"
    );
    assert!(log.contains("torn file(s)"), "{log}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("airlock_ledger_repaired_files_total 2"),
        "{metrics}"
    );
}
