//! One run cannot starve the others through the fence socket (issue 35, item 4;
//! docs/containment.md, "Limits"): its connections count against
//! `--max-connections-per-run` from their hello, a connection without a hello or a DNS
//! connection without a query is closed, and DNS queries past `--dns-queries-per-second`
//! are not answered. Each refusal shows in the run's fence counts and in `/metrics`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock_net::fence::{read_frame, write_frame, write_hello, Hello, Kind};
use airlock_tests::{curl, loopback_policy, ok_origin, Airlock, Fixture};
use tokio::io::AsyncReadExt as _;
use tokio::net::UnixStream;

/// The loopback policy, and `b.example` resolvable (a read rule names it).
fn policy(port: u16) -> String {
    format!(
        "{}\n[[rule]]\nid = \"b-reads\"\nhost = \"b.example\"\nmethod = \"read\"\naction = \"pass\"\n",
        loopback_policy(port)
    )
}

fn fence_socket(fx: &Fixture) -> PathBuf {
    fx.data_dir().join("fence.sock")
}

/// A connection to the fence socket that has sent its hello for `run`.
async fn hello(
    socket: &PathBuf,
    run: &str,
    token: &str,
    kind: Kind,
) -> std::io::Result<UnixStream> {
    let mut stream = UnixStream::connect(socket).await?;
    let hello = Hello {
        run: run.to_owned(),
        token: token.to_owned(),
        kind,
    };
    write_hello(&mut stream, &hello).await?;
    Ok(stream)
}

/// A DNS query (id 0x4242, recursion desired) for `name`, type A.
fn query(name: &str) -> Vec<u8> {
    let mut q = vec![0x42, 0x42, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend(label.as_bytes());
    }
    q.extend([0, 0, 1, 0, 1]);
    q
}

/// `(rcode, answer count)` of a DNS message.
fn rcode_and_answers(answer: &[u8]) -> (u8, u16) {
    (answer[3] & 0x0f, u16::from_be_bytes([answer[6], answer[7]]))
}

/// One query for `name` over a new fence DNS connection of `run`: its answer.
async fn resolve(socket: &PathBuf, run: &str, token: &str, name: &str) -> Option<Vec<u8>> {
    let mut stream = hello(socket, run, token, Kind::Dns).await.ok()?;
    write_frame(&mut stream, &query(name)).await.ok()?;
    read_frame(&mut stream).await.ok().flatten()
}

/// Whether the peer closed `stream` within `within` (EOF or an error).
async fn closed_within(stream: &mut UnixStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// A counter's value in `/metrics` text (0 when absent).
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn fence_counts(airlock: &Airlock, run: &str) -> serde_json::Value {
    airlock
        .admin
        .get(&format!("/v1/runs/{run}/fence"))
        .await
        .expect("fence counts")["counts"]
        .clone()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// How many connections this process can hold, up to `wanted`: the open-file limit is
/// raised as far as it may be (root with `CAP_SYS_RESOURCE` may raise the hard limit),
/// keeping 64 descriptors spare.
fn connections_we_can_hold(wanted: u64) -> usize {
    let spare = 64;
    let _ = rlimit::setrlimit(rlimit::Resource::NOFILE, wanted + spare, wanted + spare);
    let _ = rlimit::increase_nofile_limit(wanted + spare);
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap_or((1024, 1024));
    usize::try_from(soft.saturating_sub(spare).min(wanted)).unwrap_or(1000)
}

/// A second process (python3) that opens `n` DNS connections of `run` through the fence
/// socket, prints `ready HELD RETRIES` and holds them until its stdin closes: two
/// processes hold 20,000 where one may hold fewer (a hard limit of 20,000 descriptors).
const HOLDER: &str = r#"
import json, socket, struct, sys, time
path, run, token, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
hello = json.dumps({"run": run, "token": token, "kind": "dns"}).encode()
frame = struct.pack(">H", len(hello)) + hello
held, retries = [], 0
while len(held) < n:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(frame)
        held.append(s)
    except OSError:
        s.close()
        retries += 1
        if retries > 100000:
            sys.exit("the fence socket stopped accepting")
        time.sleep(0.001)
print("ready", len(held), retries, flush=True)
sys.stdin.read()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_held_fence_connections_of_one_run_leave_another_run_and_healthz_answered()
{
    const WANTED: usize = 20_000;
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, a, _) = fx.start_run(&policy(port), &[]).await;
    let (b, b_env) = airlock.create_run().await;
    let (a_token, b_token) = (airlock.run_token(&a).await, airlock.run_token(&b).await);
    let socket = fence_socket(&fx);
    let pid = airlock.pid().expect("pid");
    let fds_before = open_fds(pid);

    // Run A opens 20,000 DNS connections through the fence socket and holds them all:
    // half in a second process, half here.
    let started = Instant::now();
    let mut holder = std::process::Command::new("python3")
        .args(["-c", HOLDER])
        .arg(&socket)
        .args([&a, &a_token, &(WANTED / 2).to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok();
    let here = match holder {
        Some(_) => connections_we_can_hold((WANTED / 2) as u64),
        None => connections_we_can_hold(WANTED as u64),
    };
    let mut held = Vec::with_capacity(here);
    let mut failed_connects = 0usize;
    while held.len() < here {
        match hello(&socket, &a, &a_token, Kind::Dns).await {
            Ok(stream) => held.push(stream),
            Err(_) => {
                // The listen backlog is full for a moment: airlock accepts and closes.
                failed_connects += 1;
                assert!(
                    failed_connects < 100_000,
                    "the fence socket stopped accepting"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let held_elsewhere = match holder.as_mut().and_then(|h| h.stdout.take()) {
        Some(stdout) => {
            let line = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                let _ =
                    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
                line
            })
            .await
            .expect("the holder's answer");
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some("ready"), "the holder: {line:?}");
            words.next().and_then(|n| n.parse().ok()).unwrap_or(0usize)
        }
        None => 0,
    };
    let wanted = here + held_elsewhere;
    if wanted < WANTED {
        eprintln!(
            "holding {wanted} connections, not 20,000: no python3 for a second process, and \
             this one's open-file limit cannot be raised further"
        );
    }
    let opened_in = started.elapsed();
    let max_fds = open_fds(pid);

    // While A holds them: /healthz, run B through the proxy listener, and run B's DNS
    // through the fence socket are answered, each within 5 s.
    let health = tokio::time::timeout(Duration::from_secs(5), airlock.admin.get("/healthz"))
        .await
        .expect("/healthz answers within 5 s")
        .expect("/healthz");
    assert_eq!(health["status"], "ok", "{health}");
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        curl(&b_env, &[&format!("https://127.0.0.1:{port}/customers")]),
    )
    .await
    .expect("run B's request is answered within 10 s");
    assert_eq!(read.status, 200, "{}", read.stderr);
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        resolve(&socket, &b, &b_token, "b.example"),
    )
    .await
    .expect("run B's DNS is answered within 5 s")
    .expect("an answer");
    assert_eq!(
        rcode_and_answers(&answer),
        (0, 1),
        "b.example gets a pool address"
    );

    // airlock kept at most A's cap (256 by default) of them and closed the rest: refused
    // at the cap after their hello, or (while the accept backlog was deep) closed before
    // it to make room (--max-unauthenticated-connections).
    let closed = |metrics: &str| {
        counter(
            metrics,
            "airlock_fence_connections_refused_total{limit=\"max_connections_per_run\"}",
        ) + counter(
            metrics,
            "airlock_fence_connections_closed_total{reason=\"hello_evicted\"}",
        ) + counter(
            metrics,
            "airlock_fence_connections_refused_total{limit=\"max_connections\"}",
        )
    };
    let metrics = airlock_tests::poll_until(Duration::from_secs(60), || async {
        let metrics = airlock.admin.get_text("/metrics").await.ok()?;
        (closed(&metrics) as usize >= wanted - 256).then_some(metrics)
    })
    .await
    .expect("all but 256 of A's connections are closed within 60 s");
    let counts = fence_counts(&airlock, &a).await;
    let limited = counts["connections_limited"].as_u64().unwrap_or(0);
    assert!(limited > 0, "{counts}");
    let fds_now = open_fds(pid);
    assert!(
        fds_now < fds_before + 1500,
        "airlock holds {fds_now} descriptors (before: {fds_before}): the refused connections were closed"
    );
    assert!(
        counter(
            &metrics,
            "airlock_fence_connections_refused_total{limit=\"max_connections_per_run\"}"
        ) >= limited,
        "{metrics}"
    );
    eprintln!(
        "{wanted} fence connections of one run opened in {opened_in:?} ({failed_connects} connects retried); \
         airlock refused {limited} at --max-connections-per-run; its descriptors: {fds_before} before, \
         {max_fds} right after, {fds_now} while they are held"
    );
    drop(held);
    if let Some(mut holder) = holder {
        drop(holder.stdin.take());
        let _ = holder.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_connection_without_a_hello_or_an_idle_dns_connection_is_closed() {
    let fx = Fixture::new();
    let (airlock, run, _) = fx
        .start_run(
            &policy(9),
            &["--auth-timeout", "1", "--keep-alive-timeout", "2"],
        )
        .await;
    let token = airlock.run_token(&run).await;
    let socket = fence_socket(&fx);

    // No hello: closed after --auth-timeout (1 s).
    let started = Instant::now();
    let mut silent = UnixStream::connect(&socket).await.expect("connect");
    assert!(
        closed_within(&mut silent, Duration::from_secs(10)).await,
        "a connection without a hello is closed"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}"
    );

    // A DNS connection answered once, then idle: closed after --keep-alive-timeout (2 s).
    let mut dns = hello(&socket, &run, &token, Kind::Dns)
        .await
        .expect("hello");
    write_frame(&mut dns, &query("b.example"))
        .await
        .expect("query");
    let answer = read_frame(&mut dns).await.expect("read").expect("answer");
    assert_eq!(rcode_and_answers(&answer), (0, 1));
    let started = Instant::now();
    assert!(
        closed_within(&mut dns, Duration::from_secs(15)).await,
        "an idle DNS connection is closed"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1800) && waited < Duration::from_secs(10),
        "closed after {waited:?}, expected about 2 s"
    );
    let counts = fence_counts(&airlock, &run).await;
    assert_eq!(counts["dns_idle_closed"], 1, "{counts}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert!(
        counter(
            &metrics,
            "airlock_fence_connections_closed_total{reason=\"hello_timeout\"}"
        ) >= 1,
        "{metrics}"
    );
    assert!(
        counter(
            &metrics,
            "airlock_fence_connections_closed_total{reason=\"dns_idle\"}"
        ) >= 1,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_over_udp_past_a_runs_rate_is_not_answered() {
    let fx = Fixture::new();
    let airlock = fx.start(
        &policy(9),
        &["--dns", "127.0.0.1:0", "--dns-queries-per-second", "5"],
    );
    let run = airlock
        .admin
        .post("/v1/runs", Some(serde_json::json!({"source": "127.0.0.1"})))
        .await
        .expect("a run bound to 127.0.0.1");
    let run = run["id"].as_str().expect("id").to_owned();
    let addresses: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fx.data_dir().join("addresses.json")).expect("addresses"),
    )
    .expect("json");
    let dns = addresses["dns"].as_str().expect("--dns address").to_owned();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    socket.connect(&dns).await.expect("connect");
    // 40 queries at once: the bucket holds two seconds' worth (10), plus what refills.
    for _ in 0..40 {
        socket.send(&query("b.example")).await.expect("send");
    }
    let mut answered = 0;
    let mut buf = [0u8; 512];
    while let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await
    {
        answered += 1;
    }
    assert!((10..=14).contains(&answered), "{answered} of 40 answered");
    let counts = fence_counts(&airlock, &run).await;
    let limited = counts["dns_rate_limited"].as_u64().unwrap_or(0);
    assert_eq!(limited + answered, 40, "{counts}");
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_eq!(
        counter(&metrics, "airlock_fence_dns_rate_limited_total"),
        limited,
        "{metrics}"
    );
}
