//! The lineage corpus on the pass path (docs/lineage.md, "Flows on the pass path"): each
//! case is one run that reads the case's body from a loopback origin under a `pass`
//! rule labelled `secret`, then sends its effects to another loopback origin under a
//! `pass` rule, so a `block` flow must refuse them before they are forwarded. An effect
//! is REFUSED when it gets 403 `flow_blocked` (or `flow_review_required` from the
//! secret flow), HELD when the `from = ["unanalysed"]` review flow refuses it (403
//! `flow_review_required`: its body could not be read). An exfiltration case is detected
//! when any effect is refused or held; a benign case is a false positive when any is
//! refused. The origin must receive exactly the effects that passed. Prints the rates
//! (`--nocapture`); asserts detection >= 95% and false positives <= 5%.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::lineage_corpus::{corpus, Case, Class};
use airlock_tests::{curl, Airlock, CurlResult, Fixture};
use futures_util::StreamExt as _;

use super::corpus::{case_origin, effect_args, with_git};

/// The review flow for bodies lineage cannot read.
const UNANALYSED_FLOW: &str = "unread-bodies";

fn policy(read_port: u16, sink_port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {read_port}
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "sink"
host = "127.0.0.1"
port = {sink_port}
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
min_overlap_bytes = 24
action = "block"

[[flow]]
id = "{UNANALYSED_FLOW}"
from = ["unanalysed"]
to = "external"
action = "review"
"#
    )
}

/// What happened to one case's effects.
#[derive(Default)]
struct Outcome {
    refused: usize,
    held: usize,
    passed: usize,
    /// The first refusal's reason.
    reason: String,
}

/// The answer to one effect, retried while it is `flow_unchecked` (the lineage worker
/// had not analysed the read within the pass path's bound).
async fn send(env: &std::collections::BTreeMap<String, String>, args: &[&str]) -> CurlResult {
    let mut sent = curl(env, args).await;
    for _ in 0..10 {
        if sent.status != 403 || sent.json()["reason_code"] != "flow_unchecked" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        sent = curl(env, args).await;
    }
    sent
}

async fn run_case(
    airlock: &Airlock,
    dir: &std::path::Path,
    index: usize,
    case: &Case,
    read_port: u16,
    sink_port: u16,
) -> Outcome {
    let (_run, env) = airlock.create_run().await;
    let read = curl(
        &env,
        &[&format!("https://127.0.0.1:{read_port}/case/{index}")],
    )
    .await;
    assert_eq!(read.status, 200, "{}: read {}", case.name, read.stderr);
    let mut outcome = Outcome::default();
    for (e, effect) in case.effects.iter().enumerate() {
        let url = format!("https://127.0.0.1:{sink_port}{}", effect.path);
        let args = effect_args(dir, &format!("pass-{index}-{e}"), effect, &url);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let sent = send(&env, &args).await;
        if sent.status < 300 {
            outcome.passed += 1;
            continue;
        }
        let body = sent.json();
        let code = body["reason_code"].as_str().unwrap_or("").to_owned();
        let reason = body["reason"].as_str().unwrap_or("").to_owned();
        assert_eq!(sent.status, 403, "{}: effect {e}: {body}", case.name);
        match code.as_str() {
            "flow_review_required" if reason.contains(UNANALYSED_FLOW) => outcome.held += 1,
            "flow_blocked" | "flow_review_required" => outcome.refused += 1,
            other => panic!(
                "{}: effect {e}: unexpected refusal {other}: {body}",
                case.name
            ),
        }
        if outcome.reason.is_empty() {
            outcome.reason = reason;
        }
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lineage_corpus_on_the_pass_path_refuses_exfiltration_and_passes_benign_requests() {
    let cases = Arc::new(corpus(with_git()));
    let fx = Fixture::new();
    let reads = case_origin(&fx, cases.clone()).await;
    let sink = airlock_tests::ok_origin(&fx.origin_ca).await;
    let (read_port, sink_port) = (reads.addr().port(), sink.addr().port());
    let airlock = fx.start(&policy(read_port, sink_port), &[]);
    let dir = fx.dir.path();
    let started = std::time::Instant::now();
    let mut outcomes: Vec<(usize, Outcome)> = futures_util::stream::iter(cases.iter().enumerate())
        .map(|(i, case)| {
            let airlock = &airlock;
            async move {
                (
                    i,
                    run_case(airlock, dir, i, case, read_port, sink_port).await,
                )
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    outcomes.sort_by_key(|(i, _)| *i);

    let (mut exfil, mut detected, mut benign, mut false_pos) = (0, 0, 0, 0);
    let (mut detected_held, mut benign_held, mut passed) = (0, 0, 0);
    let mut misses = Vec::new();
    println!(
        "\n{:<34} {:<13} {:<18} first reason",
        "case", "class", "refused/held/passed"
    );
    for (i, outcome) in &outcomes {
        let case = &cases[*i];
        passed += outcome.passed;
        let refused = outcome.refused > 0;
        let held = !refused && outcome.held > 0;
        match case.class {
            Class::Exfiltration => {
                exfil += 1;
                if refused || held {
                    detected += 1;
                    detected_held += usize::from(held);
                } else {
                    misses.push(case.name.clone());
                }
            }
            Class::Benign => {
                benign += 1;
                benign_held += usize::from(held);
                if refused {
                    false_pos += 1;
                    misses.push(format!("{} (false positive)", case.name));
                }
            }
            Class::OutOfScope => {}
        }
        println!(
            "{:<34} {:<13} {:<18} {}",
            case.name,
            format!("{:?}", case.class),
            format!("{}/{}/{}", outcome.refused, outcome.held, outcome.passed),
            outcome.reason.chars().take(100).collect::<String>()
        );
    }
    let detection = detected as f64 * 100.0 / exfil.max(1) as f64;
    let fp_rate = false_pos as f64 * 100.0 / benign.max(1) as f64;
    println!(
        "\npass path: detection {detected}/{exfil} = {detection:.1}%; false positives {false_pos}/{benign} = {fp_rate:.1}%; {} cases in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "held as unanalysed: {detected_held} of the detected exfiltration cases; {benign_held}/{benign} benign cases"
    );
    println!("misses: {misses:?}");
    // What was refused never reached the origin; what passed did, once.
    assert_eq!(
        sink.received().len(),
        passed,
        "the origin received exactly the requests that passed"
    );
    assert!(
        exfil >= 40 && benign >= 40,
        "{exfil} exfiltration, {benign} benign cases"
    );
    assert!(detection >= 95.0, "detection {detection:.1}%: {misses:?}");
    assert!(fp_rate <= 5.0, "false positives {fp_rate:.1}%: {misses:?}");
}
