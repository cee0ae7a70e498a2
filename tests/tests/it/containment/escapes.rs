//! Root inside the fence and the fence's own `/proc`. `airlock run` as root makes the
//! fence without a user namespace, so the command holds every capability of the host's
//! user namespace; the fence's `/proc` is a mount over the host's, in the mount
//! namespace the fence's PID 1 shares with the command.

use airlock_tests::{text_origin, Fixture};

use super::{fence_or_skip, requests, Fenced};

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
    let fenced = Fenced::start(fx, &super::policy(port));
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
    let fenced = Fenced::start(fx, &super::policy(origin.addr().port()));
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
