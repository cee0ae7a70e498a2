//! `airlock serve --role proxy|control|all` (issue #19 item 2, docs/fleet.md): a proxy
//! instance stages and passes but answers no admin API, a control instance serves the admin
//! API and the UI but has no proxy listener, and flags that do not fit the role are refused.
//!
//! On the embedded store one process holds the ledger, so these tests hand the data
//! directory from a control instance to a proxy instance and back in turn: the run (and its
//! token) a control instance created is used on a proxy instance, whose staged effect the
//! next control instance lists.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use airlock_tests::{
    airlock_bin, curl, curl_blocking, loopback_policy, ok_origin, ClientError, Fixture,
};

/// A loopback port free now (bound, read, released), for a proxy a control instance
/// advertises before the proxy starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The TCP ports process `pid` listens on: its socket inodes (`/proc/PID/fd`) matched
/// against the `LISTEN` rows of `/proc/net/tcp` and `tcp6`.
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the process's descriptors")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let text = target.to_string_lossy().into_owned();
            Some(text.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut ports = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if fields.len() > 9 && fields[3] == "0A" && inodes.contains(fields[9]) {
                if let Some((_, port)) = fields[1].rsplit_once(':') {
                    ports.insert(u16::from_str_radix(port, 16).expect("hex port"));
                }
            }
        }
    }
    ports
}

/// The port of `http://127.0.0.1:PORT`.
fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, port)| port.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("{url} has no port"))
}

/// The airlock CLI on the fixture's data directory (it finds the admin address and token
/// there, as an operator's would).
fn airlock_cli(fx: &Fixture, args: &[&str]) -> std::process::Output {
    Command::new(airlock_bin())
        .args(args)
        .arg("--data")
        .arg(fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run the airlock CLI")
}

/// `GET url` with no proxy and no token: (status, body).
async fn get_plain(url: &str, token: Option<&str>) -> (u16, String) {
    let url = url.to_owned();
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    tokio::task::spawn_blocking(move || {
        let mut args = vec![url.as_str()];
        if let Some(auth) = &auth {
            args.extend(["-H", auth.as_str()]);
        }
        let out = curl_blocking(&BTreeMap::new(), &args);
        (out.status, String::from_utf8_lossy(&out.body).into_owned())
    })
    .await
    .expect("curl task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_proxy_stages_a_real_request_serves_healthz_and_metrics_but_no_admin_api() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = loopback_policy(origin.addr().port());
    let proxy_addr = format!("127.0.0.1:{}", free_port());
    let control_args = [
        "--role",
        "control",
        "--advertise-proxy",
        proxy_addr.as_str(),
    ];

    // A control instance creates the run; its environment points at the proxy instance.
    let mut control = fx.start(&policy, &control_args);
    let (run, env) = control.create_run().await;
    assert!(
        env["HTTPS_PROXY"].ends_with(&format!("@{proxy_addr}")),
        "the run's proxy is the advertised proxy instance: {env:?}"
    );
    let exports = airlock_cli(&fx, &["env", &run]);
    assert!(exports.status.success(), "{exports:?}");
    assert!(
        String::from_utf8_lossy(&exports.stdout).contains(&format!("@{proxy_addr}'")),
        "airlock env on the control instance: {exports:?}"
    );
    control
        .terminate(Duration::from_secs(15))
        .expect("control stops");

    let proxy = fx.start(
        &policy,
        &["--role", "proxy", "--listen", proxy_addr.as_str()],
    );
    assert_eq!(proxy.proxy, proxy_addr);
    let ops_port = port_of(&proxy.admin_url);
    assert_eq!(
        listening_ports(proxy.pid().expect("running")),
        BTreeSet::from([port_of(&proxy_addr), ops_port]),
        "a proxy instance listens on --listen and its ops address only"
    );

    // The token the control instance issued works here: a read passes, a write is staged.
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let read = curl(&env, &[&format!("{base}/status")]).await;
    assert_eq!(
        read.status,
        200,
        "read: {} {}",
        read.stderr,
        String::from_utf8_lossy(&read.body)
    );
    let staged = curl(
        &env,
        &[
            "-X",
            "POST",
            "--data",
            r#"{"n":1}"#,
            &format!("{base}/hooks/deploy"),
        ],
    )
    .await;
    assert_eq!(
        staged.status,
        202,
        "stage: {} {}",
        staged.stderr,
        String::from_utf8_lossy(&staged.body)
    );
    let effect = staged
        .header("airlock-effect")
        .expect("airlock-effect header");
    assert_eq!(staged.json()["status"], "staged");

    // Probes and scraping on the ops address; the admin API and the UI are not there.
    let (status, body) = get_plain(&format!("{}/healthz", proxy.admin_url), None).await;
    assert_eq!(
        (status, body.contains(r#""status":"ok""#)),
        (200, true),
        "{body}"
    );
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("admin token");
    let (status, metrics) =
        get_plain(&format!("{}/metrics", proxy.admin_url), Some(token.trim())).await;
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("airlock_requests_total{action=\"stage\"} 1\n")
            && metrics.contains("airlock_requests_total{action=\"pass\"} 1\n")
            && metrics.contains("airlock_ledger_writable 1"),
        "the proxy's own request counters: {metrics}"
    );
    let (status, _) = get_plain(&format!("{}/metrics", proxy.admin_url), None).await;
    assert_eq!(status, 401, "/metrics keeps its bearer token");
    match proxy.admin.get("/v1/runs").await {
        Err(ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (404, "not_served_by_role"));
        }
        other => panic!("a proxy instance answered the admin API: {other:?}"),
    }
    match proxy.admin.get(&format!("/v1/runs/{run}/effects")).await {
        Err(ClientError::Api { status: 404, .. }) => {}
        other => panic!("a proxy instance listed effects: {other:?}"),
    }
    let (status, body) = get_plain(&format!("{}/login", proxy.admin_url), None).await;
    assert_eq!(status, 404, "no review UI on a proxy instance: {body}");
    let refused = airlock_cli(&fx, &["env", &run]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("not_served_by_role"),
        "airlock env against a proxy instance: {stderr}"
    );
    drop(proxy);

    // The next control instance lists what the proxy staged; nothing was released.
    let control = fx.start(&policy, &control_args);
    let effects = control.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["id"], effect.as_str());
    assert_eq!(effects[0]["state"], "staged");
    let received = origin.received();
    assert_eq!(
        received.len(),
        1,
        "only the read reached the origin: {received:?}"
    );
    assert_eq!(received[0].method, "GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_control_serves_the_admin_api_and_ui_and_has_no_proxy_listener() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let control = fx.start(
        &loopback_policy(origin.addr().port()),
        &[
            "--role",
            "control",
            "--advertise-proxy",
            "proxy.airlock.svc:8080",
        ],
    );
    assert_eq!(control.proxy, "", "addresses.json names no proxy listener");
    let addresses: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fx.data_dir().join("addresses.json")).expect("addresses"),
    )
    .expect("addresses JSON");
    assert_eq!(addresses["role"], "control");
    assert!(
        addresses["proxy"].is_null() && addresses["fence_socket"].is_null(),
        "{addresses}"
    );
    assert!(
        !fx.data_dir().join("fence.sock").exists(),
        "no fence socket"
    );
    assert_eq!(
        listening_ports(control.pid().expect("running")),
        BTreeSet::from([port_of(&control.admin_url)]),
        "a control instance listens on its admin address only"
    );

    let (run, env) = control.create_run().await;
    assert!(
        env["HTTPS_PROXY"].ends_with("@proxy.airlock.svc:8080"),
        "{env:?}"
    );
    let shown = control
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("show run");
    assert_eq!(shown["state"], "open");
    assert_eq!(
        shown["proxy"], "proxy.airlock.svc:8080",
        "where sandboxes reach the proxy"
    );
    let (status, health) = get_plain(&format!("{}/healthz", control.admin_url), None).await;
    assert_eq!(status, 200, "{health}");
    let (status, page) = get_plain(&format!("{}/login", control.admin_url), None).await;
    assert_eq!(status, 200, "the review UI's sign-in page");
    assert!(page.contains("<form"), "{page}");
    let sealed = control
        .post(&format!("/v1/runs/{run}/seal"), None)
        .await
        .expect("seal");
    assert_eq!(sealed["state"], "sealed");
}

/// `airlock serve ARGS…` on a fresh data directory, which must fail: its stderr.
fn refused(fx: &Fixture, args: &[&str], env: &[(&str, &str)]) -> String {
    std::fs::write(
        fx.dir.path().join("policy.toml"),
        "version = 1\ndefault = \"deny\"\n",
    )
    .expect("policy");
    let out = Command::new(airlock_bin())
        .arg("serve")
        .arg("--data")
        .arg(fx.data_dir())
        .arg("--policy")
        .arg(fx.dir.path().join("policy.toml"))
        .args(["--admin", "127.0.0.1:0"])
        .args(args)
        .env_remove("AIRLOCK_ROLE")
        .envs(env.iter().copied())
        .output()
        .expect("run airlock serve");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "airlock serve {args:?} started: {stderr}"
    );
    assert!(
        !fx.data_dir().join("addresses.json").exists(),
        "airlock serve {args:?} listened before refusing"
    );
    stderr
}

/// One refused start: `serve` args, environment, what stderr says.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn role_misfit_flags_exit_non_zero_naming_the_flag_and_role() {
    let fx = Fixture::new();
    let cases: &[Case] = &[
        (
            &["--role", "control", "--advertise-proxy", "p:8080", "--transparent", "127.0.0.1:0"],
            &[],
            "--transparent does not apply to --role control",
        ),
        (
            &["--role", "control", "--advertise-proxy", "p:8080", "--listen", "127.0.0.1:0"],
            &[],
            "--listen does not apply to --role control",
        ),
        (
            &["--role", "control"],
            &[],
            "--role control has no proxy listener, so it cannot tell sandboxes where to connect: pass --advertise-proxy",
        ),
        (
            &["--role", "proxy", "--reviewer-token", "alice=/dev/null"],
            &[],
            "--reviewer-token does not apply to --role proxy",
        ),
        (
            &["--notify-webhook", "http://127.0.0.1:9/hook"],
            &[("AIRLOCK_ROLE", "proxy")],
            "--notify-webhook does not apply to --role proxy",
        ),
        (&["--role", "edge"], &[], "invalid value 'edge' for '--role <ROLE>'"),
    ];
    for (args, env, expected) in cases {
        let stderr = refused(&fx, args, env);
        assert!(
            stderr.contains(expected),
            "airlock serve {args:?}: {stderr}"
        );
    }
}
