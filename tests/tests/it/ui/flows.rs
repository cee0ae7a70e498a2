//! Flow decisions where a reviewer looks: a `review` flow over a secret read that an
//! effect carries to another origin, shown by `GET /v1/effects/{id}`, the run listings,
//! the 409 of a bulk commit, the CLI and the effect page; a reviewer's own approval
//! records the flow it was shown.

use std::time::Duration;

use airlock_tests::{curl, ok_origin, poll_until, text_origin, Fixture};
use serde_json::{json, Value};

use super::{get, sign_in, text};

/// What the vault origin serves: long enough for content fingerprints.
const SECRET: &str = "vault entry: sk-live-7f3a9c2e1b8d4f6a0c5e9b7d3a1f8e2c4b6d0a9f7e5c3b1d \
                      owner=payments rotation=2026-12-01 scope=charges:write refunds:write \
                      note=never paste this key into tickets, chats or webhooks of any kind";

fn policy(vault: u16, sink: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "vault"
host = "127.0.0.1"
port = {vault}
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "hooks"
host = "127.0.0.1"
port = {sink}
method = ["POST"]
action = "stage"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
action = "review"
reason = "secrets from the vault stay inside"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_flow_violation_is_shown_by_the_api_the_cli_and_the_effect_page() {
    let fx = Fixture::new();
    let vault = text_origin(Some(&fx.origin_ca), 200, SECRET).await;
    let sink = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&policy(vault.addr().port(), sink.addr().port()), &[])
        .await;
    let vault_url = format!("https://127.0.0.1:{}/secret", vault.addr().port());
    let read = curl(&env, &[&vault_url]).await;
    assert_eq!(read.status, 200, "{}", text(&read));
    let posted = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: text/plain",
            "--data-binary",
            SECRET,
            &format!("https://127.0.0.1:{}/hooks/ticket", sink.addr().port()),
        ],
    )
    .await;
    assert_eq!(posted.status, 202, "{}", text(&posted));
    let effect = posted.header("airlock-effect").expect("effect id");

    // Lineage is analysed in the background: poll until the flow decision is made.
    let shown: Value = poll_until(Duration::from_secs(15), || async {
        let shown = airlock
            .admin
            .get(&format!("/v1/effects/{effect}"))
            .await
            .ok()?;
        let decided = shown["flows"]["analysed"] == true
            && shown["flows"]["violations"]
                .as_array()
                .is_some_and(|v| !v.is_empty());
        decided.then_some(shown)
    })
    .await
    .expect("the effect's flows are decided");
    let violation = &shown["flows"]["violations"][0];
    assert_eq!(violation["flow"], "no-secrets-out", "{shown}");
    assert_eq!(violation["action"], "review", "{shown}");
    assert_eq!(violation["reason"], "secrets from the vault stay inside");
    assert_eq!(violation["labels"], json!(["secret"]), "{violation}");
    assert_eq!(violation["edge"]["kind"], "content", "{violation}");
    assert!(
        violation["edge"]["overlap_bytes"].as_u64().unwrap_or(0) > 0,
        "{violation}"
    );
    assert!(
        violation["source"]
            .as_str()
            .is_some_and(|s| s.contains(&format!("GET {vault_url}"))),
        "{violation}"
    );
    assert_eq!(shown["flow_hold"], "held", "{shown}");

    let listed = airlock.effects(&run).await;
    assert_eq!(
        listed[0]["flows"][0]["flow"], "no-secrets-out",
        "{listed:?}"
    );
    assert_eq!(listed[0]["flow_hold"], "held");
    let run_shown = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    assert_eq!(run_shown["flows"]["held"], json!([effect]), "{run_shown}");

    // The CLI prints the violation, and the hint of a refused bulk commit names it.
    let (ok, out, err) = crate::cli::cli(&fx, &["show", &effect]);
    assert!(ok, "{err}");
    assert!(out.contains("flow \"no-secrets-out\""), "{out}");
    assert!(out.contains("HELD"), "{out}");
    assert!(out.contains(&format!("GET {vault_url}")), "{out}");
    let (ok, _, err) = crate::cli::cli(&fx, &["commit", &run, "--approve-pending"]);
    assert!(!ok);
    assert!(err.contains("flow_review_required"), "{err}");
    assert!(err.contains(&format!("airlock approve {effect}")), "{err}");

    // The effect page shows the flow; its Approve button is the reviewer's own approval.
    let cookie = sign_in(&airlock.admin_url, &airlock_token(&fx)).await;
    let page = text(
        &get(
            &format!("{}/effects/{effect}", airlock.admin_url),
            Some(&cookie),
        )
        .await,
    );
    assert!(page.contains("Flow rules"), "{page}");
    assert!(page.contains("no-secrets-out"), "{page}");
    assert!(
        page.contains("your own approval of a flagged effect"),
        "{page}"
    );
    let run_page = text(&get(&format!("{}/runs/{run}", airlock.admin_url), Some(&cookie)).await);
    assert!(
        run_page.contains("held: needs your own approval"),
        "{run_page}"
    );
    assert!(
        run_page.contains("skips 1 that flow rules hold or block"),
        "{run_page}"
    );

    // A reviewer's own approval records the flow shown, and releases the effect.
    let approved = airlock.approve(&effect).await;
    assert_eq!(approved["approval"]["explicit"], true, "{approved}");
    assert_eq!(
        approved["approval"]["flows"],
        json!(["no-secrets-out"]),
        "{approved}"
    );
    let report = airlock.commit(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
}

fn airlock_token(fx: &Fixture) -> String {
    std::fs::read_to_string(fx.data_dir().join("admin.token"))
        .expect("admin token")
        .trim()
        .to_owned()
}
