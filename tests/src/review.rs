//! A run to review, shared by the review UI tests (curl-driven and browser-driven): one
//! read of 412 contact rows, a harmless status webhook, an export webhook that leaks the
//! contacts (a read -> effect lineage edge), and an item with a comment that carries the
//! item's placeholder id (an effect -> effect edge).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{curl, poll_until, Airlock, Fixture, Origin, Received, Reply};

/// The policy: reads pass, hooks and items are staged, item creation answers like the
/// real API with placeholders.
pub fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

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

[[rule]]
id = "hooks"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/hooks/**"
action = "stage"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
"#
    )
}

/// 412 contact rows.
pub fn contacts() -> Value {
    Value::Array(
        (0..412)
            .map(|i| {
                json!({
                    "id": i,
                    "name": format!("{} Surname{}", ["Ada", "Grace", "Alan", "Edsger"][i % 4], i * 37 % 1013),
                    "email": format!("user{}.{}@customers{}.example", i, i * 53 % 997, i % 7),
                })
            })
            .collect(),
    )
}

/// A staged, analysed run waiting for review, its origin and airlock.
pub struct Scenario {
    /// Holds the files; keep it alive.
    pub fx: Fixture,
    /// The loopback origin (records what it receives).
    pub origin: Origin,
    /// The running airlock.
    pub airlock: Airlock,
    /// The run.
    pub run: String,
    /// `POST /hooks/status` (harmless).
    pub status: String,
    /// `POST /hooks/export` carrying the contacts (leaks the read).
    pub export: String,
    /// `POST /items` (hands out a placeholder id).
    pub item: String,
    /// `POST /items/{placeholder}/comments` (depends on the item).
    pub comment: String,
    /// The admin token.
    pub token: String,
}

impl Scenario {
    /// Starts the origin and airlock (with `args` added to `serve`) and stages the run.
    pub async fn start(args: &[&str]) -> Self {
        let fx = Fixture::new();
        let origin = Origin::start(
            Some(&fx.origin_ca),
            Arc::new(
                |req: &Received| match (req.method.as_str(), req.path.as_str()) {
                    ("GET", "/contacts") => Reply::json(200, &contacts()),
                    ("POST", "/items") => Reply::json(201, &json!({"id": 4242, "state": "open"})),
                    ("POST", path) if path.starts_with("/hooks/") => {
                        Reply::json(200, &json!({"ok": true, "received": path}))
                    }
                    _ => Reply::json(201, &json!({"ok": true})),
                },
            ),
        )
        .await
        .expect("origin");
        let port = origin.addr().port();
        let airlock = fx.start(&policy(port), args);
        let token = std::fs::read_to_string(fx.data_dir().join("admin.token"))
            .expect("admin token")
            .trim()
            .to_owned();
        let (run, env) = airlock.create_run().await;
        let base = format!("https://127.0.0.1:{port}");
        let read = curl(&env, &[&format!("{base}/contacts")]).await;
        assert_eq!(read.status, 200, "the read passes");
        let status = stage(
            &env,
            &format!("{base}/hooks/status"),
            r#"{"text":"nightly sync finished: 412 contacts"}"#,
        )
        .await;
        let export = stage(
            &env,
            &format!("{base}/hooks/export"),
            &String::from_utf8_lossy(&read.body),
        )
        .await;
        let item = stage(
            &env,
            &format!("{base}/items"),
            r#"{"title":"follow up on sync"}"#,
        )
        .await;
        let placeholder = item.1["id"].as_u64().expect("placeholder id");
        let comment = stage(
            &env,
            &format!("{base}/items/{placeholder}/comments"),
            &format!(r#"{{"text":"see item {placeholder}"}}"#),
        )
        .await;
        let scenario = Self {
            fx,
            origin,
            run,
            status: status.0,
            export: export.0,
            item: item.0,
            comment: comment.0,
            token,
            airlock,
        };
        scenario.wait_for_lineage().await;
        scenario
    }

    /// Waits until the export's content edge from the read is recorded.
    async fn wait_for_lineage(&self) {
        let path = format!("/v1/runs/{}/lineage", self.run);
        let export = self.export.clone();
        let found = poll_until(Duration::from_secs(30), || {
            let admin = self.airlock.admin.clone();
            let path = path.clone();
            let export = export.clone();
            async move {
                let graph = admin.get(&path).await.ok()?;
                let nodes = graph["nodes"].as_array()?;
                let analysed = nodes
                    .iter()
                    .filter(|n| n["kind"] == "effect")
                    .all(|n| n["analyzed"] == true);
                let leak = graph["edges"]
                    .as_array()?
                    .iter()
                    .any(|e| e["to"] == export.as_str() && e["kind"] == "content");
                (analysed && leak).then_some(())
            }
        })
        .await;
        assert!(found.is_some(), "the export's lineage edge is recorded");
    }

    /// The admin listener's base URL (`http://127.0.0.1:PORT`).
    pub fn admin_url(&self) -> &str {
        &self.airlock.admin_url
    }

    /// What the origin received, as `METHOD path` lines, in order.
    pub fn origin_requests(&self) -> Vec<String> {
        self.origin
            .received()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }
}

async fn stage(env: &BTreeMap<String, String>, url: &str, body: &str) -> (String, Value) {
    let out = curl(
        env,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
            url,
        ],
    )
    .await;
    assert!(
        out.status == 202 || out.status == 201,
        "{url} is staged: {} {}",
        out.status,
        String::from_utf8_lossy(&out.body)
    );
    let effect = out.header("airlock-effect").expect("airlock-effect header");
    (
        effect,
        serde_json::from_slice(&out.body).unwrap_or(Value::Null),
    )
}
