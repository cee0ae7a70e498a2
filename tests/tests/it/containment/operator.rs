//! Case C22: a fence an operator builds in front of `airlock serve --transparent ADDR --dns
//! ADDR` (docs/containment.md, "Fences you build yourself"). A run created with `"source":
//! ADDR` owns the connections and DNS queries from that address, with no credentials; the
//! operator's nftables send every TCP connection to `--transparent` and DNS to `--dns`.
//!
//! Everything happens in a network namespace the test makes itself (`unshare --net`), so
//! nothing touches the host's network: its `lo` holds the agent's two source addresses
//! (10.99.0.1, bound to the run, and 10.99.0.2, bound to none), a plain-HTTP origin on
//! 127.0.0.1:18080, and airlock, which reaches the origin by its `--resolve`d address.

use std::path::Path;
use std::process::{Command, Stdio};

use airlock_tests::{airlock_bin, Fixture};
use serde_json::Value;

use super::{fence_or_skip, is_root, HOST};

/// The origin's port inside the namespace (free: the namespace is new).
const ORIGIN_PORT: u16 = 18080;

/// The script run in the namespace, as root there: `$AIRLOCK`, `$DATA` and `$POLICY` name
/// the binary, the data directory and the policy; every outcome goes to a file in the
/// working directory. Its background processes die with the namespace's PID 1 (`unshare
/// --pid --fork`), and the trap stops them first.
const SCRIPT: &str = r#"
trap 'kill ${ORIGIN:-} ${SERVER:-} 2> /dev/null; wait' EXIT
ip link set lo up && ip addr add 10.99.0.1/24 dev lo && ip addr add 10.99.0.2/24 dev lo \
  && ip route add default dev lo || { echo "cannot configure lo" >&2; exit 3; }

python3 -m http.server 18080 --bind 127.0.0.1 --directory www 2> origin.log &
ORIGIN=$!
AIRLOCK_LOG=info "$AIRLOCK" serve --data "$DATA" --policy "$POLICY" --resolve origin.test=127.0.0.1 \
  --listen 127.0.0.1:18000 --admin 127.0.0.1:18001 --transparent 127.0.0.1:18002 --dns 127.0.0.1:18053 \
  2> airlock.log &
SERVER=$!
for _ in $(seq 200); do [ -s "$DATA/addresses.json" ] && break; sleep 0.1; done
[ -s "$DATA/addresses.json" ] || { echo "airlock did not start" >&2; exit 4; }
for _ in $(seq 100); do (: < /dev/tcp/127.0.0.1/18080) 2> /dev/null && break; sleep 0.1; done

TOKEN=$(cat "$DATA/admin.token")
admin() { curl -sS -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' "$@"; }
admin -o run.json -w '%{http_code}' -d '{"source": "10.99.0.1"}' http://127.0.0.1:18001/v1/runs > run.code
RUN=$(python3 -c 'import json; print(json.load(open("run.json"))["id"])') || exit 5
admin -o overlap.json -w '%{http_code}' -d '{"source": "10.99.0.0/24"}' http://127.0.0.1:18001/v1/runs > overlap.code

nft -f - <<'NFT' || { echo "nft refused the operator's ruleset" >&2; exit 6; }
table ip operator {
  chain out {
    type nat hook output priority -100; policy accept;
    ip daddr 127.0.0.0/8 return
    ip daddr 10.99.0.53 udp dport 53 dnat to 127.0.0.1:18053
    ip daddr 10.99.0.53 tcp dport 53 dnat to 127.0.0.1:18053
    meta l4proto tcp redirect to :18002
  }
}
NFT
echo 'nameserver 10.99.0.53' > resolv.conf
mount --bind resolv.conf /etc/resolv.conf || { echo "cannot mount resolv.conf" >&2; exit 7; }

getent hosts origin.test > getent-origin.txt; echo $? > getent-origin.code
getent hosts exfil.attacker.test > getent-exfil.txt; echo $? > getent-exfil.code
curl --interface 10.99.0.1 -sS --max-time 10 -o post.json -w '%{http_code}' \
  -X POST -d hi http://origin.test:18080/hook > post.code 2> post.err
curl --interface 10.99.0.1 -sS --max-time 10 -o get.txt -w '%{http_code}' \
  http://origin.test:18080/ > get.code 2> get.err
curl --interface 10.99.0.2 -sS --max-time 5 -o unbound.txt -w '%{http_code}' \
  http://origin.test:18080/ > unbound.code 2> unbound.err; echo $? > unbound.exit

admin -o effects.json "http://127.0.0.1:18001/v1/runs/$RUN/effects"
admin -o denials.json "http://127.0.0.1:18001/v1/runs/$RUN/denials"
"#;

/// Reads pass and writes stage on the origin; loopback allowed (its `--resolve`d address).
fn policy() -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "reads"
host = "{HOST}"
port = {ORIGIN_PORT}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "{HOST}"
port = {ORIGIN_PORT}
method = "write"
action = "stage"
"#
    )
}

/// A file the script wrote, trimmed (empty when it is missing).
fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// A JSON file the script wrote; panics with `context` when it is not JSON.
fn json(dir: &Path, name: &str, context: &str) -> Value {
    let text = read(dir, name);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {text:?}\n{context}"))
}

#[test]
fn case_c22_serve_transparent_binds_a_fence_an_operator_builds_to_the_run_of_its_source() {
    let test =
        "case_c22_serve_transparent_binds_a_fence_an_operator_builds_to_the_run_of_its_source";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let work = fx.dir.path().join("ns");
    std::fs::create_dir_all(work.join("www")).expect("origin directory");
    std::fs::write(work.join("www/index.html"), "from the origin\n").expect("index");
    let policy_path = fx.dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy()).expect("policy");
    let data = fx.data_dir();

    let mut flags = vec!["--net", "--mount", "--pid", "--fork", "--kill-child"];
    if !is_root() {
        flags.extend(["--user", "--map-root-user"]);
    }
    // `timeout` bounds the whole flow; killing `unshare` kills the namespace's PID 1
    // (`--kill-child`), and with it every process inside.
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120", "unshare"])
        .args(&flags)
        .args(["--", "bash", "-c", SCRIPT])
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("HOME", fx.dir.path())
        .env("AIRLOCK", airlock_bin())
        .env("DATA", &data)
        .env("POLICY", &policy_path)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let context = format!(
        "script exit {}; stderr: {}\nairlock's log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        read(&work, "airlock.log")
    );
    assert!(out.status.success(), "{context}");
    let read = |name: &str| read(&work, name);
    let json = |name: &str| json(&work, name, &context);

    // The run is bound to 10.99.0.1; a CIDR that overlaps it is refused.
    assert_eq!(read("run.code"), "201", "{}\n{context}", read("run.json"));
    let run = json("run.json")["id"].as_str().expect("run id").to_owned();
    assert_eq!(read("overlap.code"), "409", "{}", read("overlap.json"));
    let overlap = json("overlap.json");
    assert_eq!(overlap["reason_code"], "source_in_use", "{overlap:#}");
    assert!(
        overlap["reason"].as_str().is_some_and(|r| r.contains(&run)),
        "the refusal names the run holding the source: {overlap:#}"
    );

    // airlock's DNS, reached through the operator's dnat: a pool address for the allowed
    // name, nothing for the other.
    assert_eq!(read("getent-origin.code"), "0", "{context}");
    let answer = read("getent-origin.txt");
    let address: std::net::Ipv4Addr = answer
        .split_whitespace()
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("getent hosts {HOST}: no IPv4 answer: {answer:?}"));
    assert_eq!(
        address.octets()[..2],
        [198, 18],
        "the answer is a pool address (198.18.0.0/15): {answer}"
    );
    assert_ne!(
        read("getent-exfil.code"),
        "0",
        "exfil.attacker.test resolved: {}",
        read("getent-exfil.txt")
    );

    // From the bound source: the POST is staged, the GET passes.
    assert_eq!(read("post.code"), "202", "{}\n{context}", read("post.err"));
    assert_eq!(json("post.json")["status"], "staged");
    assert_eq!(read("get.code"), "200", "{}\n{context}", read("get.err"));
    assert_eq!(read("get.txt"), "from the origin");
    // From a source bound to no run: the connection is closed, curl gets no answer.
    assert_ne!(
        read("unbound.exit"),
        "0",
        "a connection from 10.99.0.2 (no run) was served: {} {}",
        read("unbound.code"),
        read("unbound.txt")
    );
    assert_eq!(read("unbound.code"), "000", "{}", read("unbound.err"));

    let effects = json("effects.json");
    let effects = effects["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "only the POST is staged: {effects:#?}");
    assert_eq!(effects[0]["method"], "POST");
    assert_eq!(
        effects[0]["url"],
        format!("http://{HOST}:{ORIGIN_PORT}/hook")
    );
    assert_eq!(effects[0]["state"], "staged");
    let denials = json("denials.json");
    let denials = denials["denials"].as_array().expect("denials");
    let lookup = denials
        .iter()
        .find(|d| {
            d["method"] == "DNS"
                && d["url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("dns:exfil.attacker.test?type="))
        })
        .unwrap_or_else(|| panic!("the NXDOMAIN is journaled as a DNS denial: {denials:#?}"));
    assert_eq!(lookup["reason_code"], "default_deny", "{lookup:#}");

    // The origin saw the one GET: neither the staged POST nor the unbound connection.
    let log = read("origin.log");
    let requests: Vec<&str> = log.lines().filter(|l| l.contains("HTTP/1.")).collect();
    assert_eq!(requests.len(), 1, "origin log:\n{log}");
    assert!(
        requests[0].contains("\"GET / HTTP/1.1\""),
        "origin log:\n{log}"
    );
}
