//! Issue 38 item 5: a read cut off by a crash is known. While a read is in flight its run
//! is marked on disk (`DATA/reads-in-flight.log`); airlock is SIGKILLed while a read waits
//! for its origin, and the restarted server flags the run `lineage_incomplete`, so an
//! `unanalysed` flow holds the run's effect for a person: what the cut-off read carried
//! was never journaled, and is never silently missing. A run whose reads all ended before
//! the kill is not flagged. Effects whose analysis the kill lost are analysed again at
//! start, so both are shown analysed, not "not analysed yet".

use std::time::Duration;

use airlock_tests::{curl, ok_origin, poll_until, slow_text_origin, Fixture};
use serde_json::Value;

fn policy(vault: u16, hooks: u16) -> String {
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
port = {hooks}
method = ["POST"]
action = "stage"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
action = "block"

[[flow]]
id = "unreadable"
from = ["unanalysed"]
to = "external"
action = "review"
reason = "what airlock could not read needs a person"
"#
    )
}

fn flags(run: &Value) -> Vec<String> {
    run["flags"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|f| f["code"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_cut_off_by_sigkill_holds_its_runs_effects_as_unanalysed() {
    let fx = Fixture::new();
    let vault = slow_text_origin(
        Some(&fx.origin_ca),
        200,
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc9f3Q2xZk",
        Duration::from_secs(60),
    )
    .await;
    let hooks = ok_origin(&fx.origin_ca).await;
    let text = policy(vault.addr().port(), hooks.addr().port());
    let (mut airlock, run, env) = fx.start_run(&text, &[]).await;
    let (calm, calm_env) = airlock.create_run().await;
    let hook = format!("https://127.0.0.1:{}/hooks/status", hooks.addr().port());
    // The calm run's read ends before the kill; the cut run's is still waiting.
    let calm_read = curl(
        &calm_env,
        &[&format!("https://127.0.0.1:{}/x", hooks.addr().port())],
    )
    .await;
    assert_eq!(
        calm_read.status, 403,
        "the hooks host has no read rule: denied, not in flight"
    );
    let staged = curl(&env, &["-X", "POST", "--data", "status: all green", &hook]).await;
    assert_eq!(
        staged.status,
        202,
        "{}",
        String::from_utf8_lossy(&staged.body)
    );
    let effect = staged.header("airlock-effect").expect("effect");
    let calm_staged = curl(&calm_env, &["-X", "POST", "--data", "status: fine", &hook]).await;
    assert_eq!(calm_staged.status, 202);
    let calm_effect = calm_staged.header("airlock-effect").expect("effect");
    // Both effects are analysed before the kill: only the cut-off read can make one
    // unanalysed after it.
    for id in [&effect, &calm_effect] {
        let analysed = poll_until(Duration::from_secs(15), || async {
            let shown = airlock.admin.get(&format!("/v1/effects/{id}")).await.ok()?;
            (shown["flows"]["analysed"] == true).then_some(shown)
        })
        .await
        .expect("analysed");
        assert!(
            analysed["flows"]["violations"]
                .as_array()
                .is_none_or(|v| v.is_empty()),
            "{analysed:#}"
        );
    }
    // An effect's lineage is not synced by itself: the kill may lose it, and the restart
    // analyses such effects again (DataPlane::analyse_unanalysed).
    let vault_url = format!("https://127.0.0.1:{}/v1/secret", vault.addr().port());
    let mut reading = tokio::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "90", &vault_url])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&env)
        .kill_on_drop(true)
        .spawn()
        .expect("curl");
    // The read reached the origin: it is in flight.
    assert!(
        poll_until(Duration::from_secs(10), || async {
            (!vault.received().is_empty()).then_some(())
        })
        .await
        .is_some(),
        "the read reached the vault"
    );
    airlock.kill();
    let _ = reading.kill().await;
    airlock.restart().expect("restart");

    let shown = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    assert!(
        flags(&shown).contains(&"lineage_incomplete".to_owned()),
        "{shown:#}"
    );
    let calm_shown = airlock
        .admin
        .get(&format!("/v1/runs/{calm}"))
        .await
        .expect("run");
    assert!(flags(&calm_shown).is_empty(), "{calm_shown:#}");
    // Both effects are analysed again after the restart; the cut run's is held by the
    // unanalysed flow for the cut-off read, the calm run's is not.
    let analysed = |id: String| {
        let airlock = &airlock;
        async move {
            poll_until(Duration::from_secs(15), || async {
                let shown = airlock.admin.get(&format!("/v1/effects/{id}")).await.ok()?;
                (shown["flows"]["analysed"] == true).then_some(shown)
            })
            .await
            .unwrap_or_else(|| panic!("{id} is analysed after the restart"))
        }
    };
    let held = analysed(effect.clone()).await;
    assert!(
        held["flows"]["violations"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v["flow"] == "unreadable")),
        "{held:#}"
    );
    assert!(
        held["flows"]["incomplete"]
            .as_str()
            .is_some_and(|why| why.contains("stopped")),
        "{held:#}"
    );
    let calm_effect = analysed(calm_effect.clone()).await;
    assert!(
        calm_effect["flows"]["violations"]
            .as_array()
            .is_none_or(|v| v.is_empty()),
        "{calm_effect:#}"
    );
}
