//! Crash safety: SIGKILL at the risky moments, restart, check the ledger and the origin.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{
    curl, eventually, loopback_policy, ok_origin, poll_until, slow_text_origin, Fixture, Origin,
    Received, Reply,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_202_keeps_the_effect_and_commit_releases_it_once() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (mut airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let url = format!("https://127.0.0.1:{}/hook", origin.addr().port());
    let out = curl(&env, &["-X", "POST", "--data", "survives", &url]).await;
    assert_eq!(out.status, 202);
    let effect = out.header("airlock-effect").expect("effect id");

    // The 202 was only sent after the flush: killing now loses nothing.
    airlock.restart().expect("restart");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["id"], effect.as_str());
    assert_eq!(effects[0]["state"], "staged");

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed");
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, b"survives");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_commit_never_sends_twice_and_marks_the_interrupted_effect_unknown() {
    let fx = Fixture::new();
    // The origin holds the second effect's response for a long time, so airlock is
    // killed while that effect is `releasing`.
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(|req: &Received| {
            let mut reply = Reply::text(200, "ok");
            if req.path == "/second" {
                reply.delay = Some(Duration::from_secs(60));
            }
            reply
        }),
    )
    .await
    .expect("origin");
    let (mut airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
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
    let _ = committing.await;

    airlock.restart().expect("restart");
    // On restart the written commit decision is finished: /third is released, /second
    // is unknown and never re-sent.
    let effects = poll_until(Duration::from_secs(10), || async {
        let shown = airlock
            .admin
            .get(&format!("/v1/runs/{run}"))
            .await
            .expect("run");
        if shown["state"] == "committing" {
            return None;
        }
        let effects = airlock.effects(&run).await;
        effects
            .iter()
            .all(|e| !matches!(e["state"].as_str(), Some("approved" | "releasing")))
            .then_some(effects)
    })
    .await
    .expect("recovery finished the commit");
    let states: Vec<_> = effects.iter().map(|e| e["state"].clone()).collect();
    assert_eq!(
        states,
        vec![json!("released"), json!("unknown"), json!("released")]
    );
    assert!(effects[1]["state_reason"]
        .as_str()
        .unwrap_or("")
        .contains("may or may not"));

    // The run's final state is written just after the last effect's outcome.
    let run_state = poll_until(Duration::from_secs(10), || async {
        let run = airlock.admin.get(&format!("/v1/runs/{run}")).await.ok()?;
        (run["state"] != "committing").then_some(run)
    })
    .await
    .expect("the recovered commit finished");
    assert_eq!(run_state["state"], "partially_committed");

    // A further commit is a no-op: nothing is sent again.
    let report = airlock
        .post(&format!("/v1/runs/{run}/commit"), None)
        .await
        .expect("commit again");
    assert_eq!(report["state"], "partially_committed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["/first", "/second", "/third"],
        "each effect reached the origin exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_finishes_even_when_the_admin_client_hangs_up() {
    use tokio::io::AsyncWriteExt;
    let fx = Fixture::new();
    let origin = slow_text_origin(Some(&fx.origin_ca), 200, "ok", Duration::from_millis(400)).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    for path in ["/a", "/b", "/c"] {
        assert_eq!(
            curl(
                &env,
                &["-X", "POST", "--data", path, &format!("{base}{path}")]
            )
            .await
            .status,
            202
        );
    }
    // Ask for the commit, then hang up at once.
    let admin = airlock.admin_url.trim_start_matches("http://").to_owned();
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let body = airlock.approve_pending_body(&run).await.to_string();
    let mut stream = tokio::net::TcpStream::connect(&admin)
        .await
        .expect("connect admin");
    stream
        .write_all(
            format!(
                "POST /v1/runs/{run}/commit HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                token.trim(),
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);

    let state = poll_until(Duration::from_secs(15), || async {
        let shown = airlock
            .admin
            .get(&format!("/v1/runs/{run}"))
            .await
            .expect("run");
        // A commit seals the run before it writes its decision (then `committing`).
        let deciding = ["open", "sealed", "committing"]
            .iter()
            .any(|s| shown["state"] == *s);
        (!deciding).then(|| shown["state"].clone())
    })
    .await
    .expect("the commit finished");
    assert_eq!(state, "committed");
    let states: Vec<_> = airlock
        .effects(&run)
        .await
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(states, vec![json!("released"); 3]);
    assert_eq!(origin.received().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_accepting_lets_requests_in_flight_finish_and_keeps_the_ledger() {
    let fx = Fixture::new();
    let origin = slow_text_origin(
        Some(&fx.origin_ca),
        200,
        "slow but complete",
        Duration::from_millis(1500),
    )
    .await;
    let (mut airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    assert_eq!(
        curl(
            &env,
            &["-X", "POST", "--data", "kept", &format!("{base}/hook")]
        )
        .await
        .status,
        202
    );
    let slow_env = env.clone();
    let slow_url = format!("{base}/slow");
    let slow = tokio::spawn(async move { curl(&slow_env, &[&slow_url]).await });
    assert!(
        eventually(Duration::from_secs(5), || origin
            .received()
            .iter()
            .any(|r| r.path == "/slow"))
        .await,
        "the slow request reached the origin"
    );
    let proxy = airlock.proxy.clone();
    let status = tokio::task::spawn_blocking(move || {
        airlock
            .terminate(Duration::from_secs(15))
            .map(|s| (s, airlock))
    })
    .await
    .expect("terminate");
    let (status, mut airlock) = status.expect("airlock exited within the grace period");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    let out = slow.await.expect("slow curl");
    assert_eq!(
        out.status, 200,
        "the request in flight finished: {}",
        out.stderr
    );
    assert_eq!(out.body, b"slow but complete");
    assert!(
        tokio::net::TcpStream::connect(&proxy).await.is_err(),
        "nothing is accepted after the stop"
    );
    airlock.restart().expect("restart");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "the staged effect survived the stop");
}

/// SIGKILL while reads are being journaled (the sled store's read log, docs/architecture.md
/// "Durability and recovery"): after the restart the run's reads parse, every read listed
/// before the kill is still there, they are numbered 1..n with none repeated, and a new read
/// numbers on after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_a_read_load_leaves_a_whole_read_journal_that_numbers_on() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Empty};

    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (mut airlock, run, _env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let authority = format!("127.0.0.1:{}", origin.addr().port());
    let token = airlock.run_token(&run).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut loaders = Vec::new();
    for _ in 0..4 {
        let mut sender =
            airlock_tests::tunnel::h1_through::<Empty<Bytes>>(&airlock, &run, &token, &authority)
                .await;
        let (stop, authority) = (Arc::clone(&stop), authority.clone());
        loaders.push(tokio::spawn(async move {
            while !stop.load(Relaxed) && sender.ready().await.is_ok() {
                let request = http::Request::get(format!("https://{authority}/read"))
                    .header("host", &authority)
                    .body(Empty::new())
                    .expect("request");
                match sender.send_request(request).await {
                    Ok(response) => drop(response.into_body().collect().await),
                    Err(_) => break,
                }
            }
        }));
    }
    let before = poll_until(Duration::from_secs(60), || async {
        airlock.reads(&run).await.filter(|reads| reads.len() >= 300)
    })
    .await
    .expect("reads are journaled under the load");
    // Killed while the load goes on: the lineage worker is appending batches.
    airlock.kill();
    stop.store(true, Relaxed);
    for loader in loaders {
        let _ = loader.await;
    }

    airlock.restart().expect("restart");
    let reads = airlock
        .reads(&run)
        .await
        .expect("the run's reads parse after the kill");
    let seqs: Vec<u64> = reads
        .iter()
        .map(|r| r["seq"].as_u64().expect("seq"))
        .collect();
    assert!(
        seqs.len() >= before.len(),
        "{} reads listed before the kill, {} after",
        before.len(),
        seqs.len()
    );
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "numbered 1..n, none repeated"
    );
    // The restarted airlock listens on a new port: a new tunnel.
    let token = airlock.run_token(&run).await;
    let mut sender =
        airlock_tests::tunnel::h1_through::<Empty<Bytes>>(&airlock, &run, &token, &authority).await;
    let request = http::Request::get(format!("https://{authority}/after"))
        .header("host", &authority)
        .body(Empty::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("answered");
    assert_eq!(response.status(), 200);
    let next = seqs.len() as u64 + 1;
    let after = poll_until(Duration::from_secs(20), || async {
        airlock.reads(&run).await.filter(|r| r.len() as u64 == next)
    })
    .await
    .expect("the new read is journaled");
    let last = after.last().expect("a read");
    assert_eq!(last["seq"].as_u64(), Some(next));
    assert!(last["url"].as_str().is_some_and(|u| u.ends_with("/after")));
}
