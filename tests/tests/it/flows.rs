//! Flow rules end to end (docs/policy.md#flow-rules): a secret read from a labelled
//! internal origin and posted, encoded, to an outside webhook is held or rejected; a benign
//! status message beside it is released; bulk approvals and `review = "auto"` never
//! release the held effect; a reviewer's own approval does, and the record keeps who.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{curl, poll_until, Airlock, Fixture, Origin, Received, Reply};
use base64::Engine as _;
use serde_json::{json, Value};

/// The secret the vault origin serves.
const SECRET: &str = r#"{"service":"payments","api_key":"sk_live_4eC39HqLyjWDarjtT1zdp7dc9f3Q2xZk","db_password":"correct-horse-battery-staple-7731"}"#;

/// Vault (port `vault`, labelled secret) and hooks (port `hooks`, staged with review =
/// auto), with one flow of `action`.
fn policy(vault: u16, hooks: u16, action: &str, extra: &str) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "vault-read"
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
review = "auto"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
min_overlap_bytes = 24
action = "{action}"
reason = "secrets never leave for outside hosts"
{extra}"#
    )
}

/// A loopback origin of `fx` answering with `reply`.
async fn origin(
    fx: &Fixture,
    reply: impl Fn(&Received) -> Reply + Send + Sync + 'static,
) -> Origin {
    Origin::start(Some(&fx.origin_ca), Arc::new(reply))
        .await
        .expect("origin")
}

/// The vault's answer: [`SECRET`] as JSON.
fn secret_reply() -> Reply {
    Reply::json(200, &serde_json::from_str::<Value>(SECRET).expect("json"))
}

struct Setup {
    fx: Fixture,
    airlock: Airlock,
    run: String,
    env: std::collections::BTreeMap<String, String>,
    vault: Origin,
    hooks: Origin,
}

async fn setup(action: &str, extra: &str) -> Setup {
    let fx = Fixture::new();
    let vault = origin(&fx, |_: &Received| secret_reply()).await;
    let hooks = origin(&fx, |_: &Received| Reply::json(200, &json!({"ok": true}))).await;
    let text = policy(vault.addr().port(), hooks.addr().port(), action, extra);
    let (airlock, run, env) = fx.start_run(&text, &[]).await;
    Setup {
        fx,
        airlock,
        run,
        env,
        vault,
        hooks,
    }
}

impl Setup {
    fn vault_url(&self) -> String {
        format!(
            "https://127.0.0.1:{}/v1/secret/payments",
            self.vault.addr().port()
        )
    }

    fn hook_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.hooks.addr().port())
    }

    /// Reads the secret, then posts it base64-encoded and a benign status message; returns
    /// the two effects and the leaking post's `airlock-flow` header.
    async fn leak_and_status(&self) -> (String, String, Option<String>, Option<String>) {
        let read = curl(&self.env, &[&self.vault_url()]).await;
        assert_eq!(read.status, 200, "the vault read passes");
        let encoded = base64::engine::general_purpose::STANDARD.encode(&read.body);
        let leak = curl(
            &self.env,
            &[
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "--data",
                &json!({"event": "backup", "blob": encoded}).to_string(),
                &self.hook_url("/hooks/backup"),
            ],
        )
        .await;
        assert!(
            leak.status < 300,
            "staged: {}",
            String::from_utf8_lossy(&leak.body)
        );
        let status = curl(
            &self.env,
            &[
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "--data",
                r#"{"text":"build passed on main, deployed v1.4.2 to staging"}"#,
                &self.hook_url("/hooks/status"),
            ],
        )
        .await;
        assert!(status.status < 300);
        (
            leak.header("airlock-effect").expect("effect"),
            status.header("airlock-effect").expect("effect"),
            leak.header("airlock-flow"),
            status.header("airlock-flow"),
        )
    }

    async fn effect(&self, id: &str) -> Value {
        self.airlock
            .admin
            .get(&format!("/v1/effects/{id}"))
            .await
            .expect("effect")
    }

    /// Commits approving what is pending; returns the API's error code and details, or
    /// the report.
    async fn commit_pending(&self) -> Result<Value, (String, Option<Value>)> {
        self.airlock
            .post(
                &format!("/v1/runs/{}/commit", self.run),
                Some(self.airlock.approve_pending_body(&self.run).await),
            )
            .await
            .map_err(|error| match error {
                airlock_tests::ClientError::Api { code, details, .. } => (code, details),
                other => panic!("{other}"),
            })
    }
}

fn paths(origin: &Origin) -> Vec<String> {
    origin.received().iter().map(|r| r.path.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_posted_base64_to_an_outside_webhook_is_held_then_rejected_by_a_block_flow() {
    let s = setup("review", "").await;
    let (leak, status, leak_flow, status_flow) = s.leak_and_status().await;

    // The agent learns at once that the effect is held, and why.
    assert_eq!(
        leak_flow.as_deref(),
        Some(r#"review; flow="no-secrets-out""#),
        "the synthetic response names the flow"
    );
    assert_eq!(status_flow, None, "the benign status message is not held");

    // The violation is shown with its edge and excerpt.
    let shown = s.effect(&leak).await;
    let violation = &shown["flows"]["violations"][0];
    assert_eq!(violation["flow"], "no-secrets-out", "{shown:#}");
    assert_eq!(violation["action"], "review");
    assert_eq!(violation["reason"], "secrets never leave for outside hosts");
    assert!(violation["source"]
        .as_str()
        .unwrap_or("")
        .contains("/v1/secret/payments"));
    assert!(
        violation["edge"]["overlap_bytes"].as_u64().unwrap_or(0) >= 24
            || violation["edge"]["kind"] == "credential"
    );

    // review = "auto" approved the benign effect, not the held one.
    assert_eq!(s.effect(&status).await["state"], "approved");
    assert_eq!(
        shown["state"], "staged",
        "review = auto does not apply to a held effect"
    );

    // approve_pending does not release it: the commit is refused, nothing is sent.
    let (code, details) = s.commit_pending().await.expect_err("held");
    assert_eq!(code, "flow_review_required");
    assert_eq!(details.expect("details")["held"], json!([leak]));
    assert!(s.hooks.received().is_empty(), "nothing reached the webhook");

    // A block flow (hot reloaded: new flows apply to undecided effects) makes commit
    // reject it; the benign effect is released.
    let text = policy(s.vault.addr().port(), s.hooks.addr().port(), "block", "");
    s.airlock
        .admin
        .post_text("/v1/policy", "application/toml", text)
        .await
        .expect("reload");
    let blocked = s
        .airlock
        .post(&format!("/v1/effects/{leak}/approve"), None)
        .await
        .expect_err("a blocked effect cannot be approved");
    assert!(blocked.to_string().contains("flow_blocked"), "{blocked}");
    let report = s.commit_pending().await.expect("commit");
    assert_eq!(report["state"], "committed", "{report:#}");
    let leak_after = s.effect(&leak).await;
    assert_eq!(leak_after["state"], "rejected");
    assert!(
        leak_after["state_reason"]
            .as_str()
            .unwrap_or("")
            .contains("secrets never leave"),
        "{leak_after:#}"
    );
    assert_eq!(s.effect(&status).await["state"], "released");
    assert_eq!(
        paths(&s.hooks),
        ["/hooks/status"],
        "only the benign effect was sent"
    );
    let body = String::from_utf8_lossy(&s.hooks.received()[0].body).into_owned();
    assert!(body.contains("build passed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_reviewers_own_approval_releases_a_held_effect_and_the_record_keeps_who() {
    let s = setup("review", "").await;
    let (leak, _status, _, _) = s.leak_and_status().await;

    // Approving staged-by-rule in bulk skips it (the UI's action; the API's own form is
    // approve_pending, refused above); a reviewer's approval of the effect itself works.
    let approved = s.airlock.approve(&leak).await;
    assert_eq!(approved["state"], "approved");
    let approval = &s.effect(&leak).await["approval"];
    assert_eq!(approval["by"], "admin", "{approval:#}");
    assert_eq!(approval["explicit"], true);
    assert_eq!(approval["flows"], json!(["no-secrets-out"]));

    let report = s.commit_pending().await.expect("commit");
    assert_eq!(report["state"], "committed", "{report:#}");
    let mut sent = paths(&s.hooks);
    sent.sort();
    assert_eq!(sent, ["/hooks/backup", "/hooks/status"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanalysed_effect_under_an_unanalysed_flow_needs_a_named_approval() {
    let extra = r#"
[[flow]]
id = "look-if-you-could-not"
from = ["unanalysed"]
to = "any"
action = "review"
reason = "airlock could not read this body, so a human does"
"#;
    let s = setup("review", extra).await;
    // A body that says gzip but is not: its analysis is skipped.
    let posted = curl(
        &s.env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/octet-stream",
            "-H",
            "content-encoding: gzip",
            "--data-binary",
            "\u{1f}\u{8b} definitely not a gzip stream, but long enough to analyse",
            &s.hook_url("/hooks/upload"),
        ],
    )
    .await;
    assert!(posted.status < 300);
    let effect = posted.header("airlock-effect").expect("effect");
    assert_eq!(
        posted.header("airlock-flow").as_deref(),
        Some(r#"review; flow="look-if-you-could-not""#)
    );
    let shown = poll_until(Duration::from_secs(10), || async {
        let shown = s.effect(&effect).await;
        (shown["flows"]["incomplete"].is_string()).then_some(shown)
    })
    .await
    .expect("the effect's lineage says it is incomplete");
    assert_eq!(
        shown["flows"]["violations"][0]["labels"],
        json!(["unanalysed"])
    );
    assert_eq!(shown["state"], "staged");

    let (code, _) = s.commit_pending().await.expect_err("held");
    assert_eq!(code, "flow_review_required");
    s.airlock.approve(&effect).await;
    let report = s.commit_pending().await.expect("commit");
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(paths(&s.hooks), ["/hooks/upload"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_replay_re_decides_the_flows_of_a_past_run_under_a_changed_policy() {
    let s = setup("review", "").await;
    let (leak, status, _, _) = s.leak_and_status().await;
    let (vault, hooks) = (s.vault.addr().port(), s.hooks.addr().port());
    let candidate = s.fx.dir.path().join("candidate.toml");
    std::fs::write(&candidate, policy(vault, hooks, "block", "")).expect("candidate");
    let candidate = candidate.to_str().expect("utf-8 path");
    let (ok, out, err) = crate::cli::cli(
        &s.fx,
        &["policy", "replay", candidate, "--run", &s.run, "--json"],
    );
    assert!(ok, "{err}");
    let replay: Value = serde_json::from_str(&out).expect("json");
    let changed = replay["flows_changed"].as_array().expect("flows_changed");
    assert_eq!(
        changed.len(),
        1,
        "only the leaking effect changes: {replay:#}"
    );
    assert_eq!(changed[0]["effect"], leak.as_str());
    assert_eq!(changed[0]["was"][0]["action"], "review");
    assert_eq!(changed[0]["now"][0]["action"], "block");
    assert_eq!(changed[0]["now"][0]["flow"], "no-secrets-out");
    assert!(!out.contains(&status), "the benign effect is unchanged");

    // Replay decides; it changes nothing on the server.
    assert_eq!(s.effect(&leak).await["state"], "staged");
}

/// A secret posted to its own origin (not external) whose answer is handed back as a
/// placeholder, and the placeholder posted outside: the value substituted at release is
/// the parent's answer, so the child carries the parent's lineage and is held.
/// The laundering run of [`a_secret_laundered_through_a_placeholder_is_still_held`].
struct Laundered {
    fx: Fixture,
    airlock: Airlock,
    run: String,
    /// The child effect that carries the placeholder outside.
    child: String,
    vport: u16,
    hport: u16,
    /// The vault and the hooks, served as long as the setup lives.
    _origins: (Origin, Origin),
}

/// Reads the secret, posts it to its own origin (staged, answered with a placeholder) and
/// posts the placeholder outside, under a `review` flow.
async fn launder() -> Laundered {
    let fx = Fixture::new();
    let vault = origin(&fx, |r: &Received| {
        if r.method == "POST" {
            Reply::json(200, &json!({"echo": String::from_utf8_lossy(&r.body)}))
        } else {
            secret_reply()
        }
    })
    .await;
    let hooks = origin(&fx, |_: &Received| Reply::json(200, &json!({"ok": true}))).await;
    let (vport, hport) = (vault.addr().port(), hooks.addr().port());
    let extra = format!(
        r#"
[[rule]]
id = "vault-echo"
host = "127.0.0.1"
port = {vport}
method = ["POST"]
action = "stage"
review = "auto"
[rule.respond]
body = '{{"echo": "{{{{placeholder:string:/echo}}}}"}}'
"#
    );
    let text =
        policy(vport, hport, "review", "").replace("[[flow]]", &format!("{extra}\n[[flow]]"));
    let (airlock, run, env) = fx.start_run(&text, &[]).await;
    let read = curl(
        &env,
        &[&format!("https://127.0.0.1:{vport}/v1/secret/payments")],
    )
    .await;
    assert_eq!(read.status, 200);
    let parent = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data-binary",
            &String::from_utf8_lossy(&read.body),
            &format!("https://127.0.0.1:{vport}/v1/transit/echo"),
        ],
    )
    .await;
    assert!(
        parent.status < 300,
        "{}",
        String::from_utf8_lossy(&parent.body)
    );
    assert_eq!(
        parent.header("airlock-flow"),
        None,
        "posting to its own origin is not external"
    );
    let placeholder = parent.json()["echo"]
        .as_str()
        .expect("placeholder")
        .to_owned();
    let child = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &json!({"text": placeholder}).to_string(),
            &format!("https://127.0.0.1:{hport}/hooks/relay"),
        ],
    )
    .await;
    assert!(child.status < 300);
    assert_eq!(
        child.header("airlock-flow").as_deref(),
        Some(r#"review; flow="no-secrets-out""#),
        "the placeholder carries the parent's lineage"
    );
    let child = child.header("airlock-effect").expect("effect");
    Laundered {
        _origins: (vault, hooks),
        fx,
        airlock,
        run,
        child,
        vport,
        hport,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_laundered_through_a_placeholder_is_still_held() {
    let Laundered {
        airlock, child: id, ..
    } = launder().await;
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{id}"))
        .await
        .expect("effect");
    assert_eq!(
        shown["state"], "staged",
        "review = auto does not apply: {shown:#}"
    );
    let detail = shown["flows"]["violations"][0]["edge"]["detail"]
        .as_str()
        .unwrap_or("");
    assert!(
        detail.contains("carried through the placeholder"),
        "{shown:#}"
    );
}

/// `policy replay` decides with the live decision's inputs: the lineage carried through a
/// placeholder counts, so a candidate that turns the flow into a block rejects the child
/// at commit, where the policy in force holds it for review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_replay_follows_lineage_carried_through_a_placeholder() {
    let l = launder().await;
    let candidate = l.fx.dir.path().join("candidate.toml");
    let text = l.airlock.admin.get("/v1/policy").await.expect("policy")["text"]
        .as_str()
        .expect("text")
        .replacen("action = \"review\"", "action = \"block\"", 1);
    assert!(text.contains("action = \"block\""), "{text}");
    std::fs::write(&candidate, text).expect("candidate");
    let candidate = candidate.to_str().expect("utf-8 path");
    let (ok, out, err) = crate::cli::cli(
        &l.fx,
        &["policy", "replay", candidate, "--run", &l.run, "--json"],
    );
    assert!(ok, "{err}");
    let replay: Value = serde_json::from_str(&out).expect("json");
    let changed = replay["flows_changed"].as_array().expect("flows_changed");
    let child = changed
        .iter()
        .find(|c| c["effect"] == l.child.as_str())
        .unwrap_or_else(|| panic!("the child's verdict changes: {replay:#}"));
    assert_eq!(child["was"][0]["action"], "review", "{replay:#}");
    assert_eq!(child["was_at_commit"], "held", "{replay:#}");
    assert_eq!(child["now"][0]["action"], "block", "{replay:#}");
    assert_eq!(child["now_at_commit"], "rejected", "{replay:#}");
    assert_eq!(
        child["url"],
        format!("https://127.0.0.1:{}/hooks/relay", l.hport)
    );
    // The parent, posted to the vault's own origin, is not external: unchanged.
    assert!(
        !out.contains(&format!("127.0.0.1:{}/v1/transit/echo", l.vport)),
        "{replay:#}"
    );
    // Replay decides; the server changed nothing.
    let shown = l
        .airlock
        .admin
        .get(&format!("/v1/effects/{}", l.child))
        .await
        .expect("effect");
    assert_eq!(shown["state"], "staged");
}

/// A labelled read still streaming when the commit is asked: what it carries reached the
/// agent but is not analysed yet, so the commit's final pass holds the run's effects (a
/// reviewer's own approval still releases them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_are_held_while_a_labelled_read_still_streams() {
    let fx = Fixture::new();
    let vault = origin(&fx, |_: &Received| Reply {
        hold_open: Some(Duration::from_secs(20)),
        ..Reply::text(200, SECRET)
    })
    .await;
    let hooks = origin(&fx, |_: &Received| Reply::json(200, &json!({"ok": true}))).await;
    let (vport, hport) = (vault.addr().port(), hooks.addr().port());
    let (airlock, run, env) = fx.start_run(&policy(vport, hport, "block", ""), &[]).await;
    // The agent reads the stream's first bytes and keeps it open.
    let out = fx.dir.path().join("stream.out");
    let mut stream = tokio::process::Command::new("curl");
    stream
        .args(["-sS", "-N", "--max-time", "25", "-o"])
        .arg(&out)
        .arg(format!("https://127.0.0.1:{vport}/v1/secret/stream"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&env)
        .kill_on_drop(true);
    let mut stream = stream.spawn().expect("curl");
    let secret = poll_until(Duration::from_secs(10), || async {
        std::fs::read_to_string(&out)
            .ok()
            .filter(|s| s.contains("sk_live_"))
    })
    .await
    .expect("the stream's first bytes arrived");
    let posted = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            &secret,
            &format!("https://127.0.0.1:{hport}/hooks/backup"),
        ],
    )
    .await;
    assert!(posted.status < 300);
    let effect = posted.header("airlock-effect").expect("effect");

    let refused = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(airlock.approve_pending_body(&run).await),
        )
        .await
        .expect_err("held while the read streams");
    assert!(refused.to_string().contains("still streaming"), "{refused}");
    assert!(hooks.received().is_empty(), "nothing was released");

    // Once the read ends, its data is analysed and the block flow decides.
    let _ = stream.kill().await;
    let report = poll_until(Duration::from_secs(15), || async {
        airlock
            .post(
                &format!("/v1/runs/{run}/commit"),
                Some(airlock.approve_pending_body(&run).await),
            )
            .await
            .ok()
    })
    .await
    .expect("commit once the read ended");
    assert_eq!(report["state"], "committed", "{report:#}");
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{effect}"))
        .await
        .expect("effect");
    assert_eq!(
        shown["state"], "rejected",
        "the cut-short read's data was analysed: {shown:#}"
    );
    assert!(hooks.received().is_empty(), "the blocked effect never left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_except_host_may_carry_the_secret_while_every_other_exit_is_still_judged() {
    // The agent's "model" is the hooks origin reached as localhost; the flow excepts it.
    let fx = Fixture::new();
    let vault = origin(&fx, |_: &Received| secret_reply()).await;
    let hooks = origin(&fx, |_: &Received| Reply::json(200, &json!({"ok": true}))).await;
    let port = hooks.addr().port();
    let extra = format!(
        "except = [\"localhost\"]\n\n[[rule]]\nid = \"model\"\nhost = \"localhost\"\nport = {port}\nmethod = [\"POST\"]\naction = \"stage\"\nreview = \"auto\"\n"
    );
    let text = policy(vault.addr().port(), port, "block", &extra);
    let (airlock, run, env) = fx.start_run(&text, &[]).await;
    let s = Setup {
        fx,
        airlock,
        run,
        env,
        vault,
        hooks,
    };
    let read = curl(&s.env, &[&s.vault_url()]).await;
    assert_eq!(read.status, 200);
    let prompt =
        json!({"messages": [{"role": "user", "content": String::from_utf8_lossy(&read.body)}]})
            .to_string();
    let post = |url: String| {
        let prompt = prompt.clone();
        let env = s.env.clone();
        async move {
            let args = [
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "--data",
                prompt.as_str(),
                url.as_str(),
            ];
            curl(&env, &args).await
        }
    };
    let to_model = post(format!("https://localhost:{port}/v1/messages")).await;
    let elsewhere = post(s.hook_url("/hooks/backup")).await;
    assert!(
        to_model.status < 300 && elsewhere.status < 300,
        "{} {}",
        String::from_utf8_lossy(&to_model.body),
        String::from_utf8_lossy(&elsewhere.body)
    );
    assert_eq!(
        to_model.header("airlock-flow"),
        None,
        "the except host is not judged"
    );
    assert_eq!(
        elsewhere.header("airlock-flow").as_deref(),
        Some(r#"block; flow="no-secrets-out""#)
    );
    let report = s.commit_pending().await.expect("commit");
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(
        paths(&s.hooks),
        ["/v1/messages"],
        "only the model got the prompt"
    );
}
