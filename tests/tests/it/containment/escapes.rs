//! Case C22: root inside the fence. The command runs in a user and mount namespace nested
//! in the fence's (`airlock fence-init` starts it with `unshare --user --map-root-user
//! --mount`), so root there holds no capability over the fence's network namespace and
//! the fence's mounts are locked under it: `kill -9 1`, `nft flush ruleset` and `ip route
//! add` change nothing, and `umount -l /proc` neither lets `nsenter --net` into the host's
//! namespace nor changes what is reported left running.

use airlock_tests::{text_origin, Fixture};

use super::{fence_or_skip, policy, requests, Fenced, HOST};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_root_in_the_fence_cannot_join_the_hosts_network_namespace() {
    let test = "case_c22_root_in_the_fence_cannot_join_the_hosts_network_namespace";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    // Plain HTTP on the host's loopback: a request that arrives is recorded.
    let origin = text_origin(None, 200, "the host's origin").await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    // The test process lives in the host's network namespace; its /proc entry is what
    // `nsenter --net` needs, once the fence's /proc no longer hides the host's.
    let host_pid = std::process::id();
    let script = format!(
        "umount -l /proc 2> umount.err; echo $? > umount.code; \
         nsenter --net=/proc/{host_pid}/ns/net \
           curl --noproxy '*' -sS --max-time 10 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/escaped \
           > escape.code 2> escape.err; echo $? > nsenter.code"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    assert!(
        origin.received().is_empty(),
        "the fenced command reached the host's loopback origin directly, unstaged: {:?} \
         (umount exit {}, nsenter+curl exit {}, http {} {}; airlock run exit {})",
        requests(&origin),
        fenced.read("umount.code"),
        fenced.read("nsenter.code"),
        fenced.read("escape.code"),
        fenced.read("escape.err"),
        ran.out.status
    );
    assert_ne!(fenced.read("escape.code"), "200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_unmounting_proc_in_the_fence_does_not_change_what_is_reported_left_running() {
    let test =
        "case_c22_unmounting_proc_in_the_fence_does_not_change_what_is_reported_left_running";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = text_origin(None, 200, "unused").await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    // The command leaves nothing running; it only takes the fence's /proc away.
    let ran = fenced
        .run("isolated", &[], "umount -l /proc; echo $? > umount.code")
        .await;
    ran.assert_success();
    let left = ran.report["left_running"].as_array().expect("left_running");
    assert!(
        left.is_empty(),
        "the command left nothing running, yet the fence reports {} process(es) (umount exit {}) \
         as left running and killed, e.g. {:#?}",
        left.len(),
        fenced.read("umount.code"),
        left.iter().take(3).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_root_in_the_fence_flushing_nftables_adding_routes_or_killing_pid_1_reaches_nothing(
) {
    let test = "case_c22_root_in_the_fence_flushing_nftables_adding_routes_or_killing_pid_1_reaches_nothing";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    let direct = |name: &str, url: &str| {
        format!(
            "curl --noproxy '*' -sS --connect-timeout 5 --max-time 10 -o /dev/null -X POST --data {name} {url} \
               2> {name}.err; echo $? > {name}.code"
        )
    };
    let by_name = format!("https://{HOST}:{port}/hook");
    let loopback = format!("https://127.0.0.1:{port}/hook");
    let script = [
        // PID 1 is the relay: the kernel ignores signals its init has no handler for.
        // `[ -e /proc/1/status ]`, not `kill -0 1`: under root PID 1 is another user of
        // the fence's namespace than the command, and `kill -0` is refused.
        "kill -9 1; [ -e /proc/1/status ] && echo alive > pid1.txt".to_owned(),
        format!(
            "curl --noproxy '*' -sS -o /dev/null -w '%{{http_code}}' -X POST --data after-kill {by_name} > after-kill.code"
        ),
        "nft flush ruleset; echo $? > flush.code; nft list ruleset > ruleset.txt".to_owned(),
        direct("flushed-by-name", &by_name),
        direct("flushed-loopback", &loopback),
        "ip route add 10.0.0.0/8 dev lo; ip route replace default dev lo; ip route add 127.0.0.0/8 dev lo table main; echo $? > route.code"
            .to_owned(),
        direct("routed-by-name", &by_name),
        direct("routed-loopback", &loopback),
        // The proxy variable still works after all that: the relay on PID 1 carries it to
        // airlock, which stages the write.
        format!(
            "curl -sS -o /dev/null -w '%{{http_code}}' -X POST --data via-proxy {by_name} > via-proxy.code"
        ),
    ]
    .join("; ");
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("pid1.txt"),
        "alive",
        "kill -9 1 did not end the fence"
    );
    assert_eq!(fenced.read("after-kill.code"), "202", "{}", ran.stderr());
    // The command runs in a user namespace nested in the fence's: root there holds no
    // capability over the fence's network namespace, so the rules and routes stay.
    assert_ne!(
        fenced.read("flush.code"),
        "0",
        "root in the fence flushed the fence's rules"
    );
    assert_ne!(
        fenced.read("route.code"),
        "0",
        "root in the fence changed the fence's routes"
    );
    let mut staged_directly = 0;
    for name in ["flushed-by-name", "routed-by-name"] {
        let code = fenced.read(&format!("{name}.code"));
        // Still captured (the rules are intact), so curl succeeds and the write is
        // staged; or it could not connect. Never out.
        assert!(
            code == "0" || code == "7" || code == "28",
            "{name}: curl through airlock (0), or could not connect (7, 28); got {code}: {}",
            fenced.read(&format!("{name}.err"))
        );
        staged_directly += usize::from(code == "0");
    }
    for name in ["flushed-loopback", "routed-loopback"] {
        let code = fenced.read(&format!("{name}.code"));
        assert!(
            code == "7" || code == "28",
            "{name}: the fence's own loopback has no origin: curl could not connect (7) or timed out (28), got {code}: {}",
            fenced.read(&format!("{name}.err"))
        );
    }
    assert_eq!(fenced.read("via-proxy.code"), "202", "{}", ran.stderr());
    assert!(
        origin.received().is_empty(),
        "nothing reached the host's origin: {:?}",
        requests(&origin)
    );
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(
        effects.len(),
        2 + staged_directly,
        "every write that went through airlock was staged: {effects:#?}"
    );
}
