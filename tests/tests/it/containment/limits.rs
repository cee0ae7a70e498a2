//! Case C22, limits (issue 35, item 4; docs/containment.md, "Limits"): connections a
//! fenced command opens past `--max-connections-per-run` are refused by airlock, and the
//! step's containment record counts them, while the run's other traffic still goes through.

use super::{Fenced, HOST};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_connections_past_the_runs_cap_are_refused_and_in_the_containment_record() {
    let test = "case_c22_connections_past_the_runs_cap_are_refused_and_in_the_containment_record";
    if !super::fence_or_skip(test) {
        return;
    }
    let fx = airlock_tests::Fixture::new();
    let origin = airlock_tests::ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start_with(
        fx,
        &super::policy(port),
        &["--max-connections-per-run", "2"],
    );
    // Six DNS-over-TCP connections held at once (the relay carries each to the fence
    // socket), then, once they are closed, one request that must still go through.
    let script = format!(
        "python3 -c 'import socket, time\n\
         held = [socket.create_connection((\"127.0.0.1\", 53)) for _ in range(6)]\n\
         time.sleep(2)' ; \
         curl --noproxy '*' -sS -o /dev/null -w '%{{http_code}}' https://{HOST}:{port}/ > after.code"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("after.code"),
        "200",
        "the run's request after them"
    );
    let limited = ran.count("connections_limited");
    assert!(
        (4..=6).contains(&limited),
        "6 held connections, a cap of 2: {limited} refused: {:#}",
        ran.report
    );
    assert_eq!(ran.count("relay_limited"), 0);
    let record = fenced.workspace(&ran.run()).await;
    assert_eq!(
        record["steps"][0]["containment"]["connections_limited"], limited,
        "{record:#}"
    );
    let metrics = fenced
        .airlock
        .admin
        .get_text("/metrics")
        .await
        .expect("metrics");
    assert!(
        metrics.contains(
            "airlock_fence_connections_refused_total{limit=\"max_connections_per_run\"} "
        ) && !metrics.contains(
            "airlock_fence_connections_refused_total{limit=\"max_connections_per_run\"} 0\n"
        ),
        "{metrics}"
    );
}
