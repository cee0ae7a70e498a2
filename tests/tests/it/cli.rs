//! The CLI over the admin API, as an operator uses it: it finds the server and token from
//! `--data`.

use std::process::Command;

use airlock_tests::{airlock_bin, curl, loopback_policy, ok_origin, Fixture};

/// Runs the CLI against `fx`'s server (found through `--data`): success, stdout, stderr.
pub(crate) fn cli(fx: &Fixture, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(airlock_bin())
        .args(args)
        .arg("--data")
        .arg(fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_reviews_and_commits_with_the_cli() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let _airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);

    let (ok, out, err) = cli(&fx, &["runs", "create", "--json"]);
    assert!(ok, "{err}");
    let run: serde_json::Value = serde_json::from_str(&out).expect("json");
    let run_id = run["id"].as_str().expect("id").to_owned();

    // `airlock env RUN` prints shell exports a sandbox can eval.
    let (ok, exports, err) = cli(&fx, &["env", &run_id]);
    assert!(ok, "{err}");
    assert!(
        exports.contains("export HTTPS_PROXY='http://run_"),
        "{exports}"
    );
    assert!(exports.contains("export https_proxy="), "{exports}");
    assert!(exports.contains("export NO_PROXY=''"), "{exports}");
    assert!(exports.contains("export SSL_CERT_FILE="), "{exports}");
    let env: std::collections::BTreeMap<String, String> = exports
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let keep = curl(
        &env,
        &["-X", "POST", "--data", "keep", &format!("{base}/keep")],
    )
    .await;
    let drop = curl(
        &env,
        &["-X", "POST", "--data", "drop", &format!("{base}/drop")],
    )
    .await;
    assert_eq!(
        (keep.status, drop.status),
        (202, 202),
        "{} {}",
        keep.stderr,
        drop.stderr
    );
    let keep_id = keep.header("airlock-effect").expect("id");
    let drop_id = drop.header("airlock-effect").expect("id");

    let (ok, table, _) = cli(&fx, &["effects", &run_id]);
    assert!(ok);
    assert!(
        table.contains(&keep_id) && table.contains("staged"),
        "{table}"
    );
    let (ok, shown, _) = cli(&fx, &["show", &keep_id]);
    assert!(ok);
    assert!(
        shown.contains("POST") && shown.contains("| keep"),
        "{shown}"
    );

    // Commit refuses while effects are undecided, with a hint.
    let (ok, _, err) = cli(&fx, &["commit", &run_id]);
    assert!(!ok);
    assert!(
        err.starts_with("error: ") && err.contains("undecided"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");

    assert!(cli(&fx, &["approve", &keep_id]).0);
    assert!(cli(&fx, &["reject", &drop_id]).0);
    let (ok, report, err) = cli(&fx, &["commit", &run_id]);
    assert!(ok, "{err}");
    assert!(report.contains("committed"), "{report}");
    let received = origin.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/keep");

    let (ok, pem, _) = cli(&fx, &["ca", "export"]);
    assert!(ok);
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let (ok, list, _) = cli(&fx, &["runs", "list"]);
    assert!(ok);
    assert!(
        list.contains(&run_id) && list.contains("committed"),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_environments_advertise_the_address_and_ca_path_the_sandbox_sees() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let _airlock = fx.start(
        &loopback_policy(origin.addr().port()),
        &[
            "--advertise-proxy",
            "airlock.sandbox.internal:3128",
            "--advertise-ca",
            "/etc/airlock/ca.pem",
        ],
    );
    let (ok, out, err) = cli(&fx, &["runs", "create", "--json"]);
    assert!(ok, "{err}");
    let run: serde_json::Value = serde_json::from_str(&out).expect("json");
    let run_id = run["id"].as_str().expect("id").to_owned();
    let (ok, exports, err) = cli(&fx, &["env", &run_id]);
    assert!(ok, "{err}");
    assert!(
        exports.contains("@airlock.sandbox.internal:3128'"),
        "{exports}"
    );
    assert!(
        exports.contains("export SSL_CERT_FILE='/etc/airlock/ca.pem'"),
        "{exports}"
    );
    assert!(
        exports.contains("-Dhttps.proxyHost=airlock.sandbox.internal -Dhttps.proxyPort=3128"),
        "{exports}"
    );
    // A bad value is refused at start with the reason.
    let out = Command::new(airlock_bin())
        .args(["serve", "--advertise-proxy", "no-port"])
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected HOST:PORT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
