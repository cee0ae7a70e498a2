//! `airlock demo`: the main job end to end on loopback with embedded defaults — a local
//! HTTPS origin, airlock, a run, a curl "agent" that reads customer rows, posts webhooks
//! and opens an item with a comment, pushes a branch and opens a pull request (`forge`); a
//! reviewer who reads the lineage, rejects the webhook that leaks the rows and commits the
//! rest; and what the origin received.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::client::AdminClient;
use airlock_origin::{Origin, OriginCa, Reply};

mod forge;

fn policy(port: u16) -> String {
    format!(
        r#"# The demo's policy: reads pass, webhook POSTs and item writes are staged,
# everything else is denied.
version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]   # the demo's origin is on loopback

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "webhooks"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks/**"
action = "stage"

# Creating an item answers like the real API: 201 with an id only the origin can assign,
# so airlock hands out a placeholder id and substitutes the real one at release.
[[rule]]
id = "create-item"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/items"
action = "stage"
[rule.respond]
status = 201
body = '{{"id": "{{{{placeholder:number:/id}}}}", "state": "open"}}'

[[rule]]
id = "item-writes"
host = "127.0.0.1"
port = {port}
method = "write"
path = "/items/**"
action = "stage"
"#
    )
}

fn customers() -> Value {
    let first = [
        "Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Margaret", "Dennis",
    ];
    let plans = ["free", "pro", "enterprise"];
    Value::Array(
        (0..40)
            .map(|i| {
                json!({
                    "id": i + 1,
                    "name": format!("{} Example{}", first[i % first.len()], i * 7 % 31),
                    "email": format!("customer{}@clients{}.example", i + 1, i % 4),
                    "plan": plans[i % plans.len()],
                })
            })
            .collect(),
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
    let forge = Arc::new(forge::Forge::new(dir)?);
    let forge_origin = forge.clone();
    let origin = Origin::start(
        Some(&origin_ca),
        Arc::new(move |req| {
            if let Some(reply) = forge_origin.answer(req) {
                return reply;
            }
            match (req.method.as_str(), req.path.as_str()) {
                ("GET", "/customers") => Reply::json(200, &customers()),
                ("POST", "/items") => Reply::json(201, &json!({"id": 1042, "state": "open"})),
                ("POST", path) if path.starts_with("/items/") => {
                    Reply::json(201, &json!({"id": 7, "ok": true}))
                }
                ("POST", path) if path.starts_with("/hooks/") => {
                    Reply::json(200, &json!({"ok": true}))
                }
                _ => Reply::text(404, "not found\n"),
            }
        }),
    )
    .await?;
    let port = origin.addr().port();
    let base = format!("https://127.0.0.1:{port}");
    println!("airlock demo: an agent works through airlock; its reads pass, its side effects wait for a reviewer.");
    say(&format!("an HTTPS origin runs on {base}: GET /customers, POST /hooks/..., POST /items, POST /items/ID/comments"));

    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, policy(port) + &forge::policy(port))?;
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
        "airlock listens: proxy {}, admin http://{}\n   policy: reads pass; POST /hooks/** and item writes are staged; everything else is denied",
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

    say("the agent reads the customer list: GET /customers  -> passes to the origin");
    let (status, body) = curl(&env, &[&format!("{base}/customers")]).await?;
    let rows: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
    println!("   HTTP {status}: {} customer rows", rows.len());

    say("the agent posts a status webhook: POST /hooks/status  -> staged, answered at once with 202");
    let (status, body) = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"text":"nightly sync finished"}"#,
            &format!("{base}/hooks/status"),
        ],
    )
    .await?;
    println!("   HTTP {status}");
    print!("{}", indent(&body));

    say("the agent also posts the customers to an outside webhook (reformatted, every other row)  -> staged");
    let export: Vec<Value> = rows
        .iter()
        .step_by(2)
        .map(|r| json!({"customer": r["name"], "contact": r["email"]}))
        .collect();
    let export = serde_json::to_string(&json!({"records": export}))?;
    let (status, _) = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &export,
            &format!("{base}/hooks/export"),
        ],
    )
    .await?;
    println!("   HTTP {status}");

    say("the agent opens an item: POST /items  -> staged; the answer carries a placeholder id, typed like the real one");
    let (status, body) = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"title":"sync report"}"#,
            &format!("{base}/items"),
        ],
    )
    .await?;
    println!("   HTTP {status}: {}", body.trim());
    let item: Value = serde_json::from_str(&body).unwrap_or_default();
    let placeholder = item["id"].as_u64().unwrap_or_default();
    say(&format!("and comments on it: POST /items/{placeholder}/comments  -> staged, and depends on the item"));
    let (status, _) = curl(
        &env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"text":"all rows synced"}"#,
            &format!("{base}/items/{placeholder}/comments"),
        ],
    )
    .await?;
    println!("   HTTP {status}");

    forge
        .agent(&env, &base, async |args: &[&str]| curl(&env, args).await)
        .await?;

    say("the agent tries something no rule allows: DELETE /customers  -> denied");
    let (status, body) = curl(&env, &["-X", "DELETE", &format!("{base}/customers")]).await?;
    let denial: Value = serde_json::from_str(&body).unwrap_or_default();
    println!(
        "   HTTP {status}: {}",
        denial["reason"].as_str().unwrap_or("")
    );

    let posts = origin
        .received()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    say(&format!(
        "so far the origin received {} request(s), {posts} of them writes: no side effect has left",
        origin.received().len()
    ));

    // Content analysis runs off the request path; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let effects = admin.get(&format!("/v1/runs/{run_id}/effects")).await?;
    let list = effects["effects"].as_array().cloned().unwrap_or_default();
    say("a reviewer lists the run's pending effects  (airlock effects RUN)");
    print!("{}", indent(&crate::render::effects_table(&list)));
    let mut leaking = None;
    for effect in &list {
        let id = effect["id"].as_str().unwrap_or_default();
        let shown = admin.get(&format!("/v1/effects/{id}")).await?;
        let carries_data = shown["lineage"]["sources"]
            .as_array()
            .is_some_and(|s| s.iter().any(|e| e["kind"] == "content"));
        if carries_data || shown["url"].as_str().unwrap_or("").contains("/comments") {
            say(&format!("the reviewer reads {id}  (airlock show EFFECT)"));
            print!("{}", indent(&crate::render::render_effect(&shown)));
        }
        if carries_data {
            leaking = Some(id.to_owned());
        }
    }
    let Some(leaking) = leaking else {
        bail!("the export webhook should carry content from the customer read");
    };
    say("the reviewer rejects the webhook that carries customer rows and approves the rest");
    admin
        .post(&format!("/v1/effects/{leaking}/reject"), None)
        .await?;
    println!("   airlock reject {leaking}");
    for effect in &list {
        let id = effect["id"].as_str().unwrap_or_default();
        if id != leaking {
            admin
                .post(&format!("/v1/effects/{id}/approve"), None)
                .await?;
            println!("   airlock approve {id}");
        }
    }
    say("and commits the run  (airlock commit RUN): released in dependency order, the real item id substituted");
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
        indent(&crate::render::effects_table(
            report["effects"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
        ))
    );

    say(
        "what the origin received, in order (the ORIGIN STATUS column above is its answer to each)",
    );
    for req in origin.received() {
        let body = String::from_utf8_lossy(&req.body);
        let shown = if body.chars().count() > 70 {
            format!("{}…", body.chars().take(70).collect::<String>())
        } else {
            body.into_owned()
        };
        println!(
            "   {} {}{}",
            req.method,
            req.path,
            if shown.is_empty() {
                String::new()
            } else {
                format!("  body: {shown}")
            }
        );
    }
    let received = origin.received();
    let exported = received.iter().any(|r| r.path == "/hooks/export");
    let commented = received.iter().any(|r| r.path == "/items/1042/comments");
    let posts = received
        .iter()
        .filter(|r| r.method == "POST" && !forge::Forge::owns(&r.path))
        .count();
    if exported || !commented || posts != 3 {
        bail!("the origin should receive the status webhook, the item and its comment (with the real id 1042), and never the export");
    }
    let forged = forge.check(&received)?;
    say("done: reads passed; the status webhook, the item and its comment left once each, after approval,");
    println!("   the comment with the item's real id 1042; the export with customer rows and the DELETE never left;");
    println!("   {forged}.");
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

/// Runs curl with the run's environment; returns the final status code and body.
async fn curl(env: &[(String, String)], args: &[&str]) -> anyhow::Result<(u16, String)> {
    let mut command = tokio::process::Command::new("curl");
    command
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().await.context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "curl failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    Ok((status.trim().parse().unwrap_or(0), body.to_owned()))
}
