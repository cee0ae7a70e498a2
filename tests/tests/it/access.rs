//! Issue 36: roles and accountability. Every admin route answers each role as the route
//! table says (the matrix is built from the table, so a route without a declaration fails
//! it); a reviewer approves and commits but cannot reload the policy, prune, read run tokens
//! or create runs; a viewer only reads; a runner creates and drives a run but never
//! decides or commits; and the audit log names each actor in order and survives a prune of
//! the run it describes, on sled and on PostgreSQL.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use airlock_control::access::routes::{Access, ROUTES};
use airlock_control::access::Role;
use airlock_ledger::conformance::postgres::TestServer;
use airlock_tests::review::Scenario;
use airlock_tests::{airlock_bin, curl, ClientError, CurlResult};
use serde_json::{json, Value};

use crate::ui::{csrf, get, post_form, sign_in, text};

/// The named tokens every test here starts the server with: `(role flag, name, token)`.
const TOKENS: &[(&str, &str, &str)] = &[
    ("--admin-token", "ops", "ops-secret-token-0123456789"),
    ("--runner-token", "rita", "rita-secret-token-0123456789"),
    ("--reviewer-token", "alice", "alice-secret-token-0123456789"),
    ("--viewer-token", "vera", "vera-secret-token-0123456789"),
];

fn token_of(name: &str) -> &'static str {
    TOKENS
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(_, _, t)| *t)
        .unwrap_or_else(|| panic!("no token {name}"))
}

/// `serve` arguments naming each token of [`TOKENS`], written into `dir`, and `dir/ws` as
/// the one directory runners may attach workspaces under.
fn token_args(dir: &Path) -> Vec<String> {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).expect("the runners' workspace root");
    let mut args = vec![
        "--runner-workspace-root".to_owned(),
        root.display().to_string(),
    ];
    for (flag, name, token) in TOKENS {
        let file = dir.join(format!("{name}.token"));
        std::fs::write(&file, format!("{token}\n")).expect("write a token file");
        args.push((*flag).to_owned());
        args.push(format!("{name}={}", file.display()));
    }
    args
}

async fn scenario(extra: &[&str]) -> (tempfile::TempDir, Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = token_args(dir.path());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (dir, Scenario::start(&args).await)
}

/// `METHOD admin+path` with `token` as the bearer (none when `None`) and, for a `POST`, a
/// JSON body every handler refuses (unknown field; not TOML), so that a call the role
/// check lets through changes nothing.
async fn call(admin: &str, method: &str, path: &str, token: Option<&str>) -> CurlResult {
    let url = format!("{admin}{path}");
    let mut args = vec!["-X".to_owned(), method.to_owned(), url];
    if let Some(token) = token {
        args.extend(["-H".to_owned(), format!("Authorization: Bearer {token}")]);
    }
    if method == "POST" {
        args.extend([
            "-H".to_owned(),
            "content-type: application/json".to_owned(),
            "--data".to_owned(),
            r#"{"__matrix": true}"#.to_owned(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&BTreeMap::new(), &args).await
}

/// A route template with a well-formed id of a run or effect that does not exist.
fn concrete(path: &str) -> String {
    path.replace("/runs/{id}", "/runs/run_01JZZZZZZZZZZZZZZZZZZZZZZZ")
        .replace("/effects/{id}", "/effects/eff_01JZZZZZZZZZZZZZZZZZZZZZZZ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_answers_each_role_as_the_route_table_says() {
    let (_dir, s) = scenario(&[]).await;
    let admin = s.admin_url().to_owned();
    let run_token = s.airlock.run_token(&s.run).await;
    let holders: Vec<(&str, Option<Role>, Option<&str>)> = vec![
        ("admin", Some(Role::Admin), Some(s.token.as_str())),
        ("ops", Some(Role::Admin), Some(token_of("ops"))),
        ("rita", Some(Role::Runner), Some(token_of("rita"))),
        ("alice", Some(Role::Reviewer), Some(token_of("alice"))),
        ("vera", Some(Role::Viewer), Some(token_of("vera"))),
        ("run token", None, Some(run_token.as_str())),
        ("no token", None, None),
    ];
    // A second opinion, written out by hand, on the routes that matter most: whatever the
    // table says, only these roles may call them.
    let sensitive: &[(&str, &str, &[Role])] = &[
        ("POST", "/v1/policy", &[Role::Admin]),
        ("POST", "/v1/runs/{id}/prune", &[Role::Admin]),
        ("POST", "/v1/runs/prune", &[Role::Admin]),
        ("GET", "/v1/runs/{id}/env", &[Role::Admin, Role::Runner]),
        ("POST", "/v1/runs", &[Role::Admin, Role::Runner]),
        (
            "POST",
            "/v1/runs/{id}/commit",
            &[Role::Admin, Role::Reviewer],
        ),
        (
            "POST",
            "/v1/effects/{id}/approve",
            &[Role::Admin, Role::Reviewer],
        ),
        (
            "POST",
            "/v1/effects/{id}/reject",
            &[Role::Admin, Role::Reviewer],
        ),
        (
            "POST",
            "/v1/runs/{id}/workspace/steps",
            &[Role::Admin, Role::Runner],
        ),
    ];
    for (method, path, roles) in sensitive {
        let route = ROUTES
            .iter()
            .find(|r| r.method == *method && r.path == *path)
            .unwrap_or_else(|| panic!("{method} {path} is declared"));
        let action = route.access.action().expect("a token route");
        assert_eq!(Role::allowed(action), *roles, "{method} {path}");
    }
    let mut checked = 0;
    for route in ROUTES {
        let Access::Token(action) = route.access else {
            continue;
        };
        let path = concrete(route.path);
        for (who, role, token) in &holders {
            let out = call(&admin, route.method, &path, *token).await;
            let what = format!(
                "{who} {} {path}: {} {}",
                route.method,
                out.status,
                text(&out)
            );
            match role {
                None => assert_eq!(out.status, 401, "{what}"),
                Some(role) if role.may(action) => {
                    assert!(![401, 403].contains(&out.status), "allowed: {what}");
                }
                Some(role) => {
                    assert_eq!(out.status, 403, "forbidden: {what}");
                    let body = out.json();
                    assert_eq!(body["reason_code"], "forbidden_for_role", "{what}");
                    assert_eq!(body["details"]["role"], role.as_str(), "{what}");
                    let needed: Vec<&str> =
                        Role::allowed(action).iter().map(|r| r.as_str()).collect();
                    assert_eq!(body["details"]["needed"], json!(needed), "{what}");
                }
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 7 * 30,
        "every declared route was called: {checked}"
    );
    // The OpenAPI document (every endpoint the API has) and the table name the same
    // operations: an endpoint cannot be added without a role declaration.
    let document = s.airlock.admin.get("/v1/openapi.json").await.expect("doc");
    let mut documented = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in ["get", "post"] {
            if let Some(operation) = item.get(method) {
                let public = operation["security"] == json!([{}]);
                if !public {
                    documented.insert((method.to_uppercase(), path.clone()));
                    assert!(
                        operation["x-airlock-roles"].is_array(),
                        "{method} {path} has x-airlock-roles"
                    );
                }
            }
        }
    }
    let declared: BTreeSet<(String, String)> = ROUTES
        .iter()
        .filter(|r| matches!(r.access, Access::Token(_)))
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(
        documented, declared,
        "the OpenAPI document and the route table"
    );
    // The review UI's forms, for a session of each role.
    for (who, role, token) in holders.iter().filter(|h| h.1.is_some()) {
        let role = role.expect("a role");
        let cookie = sign_in(&admin, token.expect("a token")).await;
        let page = text(&get(&format!("{admin}/"), Some(&cookie)).await);
        assert!(
            page.contains(&format!("({})", role.as_str())),
            "{who}: {page}"
        );
        let token = csrf(&page);
        for route in ROUTES {
            let Access::Session(action) = route.access else {
                continue;
            };
            if route.method != "POST" || route.name == "sign_out" {
                continue;
            }
            let path = concrete(route.path);
            let out = post_form(
                &format!("{admin}{path}"),
                Some(&cookie),
                &[("csrf", &token)],
            )
            .await;
            let what = format!("{who} UI POST {path}: {} {}", out.status, text(&out));
            if role.may(action) {
                assert_ne!(out.status, 403, "allowed: {what}");
            } else {
                assert_eq!(out.status, 403, "forbidden: {what}");
                assert!(text(&out).contains("forbidden_for_role"), "{what}");
            }
        }
    }
}

/// The entries of the audit log about `run`, oldest first, read with `token`.
async fn audit_of(admin: &str, run: &str, token: &str) -> Vec<Value> {
    let client = airlock_tests::AdminClient::new(admin, token);
    let page = client
        .get(&format!("/v1/audit?run={run}&order=oldest&limit=1000"))
        .await
        .expect("the audit log");
    page["entries"].as_array().cloned().unwrap_or_default()
}

fn forbidden(result: Result<Value, ClientError>) -> Value {
    match result {
        Err(ClientError::Api {
            status: 403,
            code,
            details,
            ..
        }) if code == "forbidden_for_role" => details.unwrap_or_default(),
        other => panic!("expected 403 forbidden_for_role, got {other:?}"),
    }
}

/// Reviewer alice decides and commits; viewer vera and runner rita are refused; admin
/// `ops` reloads the policy and prunes the run after exporting it. Returns the run's audit
/// entries, read after the prune, and checks them.
async fn reviewed_committed_pruned(s: &Scenario) -> Vec<Value> {
    let admin = s.admin_url();
    let as_ = |name: &str| airlock_tests::AdminClient::new(admin, token_of(name));
    let (alice, vera, rita, ops) = (as_("alice"), as_("vera"), as_("rita"), as_("ops"));
    // A viewer lists and reads, but does not approve.
    let listed = vera.get("/v1/runs").await.expect("a viewer lists runs");
    assert!(listed["runs"].as_array().is_some_and(|r| !r.is_empty()));
    vera.get(&format!("/v1/runs/{}/lineage", s.run))
        .await
        .expect("a viewer reads lineage");
    let details = forbidden(
        vera.post(&format!("/v1/effects/{}/approve", s.status), None)
            .await,
    );
    assert_eq!(details["role"], "viewer");
    // A reviewer cannot reload the policy, prune, read run tokens or create runs…
    let policy = alice
        .get("/v1/policy")
        .await
        .expect("a reviewer reads the policy");
    let policy_text = policy["text"].as_str().expect("policy text").to_owned();
    forbidden(
        alice
            .post_text("/v1/policy", "text/plain", policy_text.clone())
            .await,
    );
    forbidden(alice.post(&format!("/v1/runs/{}/prune", s.run), None).await);
    forbidden(alice.get(&format!("/v1/runs/{}/env", s.run)).await);
    forbidden(alice.post("/v1/runs", None).await);
    // …nor can a runner decide or commit.
    forbidden(
        rita.post(&format!("/v1/effects/{}/approve", s.status), None)
            .await,
    );
    forbidden(rita.post(&format!("/v1/runs/{}/commit", s.run), None).await);
    // The reviewer decides every effect and commits.
    for effect in [&s.status, &s.item, &s.comment] {
        alice
            .post(&format!("/v1/effects/{effect}/approve"), None)
            .await
            .expect("a reviewer approves");
    }
    alice
        .post(&format!("/v1/effects/{}/reject", s.export), None)
        .await
        .expect("a reviewer rejects");
    alice
        .post(&format!("/v1/runs/{}/commit", s.run), None)
        .await
        .expect("a reviewer commits");
    let released = s.origin_requests();
    assert_eq!(
        released
            .iter()
            .filter(|r| r.starts_with("POST /hooks/status"))
            .count(),
        1,
        "{released:?}"
    );
    assert!(!released.iter().any(|r| r.starts_with("POST /hooks/export")));
    // The admin reloads the policy (same text: a new generation) and prunes the run.
    ops.post_text("/v1/policy", "text/plain", policy_text.clone())
        .await
        .expect("an admin reloads the policy");
    let pruned = ops
        .post(
            &format!("/v1/runs/{}/prune", s.run),
            Some(json!({"exported_to": "/var/backups/airlock/run.ndjson"})),
        )
        .await
        .expect("an admin prunes");
    assert_eq!(pruned["removed"]["effects"], 4);
    assert!(matches!(
        ops.get(&format!("/v1/runs/{}", s.run)).await,
        Err(ClientError::Api { status: 404, .. })
    ));
    let entries = audit_of(admin, &s.run, token_of("vera")).await;
    let seen: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            (
                e["who"].as_str().unwrap_or("").to_owned(),
                e["action"].as_str().unwrap_or("").to_owned(),
                e["outcome"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want: Vec<(&str, &str, &str)> = vec![
        ("admin", "create_run", "done"),
        ("vera", "approve", "forbidden"),
        ("alice", "prune", "forbidden"),
        ("alice", "read_env", "forbidden"),
        ("rita", "approve", "forbidden"),
        ("rita", "commit", "forbidden"),
        ("alice", "approve", "done"),
        ("alice", "approve", "done"),
        ("alice", "approve", "done"),
        ("alice", "reject", "done"),
        ("alice", "commit", "done"),
        ("ops", "prune", "done"),
    ];
    let mut rest = seen.iter();
    for step in &want {
        assert!(
            rest.any(
                |(who, action, outcome)| (who.as_str(), action.as_str(), outcome.as_str()) == *step
            ),
            "{step:?} in order in {seen:?}"
        );
    }
    let prune = entries.last().expect("the prune is the last entry");
    assert_eq!(prune["role"], "admin");
    assert_eq!(prune["detail"]["removed"]["effects"], 4);
    assert_eq!(
        prune["detail"]["exported_to"],
        "/var/backups/airlock/run.ndjson"
    );
    let approvals: Vec<&Value> = entries
        .iter()
        .filter(|e| e["action"] == "approve" && e["outcome"] == "done")
        .collect();
    assert!(approvals
        .iter()
        .all(|e| e["effect"].is_string() && e["role"] == "reviewer"));
    // The reload is in the log with both revisions, under the admin's name.
    let all = vera
        .get("/v1/audit?limit=1000")
        .await
        .expect("the whole log");
    let reload = all["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["action"] == "policy_reload" && e["outcome"] == "done")
        .cloned()
        .expect("the reload is audited");
    assert_eq!(reload["who"], "ops");
    assert!(reload["detail"]["revision_before"].is_string());
    assert!(reload["detail"]["revision_after"].is_string());
    assert!(
        all["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|e| e["action"] == "policy_reload"
                && e["who"] == "alice"
                && e["outcome"] == "forbidden"),
        "the reviewer's refused reload is audited"
    );
    // A runner may not read the audit log.
    forbidden(rita.get("/v1/audit").await);
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_names_each_actor_and_survives_a_prune_and_a_restart() {
    let (_dir, mut s) = scenario(&[]).await;
    let before = reviewed_committed_pruned(&s).await;
    s.airlock.restart().expect("airlock restarts");
    let after = audit_of(s.admin_url(), &s.run, token_of("alice")).await;
    assert_eq!(before, after, "the log is the same after a restart");
    // The CLI prints it, and names the role a refused command needs.
    let admin = s.admin_url().to_owned();
    let cli = |token: &str, args: &[&str]| {
        std::process::Command::new(airlock_bin())
            .args(args)
            .args(["--admin", &admin, "--token", token])
            .output()
            .expect("run airlock")
    };
    let out = cli(
        token_of("vera"),
        &["audit", "--run", &s.run, "--limit", "5"],
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("ops") && printed.contains("prune"),
        "{printed}"
    );
    let out = cli(token_of("vera"), &["approve", &s.status]);
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        error.contains("needs the admin or reviewer role") && error.contains("forbidden_for_role"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_survives_a_prune_on_postgresql() {
    let Some(pg) = TestServer::start() else {
        return;
    };
    let url = pg.database();
    let (_dir, s) = scenario(&["--store", &url]).await;
    reviewed_committed_pruned(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_creates_and_drives_a_run_but_cannot_commit_it() {
    let (dir, s) = scenario(&[]).await;
    let rita = airlock_tests::AdminClient::new(s.admin_url(), token_of("rita"));
    let created = rita
        .post("/v1/runs", None)
        .await
        .expect("a runner creates a run");
    let run = created["id"].as_str().expect("run id").to_owned();
    assert!(created["token"].is_string());
    rita.get(&format!("/v1/runs/{run}/env"))
        .await
        .expect("a runner reads its env");
    let workspace = dir.path().join("ws").join("repo");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "before\n").expect("write");
    let path = workspace.display().to_string();
    // Outside the runners' root, or with a driver that runs the repository's commands
    // (git's filters) or mounts, a runner attaches nothing.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    match rita
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": elsewhere.display().to_string()})),
        )
        .await
    {
        Err(ClientError::Api {
            status: 403, code, ..
        }) => {
            assert_eq!(code, "workspace_outside_roots")
        }
        other => panic!("a workspace outside the roots is refused: {other:?}"),
    }
    let refused = forbidden(
        rita.post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": path, "driver": "git"})),
        )
        .await,
    );
    assert_eq!(refused["action"], "workspace_command");
    let refused = forbidden(
        rita.post(
            &format!("/v1/runs/{run}/workspace"),
            Some(
                json!({"path": path, "driver": "cmd", "snapshot_cmd": "id", "rollback_cmd": "id"}),
            ),
        )
        .await,
    );
    assert_eq!(refused["action"], "workspace_command");
    rita.post(
        &format!("/v1/runs/{run}/workspace"),
        Some(json!({"path": path})),
    )
    .await
    .expect("a runner attaches a workspace");
    rita.post(
        &format!("/v1/runs/{run}/savepoints"),
        Some(json!({"name": "sp1"})),
    )
    .await
    .expect("a runner takes a savepoint");
    forbidden(
        rita.post(
            &format!("/v1/runs/{run}/workspace/decide"),
            Some(json!({"outcome": "keep", "commit": true, "approve_all": true})),
        )
        .await,
    );
    forbidden(rita.post(&format!("/v1/runs/{run}/commit"), None).await);
    let decided = rita
        .post(
            &format!("/v1/runs/{run}/workspace/decide"),
            Some(json!({"outcome": "keep", "commit": false})),
        )
        .await
        .expect("a runner keeps without committing");
    assert!(decided["workspace"].is_object(), "{decided}");
    // The other run, a reviewer's to decide: the runner's own credentials cannot.
    forbidden(
        rita.post(&format!("/v1/effects/{}/reject", s.export), None)
            .await,
    );
    rita.post(&format!("/v1/runs/{}/abort", s.run), None)
        .await
        .expect("a runner aborts a run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_actions_in_the_review_ui_and_is_refused_with_a_readable_page() {
    let (_dir, s) = scenario(&[]).await;
    let admin = s.admin_url().to_owned();
    let cookie = sign_in(&admin, token_of("vera")).await;
    let page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    assert!(
        page.contains("signed in as <strong>vera</strong> (viewer)"),
        "{page}"
    );
    assert!(
        !page.contains("/approve\""),
        "no approve form for a viewer: {page}"
    );
    assert!(!page.contains("Commit…"), "no commit for a viewer: {page}");
    let refused = post_form(
        &format!("{admin}/effects/{}/approve", s.status),
        Some(&cookie),
        &[("csrf", &csrf(&page))],
    )
    .await;
    assert_eq!(refused.status, 403);
    let body = text(&refused);
    assert!(body.contains("vera has the viewer role"), "{body}");
    assert!(body.contains("forbidden_for_role"), "{body}");
    // A reviewer's page has them.
    let cookie = sign_in(&admin, token_of("alice")).await;
    let page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    assert!(page.contains("/approve\""), "{page}");
    assert!(page.contains("Commit…"), "{page}");
}

#[test]
fn a_missing_or_empty_token_file_fails_the_start_naming_the_flag_and_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.token");
    std::fs::write(&empty, "\n").expect("write");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"deny\"\n").expect("write");
    for (flag, file) in [
        ("--viewer-token", dir.path().join("absent.token")),
        ("--runner-token", empty),
    ] {
        let out = std::process::Command::new(airlock_bin())
            .args(["serve", "--data"])
            .arg(dir.path().join("data"))
            .arg("--policy")
            .arg(&policy)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", flag])
            .arg(format!("bob={}", file.display()))
            .output()
            .expect("run airlock serve");
        let error = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {error}");
        assert!(
            error.contains(&format!("{flag} bob={}", file.display())),
            "{flag}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airlock_run_with_a_runner_token_stages_and_a_reviewer_releases() {
    let (dir, s) = scenario(&[]).await;
    let workspace = dir.path().join("ws").join("agent");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let port = s.origin.addr().port();
    let script = format!(
        "echo done > result.txt && curl -sS -o /dev/null -X POST --data note \
         https://127.0.0.1:{port}/hooks/runner"
    );
    let run = |extra: &[&str]| {
        std::process::Command::new(airlock_bin())
            .args(["run", "--admin", s.admin_url(), "--token", token_of("rita")])
            .arg("--workspace")
            .arg(&workspace)
            .args(["--network", "env"])
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .env_remove("AIRLOCK_DATA")
            .env_remove("AIRLOCK_TOKEN")
            .output()
            .expect("airlock run")
    };
    let out = run(&[]);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    // The runner's run waits for a reviewer: the effect is staged, nothing was sent.
    let runs = s.airlock.admin.get("/v1/runs").await.expect("runs");
    let run_id = runs["runs"][0]["id"].as_str().expect("id").to_owned();
    assert_ne!(run_id, s.run);
    let effects = s.airlock.effects(&run_id).await;
    assert_eq!(effects.len(), 1, "{printed}");
    assert_eq!(effects[0]["state"], "staged");
    assert!(!s
        .origin_requests()
        .iter()
        .any(|r| r.contains("/hooks/runner")));
    // The runner's commit is refused with the role it needs, and its effects are held.
    let out = run(&["--on-pass", "commit"]);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("needs the admin or reviewer role")
            && printed.contains("held for a reviewer instead"),
        "{printed}"
    );
    let runs = s.airlock.admin.get("/v1/runs").await.expect("runs");
    let second = runs["runs"][0]["id"].as_str().expect("id").to_owned();
    assert_ne!(second, run_id);
    assert_eq!(s.airlock.effects(&second).await[0]["state"], "staged");
    assert!(!s
        .origin_requests()
        .iter()
        .any(|r| r.contains("/hooks/runner")));
    // The reviewer releases the first run's effect, once.
    let alice = airlock_tests::AdminClient::new(s.admin_url(), token_of("alice"));
    let effect = effects[0]["id"].as_str().expect("effect id");
    alice
        .post(&format!("/v1/effects/{effect}/approve"), None)
        .await
        .expect("approve");
    alice
        .post(&format!("/v1/runs/{run_id}/commit"), None)
        .await
        .expect("commit");
    let sent = s
        .origin_requests()
        .iter()
        .filter(|r| r.contains("/hooks/runner"))
        .count();
    assert_eq!(sent, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_id_is_audited_under_its_run_and_a_wrong_method_gets_405() {
    let (_dir, s) = scenario(&[]).await;
    let admin = s.admin_url().to_owned();
    // `%30` is `0`: the handler decodes it, and so does the audit entry.
    let escaped = s.status.replacen("eff_0", "eff_%30", 1);
    assert_ne!(escaped, s.status);
    let approved = airlock_tests::AdminClient::new(&admin, token_of("alice"))
        .post(&format!("/v1/effects/{escaped}/approve"), None)
        .await
        .expect("approve through the escaped id");
    assert_eq!(approved["state"], "approved");
    let entries = audit_of(&admin, &s.run, token_of("vera")).await;
    assert!(
        entries.iter().any(|e| e["action"] == "approve"
            && e["effect"] == s.status.as_str()
            && e["outcome"] == "done"),
        "the escaped call is under its run and effect: {entries:?}"
    );
    // A method the route does not answer is 405 with Allow, not a role refusal.
    let out = call(&admin, "PUT", "/v1/policy", Some(token_of("vera"))).await;
    assert_eq!(out.status, 405, "{}", text(&out));
    assert_eq!(out.json()["reason_code"], "method_not_allowed");
    assert!(out
        .header("allow")
        .is_some_and(|a| a.contains("GET") && a.contains("POST")));
    // A handler's own role check is audited as forbidden too.
    let for_ops = airlock_tests::AdminClient::new(&admin, token_of("vera"))
        .post("/v1/ui/sign-in-links", Some(json!({"for": "ops"})))
        .await;
    forbidden(for_ops);
    let log = airlock_tests::AdminClient::new(&admin, token_of("vera"))
        .get("/v1/audit?limit=5")
        .await
        .expect("audit");
    let last = &log["entries"][0];
    assert_eq!(
        (
            last["who"].as_str(),
            last["action"].as_str(),
            last["outcome"].as_str()
        ),
        (Some("vera"), Some("sign_in_link"), Some("forbidden")),
        "{log}"
    );
}
