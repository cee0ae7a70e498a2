//! Run tokens are never stored (issue 35, item 5; docs/fleet.md, "The run token key"):
//! derived from the run's id with `DATA/run-token.key`, a plaintext token of an old ledger
//! rewritten as its keyed hash on open; and a `source` that holds every address refused
//! unless asked for by name.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use airlock_tests::{curl, loopback_policy, ok_origin, Fixture};
use serde_json::json;

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            bytes.extend(all_bytes(&path));
        } else if let Ok(file) = std::fs::read(&path) {
            bytes.extend(file);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The run's environment with `token` in its proxy URLs instead of the run's own.
fn with_token(env: &BTreeMap<String, String>, own: &str, token: &str) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| (k.clone(), v.replace(own, token)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_token_is_in_no_file_of_the_data_directory() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (mut airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let token = airlock.run_token(&run).await;
    assert_eq!(token.len(), 48, "{token}");
    // A read and a staged effect, so the ledger holds the run's records.
    let read = curl(&env, &[&format!("https://127.0.0.1:{port}/customers")]).await;
    assert_eq!(read.status, 200, "{}", read.stderr);
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            "{\"a\":1}",
            &format!("https://127.0.0.1:{port}/hooks"),
        ],
    )
    .await;
    assert_eq!(staged.status, 202, "{}", staged.stderr);
    // The token is given back as often as asked.
    assert_eq!(airlock.run_token(&run).await, token);
    airlock
        .terminate(Duration::from_secs(20))
        .expect("airlock stops on SIGTERM");
    let bytes = all_bytes(&fx.data_dir());
    assert!(
        contains(&bytes, run.as_bytes()),
        "the scan sees the ledger's records"
    );
    assert!(
        !contains(&bytes, token.as_bytes()) && !contains(&bytes, token.to_uppercase().as_bytes()),
        "the run token is in a file of the data directory"
    );
    let key = fx.data_dir().join("run-token.key");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&key)
        .expect("run-token.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "run-token.key is private");
    // The same key after a restart: the same token still works.
    airlock.restart().expect("restart");
    assert_eq!(airlock.run_token(&run).await, token);
    let env = airlock
        .admin
        .get(&format!("/v1/runs/{run}/env"))
        .await
        .expect("env");
    let env: BTreeMap<String, String> = env["env"]
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let again = curl(&env, &[&format!("https://127.0.0.1:{port}/customers")]).await;
    assert_eq!(again.status, 200, "{}", again.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_ledgers_plaintext_token_is_rewritten_on_open_and_still_works() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (mut airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let derived = airlock.run_token(&run).await;
    airlock
        .terminate(Duration::from_secs(20))
        .expect("airlock stops on SIGTERM");
    // The run as a ledger written before tokens were derived holds it: a random token in
    // plaintext in its record.
    let old = "00112233445566778899aabbccddeeff0011223344556677";
    let ledger = fx.data_dir().join("ledger");
    let id = airlock_ledger::RunId(run.clone());
    airlock_ledger::conformance::write_plaintext_token(&ledger, &id, old).expect("an old record");
    let before = airlock.proxy.clone();
    airlock.restart().expect("restart");
    // The proxy listens on a new port.
    let env = with_token(&env, &before, &airlock.proxy);
    assert!(
        airlock
            .log()
            .contains("plaintext run tokens in the ledger rewritten"),
        "{}",
        airlock.log()
    );
    // The old token authenticates; the derived one is not this run's token.
    let url = format!("https://127.0.0.1:{port}/customers");
    let read = curl(&with_token(&env, &derived, old), &[&url]).await;
    assert_eq!(read.status, 200, "{}", read.stderr);
    let refused = curl(&env, &["-s", "-o", "/dev/null", &url]).await;
    assert_ne!(refused.status, 200, "the derived token is not this run's");
    // Its token cannot be given back: only its hash is kept.
    let answer = airlock.admin.get(&format!("/v1/runs/{run}/env")).await;
    match answer {
        Err(airlock::client::ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (409, "token_not_recoverable"));
        }
        other => panic!("GET env of an old run: {other:?}"),
    }
    airlock
        .terminate(Duration::from_secs(20))
        .expect("airlock stops on SIGTERM");
    let store = airlock_ledger::Ledger::open(&ledger).expect("open the ledger");
    let record = store.run(&id).expect("read").expect("the run");
    assert_eq!(record.plaintext_token, None, "rewritten");
    assert!(record.token_hash.is_some(), "kept as its keyed hash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_of_every_address_is_refused_unless_asked_for_by_name() {
    let fx = Fixture::new();
    let airlock = fx.start(&loopback_policy(9), &[]);
    for source in ["0.0.0.0/0", "::/0"] {
        let refused = airlock
            .admin
            .post("/v1/runs", Some(json!({ "source": source })))
            .await;
        match refused {
            Err(airlock::client::ClientError::Api {
                status,
                code,
                message,
                ..
            }) => {
                assert_eq!(
                    (status, code.as_str()),
                    (400, "source_too_broad"),
                    "{message}"
                );
                assert!(message.contains("source_all"), "{message}");
            }
            other => panic!("{source}: {other:?}"),
        }
    }
    let runs = airlock.admin.get("/v1/runs").await.expect("runs");
    assert_eq!(
        runs["runs"].as_array().map(Vec::len),
        Some(0),
        "no run created: {runs}"
    );
    let created = airlock
        .admin
        .post(
            "/v1/runs",
            Some(json!({ "source": "0.0.0.0/0", "source_all": true })),
        )
        .await
        .expect("asked for by name");
    assert_eq!(created["source"], "0.0.0.0/0", "{created}");
    let narrow = airlock
        .admin
        .post("/v1/runs", Some(json!({ "source": "fd00::/64" })))
        .await
        .expect("a narrower source needs nothing more");
    assert_eq!(narrow["source"], "fd00::/64");
}
