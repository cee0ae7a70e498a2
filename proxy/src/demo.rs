//! `airlock demo`: the main job end to end on loopback with embedded defaults — a local
//! HTTPS origin, airlock, a run, a curl "agent" that reads and POSTs a webhook, review,
//! commit, and what the origin received.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::json;

use crate::client::AdminClient;
use crate::origin::{Origin, OriginCa, Reply};

fn policy(port: u16) -> String {
    format!(
        r#"# The demo's policy: reads from the warehouse pass, webhook POSTs are staged,
# everything else is denied.
version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]   # the demo's origin is on loopback

[[rule]]
id = "warehouse-read"
host = "127.0.0.1"
port = {port}
method = "read"
path = "/contacts"
action = "pass"

[[rule]]
id = "webhooks"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks/**"
action = "stage"
"#
    )
}

fn say(text: &str) {
    println!("\n== {text}");
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("   {l}\n")).collect()
}

/// Runs the demo; prints a readable account to stdout.
pub async fn run() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("airlock-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = story(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn story(dir: &std::path::Path) -> anyhow::Result<()> {
    which_curl()?;
    let origin_ca = OriginCa::new().context("cannot make the origin's CA")?;
    let origin_ca_file = dir.join("origin-ca.pem");
    std::fs::write(&origin_ca_file, origin_ca.cert_pem())?;
    let origin = Origin::start(
        Some(&origin_ca),
        Arc::new(|req| match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/contacts") => Reply::json(
                200,
                &json!([{"name": "Ada Lovelace", "email": "ada@example.com"},
                        {"name": "Alan Turing", "email": "alan@example.com"}]),
            ),
            ("POST", path) if path.starts_with("/hooks/") => {
                Reply::json(200, &json!({"ok": true, "received": path}))
            }
            _ => Reply::text(404, "not found\n"),
        }),
    )
    .await?;
    let port = origin.addr().port();
    let base = format!("https://127.0.0.1:{port}");
    println!("airlock demo: an agent reads data and posts a webhook; airlock stages the post until a reviewer commits it.");
    say(&format!(
        "an HTTPS origin runs on {base} (GET /contacts, POST /hooks/...)"
    ));

    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, policy(port))?;
    let mut config = crate::ServeConfig::new(dir.join("data"), policy_file);
    config.listen = "127.0.0.1:0".parse()?;
    config.admin = "127.0.0.1:0".parse()?;
    config.upstream_ca = Some(origin_ca_file);
    let server = crate::Server::build(config).await?;
    let admin = AdminClient::new(
        &format!("http://{}", server.admin_addr()),
        server.admin_token(),
    );
    say(&format!(
        "airlock listens: proxy {}, admin http://{}; policy: reads of /contacts pass, POST /hooks/** is staged, all else denied",
        server.proxy_addr(),
        server.admin_addr()
    ));
    let serving = tokio::spawn(server.run());

    let run = admin.post("/v1/runs", Some(json!({}))).await?;
    let run_id = run["id"].as_str().unwrap_or_default().to_owned();
    say(&format!("created run {run_id}; the agent gets only its environment (HTTPS_PROXY, SSL_CERT_FILE, ...)"));
    let env: Vec<(String, String)> = run["env"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();

    say("the agent (curl) reads the contacts: GET /contacts  -> passes to the origin");
    let out = curl(&env, &["-sS", &format!("{base}/contacts")]).await?;
    print!("{}", indent(&out));
    say("the agent (curl) posts a webhook: POST /hooks/deploy  -> staged, answered at once");
    let out = curl(
        &env,
        &[
            "-sS",
            "-i",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"text":"deploy finished","contacts":2}"#,
            &format!("{base}/hooks/deploy"),
        ],
    )
    .await?;
    print!("{}", indent(&out));
    say("the agent tries something no rule allows: DELETE /contacts  -> denied");
    let out = curl(&env, &["-sS", "-X", "DELETE", &format!("{base}/contacts")]).await?;
    print!("{}", indent(&out));

    let posts = origin
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    say(&format!(
        "so far the origin received {} request(s), {posts} of them POSTs: the webhook has not left",
        origin.received().len()
    ));

    let effects = admin.get(&format!("/v1/runs/{run_id}/effects")).await?;
    let list = effects["effects"].as_array().cloned().unwrap_or_default();
    say("a reviewer lists the run's pending effects  (airlock effects RUN)");
    print!("{}", indent(&crate::cli::effects_table(&list)));
    let Some(effect_id) = list
        .first()
        .and_then(|e| e["id"].as_str())
        .map(str::to_owned)
    else {
        bail!("the webhook was not staged");
    };
    let effect = admin.get(&format!("/v1/effects/{effect_id}")).await?;
    say("and reads it  (airlock show EFFECT)");
    print!("{}", indent(&crate::cli::render_effect(&effect)));

    say("the reviewer approves it and commits the run  (airlock approve EFFECT; airlock commit RUN)");
    admin
        .post(&format!("/v1/effects/{effect_id}/approve"), None)
        .await?;
    let report = admin
        .post(&format!("/v1/runs/{run_id}/commit"), Some(json!({})))
        .await?;
    println!(
        "   run {} is {}",
        run_id,
        report["state"].as_str().unwrap_or("")
    );
    print!(
        "{}",
        indent(&crate::cli::effects_table(
            report["effects"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
        ))
    );

    say("what the origin received, in order");
    for req in origin.received() {
        let body = String::from_utf8_lossy(&req.body);
        println!(
            "   {} {}{}",
            req.method,
            req.path,
            if body.is_empty() {
                String::new()
            } else {
                format!("  body: {body}")
            }
        );
    }
    let released = origin
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    if released != 1 {
        bail!("expected the origin to receive the webhook exactly once, it received {released}");
    }
    say("done: the read passed, the webhook left exactly once, after approval; the DELETE never left.");
    serving.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

fn which_curl() -> anyhow::Result<()> {
    match std::process::Command::new("curl").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => bail!("the demo's agent is curl, and curl is not installed (apt-get install curl)"),
    }
}

async fn curl(env: &[(String, String)], args: &[&str]) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::new("curl");
    command.args(args).arg("--max-time").arg("20");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().await.context("cannot run curl")?;
    let mut text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    if !out.status.success() {
        text.push_str(&format!(
            "(curl failed: {})\n",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(text)
}
