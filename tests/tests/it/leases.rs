//! Release across instances (issue 19, item 3): a control instance SIGKILLed mid-release
//! is taken over by another instance on the same store once its release lease expires;
//! the effect in flight becomes `unknown`, every other approved effect reaches the origin
//! exactly once, and a second commit reports the same outcome.
//!
//! The other instance is the same binary restarted on the same ledger with a new
//! `instance-id` (so the dead one's lease is another holder's, live until its TTL); a
//! restart that keeps its `instance-id` takes its own leases over at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_tests::{
    curl, eventually, loopback_policy, poll_until, Airlock, Fixture, Origin, Received, Reply,
};
use serde_json::{json, Value};

/// The TTL of the tests' leases, in seconds.
const TTL_SECS: u64 = 6;

/// Three effects to one origin, committed; the origin holds `/second`, and airlock is
/// SIGKILLed while `/second` is `releasing`. Returns airlock (stopped), the run, the
/// origin and when it was killed.
async fn killed_mid_release(fx: &Fixture, ttl: u64) -> (Airlock, String, Origin, Instant) {
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| {
            let mut reply = Reply::text(200, "ok");
            if req.path == "/second" {
                reply.delay = Some(Duration::from_secs(120));
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let ttl = ttl.to_string();
    let (mut airlock, run, env) = fx
        .start_run(
            &loopback_policy(origin.addr().port()),
            &["--release-lease-ttl", &ttl],
        )
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    for path in ["/first", "/second", "/third"] {
        let out = curl(
            &env,
            &["-X", "POST", "--data", path, &format!("{base}{path}")],
        )
        .await;
        assert_eq!(out.status, 202);
    }
    let admin = airlock.admin.clone();
    let commit_path = format!("/v1/runs/{run}/commit");
    let body = airlock.approve_pending_body(&run).await;
    let committing = tokio::spawn(async move { admin.post(&commit_path, Some(body)).await });
    let reached = eventually(Duration::from_secs(10), || {
        origin.received().iter().any(|r| r.path == "/second")
    })
    .await;
    assert!(reached, "the second effect reached the origin");
    airlock.kill();
    let killed = Instant::now();
    let _ = committing.await;
    (airlock, run, origin, killed)
}

/// Starts "another control instance" on the dead one's ledger: a new instance id.
fn start_other_instance(fx: &Fixture, airlock: &mut Airlock) {
    std::fs::remove_file(fx.data_dir().join("instance-id")).expect("remove instance-id");
    airlock.restart().expect("restart");
}

/// The run once it is no longer `committing`, with its effects.
async fn finished(airlock: &Airlock, run: &str, within: Duration) -> (Value, Vec<Value>) {
    poll_until(within, || async {
        let shown = airlock.admin.get(&format!("/v1/runs/{run}")).await.ok()?;
        if shown["state"] == "committing" {
            return None;
        }
        Some((shown, airlock.effects(run).await))
    })
    .await
    .expect("the commit was finished")
}

fn states(effects: &[Value]) -> Vec<Value> {
    effects.iter().map(|e| e["state"].clone()).collect()
}

/// Each path the origin received, sorted.
fn received_paths(origin: &Origin) -> Vec<String> {
    let mut paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    paths
}

/// Control X dies mid-release; control Y (same store, another holder) leaves the effect
/// in flight alone while X's lease is live, then its sweeper takes the run over: 0 lost,
/// 0 sent twice, the in-flight effect `unknown`, and a second commit reports the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_instance_killed_mid_release_is_taken_over_after_its_lease_ttl() {
    let fx = Fixture::new();
    let (mut airlock, run, origin, killed) = killed_mid_release(&fx, TTL_SECS).await;
    start_other_instance(&fx, &mut airlock);

    // Start-up recovery left the live lease's effect alone: another holder may still be
    // sending it.
    let early = airlock.effects(&run).await;
    if killed.elapsed() < Duration::from_secs(TTL_SECS - 3) {
        assert_eq!(
            states(&early),
            vec![json!("released"), json!("releasing"), json!("approved")],
            "nothing is touched while the dead holder's lease is live"
        );
    }

    let (shown, effects) = finished(&airlock, &run, Duration::from_secs(30)).await;
    let took = killed.elapsed();
    eprintln!("taken over {took:?} after the SIGKILL (TTL {TTL_SECS} s)");
    assert!(
        took >= Duration::from_secs(TTL_SECS - 3),
        "the run was taken over only once the dead holder's lease expired ({took:?})"
    );
    assert!(
        took <= Duration::from_secs(TTL_SECS + TTL_SECS / 3 + 8),
        "the takeover came within the TTL plus a sweep ({took:?})"
    );
    assert_eq!(shown["state"], "partially_committed");
    assert_eq!(
        states(&effects),
        vec![json!("released"), json!("unknown"), json!("released")]
    );
    assert!(effects[1]["state_reason"]
        .as_str()
        .unwrap_or("")
        .contains("may or may not"));
    assert!(
        airlock.log().contains("holder whose lease expired"),
        "the takeover is logged"
    );

    let report = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect("commit again");
    assert_eq!(report["state"], "partially_committed");
    let reported: Vec<Value> = report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(reported, states(&effects));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        received_paths(&origin),
        vec!["/first", "/second", "/third"],
        "each effect reached the origin exactly once"
    );
}

/// A commit asked on control Y while dead X's lease is live waits for it (polling the
/// store), takes the run over when it expires and reports the finished commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_commit_on_another_instance_waits_for_the_lease_and_reports_the_outcome() {
    let fx = Fixture::new();
    let (mut airlock, run, origin, killed) = killed_mid_release(&fx, TTL_SECS).await;
    start_other_instance(&fx, &mut airlock);

    let report = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect("the second commit");
    assert!(
        killed.elapsed() >= Duration::from_secs(TTL_SECS - 3),
        "it waited for the dead holder's lease"
    );
    assert_eq!(report["state"], "partially_committed");
    let reported: Vec<Value> = report["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(
        reported,
        vec![json!("released"), json!("unknown"), json!("released")]
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(received_paths(&origin), vec!["/first", "/second", "/third"]);
}

/// A restart on the same data directory (same instance id) takes its own dead process's
/// leases over at once, however long their TTL: single-node recovery does not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_data_directory_takes_its_own_leases_over_at_once() {
    let fx = Fixture::new();
    let (mut airlock, run, origin, killed) = killed_mid_release(&fx, 600).await;
    airlock.restart().expect("restart");
    let (shown, effects) = finished(&airlock, &run, Duration::from_secs(20)).await;
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "finished long before the 600 s TTL"
    );
    assert_eq!(shown["state"], "partially_committed");
    assert_eq!(
        states(&effects),
        vec![json!("released"), json!("unknown"), json!("released")]
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(received_paths(&origin), vec!["/first", "/second", "/third"]);
}
