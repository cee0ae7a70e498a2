//! Case C22: `--network offline`, and what the run records of its fence: the report's
//! `containment` is the command step's, each step's counts are its own, and processes left
//! running are listed and killed with the fence.

use serde_json::Value;

use super::{Fenced, FENCE_GUARD, HOST};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_offline_reaches_nothing_and_the_record_says_offline() {
    let test = "case_c22_offline_reaches_nothing_and_the_record_says_offline";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    let script = format!(
        "env > env.txt; ip route > routes.txt; \
         curl -sS --connect-timeout 5 --max-time 10 -X POST --data x https://{HOST}:{port}/hook 2> by-name.err; echo $? > by-name.code; \
         curl -sS --connect-timeout 5 --max-time 10 https://127.0.0.1:{port}/ 2> loopback.err; echo $? > loopback.code"
    );
    let ran = fenced.run("offline", &[], &script).await;
    ran.assert_success();
    assert_eq!(
        fenced.read("by-name.code"),
        "6",
        "{}",
        fenced.read("by-name.err")
    );
    assert!(
        fenced
            .read("by-name.err")
            .contains(&format!("Could not resolve host: {HOST}")),
        "the agent is told: {}",
        fenced.read("by-name.err")
    );
    assert_eq!(
        fenced.read("loopback.code"),
        "7",
        "{}",
        fenced.read("loopback.err")
    );
    assert_eq!(fenced.read("routes.txt"), "", "no route at all");
    let env = fenced.read("env.txt");
    let proxies: Vec<&str> = env
        .lines()
        .filter(|l| {
            let name = l.split('=').next().unwrap_or_default().to_ascii_lowercase();
            ["http_proxy", "https_proxy", "all_proxy"].contains(&name.as_str())
        })
        .collect();
    assert!(
        proxies.is_empty(),
        "no proxy variables offline: {proxies:?}"
    );
    assert!(env.lines().any(|l| l == "AIRLOCK_NETWORK=offline"), "{env}");
    assert!(origin.received().is_empty());
    assert_eq!(ran.containment()["network"], "offline", "{:#}", ran.report);
    let record = fenced.workspace(&ran.run()).await;
    assert_eq!(
        record["steps"][0]["containment"]["network"], "offline",
        "{record:#}"
    );
    assert_eq!(ran.count("connections_captured"), 0);
    assert_eq!(ran.count("dns_answered"), 0);
}

/// Whether any process on the host runs exactly `argv` (from the host's `/proc`).
fn host_runs(argv: &[&str]) -> bool {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_the_run_record_holds_the_containment_and_leftovers_are_killed() {
    let test = "case_c22_the_run_record_holds_the_containment_and_leftovers_are_killed";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    // A sleep nobody else runs, so the host's process list can be searched for it.
    let leftover = ["sleep", "31.4159"];
    let script = format!(
        "curl --noproxy '*' -sS -o /dev/null -X POST --data captured https://{HOST}:{port}/hook; \
         curl -sS -o /dev/null -X POST --data proxied https://{HOST}:{port}/hook; \
         curl --noproxy '*' -sS -o /dev/null https://unlisted.example/; \
         {FENCE_GUARD}; curl --noproxy '*' -sS -o /dev/null https://1.2.3.4/; \
         {} & \
         while ! grep -qs 31.4159 /proc/$!/cmdline; do sleep 0.05; done; echo started > leftover.txt",
        leftover.join(" ")
    );
    // No --network: where a fence can be made, isolated is the default.
    let ran = fenced
        .run("", &["--verify", "test -f leftover.txt"], &script)
        .await;
    ran.assert_success();
    assert!(
        !ran.stderr().contains("WARNING"),
        "no warning when the fence is made: {}",
        ran.stderr()
    );
    assert_eq!(ran.report["decision"]["kind"], "keep", "{:#}", ran.report);
    // Leftovers: listed, and killed with the fence.
    let left = ran.report["left_running"].as_array().expect("left_running");
    assert!(
        left.iter().any(|l| l["command"] == leftover.join(" ")),
        "the sleep is listed: {left:#?}"
    );
    assert_eq!(left.len(), 1, "nothing else was left: {left:#?}");
    assert_eq!(ran.report["left_running_killed"], true);
    assert!(
        airlock_tests::eventually(std::time::Duration::from_secs(5), || !host_runs(&leftover))
            .await,
        "`{}` is gone from the host",
        leftover.join(" ")
    );
    // The counts: each kind of traffic the script made.
    let containment = ran.containment();
    assert_eq!(containment["network"], "isolated");
    assert_eq!(containment["note"], Value::Null);
    assert!(containment["setup_us"].as_u64().is_some_and(|us| us > 0));
    for key in [
        "proxy_connections",
        "connections_captured",
        "connections_refused",
        "dns_answered",
        "dns_refused",
    ] {
        assert!(ran.count(key) >= 1, "{key}: {containment:#}");
    }
    assert_eq!(ran.count("relay_failures"), 0);
    // The same record on the run's command step, and airlock's counts on /fence.
    let run = ran.run();
    let record = fenced.workspace(&run).await;
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["kind"], "command");
    assert_eq!(&steps[0]["containment"], containment, "{record:#}");
    assert_eq!(steps[1]["kind"], "verify");
    assert_eq!(
        steps[1]["containment"]["network"], "isolated",
        "verify ran fenced too"
    );
    let fence = fenced
        .airlock
        .admin
        .get(&format!("/v1/runs/{run}/fence"))
        .await
        .expect("fence");
    assert_eq!(
        fence["socket"],
        fenced
            .fx
            .data_dir()
            .join("fence.sock")
            .display()
            .to_string()
    );
    for key in ["connections_captured", "proxy_connections", "dns_refused"] {
        assert!(
            fence["counts"][key].as_u64().unwrap_or(0) >= containment[key].as_u64().unwrap_or(0),
            "{key}: {fence:#}"
        );
    }
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 2, "captured and proxied POSTs: {effects:#?}");
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_each_step_records_its_own_containment_counts() {
    let test = "case_c22_each_step_records_its_own_containment_counts";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    // The command makes one captured connection and one refused; verify makes none.
    let script = format!(
        "curl --noproxy '*' -sS -o /dev/null https://{HOST}:{port}/read; \
         {FENCE_GUARD}; curl --noproxy '*' -sS -o /dev/null https://1.2.3.4:{port}/"
    );
    let ran = fenced.run("isolated", &["--verify", "true"], &script).await;
    ran.assert_success();
    let record = fenced.workspace(&ran.run()).await;
    let steps = record["steps"].as_array().expect("steps");
    assert_eq!(
        steps[0]["containment"]["connections_captured"], 1,
        "{record:#}"
    );
    assert_eq!(
        steps[0]["containment"]["connections_refused"], 1,
        "{record:#}"
    );
    assert_eq!(steps[1]["kind"], "verify");
    for key in [
        "proxy_connections",
        "connections_captured",
        "connections_refused",
        "dns_answered",
        "dns_refused",
    ] {
        assert_eq!(
            steps[1]["containment"][key], 0,
            "verify (`true`) made no {key}, yet its step records the command's: {:#}",
            steps[1]["containment"]
        );
    }
}
