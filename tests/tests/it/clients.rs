//! Issue #21 items 4, 5, 6 and 12: clients that read none of the usual proxy or CA
//! variables work in env mode with nothing but what `airlock env RUN` prints, sourced by
//! a shell: Java 17's `HttpClient`, wget, and npm with an npmrc that sets its own
//! `cafile`; and `airlock env` / `airlock run --network env` warn when the sandbox's
//! `node` is older than 24 (it ignores `NODE_USE_ENV_PROXY`).
//!
//! Each test starts `airlock serve --resolve origin.test=127.0.0.1` and a loopback HTTPS
//! origin, creates a run, writes `airlock env RUN`'s stdout to `run.env`, and runs the
//! client as `sh -c '. ./run.env && CLIENT'` with only PATH and a throwaway HOME.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use airlock_tests::{
    airlock_bin, in_ci, ok_origin, Airlock, Fixture, Handler, Origin, Received, Reply, TEST_HOST,
};

/// Reads pass and writes stage on `origin.test:PORT` (loopback allowed).
fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "reads"
host = "{TEST_HOST}"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "{TEST_HOST}"
port = {port}
method = "write"
action = "stage"
"#
    )
}

/// airlock on `policy(port)`, answering `origin.test` with 127.0.0.1.
fn start(fx: &Fixture, port: u16) -> Airlock {
    fx.start(
        &policy(port),
        &["--resolve", &format!("{TEST_HOST}=127.0.0.1")],
    )
}

/// Runs the `airlock` CLI against `airlock`'s admin API with `path` as PATH, in `cwd`
/// (its data directory is `cwd/../data` or `cwd/data`: the fixture's).
fn airlock_cli(airlock: &Airlock, args: &[&str], path: &str, cwd: &Path) -> Output {
    let token = [cwd.join("data"), cwd.join("../data")]
        .iter()
        .find_map(|data| std::fs::read_to_string(data.join("admin.token")).ok())
        .expect("admin token");
    Command::new(airlock_bin())
        .args(&args[..1])
        .args(["--admin", &airlock.admin_url, "--token", token.trim()])
        .args(&args[1..])
        .env_clear()
        .env("PATH", path)
        .env("HOME", cwd)
        .current_dir(cwd)
        .output()
        .expect("run airlock")
}

/// A new run and `airlock env RUN`'s stdout, written to `DIR/run.env`.
async fn printed_env(airlock: &Airlock, dir: &Path) -> (String, PathBuf) {
    let (run, _) = airlock.create_run().await;
    let out = airlock_cli(
        airlock,
        &["env", &run],
        &std::env::var("PATH").unwrap_or_default(),
        dir,
    );
    assert!(
        out.status.success(),
        "airlock env: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.join("run.env");
    std::fs::write(&file, &out.stdout).expect("write run.env");
    (run, file)
}

/// `sh -c '. RUN_ENV && SCRIPT'` in `cwd`, with only PATH and `HOME=cwd` besides what the
/// file exports; on a blocking thread, so the test's origins keep serving.
async fn sourced(run_env: &Path, cwd: &Path, script: &str) -> Output {
    let line = format!(". '{}' && {script}", run_env.display());
    let cwd = cwd.to_owned();
    tokio::task::spawn_blocking(move || {
        Command::new("sh")
            .args(["-c", &line])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &cwd)
            .current_dir(&cwd)
            .output()
            .expect("run sh")
    })
    .await
    .expect("client task")
}

/// Whether every program in `programs` runs with `--version` (`-version` for java);
/// skips outside CI with a message naming `install` when not.
fn tools_or_skip(test: &str, programs: &[&str], install: &str) -> bool {
    let works = |program: &str| {
        let flag = if program.starts_with("java") {
            "-version"
        } else {
            "--version"
        };
        Command::new(program)
            .arg(flag)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if programs.iter().all(|p| works(p)) {
        return true;
    }
    assert!(!in_ci(), "{test} needs {programs:?} in CI ({install})");
    eprintln!("SKIPPED {test}: needs {programs:?} ({install})");
    false
}

fn paths(origin: &Origin) -> Vec<String> {
    origin
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A Java 11+ `HttpClient` on `ProxySelector.getDefault()` (what `JAVA_TOOL_OPTIONS`
/// configures) with the JDK's default trust (the truststore it names): GETs `ARG/read`,
/// POSTs `ARG/hook`, prints both statuses.
const JAVA_CLIENT: &str = r#"
import java.net.ProxySelector;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Client {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newBuilder().proxy(ProxySelector.getDefault()).build();
        HttpResponse<String> read = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/read")).GET().build(),
            HttpResponse.BodyHandlers.ofString());
        HttpResponse<String> posted = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/hook"))
                .header("content-type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{\"from\":\"java\"}"))
                .build(),
            HttpResponse.BodyHandlers.ofString());
        System.out.println("GET " + read.statusCode());
        System.out.println("POST " + posted.statusCode());
    }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item4_java17_httpclient_with_only_airlock_env_get_passes_post_is_staged() {
    let test = "item4_java17_httpclient_with_only_airlock_env_get_passes_post_is_staged";
    if !tools_or_skip(test, &["java"], ".ci/run installs default-jdk-headless") {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = start(&fx, port);
    let dir = fx.dir.path();
    let (run, run_env) = printed_env(&airlock, dir).await;
    // A JDK started before the server's background truststore write could miss it.
    let truststore = fx.data_dir().join("java-truststore.p12");
    assert!(
        airlock_tests::eventually(std::time::Duration::from_secs(20), || truststore.is_file())
            .await,
        "the server wrote {}",
        truststore.display()
    );
    std::fs::write(dir.join("Client.java"), JAVA_CLIENT).expect("write Client.java");
    let out = sourced(
        &run_env,
        dir,
        &format!("java Client.java https://{TEST_HOST}:{port}"),
    )
    .await;
    assert!(out.status.success(), "java: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("GET 200"), "the GET passed: {}", text(&out));
    assert!(
        stdout.contains("POST 202"),
        "the POST was staged: {}",
        text(&out)
    );
    assert_eq!(
        paths(&origin),
        vec!["GET /read"],
        "the origin saw the GET only"
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:#?}");
    assert_eq!(effects[0]["method"], "POST");
    assert_eq!(effects[0]["state"], "staged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item5_wget_with_only_airlock_env_gets_through_the_proxy() {
    let test = "item5_wget_with_only_airlock_env_gets_through_the_proxy";
    if !tools_or_skip(test, &["wget"], ".ci/run installs wget") {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let airlock = start(&fx, port);
    let dir = fx.dir.path();
    let (run, run_env) = printed_env(&airlock, dir).await;
    let out = sourced(
        &run_env,
        dir,
        &format!("wget -q -O got.json https://{TEST_HOST}:{port}/read"),
    )
    .await;
    assert!(out.status.success(), "wget: {}", text(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("got.json")).expect("got.json"),
        r#"{"ok":true}"#
    );
    assert_eq!(paths(&origin), vec!["GET /read"]);
    // Through airlock, as the run: the read is journaled.
    let reads = airlock.reads(&run).await.unwrap_or_default();
    assert_eq!(reads.len(), 1, "{reads:#?}");
    // A denied host's reason reaches wget too: the wgetrc sets `content_on_error`, so the
    // 403's JSON body is saved rather than dropped.
    let denied = sourced(
        &run_env,
        dir,
        &format!("wget -q -O denied.json https://denied.test:{port}/x"),
    )
    .await;
    assert!(
        !denied.status.success(),
        "wget got no error: {}",
        text(&denied)
    );
    let body = std::fs::read_to_string(dir.join("denied.json")).unwrap_or_default();
    assert!(
        body.contains("default_deny") && body.contains("manifest"),
        "wget kept the denial's reason: {body:?} ({})",
        text(&denied)
    );
    assert_eq!(
        paths(&origin),
        vec!["GET /read"],
        "nothing reached the origin"
    );
}

/// Writes a `node` on a new directory that prints `version` for `--version`, as node does.
fn node_reporting(dir: &Path, version: &str) -> String {
    let bin = dir.join(format!("node-{version}"));
    std::fs::create_dir_all(&bin).expect("mkdir");
    let node = bin.join("node");
    std::fs::write(&node, format!("#!/bin/sh\necho {version}\n")).expect("write node");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    format!("{}:/usr/bin:/bin", bin.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item6_airlock_env_and_run_warn_when_node_is_older_than_24() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = start(&fx, origin.addr().port());
    let dir = fx.dir.path();
    let (run, _) = airlock.create_run().await;
    let old = node_reporting(dir, "v20.11.1");
    let new = node_reporting(dir, "v24.1.0");

    let warned = airlock_cli(&airlock, &["env", &run], &old, dir);
    assert!(warned.status.success(), "{}", text(&warned));
    let stderr = String::from_utf8_lossy(&warned.stderr);
    for needle in [
        "WARNING",
        "v20.11.1",
        "NODE_USE_ENV_PROXY",
        "EnvHttpProxyAgent",
        "global-agent",
        "--network isolated",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in: {stderr}");
    }
    assert!(
        String::from_utf8_lossy(&warned.stdout).contains("export HTTPS_PROXY="),
        "the exports are still printed on stdout: {}",
        text(&warned)
    );
    let quiet = airlock_cli(&airlock, &["env", &run], &new, dir);
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("NODE_USE_ENV_PROXY"),
        "node 24 reads NODE_USE_ENV_PROXY: no warning: {}",
        text(&quiet)
    );

    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir ws");
    let ws = workspace.display().to_string();
    let node_run = [
        "run",
        "--network",
        "env",
        "--workspace",
        &ws,
        "--",
        "sh",
        "-c",
        "node --version",
    ];
    let ran = airlock_cli(&airlock, &node_run, &old, dir);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        stderr.contains("v20.11.1") && stderr.contains("NODE_USE_ENV_PROXY"),
        "airlock run --network env warns a command that runs node: {}",
        text(&ran)
    );
    assert_eq!(
        stderr.matches("NODE_USE_ENV_PROXY").count(),
        1,
        "once: {stderr}"
    );
    // A command that never starts Node is not told about it (issue 40 item 4).
    let ran = airlock_cli(
        &airlock,
        &["run", "--network", "env", "--workspace", &ws, "--", "true"],
        &old,
        dir,
    );
    assert!(
        !String::from_utf8_lossy(&ran.stderr).contains("NODE_USE_ENV_PROXY"),
        "no node, no warning: {}",
        text(&ran)
    );
    let ran = airlock_cli(&airlock, &node_run, &new, dir);
    assert!(
        !String::from_utf8_lossy(&ran.stderr).contains("NODE_USE_ENV_PROXY"),
        "{}",
        text(&ran)
    );
}

/// A registry-like origin for one package, `tiny-pkg@1.0.0`: its packument at
/// `/tiny-pkg` (npm registry API: `versions.V.dist.tarball` and `integrity`) and the
/// tarball `npm pack` made at `/tiny-pkg/-/tiny-pkg-1.0.0.tgz`.
async fn registry(fx: &Fixture, tarball: Vec<u8>, integrity: String) -> Origin {
    let port_cell: Arc<std::sync::OnceLock<u16>> = Arc::default();
    let cell = port_cell.clone();
    let handler: Handler = Arc::new(move |req: &Received| {
        let port = cell.get().copied().unwrap_or_default();
        let base = format!("https://{TEST_HOST}:{port}");
        match req.path.as_str() {
            "/tiny-pkg" => Reply::json(
                200,
                &serde_json::json!({
                    "name": "tiny-pkg",
                    "dist-tags": {"latest": "1.0.0"},
                    "versions": {"1.0.0": {
                        "name": "tiny-pkg",
                        "version": "1.0.0",
                        "dist": {
                            "tarball": format!("{base}/tiny-pkg/-/tiny-pkg-1.0.0.tgz"),
                            "integrity": integrity,
                        },
                    }},
                }),
            ),
            "/tiny-pkg/-/tiny-pkg-1.0.0.tgz" => {
                let mut reply = Reply::text(200, "");
                reply.headers = vec![("content-type".into(), "application/octet-stream".into())];
                reply.body = tarball.clone();
                reply
            }
            _ => Reply::json(404, &serde_json::json!({"error": "not found"})),
        }
    });
    let origin = Origin::start(Some(&fx.origin_ca), handler)
        .await
        .expect("registry starts");
    let _ = port_cell.set(origin.addr().port());
    origin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item12_npm_with_its_own_cafile_installs_through_airlock_env() {
    let test = "item12_npm_with_its_own_cafile_installs_through_airlock_env";
    if !tools_or_skip(test, &["npm"], "apt-get install npm") {
        return;
    }
    let fx = Fixture::new();
    let dir = fx.dir.path();
    // The package, made by npm itself.
    let package = dir.join("tiny-pkg");
    std::fs::create_dir_all(&package).expect("mkdir");
    std::fs::write(
        package.join("package.json"),
        r#"{"name":"tiny-pkg","version":"1.0.0","main":"index.js"}"#,
    )
    .expect("write package.json");
    std::fs::write(package.join("index.js"), "module.exports = 'tiny';\n").expect("index.js");
    let packed = Command::new("npm")
        .args([
            "pack",
            "--json",
            "--pack-destination",
            dir.to_str().expect("utf-8 path"),
        ])
        .current_dir(&package)
        .env("HOME", dir)
        .output()
        .expect("npm pack");
    assert!(packed.status.success(), "npm pack: {}", text(&packed));
    let info: serde_json::Value = serde_json::from_slice(&packed.stdout).expect("pack json");
    let integrity = info[0]["integrity"].as_str().expect("integrity").to_owned();
    let tarball = std::fs::read(dir.join("tiny-pkg-1.0.0.tgz")).expect("tarball");

    let origin = registry(&fx, tarball, integrity).await;
    let port = origin.addr().port();
    let airlock = start(&fx, port);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("mkdir project");
    let (run, run_env) = printed_env(&airlock, &project).await;
    // The user's npmrc sets its own cafile (the system roots, as many setups do), which
    // replaces Node's trust: NODE_EXTRA_CA_CERTS alone is then ignored.
    std::fs::write(
        project.join(".npmrc"),
        format!(
            "registry=https://{TEST_HOST}:{port}/\ncafile=/etc/ssl/certs/ca-certificates.crt\n"
        ),
    )
    .expect("write .npmrc");
    let out = sourced(
        &run_env,
        &project,
        "npm install tiny-pkg --no-audit --no-fund --no-update-notifier --cache ./npm-cache",
    )
    .await;
    assert!(out.status.success(), "npm install: {}", text(&out));
    assert_eq!(
        std::fs::read_to_string(project.join("node_modules/tiny-pkg/index.js"))
            .expect("installed index.js"),
        "module.exports = 'tiny';\n"
    );
    let seen = paths(&origin);
    assert!(
        seen.contains(&"GET /tiny-pkg".to_owned())
            && seen.contains(&"GET /tiny-pkg/-/tiny-pkg-1.0.0.tgz".to_owned()),
        "npm fetched the packument and the tarball from the origin: {seen:?}"
    );
    let reads = airlock.reads(&run).await.unwrap_or_default();
    assert!(reads.len() >= 2, "both fetches journaled: {reads:#?}");
}
