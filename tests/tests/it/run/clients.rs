//! The client matrix under `airlock run` (docs/cases.md C15–C18): each client reaches its
//! loopback origin through the proxy using only the environment `airlock run` gives the
//! command — curl, git over smart HTTP, Python requests and urllib, pip, Node fetch.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use airlock_tests::{Fixture, Origin, Received, Reply};
use serde_json::Value;

use super::{output, run_command, write_policy};

/// Reads pass; git's fetch POST passes; other writes are staged — on `host`.
fn matrix_policy(host: &str, port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "git-fetch"
host = "{host}"
port = {port}
method = ["POST"]
path = "/repo.git/git-upload-pack"
action = "pass"

[[rule]]
id = "reads"
host = "{host}"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "{host}"
port = {port}
method = "write"
action = "stage"
"#
    )
}

/// Builds `airlock_probe-0.1-py3-none-any.whl` in `dir`; returns its bytes.
pub(crate) fn build_wheel(dir: &Path) -> Vec<u8> {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "airlock_probe/__init__.py": b"VALUE = 42\n",
    "airlock_probe-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: airlock-probe\nVersion: 0.1\n",
    "airlock_probe-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: airlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{name},sha256={digest},{len(data)}\n"
record += "airlock_probe-0.1.dist-info/RECORD,,\n"
files["airlock_probe-0.1.dist-info/RECORD"] = record.encode()
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
"#;
    let path = dir.join("airlock_probe-0.1-py3-none-any.whl");
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&path).expect("wheel")
}

/// One origin for the whole matrix: `/hello`, `/hook`, a simple index, and git.
pub(crate) async fn matrix_origin(fx: &Fixture) -> Origin {
    use sha2::Digest as _;
    let root = fx.dir.path().join("git-root");
    std::fs::create_dir_all(&root).expect("mkdir");
    let source = fx.dir.path().join("source");
    std::fs::create_dir_all(&source).expect("mkdir");
    std::fs::write(source.join("hello.txt"), "from the origin\n").expect("write");
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["add", "-A"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "commit",
            "-qm",
            "first",
        ],
    ] {
        super::git(&source, &args);
    }
    super::git(&root, &["init", "-q", "--bare", "-b", "main", "repo.git"]);
    let bare = root.join("repo.git").display().to_string();
    super::git(&source, &["push", "-q", &bare, "main"]);

    let wheel = build_wheel(fx.dir.path());
    let sha: String = sha2::Sha256::digest(&wheel)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let index = format!(
        "<!DOCTYPE html><html><body><a href=\"/files/airlock_probe-0.1-py3-none-any.whl#sha256={sha}\">airlock_probe-0.1-py3-none-any.whl</a></body></html>"
    );
    let git = airlock_tests::git_http::backend(root);
    Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| {
            let path = req.path.split('?').next().unwrap_or("");
            if path.starts_with("/repo.git/") {
                return git(req);
            }
            match path {
                "/simple/airlock-probe/" => {
                    let mut reply = Reply::text(200, &index);
                    reply.headers = vec![("content-type".into(), "text/html".into())];
                    reply
                }
                "/files/airlock_probe-0.1-py3-none-any.whl" => {
                    let mut reply = Reply::text(200, "");
                    reply.headers =
                        vec![("content-type".into(), "application/octet-stream".into())];
                    reply.body = wheel.clone();
                    reply
                }
                _ => Reply::json(200, &serde_json::json!({"hello": "world"})),
            }
        }),
    )
    .await
    .expect("origin")
}

/// Runs `script` with `sh -c` under `airlock run` (embedded server, hold); returns the
/// output and the JSON report.
async fn under_airlock_run(fx: &Fixture, port: u16, script: &str) -> (Output, Value) {
    under_airlock_run_with(fx, &matrix_policy("127.0.0.1", port), &[], &[], script).await
}

/// [`under_airlock_run`] with `policy`, more `airlock run` arguments before `--`, and more
/// environment variables for the command.
async fn under_airlock_run_with(
    fx: &Fixture,
    policy: &str,
    args: &[&str],
    env: &[(&str, String)],
    script: &str,
) -> (Output, Value) {
    let policy = write_policy(fx, policy);
    let ws = fx.dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let mut command = run_command(fx, &policy, &["--json"]);
    // Nothing from the test's own environment may route the clients: only airlock's.
    for name in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "NODE_USE_ENV_PROXY",
        "PIP_INDEX_URL",
        "PIP_CONFIG_FILE",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", fx.dir.path())
        .arg("--workspace")
        .arg(&ws)
        .args(args)
        .args(["--", "sh", "-c", script]);
    let out = output(command).await;
    let report = super::json_report(&out);
    (out, report)
}

fn assert_passed(out: &Output, report: &Value) {
    assert!(
        out.status.success(),
        "the command failed under airlock run: {}\n{report:#}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["decision"]["kind"], "keep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c15_git_ls_remote_and_clone_through_the_proxy_with_run_credentials() {
    let fx = Fixture::new();
    let origin = matrix_origin(&fx).await;
    let port = origin.addr().port();
    let script = format!(
        "set -e; git ls-remote https://127.0.0.1:{port}/repo.git > refs.txt; \
         git clone -q https://127.0.0.1:{port}/repo.git clone; cat clone/hello.txt"
    );
    let (out, report) = under_airlock_run(&fx, port, &script).await;
    assert_passed(&out, &report);
    let ws = fx.dir.path().join("ws");
    let refs = std::fs::read_to_string(ws.join("refs.txt")).expect("refs");
    assert!(refs.contains("refs/heads/main"), "{refs}");
    assert_eq!(
        std::fs::read_to_string(ws.join("clone/hello.txt")).expect("cloned"),
        "from the origin\n"
    );
    let received = origin.received();
    assert!(
        received
            .iter()
            .any(|r| r.method == "POST" && r.path.ends_with("git-upload-pack")),
        "the clone's fetch went through the proxy"
    );
    for request in &received {
        assert!(request.header("proxy-authorization").is_none());
        assert!(request.header("proxy-connection").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c16_node_fetch_under_airlock_run() {
    let version = Command::new("node").arg("--version").output();
    let Ok(version) = version else {
        assert!(
            !airlock_tests::in_ci(),
            "case_c16 needs node in CI (.ci/run installs it)"
        );
        eprintln!("SKIPPED case_c16: node is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let parts: Vec<u32> = text
        .trim_start_matches('v')
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    // NODE_USE_ENV_PROXY arrived in Node 24.0 and 22.21.
    let supported = match parts.as_slice() {
        [major, ..] if *major >= 24 => true,
        [22, minor, ..] => *minor >= 21,
        _ => false,
    };
    if !supported {
        assert!(
            !airlock_tests::in_ci(),
            "case_c16 needs node 24+ in CI (.ci/run installs it): found {text}"
        );
        eprintln!(
            "SKIPPED case_c16: node {text} does not support NODE_USE_ENV_PROXY (Node 24+ or 22.21+); \
             airlock run sets it, but this node's fetch would ignore the proxy"
        );
        return;
    }
    let fx = Fixture::new();
    let origin = matrix_origin(&fx).await;
    let port = origin.addr().port();
    let script = format!(
        "node -e \"fetch('https://127.0.0.1:{port}/hello').then(r => r.json()).then(j => {{ if (j.hello !== 'world') process.exit(3) }}).catch(e => {{ console.error(e); process.exit(2) }})\" \
         && node -e \"fetch('https://127.0.0.1:{port}/hook', {{method: 'POST', body: 'n'}}).then(r => process.exit(r.status === 202 ? 0 : 4))\""
    );
    let (out, report) = under_airlock_run(&fx, port, &script).await;
    assert_passed(&out, &report);
    assert_eq!(report["effects"][0]["state"], "staged");
    assert_eq!(
        origin.received().len(),
        1,
        "only the read reached the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c17_python_clients_requests_urllib_and_pip_install() {
    let fx = Fixture::new();
    let origin = matrix_origin(&fx).await;
    let port = origin.addr().port();
    let base = format!("https://127.0.0.1:{port}");
    let script = format!(
        "set -e; \
         python3 -c \"import requests; r = requests.get('{base}/hello'); r.raise_for_status(); assert r.json() == {{'hello': 'world'}}\"; \
         python3 -c \"import requests; r = requests.post('{base}/hook', json={{'via': 'requests'}}); assert r.status_code == 202, r.status_code\"; \
         python3 -c \"import json, urllib.request; assert json.load(urllib.request.urlopen('{base}/hello')) == {{'hello': 'world'}}\"; \
         python3 -m pip install -q --no-cache-dir --disable-pip-version-check --index-url {base}/simple/ --target site airlock-probe; \
         python3 -c \"import sys; sys.path.insert(0, 'site'); import airlock_probe; assert airlock_probe.VALUE == 42\""
    );
    let (out, report) = under_airlock_run(&fx, port, &script).await;
    assert_passed(&out, &report);
    let effects = report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{report:#}");
    assert_eq!(effects[0]["state"], "staged");
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert!(
        paths.iter().any(|p| p == "/simple/airlock-probe/"),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.ends_with(".whl")),
        "pip fetched the wheel through the proxy: {paths:?}"
    );
    assert!(!paths.iter().any(|p| p == "/hook"), "the POST was staged");
}

/// The Go client of case C18: GETs `BASE/hello` (must be the origin's JSON) and POSTs
/// `BASE/hook` (must be airlock's 202), after writing the proxy Go's `net/http` picks for
/// the URL to `go-proxy.txt` (`direct` when none).
const GO_CLIENT: &str = r#"package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go client: "+format+"\n", args...)
	os.Exit(code)
}

func main() {
	base := os.Args[1]
	req, err := http.NewRequest("GET", base+"/hello", nil)
	if err != nil {
		fail(2, "request: %v", err)
	}
	picked := "direct"
	if proxy, err := http.ProxyFromEnvironment(req); err != nil {
		fail(2, "proxy: %v", err)
	} else if proxy != nil {
		picked = proxy.String()
	}
	if err := os.WriteFile("go-proxy.txt", []byte(picked), 0o600); err != nil {
		fail(2, "write: %v", err)
	}
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		fail(3, "GET: %v", err)
	}
	body, err := io.ReadAll(got.Body)
	got.Body.Close()
	if err != nil || got.StatusCode != 200 || string(body) != `{"hello":"world"}` {
		fail(4, "GET: %d %q %v", got.StatusCode, body, err)
	}
	posted, err := http.Post(base+"/hook", "text/plain", strings.NewReader("go"))
	if err != nil {
		fail(5, "POST: %v", err)
	}
	posted.Body.Close()
	if posted.StatusCode != 202 {
		fail(6, "POST: %d", posted.StatusCode)
	}
}
"#;

/// `go version`'s line; `None` (with a message) when `go` cannot be run and the tests are
/// not under CI, where a missing Go fails.
fn go_version() -> Option<String> {
    match Command::new("go").arg("version").output() {
        Ok(out) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        other => {
            assert!(
                !airlock_tests::in_ci(),
                "case_c18 needs go in CI (.ci/run installs Debian's golang-go): {other:?}"
            );
            eprintln!(
                "SKIPPED the Go leg of case_c18: go is not installed (apt-get install golang-go); \
                 curl and Python still run"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c18_proxy_variable_cases_all_set_and_curl_go_and_python_pick_the_proxy() {
    let fx = Fixture::new();
    let origin = matrix_origin(&fx).await;
    let port = origin.addr().port();
    // Go's net/http never proxies localhost or loopback IPs, so every client uses a name
    // that only airlock resolves (to the origin on 127.0.0.1): a client that went direct
    // could not even look it up.
    let host = airlock_tests::TEST_HOST;
    let base = format!("https://{host}:{port}");
    let hook = format!("{base}/hook");
    let go = go_version();
    let mut env = Vec::new();
    let go_leg = if let Some(version) = &go {
        eprintln!("case_c18: {version}");
        let ws = fx.dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(ws.join("main.go"), GO_CLIENT).expect("write main.go");
        let dir = |name: &str| fx.dir.path().join(name).display().to_string();
        env = vec![
            ("GOCACHE", dir("go-cache")),
            ("GOPATH", dir("go-path")),
            ("GOFLAGS", String::new()),
            ("GO111MODULE", String::new()),
            ("GOPROXY", "off".to_owned()),
            ("GOTOOLCHAIN", "local".to_owned()),
            ("CGO_ENABLED", "0".to_owned()),
        ];
        format!("go run main.go {base}")
    } else {
        "true".to_owned()
    };
    let script = format!(
        "set -e; env > env.txt; \
         curl -sS --fail -o /dev/null -X POST --data curl {hook}; \
         python3 -c \"import urllib.request; r = urllib.request.urlopen(urllib.request.Request('{hook}', data=b'urllib')); assert r.status == 202\"; \
         {go_leg}"
    );
    let resolve = format!("{host}=127.0.0.1");
    let (out, report) = under_airlock_run_with(
        &fx,
        &matrix_policy(host, port),
        &["--resolve", &resolve],
        &env,
        &script,
    )
    .await;
    assert_passed(&out, &report);
    let env: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(fx.dir.path().join("ws/env.txt"))
            .expect("env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let proxy = env.get("https_proxy").expect("https_proxy").clone();
    assert!(proxy.starts_with("http://run_"), "{proxy}");
    for name in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        assert_eq!(env.get(name), Some(&proxy), "{name}");
    }
    for name in ["no_proxy", "NO_PROXY"] {
        assert_eq!(env.get(name).map(String::as_str), Some(""), "{name}");
    }
    assert_eq!(env.get("NODE_USE_ENV_PROXY").map(String::as_str), Some("1"));
    let ca = env.get("SSL_CERT_FILE").expect("SSL_CERT_FILE");
    for name in [
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
    ] {
        assert_eq!(env.get(name), Some(ca), "{name}");
    }
    let effects = report["effects"].as_array().expect("effects");
    let received = origin.received();
    if go.is_some() {
        assert_eq!(
            std::fs::read_to_string(fx.dir.path().join("ws/go-proxy.txt")).expect("go-proxy.txt"),
            proxy,
            "Go's net/http picked the run's proxy"
        );
        assert_eq!(
            effects.len(),
            3,
            "curl, python and go each staged their POST through the proxy: {report:#}"
        );
        assert_eq!(received.len(), 1, "only Go's GET reached the origin");
        assert_eq!(
            (received[0].method.as_str(), received[0].path.as_str()),
            ("GET", "/hello")
        );
        assert_eq!(
            received[0].header("host"),
            Some(format!("{host}:{port}").as_str())
        );
    } else {
        assert_eq!(
            effects.len(),
            2,
            "curl and python both went through the proxy: {report:#}"
        );
        assert!(received.is_empty(), "both were staged, none sent");
    }
    for effect in effects {
        assert_eq!(effect["state"], "staged", "{effect:#}");
    }
}

#[test]
fn run_resolve_refuses_a_bad_answer_and_a_running_server() {
    let bad = Command::new(airlock_tests::airlock_bin())
        .args(["run", "--resolve", "origin.test=not-an-ip", "--", "true"])
        .output()
        .expect("run airlock");
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("not an IP address"), "{stderr}");

    // Without --policy the run goes to a running server, which has its own --resolve.
    let fx = Fixture::new();
    let ws = fx.dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let out = Command::new(airlock_tests::airlock_bin())
        .arg("run")
        .arg("--data")
        .arg(fx.data_dir())
        .arg("--workspace")
        .arg(&ws)
        .args(["--resolve", "origin.test=127.0.0.1", "--", "touch", "ran"])
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .env_remove("AIRLOCK_DATA")
        .output()
        .expect("run airlock");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--resolve applies to the embedded server"),
        "{stderr}"
    );
    assert!(!ws.join("ran").exists(), "the command never ran");
}
