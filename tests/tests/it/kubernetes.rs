//! Issue #19 item 6: the manifests in examples/kubernetes/ use only what the binary has.
//! Every airlock container's `--flag` is in `airlock SUBCOMMAND --help`, every `AIRLOCK_…`
//! variable it sets is one of that help's `[env: …]`, its flags fit its `--role`
//! (`airlock::role::check_flags`), the paths it hands airlock are on its volume mounts,
//! every probe path answers 200 without a token and every Prometheus scrape path 200 with
//! the admin token on a running airlock of the container's role, and the policy ConfigMap
//! passes `airlock policy check`. The sidecar's nftables ruleset names the sidecar's uid,
//! `--transparent` and `--dns`, and loads and redirects in a namespace of the test's own.
//! The YAML is read with PyYAML (`python3 -c 'import yaml'`),
//! the tests' one YAML parser.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use airlock_tests::{airlock_bin, Fixture};

mod binary;
mod manifests;

use binary::{help, running, status_of};
use manifests::{airlock_containers, documents, strings};

#[test]
fn kubernetes_manifests_use_only_flags_env_vars_and_paths_the_binary_has() {
    let docs = documents();
    let containers = airlock_containers(&docs);
    let roles: BTreeSet<&str> = containers
        .iter()
        .filter_map(|c| c.values("--role").first().copied())
        .collect();
    assert!(
        roles.contains("proxy") && roles.contains("control"),
        "the manifests run a proxy and a control instance: {containers:#?}"
    );
    let mut problems = Vec::new();
    let mut helps = BTreeMap::new();
    let mut servers: BTreeMap<&'static str, (Fixture, airlock_tests::Airlock)> = BTreeMap::new();
    for container in &containers {
        let at = &container.at;
        let subcommand = container.subcommand().to_owned();
        let (flags, env) = helps
            .entry(subcommand.clone())
            .or_insert_with(|| help(&subcommand));
        for flag in container.flags() {
            if !flags.contains(&flag) {
                problems.push(format!(
                    "{at}: {flag} is not a flag of `airlock {subcommand} --help`"
                ));
            }
        }
        for name in container.env.iter().filter(|n| n.starts_with("AIRLOCK_")) {
            if !env.contains(name) {
                problems.push(format!(
                    "{at}: env {name} is not an [env: …] of `airlock {subcommand} --help`"
                ));
            }
        }
        if subcommand != "serve" {
            continue;
        }
        let role = container.role();
        if let Err(error) = airlock::role::check_flags(role, &container.flags()) {
            problems.push(format!("{at}: {error}"));
        }
        let mut paths: Vec<&str> = ["--data", "--policy"]
            .iter()
            .flat_map(|flag| container.values(flag))
            .collect();
        for flag in [
            "--reviewer-token",
            "--runner-token",
            "--viewer-token",
            "--admin-token",
        ] {
            paths.extend(
                container
                    .values(flag)
                    .into_iter()
                    .filter_map(|v| v.split_once('=').map(|(_, file)| file)),
            );
        }
        for path in paths {
            if !container
                .mounts
                .iter()
                .any(|m| Path::new(path).starts_with(m))
            {
                problems.push(format!(
                    "{at}: {path} is on none of its volumeMounts {:?}",
                    container.mounts
                ));
            }
        }
        let (fx, airlock) = servers
            .entry(role.as_str())
            .or_insert_with(|| running(role));
        let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
        for path in &container.probe_paths {
            let status = status_of(&format!("{}{path}", airlock.admin_url), None);
            if status != 200 {
                problems.push(format!(
                    "{at}: probe {path} answers {status} on --role {role}"
                ));
            }
        }
        for path in &container.scrape_paths {
            let status = status_of(&format!("{}{path}", airlock.admin_url), Some(token.trim()));
            if status != 200 {
                problems.push(format!(
                    "{at}: scrape path {path} answers {status} on --role {role}"
                ));
            }
        }
        assert!(
            !container.probe_paths.is_empty() && !container.scrape_paths.is_empty(),
            "{at}: every airlock container has probes and is scraped"
        );
    }

    // The policy every instance loads is one airlock accepts.
    let policy = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "airlock-policy")
        .and_then(|(_, d)| d["data"]["policy.toml"].as_str())
        .expect("the airlock-policy ConfigMap");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), policy).expect("write policy");
    let check = Command::new(airlock_bin())
        .args(["policy", "check", "--strict"])
        .arg(file.path())
        .output()
        .expect("airlock policy check");
    if !check.status.success() {
        problems.push(format!(
            "policy.yaml: airlock policy check --strict: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        ));
    }

    assert!(
        problems.is_empty(),
        "examples/kubernetes uses what the binary does not have:\n  {}",
        problems.join("\n  ")
    );
}

/// Loads a ruleset in a fresh user and network namespace (`lo` up, a default route over
/// it, as a pod's route would be), then from inside: a TCP connection to an outside
/// address must land on 127.0.0.1:`tcp`, a DNS query on 127.0.0.1:`dns`, and other UDP is
/// refused.
const REDIRECT_PROBE: &str = r#"
import socket, sys
tcp, dns = int(sys.argv[1]), int(sys.argv[2])
t = socket.socket(); t.bind(("127.0.0.1", tcp)); t.listen(1); t.settimeout(5)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", dns)); u.settimeout(5)
c = socket.create_connection(("203.0.113.9", 443), timeout=5)
t.accept()
print("tcp redirected")
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"q", ("203.0.113.9", 53))
u.recvfrom(10)
print("dns redirected")
other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
other.settimeout(1)
try:
    other.sendto(b"x", ("203.0.113.9", 443)); other.recv(1); print("udp passed")
except OSError:
    print("udp refused")
"#;

#[test]
fn kubernetes_sidecar_fence_ruleset_matches_the_sidecar_and_redirects_in_nftables() {
    let docs = documents();
    let ruleset = docs
        .iter()
        .find(|(_, d)| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "airlock-fence")
        .and_then(|(_, d)| d["data"]["airlock_pod.nft"].as_str())
        .expect("the airlock-fence ConfigMap")
        .to_owned();
    let (_, pod) = docs
        .iter()
        .find(|(file, d)| file == "sidecar.yaml" && d["kind"] == "Pod")
        .expect("the sidecar pod");
    let spec = &pod["spec"];
    let airlock = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| {
            c["image"]
                .as_str()
                .is_some_and(|i| i.starts_with("airlock:"))
        })
        .expect("the airlock sidecar");
    let args = strings(&airlock["args"]);
    let port_of_flag = |flag: &str| -> u16 {
        let value = args
            .windows(2)
            .find(|pair| pair[0] == flag)
            .map(|pair| pair[1].clone())
            .unwrap_or_else(|| panic!("the sidecar has {flag}"));
        value
            .parse::<std::net::SocketAddr>()
            .unwrap_or_else(|e| panic!("{flag} {value}: {e}"))
            .port()
    };
    let (tcp, dns) = (port_of_flag("--transparent"), port_of_flag("--dns"));
    let uid = airlock["securityContext"]["runAsUser"]
        .as_u64()
        .or_else(|| spec["securityContext"]["runAsUser"].as_u64())
        .expect("the sidecar's uid");
    for needed in [
        format!("meta skuid {uid} return"),
        format!("meta skuid {uid} accept"),
        format!("redirect to :{tcp}"),
        format!("redirect to :{dns}"),
    ] {
        assert!(
            ruleset.contains(&needed),
            "fence.yaml's ruleset must hold `{needed}` (the sidecar's uid, --transparent and --dns): {ruleset}"
        );
    }
    // The agent runs as another uid than the one the ruleset lets out.
    for container in spec["containers"].as_array().into_iter().flatten() {
        if container["name"] != airlock["name"] {
            assert_ne!(
                container["securityContext"]["runAsUser"].as_u64(),
                Some(uid),
                "{} runs as airlock's uid",
                container["name"]
            );
        }
    }
    // The init container installs exactly that ConfigMap's file.
    let fence = spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| strings(&c["command"]).first().is_some_and(|p| p == "nft"))
        .expect("an init container running nft");
    let volume = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["configMap"]["name"] == "airlock-fence")
        .and_then(|v| v["name"].as_str())
        .expect("a volume of the airlock-fence ConfigMap");
    let mount = fence["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .expect("the init container mounts it");
    assert_eq!(
        strings(&fence["command"]),
        ["nft", "-f", &format!("{mount}/airlock_pod.nft")],
        "the init container loads the ConfigMap's ruleset"
    );
    assert_eq!(
        strings(&fence["securityContext"]["capabilities"]["add"]),
        ["NET_ADMIN"]
    );

    // The ruleset loads and redirects, in a namespace of our own.
    let usable = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "nft",
            "list",
            "ruleset",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        assert!(
            !airlock_tests::in_ci(),
            "unshare --user --net with nft is unavailable"
        );
        eprintln!("SKIPPED the nftables half: no user and network namespace with nft here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("airlock_pod.nft");
    std::fs::write(&file, &ruleset).expect("write ruleset");
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "sh", "-c"])
        .arg(r#"ip link set lo up && ip route add default dev lo && nft -f "$0" && python3 -c "$1" "$2" "$3""#)
        .arg(&file)
        .arg(REDIRECT_PROBE)
        .arg(tcp.to_string())
        .arg(dns.to_string())
        .output()
        .expect("unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the ruleset does not load or redirect: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["tcp redirected", "dns redirected", "udp refused"]
    );
}

/// What every instance of a fleet must share (docs/fleet.md): each pod whose init
/// container copies the `airlock-data` Secret copies the CA, the placeholder key and the
/// admin token, and the example Secret holds each of them; the example store URL asks for
/// `sslmode=verify-full` against an `sslrootcert` that every container given the URL
/// mounts, and is one `airlock serve --store` accepts (it fails only on the connection,
/// here to a closed loopback port with a real CA file in place of the mounted one, not on
/// its form or its TLS parameters).
#[test]
fn kubernetes_every_instance_gets_the_shared_files_and_a_store_url_airlock_accepts() {
    const SHARED: [&str; 5] = [
        "ca.pem",
        "ca-key.pem",
        "placeholder.key",
        "run-token.key",
        "admin.token",
    ];
    let docs = documents();
    let mut problems = Vec::new();
    let mut copying = 0;
    for (file, doc) in &docs {
        let text = doc.to_string();
        if !text.contains("/secrets/ca-key.pem") {
            continue;
        }
        copying += 1;
        for shared in SHARED {
            if !text.contains(&format!("/secrets/{shared}")) {
                problems.push(format!("{file}: the init container does not copy {shared}"));
            }
        }
    }
    assert!(
        copying >= 3,
        "control, proxy and sidecar copy the Secret ({copying})"
    );
    let secret = |name: &str| {
        docs.iter()
            .find(|(_, d)| d["kind"] == "Secret" && d["metadata"]["name"] == name)
            .map(|(_, d)| d["stringData"].clone())
            .unwrap_or_else(|| panic!("the {name} Secret"))
    };
    let data = secret("airlock-data");
    for shared in SHARED {
        if data.get(shared).is_none() {
            problems.push(format!(
                "secrets.example.yaml: airlock-data has no {shared}"
            ));
        }
    }
    let url = secret("airlock-store")["url"]
        .as_str()
        .expect("airlock-store url")
        .to_owned();
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    if param("sslmode") != Some("verify-full") {
        problems.push(format!(
            "secrets.example.yaml: the store URL does not ask for sslmode=verify-full: {url}"
        ));
    }
    let root = param("sslrootcert").unwrap_or_default().to_owned();
    let given_url = airlock_containers(&docs);
    let given_url = given_url
        .iter()
        .filter(|c| c.env.iter().any(|name| name == "AIRLOCK_STORE"));
    for container in given_url {
        if root != "system"
            && !container
                .mounts
                .iter()
                .any(|m| Path::new(&root).starts_with(m))
        {
            problems.push(format!(
                "{}: the store URL's sslrootcert {root} is on none of its volumeMounts {:?}",
                container.at, container.mounts
            ));
        }
    }
    // The same URL, pointed at a closed port of this machine, its CA a real one here.
    let data_dir = tempfile::tempdir().expect("temp dir");
    let (_, rest) = url.split_once('@').expect("USER@HOST in the url");
    let (_, path) = rest.split_once('/').expect("/DATABASE in the url");
    let mut path = path.to_owned();
    if !root.is_empty() && root != "system" {
        let ca = data_dir.path().join("store-ca.pem");
        let pem = airlock_origin::OriginCa::new()
            .expect("a CA")
            .cert_pem()
            .to_owned();
        std::fs::write(&ca, pem).expect("write the CA");
        path = path.replace(&root, &ca.display().to_string());
    }
    let probe = format!("postgres://airlock@127.0.0.1:1/{path}");
    let policy = data_dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"deny\"\n").expect("policy");
    let out = Command::new(airlock_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--store",
        ])
        .arg(&probe)
        .arg("--data")
        .arg(data_dir.path().join("data"))
        .arg("--policy")
        .arg(&policy)
        .output()
        .expect("airlock serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nothing listens on 127.0.0.1:1");
    if !stderr.contains("cannot connect") {
        problems.push(format!(
            "secrets.example.yaml: airlock refuses the example store URL's form: {stderr}"
        ));
    }
    assert!(
        problems.is_empty(),
        "examples/kubernetes:\n  {}",
        problems.join("\n  ")
    );
}
