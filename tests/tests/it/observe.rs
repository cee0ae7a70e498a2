//! Observability: the JSON log's canonical request and release lines, and the `/metrics`
//! exposition checked by Prometheus's own `promtool`.

use std::time::Duration;

use airlock_tests::{
    curl, eventually, in_ci, loopback_policy, ok_origin, poll_until, Airlock, Fixture,
};
use serde_json::Value;

/// What the tests' traffic did.
struct Traffic {
    run: String,
    effect: String,
    /// The staged POST's body.
    posted: &'static str,
}

/// A passed GET, a staged POST, a denied GET, then the POST approved and committed.
async fn traffic(airlock: &Airlock, origin_port: u16) -> Traffic {
    let (run, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{origin_port}");
    let passed = curl(&env, &[&format!("{base}/status?token=secret")]).await;
    assert_eq!(passed.status, 200, "{}", passed.stderr);
    let posted = r#"{"text":"deploy finished"}"#;
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            posted,
            &format!("{base}/hooks/deploy"),
        ],
    )
    .await;
    assert_eq!(staged.status, 202, "{}", staged.stderr);
    let effect = staged.header("airlock-effect").expect("airlock-effect");
    let denied = curl(&env, &[&format!("{base}/forbidden/x")]).await;
    assert_eq!(denied.status, 403, "{}", denied.stderr);
    airlock.approve(&effect).await;
    let report = airlock.commit(&run).await;
    assert_eq!(report["effects"][0]["state"], "released", "{report}");
    Traffic {
        run,
        effect,
        posted,
    }
}

/// airlock's stderr lines that parse as JSON objects of `target`.
fn json_lines(log: &str, target: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == target)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_has_one_canonical_line_per_request_and_per_release() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = fx.start(&loopback_policy(port), &["--log-format", "json"]);
    let done = traffic(&airlock, port).await;
    // A host no rule names is denied at the CONNECT (answered 200, then 403 inside the
    // tunnel, never dialed): a CONNECT line and one for the request inside.
    let (_, env) = airlock.create_run().await;
    let refused = curl(&env, &["--fail", &format!("https://127.0.0.2:{port}/x")]).await;
    assert!(!refused.success, "{}", refused.stderr);

    // A request's line is written once its response has left, which may trail the
    // client's exit by a moment.
    let complete = eventually(Duration::from_secs(10), || {
        json_lines(&airlock.log(), "airlock::request").len() >= 5
            && !json_lines(&airlock.log(), "airlock::release").is_empty()
    })
    .await;
    let log = airlock.log();
    assert!(complete, "request and release lines missing; log:\n{log}");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
        assert!(
            parsed["timestamp"].is_string() && parsed["level"].is_string(),
            "{line}"
        );
    }
    let mut requests = json_lines(&log, "airlock::request");
    assert_eq!(requests.len(), 5, "one line per request: {requests:#?}");
    let connect = requests.remove(
        requests
            .iter()
            .position(|l| l["method"] == "CONNECT")
            .unwrap_or_else(|| panic!("no CONNECT line in {requests:#?}")),
    );
    assert_eq!(connect["origin.host"], "127.0.0.2", "{connect}");
    assert_eq!(connect["action"], "deny", "{connect}");
    assert_eq!(
        connect["status"], 200,
        "the client's CONNECT got 200: {connect}"
    );
    assert_eq!(connect["reason_code"], "default_deny", "{connect}");
    assert!(
        connect.get("rule").is_none(),
        "the default deny names no rule: {connect}"
    );
    let by_action = |action: &str| -> &Value {
        requests
            .iter()
            .find(|l| l["action"] == action && l["origin.host"] == "127.0.0.1")
            .unwrap_or_else(|| panic!("no {action} line in {requests:#?}"))
    };
    for (action, method, path, rule, status) in [
        ("pass", "GET", "/status", "reads", 200),
        ("stage", "POST", "/hooks/deploy", "writes", 202),
        ("deny", "GET", "/forbidden/x", "forbidden", 403),
    ] {
        let line = by_action(action);
        assert_eq!(line["message"], "request", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["run.id"], done.run.as_str(), "{line}");
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["origin.host"], "127.0.0.1", "{line}");
        assert_eq!(line["origin.port"], u64::from(port), "{line}");
        assert_eq!(line["path"], path, "the path, never the query: {line}");
        assert_eq!(line["rule"], rule, "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert!(line["reason_code"].is_string(), "{line}");
        assert!(
            line["duration_ms"].as_f64().is_some_and(|d| d >= 0.0),
            "{line}"
        );
        assert!(line["bytes_out"].as_u64().is_some_and(|b| b > 0), "{line}");
    }
    assert_eq!(by_action("pass")["bytes_in"], 0);
    assert_eq!(by_action("stage")["bytes_in"], done.posted.len() as u64);
    assert!(
        !log.contains("token=secret"),
        "a query must not reach the log:\n{log}"
    );

    let releases = json_lines(&log, "airlock::release");
    assert_eq!(releases.len(), 1, "one line per release: {releases:#?}");
    let release = &releases[0];
    assert_eq!(release["message"], "release", "{release}");
    assert_eq!(release["effect.id"], done.effect.as_str(), "{release}");
    assert_eq!(release["run.id"], done.run.as_str(), "{release}");
    assert_eq!(release["outcome"], "released", "{release}");
    assert_eq!(release["origin.status"], 200, "{release}");
    assert_eq!(release["method"], "POST", "{release}");
    assert_eq!(release["origin.host"], "127.0.0.1", "{release}");
    assert_eq!(release["origin.port"], u64::from(port), "{release}");
    assert!(
        release["duration_ms"].as_f64().is_some_and(|d| d >= 0.0),
        "{release}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_fields_one_name_each_release_once_denied_connect_logs_what_the_client_saw() {
    // #21: `run.id`/`effect.id`/`origin.*` on every line, the release's port its own
    // field, one event per release, durations to the microsecond, and a denied host's
    // CONNECT logged as the client saw it: 200, then the 403 of the request inside.
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = fx.start(&loopback_policy(port), &["--log-format", "json"]);
    let done = traffic(&airlock, port).await;
    let (denied_run, env) = airlock.create_run().await;
    let refused = curl(
        &env,
        &[
            "-X",
            "DELETE",
            &format!("https://127.0.0.2:{port}/inner/path?q=1"),
        ],
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.stderr);
    let complete = eventually(Duration::from_secs(10), || {
        json_lines(&airlock.log(), "airlock::request").len() >= 5
            && !json_lines(&airlock.log(), "airlock::release").is_empty()
    })
    .await;
    let log = airlock.log();
    assert!(complete, "request and release lines missing; log:\n{log}");
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    for line in &lines {
        for old in ["run", "effect", "host", "port", "origin_status"] {
            assert!(
                line.get(old).is_none(),
                "`{old}` is named `run.id`, `effect.id`, `origin.host`, `origin.port` or \
                 `origin.status` on every line: {line}"
            );
        }
    }
    let about_release: Vec<&Value> = lines
        .iter()
        .filter(|l| l["effect.id"] == done.effect.as_str())
        .filter(|l| l["message"].as_str().is_some_and(|m| m.contains("releas")))
        .collect();
    assert_eq!(
        about_release.len(),
        1,
        "a release is logged once: {about_release:#?}"
    );
    assert_eq!(about_release[0]["target"], "airlock::release");
    assert_eq!(about_release[0]["origin.port"], u64::from(port));
    for line in lines
        .iter()
        .filter(|l| l["target"] == "airlock::request" || l["target"] == "airlock::release")
    {
        let ms = line["duration_ms"].as_f64().expect("duration_ms");
        let micros = ms * 1000.0;
        assert!(
            (micros - micros.round()).abs() < 1e-6,
            "duration_ms to the microsecond, no float noise: {line}"
        );
        let text = line["duration_ms"].to_string();
        assert!(
            text.split_once('.')
                .is_none_or(|(_, decimals)| decimals.len() <= 3),
            "at most three decimals: {text}"
        );
    }
    let denied: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "airlock::request" && l["run.id"] == denied_run.as_str())
        .collect();
    assert_eq!(
        denied.len(),
        2,
        "the CONNECT and the request inside: {denied:#?}"
    );
    let connect = denied
        .iter()
        .find(|l| l["method"] == "CONNECT")
        .expect("the CONNECT line");
    assert_eq!(
        connect["status"], 200,
        "the client's CONNECT got 200: {connect}"
    );
    assert_eq!(connect["action"], "deny", "{connect}");
    assert_eq!(connect["origin.host"], "127.0.0.2", "{connect}");
    let inner = denied
        .iter()
        .find(|l| l["method"] == "DELETE")
        .expect("the refused request inside the tunnel");
    assert_eq!(
        inner["path"], "/inner/path",
        "the path, never the query: {inner}"
    );
    assert_eq!(inner["status"], 403, "{inner}");
    assert_eq!(inner["action"], "deny", "{inner}");
    assert_eq!(inner["reason_code"], "default_deny", "{inner}");
    assert_eq!(inner["origin.port"], u64::from(port), "{inner}");
    assert!(
        inner["bytes_out"].as_u64().is_some_and(|b| b > 0),
        "{inner}"
    );
}

/// `value` of the exposition's sample `series` (`name{labels}` exactly as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_exposition_passes_promtool_and_counts_the_traffic() {
    let Ok(promtool) = which("promtool") else {
        assert!(
            !in_ci(),
            "promtool is missing in CI (.ci/run installs Debian's prometheus)"
        );
        eprintln!("skipped: promtool not found (Debian package prometheus)");
        return;
    };
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = fx.start(&loopback_policy(port), &[]);
    traffic(&airlock, port).await;
    // A request is counted once its response has left, which may trail the client's exit
    // by a moment; the lineage worker drains its queue off the request path.
    let settled = poll_until(Duration::from_secs(10), || async {
        let text = airlock.admin.get_text("/metrics").await.ok()?;
        let counted = sample(
            &text,
            "airlock_request_duration_seconds_count{action=\"deny\"}",
        ) == Some(1.0)
            && sample(&text, "airlock_lineage_queue_depth") == Some(0.0);
        counted.then_some(text)
    })
    .await;
    let text = match settled {
        Some(text) => text,
        None => panic!(
            "the traffic is not in the metrics:\n{}",
            airlock.admin.get_text("/metrics").await.unwrap_or_default()
        ),
    };

    let file = fx.dir.path().join("metrics.txt");
    std::fs::write(&file, &text).expect("write metrics");
    let checked = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).expect("open metrics"))
        .output()
        .expect("run promtool");
    assert!(
        checked.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    for (series, want) in [
        (
            "airlock_request_duration_seconds_count{action=\"pass\"}",
            1.0,
        ),
        (
            "airlock_request_duration_seconds_count{action=\"stage\"}",
            1.0,
        ),
        (
            "airlock_request_duration_seconds_count{action=\"deny\"}",
            1.0,
        ),
        (
            "airlock_request_duration_seconds_bucket{action=\"deny\",le=\"+Inf\"}",
            1.0,
        ),
        ("airlock_stage_ack_duration_seconds_count", 1.0),
        ("airlock_release_duration_seconds_count", 1.0),
        ("airlock_runs{state=\"committed\"}", 1.0),
        ("airlock_runs{state=\"open\"}", 0.0),
        ("airlock_lineage_queue_depth", 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}:\n{text}");
    }
    // The read and the effect went through the lineage worker.
    assert!(
        sample(&text, "airlock_lineage_lag_seconds_count").is_some_and(|n| n >= 2.0),
        "{text}"
    );
    assert!(
        sample(&text, "airlock_ledger_disk_bytes").is_some_and(|n| n > 0.0),
        "{text}"
    );
}

/// The path of `program` on PATH.
fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|path| path.is_file())
        })
        .ok_or(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_has_a_canonical_line_per_tunnel_with_its_bytes() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"

[[rule]]
id = "pinned"
host = "127.0.0.1"
port = {port}
action = "tunnel"
allow_private = ["127.0.0.1"]
"#
    );
    let airlock = fx.start(&policy, &["--log-format", "json"]);
    let (run, env) = airlock.create_run().await;
    let origin_ca = fx.dir.path().join("origin-ca.pem");
    let out = curl(
        &env,
        &[
            "--cacert",
            origin_ca.to_str().expect("utf-8 path"),
            &format!("https://127.0.0.1:{port}/through"),
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let written = eventually(Duration::from_secs(10), || {
        !json_lines(&airlock.log(), "airlock::request").is_empty()
    })
    .await;
    let log = airlock.log();
    assert!(written, "no request line; log:\n{log}");
    let lines = json_lines(&log, "airlock::request");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert_eq!(line["run.id"], run.as_str(), "{line}");
    assert_eq!(line["method"], "CONNECT", "{line}");
    assert_eq!(line["action"], "tunnel", "{line}");
    assert_eq!(line["rule"], "pinned", "{line}");
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["origin.port"], u64::from(port), "{line}");
    // The TLS records each way, opaque to airlock.
    assert!(line["bytes_in"].as_u64().is_some_and(|b| b > 0), "{line}");
    assert!(line["bytes_out"].as_u64().is_some_and(|b| b > 0), "{line}");
}
