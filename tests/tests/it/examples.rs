//! Each policy in `examples/policies/` with the workflow it is written for, run by a real
//! client configured only by the run's environment against loopback origins: the
//! policy's rules as written, with the host under test renamed to the test's host
//! (`origin.test`, `--resolve`d to 127.0.0.1), the origin's port and loopback allowed.
//!
//! - `forge.toml`: git clone, fetch and push (fetch's `POST …/git-upload-pack` is a read);
//! - `github-token.toml`: create a PR, then comment on it by the number airlock answered,
//!   and list reads that show the staged PRs, issues and comments;
//! - `slack.toml`: post a message, then update it by the `ts` airlock answered;
//! - `registries.toml`: pip install from a simple index.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use airlock_tests::git_http::{self, git};
use airlock_tests::{run_client_async, Airlock, Fixture, Origin, Received, Reply, TEST_HOST};
use serde_json::{json, Value};

mod github;

/// `examples/policies/NAME.toml` for a test: every quoted `"HOST"` of `hosts` becomes
/// [`TEST_HOST`], each rule on it gets `port = PORT`, and loopback is allowed.
pub(crate) fn example(name: &str, hosts: &[&str], port: u16) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies")
        .join(format!("{name}.toml"));
    let mut text = std::fs::read_to_string(&path).expect("the example policy");
    for host in hosts {
        text = text.replace(&format!("\"{host}\""), &format!("\"{TEST_HOST}\""));
    }
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim() == format!("host = \"{TEST_HOST}\"") {
            out.push_str(&format!("port = {port}\n"));
        }
        if line.trim() == "version = 1" {
            out.push_str("allow_private = [\"127.0.0.0/8\"]\n");
        }
    }
    assert!(
        out.contains(&format!("port = {port}")),
        "{name}: no rule names {hosts:?}"
    );
    out
}

/// Starts airlock with `policy`, [`TEST_HOST`] resolved to loopback and `env` in its own
/// environment; creates a run.
pub(crate) async fn start(
    fx: &Fixture,
    policy: &str,
    env: &[(&str, &str)],
) -> (Airlock, String, BTreeMap<String, String>) {
    let resolve = format!("{TEST_HOST}=127.0.0.1");
    let airlock = fx.start_with_env(policy, &["--resolve", &resolve], env);
    let (run, env) = airlock.create_run().await;
    (airlock, run, env)
}

/// Runs `git ARGS` with the run's environment (and no system or global git config).
async fn git_client(env: &BTreeMap<String, String>, args: &[&str]) -> std::process::Output {
    let mut env = env.clone();
    env.insert("GIT_CONFIG_NOSYSTEM".into(), "1".into());
    env.insert("GIT_CONFIG_GLOBAL".into(), "/dev/null".into());
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    let mut all = vec!["-k", "5", "120", "git"];
    all.extend_from_slice(args);
    run_client_async("timeout", &all, &env).await
}

/// How many `POST …/git-upload-pack` (git's fetch requests) reached the origin.
fn upload_packs(origin: &Origin) -> usize {
    origin
        .received()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/git-upload-pack"))
        .count()
}

fn ref_of(bare: &Path, name: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "-q", name])
        .current_dir(bare)
        .output()
        .expect("git");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forge_example_lets_git_clone_fetch_and_push() {
    if !git_http::available() {
        assert!(
            !airlock_tests::in_ci(),
            "the forge workflow needs git in CI"
        );
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let root = fx.dir.path().join("git");
    let seed = fx.dir.path().join("seed");
    std::fs::create_dir_all(root.join("o")).expect("root");
    std::fs::create_dir_all(&seed).expect("seed");
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README"), "hello\n").expect("write");
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-q", "-m", "first"]);
    let bare = root.join("o/r.git");
    git(
        &root,
        &[
            "clone",
            "-q",
            "--bare",
            seed.to_str().expect("utf-8"),
            "o/r.git",
        ],
    );
    let origin = Origin::start(Some(&fx.origin_ca), git_http::backend(root.clone()))
        .await
        .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, env) = start(&fx, &example("forge", &["github.com"], port), &[]).await;
    let url = format!("https://{TEST_HOST}:{port}/o/r.git");
    let work = fx.dir.path().join("work");
    let work_path = work.to_str().expect("utf-8").to_owned();

    let out = git_client(&env, &["clone", "-q", &url, &work_path]).await;
    assert!(
        out.status.success(),
        "git clone exits 0: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        airlock.log()
    );
    assert_eq!(
        std::fs::read_to_string(work.join("README")).expect("cloned"),
        "hello\n"
    );

    let fetches_after_clone = upload_packs(&origin);

    // The remote moves on; fetch brings the new commit.
    std::fs::write(seed.join("NEWS"), "second\n").expect("write");
    git(&seed, &["add", "NEWS"]);
    git(&seed, &["commit", "-q", "-m", "second"]);
    git(
        &seed,
        &["push", "-q", bare.to_str().expect("utf-8"), "main"],
    );
    let moved = ref_of(&bare, "refs/heads/main").expect("main");
    let out = git_client(&env, &["-C", &work_path, "fetch", "-q", "origin"]).await;
    assert!(
        out.status.success(),
        "git fetch exits 0: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(git(&work, &["rev-parse", "origin/main"]), moved);

    let fetches_after_fetch = upload_packs(&origin);
    assert!(
        fetches_after_fetch > fetches_after_clone && fetches_after_clone > 0,
        "clone and fetch each POSTed upload-pack to the origin ({fetches_after_clone}, then {fetches_after_fetch})"
    );
    assert!(
        airlock.effects(&run).await.is_empty(),
        "nothing was staged by reading"
    );

    // The push is staged (git exits 0), the remote unchanged until commit.
    git(
        &work,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "checkout",
            "-q",
            "-b",
            "agent/x",
        ],
    );
    std::fs::write(work.join("FIX"), "fix\n").expect("write");
    git(&work, &["add", "FIX"]);
    git(
        &work,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "commit",
            "-q",
            "-m",
            "fix",
        ],
    );
    let head = git(&work, &["rev-parse", "HEAD"]);
    let out = git_client(&env, &["-C", &work_path, "push", "-q", "origin", "agent/x"]).await;
    assert!(
        out.status.success(),
        "git push exits 0: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ref_of(&bare, "refs/heads/agent/x"),
        None,
        "staged, not pushed"
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["rule"], "git-push");
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(ref_of(&bare, "refs/heads/agent/x"), Some(head));
}

/// A Slack origin: `chat.postMessage` assigns `ts` 1712345678.123456, `chat.update`
/// echoes the `ts` it was given.
fn slack_origin() -> airlock_tests::Handler {
    Arc::new(|req: &Received| {
        let input: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match req.path.as_str() {
            "/api/chat.postMessage" => Reply::json(
                200,
                &json!({"ok": true, "channel": input["channel"], "ts": "1712345678.123456",
                        "message": {"type": "message", "text": input["text"], "ts": "1712345678.123456"}}),
            ),
            "/api/chat.update" => Reply::json(
                200,
                &json!({"ok": true, "channel": input["channel"], "ts": input["ts"], "text": input["text"]}),
            ),
            _ => Reply::json(200, &json!({"ok": false, "error": "unknown_method"})),
        }
    })
}

const SLACK_CLIENT: &str = r#"
import json, sys, requests
base = sys.argv[1]
posted = requests.post(f"{base}/api/chat.postMessage", json={"channel": "C1", "text": "build is green"})
assert posted.status_code == 200, (posted.status_code, posted.text)
ts = posted.json()["ts"]
updated = requests.post(f"{base}/api/chat.update", json={"channel": "C1", "ts": ts, "text": "build is green (edited)"})
assert updated.status_code == 200, (updated.status_code, updated.text)
print(json.dumps({"posted": posted.json(), "updated": updated.json()}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_example_posts_then_updates_the_message() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), slack_origin())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let policy = example("slack", &["slack.com"], port);
    let (airlock, run, env) = start(
        &fx,
        &policy,
        &[("AIRLOCK_SLACK_BOT_TOKEN", "xoxb-test-token")],
    )
    .await;
    let base = format!("https://{TEST_HOST}:{port}");
    let out = run_client_async("python3", &["-c", SLACK_CLIENT, &base], &env).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(seen["posted"]["ok"], true, "{seen}");
    assert_eq!(seen["updated"]["ok"], true, "{seen}");
    assert!(origin.received().is_empty(), "both are staged");

    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 2, "{effects:?}");
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    let received = origin.received();
    let paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/api/chat.postMessage", "/api/chat.update"]);
    let update: Value = serde_json::from_slice(&received[1].body).expect("json");
    assert_eq!(
        update["ts"], "1712345678.123456",
        "released with Slack's real ts"
    );
    for request in &received {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer xoxb-test-token")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registries_example_lets_pip_install_from_an_index() {
    let fx = Fixture::new();
    let wheel = crate::run::clients::build_wheel(fx.dir.path());
    let sha: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(&wheel)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let origin = Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| match req.path.as_str() {
            "/simple/airlock-probe/" => {
                let mut reply = Reply::text(
                    200,
                    &format!("<!DOCTYPE html><html><body><a href=\"/packages/ab/cd/airlock_probe-0.1-py3-none-any.whl#sha256={sha}\">airlock_probe-0.1-py3-none-any.whl</a></body></html>"),
                );
                reply.headers = vec![("content-type".into(), "text/html".into())];
                reply
            }
            "/packages/ab/cd/airlock_probe-0.1-py3-none-any.whl" => Reply {
                status: 200,
                headers: vec![("content-type".into(), "application/octet-stream".into())],
                body: wheel.clone(),
                ..Reply::default()
            },
            _ => Reply::text(404, "not found"),
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let policy = example("registries", &["pypi.org", "files.pythonhosted.org"], port);
    let (airlock, run, mut env) = start(&fx, &policy, &[]).await;
    // The machine's own pip configuration (an index mirror, say) stays out of the test.
    env.insert("PIP_CONFIG_FILE".into(), "/dev/null".into());
    let target = fx.dir.path().join("site");
    let index = format!("https://{TEST_HOST}:{port}/simple/");
    let target_path = target.to_str().expect("utf-8").to_owned();
    let out = run_client_async(
        "python3",
        &[
            "-m",
            "pip",
            "install",
            "-q",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-deps",
            "--index-url",
            &index,
            "--target",
            &target_path,
            "airlock-probe",
        ],
        &env,
    )
    .await;
    assert!(
        out.status.success(),
        "pip install exits 0: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        airlock.log()
    );
    assert_eq!(
        std::fs::read_to_string(target.join("airlock_probe/__init__.py")).expect("installed"),
        "VALUE = 42\n"
    );
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert!(
        paths.contains(&"/packages/ab/cd/airlock_probe-0.1-py3-none-any.whl".to_owned()),
        "{paths:?}"
    );
    assert!(
        airlock.effects(&run).await.is_empty(),
        "downloads are reads"
    );
}

/// A GraphQL origin: answers every POST with `{"data": {"viewer": {"login": "octocat"}}}`.
fn graphql_origin() -> airlock_tests::Handler {
    Arc::new(|_req: &Received| Reply::json(200, &json!({"data": {"viewer": {"login": "octocat"}}})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forge_example_passes_graphql_queries_and_stages_mutations() {
    let fx = Fixture::new();
    let origin = Origin::start(Some(&fx.origin_ca), graphql_origin())
        .await
        .expect("origin");
    let port = origin.addr().port();
    let policy = example("forge", &["api.github.com"], port);
    let (airlock, run, env) = start(&fx, &policy, &[]).await;
    let url = format!("https://{TEST_HOST}:{port}/graphql");
    let query = r#"{"query":"{ viewer { login } }"}"#;
    let answer = airlock_tests::curl(
        &env,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            query,
            &url,
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.stderr);
    assert_eq!(
        answer.json()["data"]["viewer"]["login"],
        "octocat",
        "the origin's answer"
    );
    let received = origin.received();
    assert_eq!(received.len(), 1, "the query reached the origin");
    assert_eq!(received[0].body, query.as_bytes(), "its body unchanged");

    let mutation = r#"{"query":"mutation { addComment(input: {subjectId: \"I_1\", body: \"hi\"}) { clientMutationId } }"}"#;
    let staged = airlock_tests::curl(
        &env,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            mutation,
            &url,
        ],
    )
    .await;
    assert_eq!(staged.status, 200, "answered by the graphql adapter");
    assert_eq!(origin.received().len(), 1, "the mutation is held");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["rule"], "api-graphql");
}
