//! `git push` through airlock to git's own smart-HTTP server: staged and answered with a
//! report-status so git exits 0; released on commit; refused cleanly when the remote
//! moved meanwhile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_tests::git_http::{self, git};
use airlock_tests::{run_client_async, Airlock, Fixture, Origin};

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

# git reads first: GET info/refs?service=git-receive-pack
[[rule]]
id = "git-reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "git-push"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/remote.git/git-receive-pack"
action = "stage"
respond = "git"
"#
    )
}

/// A loopback HTTPS origin serving a bare `remote.git` with git's smart-HTTP backend, a
/// clone of it, and airlock with [`policy`] and a run.
pub(super) struct Remote {
    /// The origin (`git http-backend` over `root`).
    pub(super) origin: Origin,
    /// Where `remote.git` lives.
    pub(super) root: PathBuf,
    /// The clone the agent works in.
    pub(super) work: PathBuf,
    /// The commit `main` points at.
    pub(super) main: String,
    pub(super) airlock: Airlock,
    pub(super) run: String,
    pub(super) env: BTreeMap<String, String>,
}

/// Sets up a [`Remote`] in `fx`'s directory.
pub(super) async fn remote(fx: &Fixture) -> Remote {
    remote_with(fx, &policy).await
}

/// [`remote`] with the policy `policy` makes for the git origin's port.
async fn remote_with(fx: &Fixture, policy: &dyn Fn(u16) -> String) -> Remote {
    let root = fx.dir.path().join("git");
    std::fs::create_dir_all(&root).expect("root");
    let origin = Origin::start(Some(&fx.origin_ca), git_http::backend(root.clone()))
        .await
        .expect("origin");
    let port = origin.addr().port();
    let work = fx.dir.path().join("work");
    let main = repositories(
        &root,
        &work,
        &format!("https://127.0.0.1:{port}/remote.git"),
    );
    let (airlock, run, env) = fx.start_run(&policy(port), &[]).await;
    Remote {
        origin,
        root,
        work,
        main,
        airlock,
        run,
        env,
    }
}

/// A bare `remote.git` under `root` with one commit on `main`, and a clone of it in
/// `work` whose `origin` is the HTTPS URL `url`.
fn repositories(root: &Path, work: &Path, url: &str) -> String {
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).expect("seed dir");
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README"), "hello\n").expect("write");
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-q", "-m", "first"]);
    git(root, &["clone", "-q", "--bare", "seed", "remote.git"]);
    git(
        root,
        &[
            "clone",
            "-q",
            "remote.git",
            work.to_str().expect("utf-8 path"),
        ],
    );
    git(work, &["remote", "set-url", "origin", url]);
    git(&root.join("remote.git"), &["rev-parse", "refs/heads/main"])
}

fn ref_of(root: &Path, name: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "-q", name])
        .current_dir(root.join("remote.git"))
        .output()
        .expect("git");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub(super) async fn push(
    work: &Path,
    env: &BTreeMap<String, String>,
    refspec: &str,
) -> std::process::Output {
    let mut env = env.clone();
    env.insert("GIT_CONFIG_NOSYSTEM".into(), "1".into());
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    // A trace of git's HTTP exchange (headers only), shown if the push fails or hangs.
    let trace = work.with_extension("curl-trace");
    env.insert("GIT_TRACE_CURL".into(), trace.display().to_string());
    env.insert("GIT_TRACE_CURL_NO_DATA".into(), "1".into());
    let work = work.to_str().expect("utf-8 path").to_owned();
    // Bounded: a push that hangs fails the test with its trace instead of stalling CI.
    let mut out = run_client_async(
        "timeout",
        &[
            "-k", "5", "120", "git", "-C", &work, "push", "origin", refspec,
        ],
        &env,
    )
    .await;
    if !out.status.success() {
        let trace = std::fs::read_to_string(&trace).unwrap_or_default();
        let tail: String = trace
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        out.stderr.extend_from_slice(
            format!("\n--- git's HTTP trace (last 60 lines) ---\n{tail}\n").as_bytes(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_push_is_staged_git_exits_0_and_commit_releases_it() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let Remote {
        origin: _origin,
        root,
        work,
        main,
        airlock,
        run,
        env,
    } = remote(&fx).await;

    git(&work, &["checkout", "-q", "-b", "agent/cleanup"]);
    std::fs::write(work.join("CLEANUP"), "tidy\n").expect("write");
    git(&work, &["add", "CLEANUP"]);
    git(&work, &["commit", "-q", "-m", "clean up"]);
    let head = git(&work, &["rev-parse", "HEAD"]);

    let out = push(&work, &env, "agent/cleanup").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "git push exits 0: {stderr}");
    assert!(
        stderr.contains("agent/cleanup -> agent/cleanup"),
        "git prints the ref update: {stderr}"
    );
    assert_eq!(
        ref_of(&root, "refs/heads/agent/cleanup"),
        None,
        "the remote is unchanged"
    );

    let effects = airlock.effects(&run).await;
    assert_eq!(
        effects.len(),
        1,
        "only the receive-pack POST is staged: {effects:?}"
    );
    let summary = effects[0]["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with("push 1 ref update(s) (1 commit(s), 3 object(s))")
            && summary.contains(&format!("refs/heads/agent/cleanup 0000000..{}", &head[..7])),
        "{summary}"
    );
    assert_eq!(effects[0]["adapter"], "git");

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(
        ref_of(&root, "refs/heads/agent/cleanup"),
        Some(head),
        "the remote has the commit"
    );
    assert_eq!(ref_of(&root, "refs/heads/main"), Some(main.clone()));

    // The compensation deletes the branch the push created, once approved and committed.
    let compensation = airlock
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await
        .expect("compensate");
    assert_eq!(
        compensation["effects"][0]["summary"],
        "undo push (approximate): delete refs/heads/agent/cleanup"
    );
    let target = compensation["compensation_run"]
        .as_str()
        .expect("a run")
        .to_owned();
    let report = airlock.commit_pending(&target).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(
        ref_of(&root, "refs/heads/agent/cleanup"),
        None,
        "the branch is gone"
    );
    assert_eq!(ref_of(&root, "refs/heads/main"), Some(main));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_a_remote_that_moved_fails_with_gits_reason() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let Remote {
        origin: _origin,
        root,
        work,
        main: _,
        airlock,
        run,
        env,
    } = remote(&fx).await;

    std::fs::write(work.join("AGENT"), "agent\n").expect("write");
    git(&work, &["add", "AGENT"]);
    git(&work, &["commit", "-q", "-m", "agent change"]);
    let out = push(&work, &env, "main").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Someone else pushes to main directly while the effect waits for review.
    let other = fx.dir.path().join("other");
    git(
        &root,
        &["clone", "-q", "remote.git", other.to_str().expect("utf-8")],
    );
    std::fs::write(other.join("OTHER"), "other\n").expect("write");
    git(&other, &["add", "OTHER"]);
    git(&other, &["commit", "-q", "-m", "other change"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let moved = ref_of(&root, "refs/heads/main");

    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "partially_committed", "{report}");
    let effect = &report["effects"][0];
    assert_eq!(effect["state"], "failed", "{report}");
    assert_eq!(
        effect["status"], 200,
        "git answers 200 and refuses inside: {report}"
    );
    let reason = effect["reason"].as_str().expect("reason");
    assert!(
        reason.contains("ng refs/heads/main"),
        "git's own reason: {reason}"
    );
    assert_eq!(
        ref_of(&root, "refs/heads/main"),
        moved,
        "the other push stands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_push_is_compensated_by_putting_the_ref_back() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let Remote {
        origin: _origin,
        root,
        work,
        main,
        airlock,
        run,
        env,
    } = remote(&fx).await;
    std::fs::write(work.join("AGENT"), "agent\n").expect("write");
    git(&work, &["add", "AGENT"]);
    git(&work, &["commit", "-q", "-m", "agent change"]);
    let out = push(&work, &env, "main").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_ne!(ref_of(&root, "refs/heads/main"), Some(main.clone()));

    let compensation = airlock
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await
        .expect("compensate");
    let target = compensation["compensation_run"]
        .as_str()
        .expect("a run")
        .to_owned();
    let report = airlock.commit_pending(&target).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(ref_of(&root, "refs/heads/main"), Some(main), "main is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_over_gits_post_buffer_is_staged_and_released() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let Remote {
        origin: _origin,
        root,
        work,
        main: _,
        airlock,
        run,
        env,
    } = remote(&fx).await;
    // 3 MiB that do not compress: git sends the pack chunked, after a probe request.
    let mut noise = Vec::with_capacity(3 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(work.join("blob.bin"), &noise).expect("write");
    git(&work, &["checkout", "-q", "-b", "agent/big"]);
    git(&work, &["add", "blob.bin"]);
    git(&work, &["commit", "-q", "-m", "big"]);
    // Over HTTP/1.1 (chunked): Debian's libcurl 7.88 can stall its own HTTP/2 upload of a
    // large body whatever the server does (curl/curl#10433, #11330; fixed in curl 8.2), which
    // made this test hang now and then under load. docs/protocols.md, Known gaps.
    git(&work, &["config", "http.version", "HTTP/1.1"]);
    let head = git(&work, &["rev-parse", "HEAD"]);
    let out = push(&work, &env, "agent/big").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "one effect, no probe: {effects:?}");
    let report = airlock.commit_pending(&run).await;
    assert_eq!(report["state"], "committed", "{report}");
    assert_eq!(ref_of(&root, "refs/heads/agent/big"), Some(head));
}

/// A vault origin's secret committed to a file and pushed: the pack's blob carries it, so
/// the push is held by a `review` flow (the agent is told in `airlock-flow`, bulk approval
/// refuses the commit) and the remote is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_push_of_a_commit_whose_file_carries_a_secret_is_held_by_a_flow() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    const SECRET: &str = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY\nDATABASE_URL=postgres://billing:Tr0ub4dor-and-3-more@db.internal:5432/billing\n";
    let fx = Fixture::new();
    let vault = Origin::start(
        Some(&fx.origin_ca),
        std::sync::Arc::new(|_: &airlock_tests::Received| airlock_tests::Reply::text(200, SECRET)),
    )
    .await
    .expect("vault");
    let vault_port = vault.addr().port();
    let flow_policy = move |port: u16| {
        format!(
            r#"{}
[[rule]]
id = "vault-read"
host = "127.0.0.1"
port = {vault_port}
method = "read"
action = "pass"
labels = ["secret"]

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
min_overlap_bytes = 24
action = "review"
reason = "secrets stay inside"
"#,
            policy(port)
        )
    };
    let Remote {
        origin: _origin,
        root,
        work,
        airlock,
        run,
        env,
        ..
    } = remote_with(&fx, &flow_policy).await;

    let read = airlock_tests::curl(&env, &[&format!("https://127.0.0.1:{vault_port}/env")]).await;
    assert_eq!(read.status, 200);
    git(&work, &["checkout", "-q", "-b", "agent/config"]);
    std::fs::write(work.join("deploy.env"), &read.body).expect("write");
    git(&work, &["add", "deploy.env"]);
    git(&work, &["commit", "-q", "-m", "add deploy config"]);
    let out = push(&work, &env, "agent/config").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    let id = effects[0]["id"].as_str().expect("id").to_owned();
    let shown = airlock_tests::poll_until(std::time::Duration::from_secs(10), || async {
        let shown = airlock.admin.get(&format!("/v1/effects/{id}")).await.ok()?;
        shown["flows"]["analysed"]
            .as_bool()
            .filter(|a| *a)
            .map(|_| shown)
    })
    .await
    .expect("analysed");
    assert_eq!(
        shown["flows"]["violations"][0]["flow"], "no-secrets-out",
        "{shown:#}"
    );

    let refused = airlock
        .post(
            &format!("/v1/runs/{run}/commit"),
            Some(airlock.approve_pending_body(&run).await),
        )
        .await
        .expect_err("held");
    assert!(
        refused.to_string().contains("flow_review_required"),
        "{refused}"
    );
    assert_eq!(
        ref_of(&root, "refs/heads/agent/config"),
        None,
        "nothing was pushed"
    );
}
