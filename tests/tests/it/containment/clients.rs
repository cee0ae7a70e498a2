//! Case C22's client matrix: git over smart HTTP (clone and push), Python requests and
//! pip work unchanged inside the fence — through the proxy variable, which the relay
//! re-serves on the fence's loopback (`CONNECT` keeps working), and with the proxy
//! variables removed, captured by the fence.

use std::path::Path;

use airlock_tests::Fixture;

use super::{fence_or_skip, requests, Fenced, HOST, NO_PROXY_VARIABLES};

/// git's fetch passes, its push is staged and answered by the `git` adapter; other reads
/// pass and writes stage — on `HOST:port`.
fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "git-fetch"
host = "{HOST}"
port = {port}
method = ["POST"]
path = "/repo.git/git-upload-pack"
action = "pass"

[[rule]]
id = "git-push"
host = "{HOST}"
port = {port}
method = ["POST"]
path = "/repo.git/git-receive-pack"
action = "stage"
respond = "git"

[[rule]]
id = "reads"
host = "{HOST}"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "{HOST}"
port = {port}
method = "write"
action = "stage"
"#
    )
}

/// Where `refs/heads/main` of the origin's bare repository points.
fn origin_main(fx_dir: &Path) -> String {
    crate::run::git(
        &fx_dir.join("git-root/repo.git"),
        &["rev-parse", "refs/heads/main"],
    )
    .trim()
    .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_git_requests_and_pip_work_unchanged_inside_the_fence() {
    let test = "case_c22_git_requests_and_pip_work_unchanged_inside_the_fence";
    if !fence_or_skip(test) {
        return;
    }
    if !airlock_tests::git_http::available() {
        assert!(!airlock_tests::in_ci(), "{test} needs git in CI");
        eprintln!("SKIPPED {test}: git is not installed");
        return;
    }
    let fx = Fixture::new();
    let origin = crate::run::clients::matrix_origin(&fx).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let fx_dir = fenced.fx.dir.path().to_owned();
    let before = origin_main(&fx_dir);
    let base = format!("https://{HOST}:{port}");
    let pip = |target: &str| {
        format!(
            "python3 -m pip install -q --no-cache-dir --index-url {base}/simple/ --target {target} airlock-probe; \
             python3 -c \"import sys; sys.path.insert(0, '{target}'); import airlock_probe; assert airlock_probe.VALUE == 42\""
        )
    };
    let script = format!(
        "set -e; \
         git clone -q {base}/repo.git clone; \
         cd clone; echo 'from the fence' >> hello.txt; \
         git -c user.name=t -c user.email=t@localhost commit -qam 'fenced change'; \
         git rev-parse HEAD > ../pushed.txt; git push -q origin HEAD:main; cd ..; \
         python3 -c \"import requests; r = requests.get('{base}/hello'); r.raise_for_status(); assert r.json() == {{'hello': 'world'}}\"; \
         python3 -c \"import requests; r = requests.post('{base}/hook', json={{'via': 'proxy'}}); assert r.status_code == 202, r.status_code\"; \
         {pip_proxied}; \
         curl -sS --fail -o /dev/null -X POST --data connect {base}/hook; \
         {NO_PROXY_VARIABLES} git ls-remote {base}/repo.git > refs.txt; \
         {NO_PROXY_VARIABLES} python3 -c \"import requests; r = requests.post('{base}/hook', json={{'via': 'captured'}}); assert r.status_code == 202, r.status_code\"; \
         {NO_PROXY_VARIABLES} {pip_captured}",
        pip_proxied = pip("site"),
        pip_captured = pip("site-captured"),
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(ran.report["decision"]["kind"], "keep");
    assert_eq!(
        std::fs::read_to_string(fenced.ws.join("clone/hello.txt")).expect("cloned"),
        "from the origin\nfrom the fence\n"
    );
    assert!(
        fenced.read("refs.txt").contains("refs/heads/main"),
        "ls-remote with no proxy variable: {}",
        fenced.read("refs.txt")
    );
    assert!(
        ran.count("proxy_connections") >= 1,
        "the proxy variable's clients went through the relay: {:#}",
        ran.report
    );
    assert!(
        ran.count("connections_captured") >= 1,
        "the clients without proxy variables were captured: {:#}",
        ran.report
    );
    let effects = ran.report["effects"].as_array().expect("effects");
    let urls: Vec<String> = effects
        .iter()
        .map(|e| format!("{} {}", e["method"], e["url"]).replace('"', ""))
        .collect();
    assert_eq!(
        urls,
        [
            format!("POST {base}/repo.git/git-receive-pack"),
            format!("POST {base}/hook"),
            format!("POST {base}/hook"),
            format!("POST {base}/hook"),
        ],
        "the push and the three webhook POSTs are staged"
    );
    assert!(
        effects.iter().all(|e| e["state"] == "staged"),
        "{effects:#?}"
    );
    let seen = requests(&origin);
    assert!(
        seen.iter().any(|r| r == "POST /repo.git/git-upload-pack"),
        "{seen:?}"
    );
    let wheels = seen.iter().filter(|r| r.ends_with(".whl")).count();
    assert_eq!(wheels, 2, "pip fetched the wheel both ways: {seen:?}");
    assert!(
        !seen
            .iter()
            .any(|r| r.contains("git-receive-pack") && r.starts_with("POST")),
        "the push was staged: {seen:?}"
    );
    assert!(!seen.iter().any(|r| r == "POST /hook"), "{seen:?}");
    assert_eq!(
        origin_main(&fx_dir),
        before,
        "the origin's main did not move"
    );

    let report = fenced.airlock.commit_pending(&ran.run()).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(
        origin_main(&fx_dir),
        fenced.read("pushed.txt"),
        "the push was released on commit"
    );
    let hooks: Vec<Vec<u8>> = origin
        .received()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/hook")
        .map(|r| r.body)
        .collect();
    assert_eq!(hooks.len(), 3, "each webhook released once");
    assert!(hooks.contains(&b"connect".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item5_wget_inside_the_fence_trusts_the_fence_bundle_through_wgetrc() {
    let test = "item5_wget_inside_the_fence_trusts_the_fence_bundle_through_wgetrc";
    if !airlock_tests::in_ci()
        && !std::process::Command::new("wget")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED {test}: no wget (apt-get install wget)");
        return;
    }
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let port = origin.addr().port();
    // The server's WGETRC is in its data directory, which the fence hides: the fence
    // names a wgetrc of its own.
    let script = format!(
        "printf '%s\\n' \"$WGETRC\" > wgetrc.txt; wget -q -O got.json https://{HOST}:{port}/read"
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert!(
        fenced.read("wgetrc.txt").contains("airlock-fence-"),
        "WGETRC names the fence's wgetrc: {}",
        fenced.read("wgetrc.txt")
    );
    assert_eq!(fenced.read("got.json"), r#"{"ok":true}"#);
    assert_eq!(requests(&origin), vec!["GET /read".to_owned()]);
}
