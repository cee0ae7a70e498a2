//! Issue 38 item 2: every write respects the free-space floor. Below
//! `--ledger-min-free-mib` a read is refused with a readable 507 before anything is
//! sent (it could not be journaled, and a read with no journal entry is a lineage hole),
//! staging keeps its 507, and a denial that cannot be journaled is counted in
//! `airlock_journal_dropped_total`. The floor here is 1 TiB, more than this machine's disk holds, so the ledger
//! is below it from the start without filling anything.

use airlock_tests::{curl, loopback_policy, text_origin, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_floor_a_read_is_refused_with_507_and_the_origin_receives_nothing() {
    let fx = Fixture::new();
    let origin = text_origin(None, 200, "customer rows").await;
    let port = origin.addr().port();
    let (airlock, _run, env) = fx
        .start_run(
            &loopback_policy(port),
            &["--ledger-min-free-mib", "1048576"],
        )
        .await;
    let read = curl(&env, &[&format!("http://127.0.0.1:{port}/rows")]).await;
    assert_eq!(read.status, 507, "{}", String::from_utf8_lossy(&read.body));
    let body = read.json();
    assert_eq!(body["reason_code"], "ledger_low_space", "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("floor")),
        "{body}"
    );
    assert!(body["manifest"].is_string(), "{body}");
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "x",
            &format!("http://127.0.0.1:{port}/hook"),
        ],
    )
    .await;
    assert_eq!(
        staged.status,
        507,
        "{}",
        String::from_utf8_lossy(&staged.body)
    );
    assert!(
        origin.received().is_empty(),
        "nothing passed unjournaled: {:?}",
        origin.received()
    );
    // A denial is still answered; its journal entry is dropped and counted.
    let denied = curl(&env, &[&format!("http://127.0.0.1:{port}/forbidden/x")]).await;
    assert_eq!(denied.status, 403);
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        metrics.contains("airlock_journal_dropped_total{record=\"denial\"} 1\n"),
        "{metrics}"
    );
}
