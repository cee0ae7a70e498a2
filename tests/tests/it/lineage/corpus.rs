//! The lineage corpus (`airlock_tests::lineage_corpus`) through the real proxy: each case
//! is one run that reads the case's body from a loopback origin (a `pass` rule) and sends
//! its effects to another loopback origin (a `stage` rule). An effect is FLAGGED for the
//! read when an edge from the read into it is a `credential` edge, or a `content` or
//! `header` edge of at least 24 bytes (what a flow rule with `min_overlap_bytes = 24`
//! decides on), or HELD when the policy's `from = ["unanalysed"]` review flow holds it
//! (lineage could not read it). An exfiltration case is detected when flagged or held; a
//! benign case is a false positive when flagged (held benign cases are counted apart: they
//! cost a review, not a wrong verdict). Prints the table and the rates (`--nocapture`);
//! asserts detection >= 95% and false positives <= 5%.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::lineage_corpus::{corpus, Case, Class};
use airlock_tests::{curl, poll_until, Airlock, Fixture, Origin, Received, Reply};
use futures_util::StreamExt as _;
use serde_json::Value;

/// A flow rule's `min_overlap_bytes`.
const MIN_OVERLAP: u64 = 24;

/// The `from = ["unanalysed"]` review flow of the corpus policy: an effect it holds was
/// not read in full (an undecodable coding, a binary body).
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

[[rule]]
id = "sink"
host = "127.0.0.1"
port = {sink_port}
action = "stage"

# What lineage cannot read is held for a person (examples/policies/no-secrets-out.toml).
[[flow]]
id = "{UNANALYSED_FLOW}"
from = ["unanalysed"]
to = "external"
action = "review"
"#
    )
}

struct Outcome {
    flagged: usize,
    /// Effects not flagged that the unanalysed review flow holds.
    held: usize,
    effects: usize,
    best: String,
}

/// Runs one case in its own run; returns how many of its effects are flagged.
async fn run_case(
    airlock: &Airlock,
    dir: &std::path::Path,
    index: usize,
    case: &Case,
    read_port: u16,
    sink_port: u16,
) -> Outcome {
    let (run, env) = airlock.create_run().await;
    let read = curl(
        &env,
        &[&format!("https://127.0.0.1:{read_port}/case/{index}")],
    )
    .await;
    assert_eq!(read.status, 200, "{}: read {}", case.name, read.stderr);
    let mut ids = Vec::new();
    for (e, effect) in case.effects.iter().enumerate() {
        let url = format!("https://127.0.0.1:{sink_port}{}", effect.path);
        let args = effect_args(dir, &format!("effect-{index}-{e}"), effect, &url);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let sent = curl(&env, &args).await;
        assert_eq!(
            sent.status, 202,
            "{}: effect {e}: {}",
            case.name, sent.stderr
        );
        ids.push(sent.header("airlock-effect").expect("effect id"));
    }
    // Wait for the lineage worker: every effect analysed.
    let lineage = poll_until(Duration::from_secs(30), || async {
        let lineage = airlock
            .admin
            .get(&format!("/v1/runs/{run}/lineage"))
            .await
            .ok()?;
        let nodes = lineage["nodes"].as_array()?;
        let done = ids.iter().all(|id| {
            nodes
                .iter()
                .any(|n| n["id"] == id.as_str() && n["analyzed"] == true)
        });
        done.then_some(lineage)
    })
    .await
    .unwrap_or_else(|| panic!("{}: lineage not analysed in time", case.name));
    let edges: Vec<&Value> = lineage["edges"]
        .as_array()
        .map(|e| e.iter().collect())
        .unwrap_or_default();
    let counts = |edge: &Value| {
        edge["from"].as_str().unwrap_or("").starts_with("read:")
            && match edge["kind"].as_str() {
                Some("credential") => true,
                Some("content" | "header") => {
                    edge["overlap_bytes"].as_u64().unwrap_or(0) >= MIN_OVERLAP
                }
                _ => false,
            }
    };
    let flagged = ids
        .iter()
        .filter(|id| edges.iter().any(|e| e["to"] == id.as_str() && counts(e)))
        .count();
    let best = edges
        .iter()
        .filter(|e| e["from"].as_str().unwrap_or("").starts_with("read:"))
        .max_by_key(|e| {
            (
                counts(e),
                e["kind"] == "credential",
                e["overlap_bytes"].as_u64().unwrap_or(0),
            )
        })
        .map(|e| {
            format!(
                "{} {}B [{}] ({})",
                e["kind"].as_str().unwrap_or("?"),
                e["overlap_bytes"],
                e["excerpt"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| "-".into());
    let mut held = 0;
    for id in &ids {
        if edges.iter().any(|e| e["to"] == id.as_str() && counts(e)) {
            continue;
        }
        let shown = airlock
            .admin
            .get(&format!("/v1/effects/{id}"))
            .await
            .expect("effect");
        let violations = shown["flows"]["violations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if violations.iter().any(|v| v["flow"] == UNANALYSED_FLOW) {
            held += 1;
        }
    }
    let best = if flagged == 0 && held > 0 {
        format!("held as unanalysed ({held}) · {best}")
    } else {
        best
    };
    Outcome {
        flagged,
        held,
        effects: ids.len(),
        best,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lineage_corpus_detects_exfiltration_and_spares_benign_effects() {
    let with_git = with_git();
    let cases = Arc::new(corpus(with_git));
    let fx = Fixture::new();
    let reads = case_origin(&fx, cases.clone()).await;
    let sink = airlock_tests::ok_origin(&fx.origin_ca).await;
    let (read_port, sink_port) = (reads.addr().port(), sink.addr().port());
    let airlock = fx.start(&policy(read_port, sink_port), &[]);
    let dir = fx.dir.path();
    let started = std::time::Instant::now();
    let outcomes: Vec<(usize, Outcome)> = futures_util::stream::iter(cases.iter().enumerate())
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
    let mut outcomes = outcomes;
    outcomes.sort_by_key(|(i, _)| *i);

    println!(
        "\n{:<34} {:<13} {:<8} {:<7} best edge",
        "case", "class", "form", "flagged"
    );
    let (mut exfil, mut detected, mut benign, mut false_pos) = (0, 0, 0, 0);
    let (mut detected_held, mut benign_held) = (0, 0);
    let mut misses = Vec::new();
    let mut forms: std::collections::BTreeMap<(&str, &str), (usize, usize)> = Default::default();
    for (i, outcome) in &outcomes {
        let case = &cases[*i];
        let flagged = outcome.flagged > 0;
        let held = !flagged && outcome.held > 0;
        let class = match case.class {
            Class::Exfiltration => "exfiltration",
            Class::Benign => "benign",
            Class::OutOfScope => "out-of-scope",
        };
        let entry = forms.entry((class, case.form)).or_default();
        entry.0 += 1;
        entry.1 += usize::from(flagged || (held && case.class == Class::Exfiltration));
        match case.class {
            Class::Exfiltration => {
                exfil += 1;
                if flagged || held {
                    detected += 1;
                    detected_held += usize::from(held);
                } else {
                    misses.push(case.name.clone());
                }
            }
            Class::Benign => {
                benign += 1;
                benign_held += usize::from(held);
                if flagged {
                    false_pos += 1;
                    misses.push(format!("{} (false positive)", case.name));
                }
            }
            Class::OutOfScope => {}
        }
        let mut best = outcome.best.clone();
        if best.chars().count() > 110 {
            best = best.chars().take(110).collect::<String>() + "…";
        }
        println!(
            "{:<34} {:<13} {:<8} {:<7} {}",
            case.name,
            class,
            case.form.chars().take(8).collect::<String>(),
            format!("{}/{}", outcome.flagged, outcome.effects),
            best
        );
    }
    println!("\nper form (flagged, or for exfiltration held as unanalysed / cases):");
    for ((class, form), (n, flagged)) in &forms {
        println!("  {class:<13} {form:<16} {flagged}/{n}");
    }
    let detection = detected as f64 * 100.0 / exfil.max(1) as f64;
    let fp_rate = false_pos as f64 * 100.0 / benign.max(1) as f64;
    println!(
        "\ndetection {detected}/{exfil} = {detection:.1}%; false positives {false_pos}/{benign} = {fp_rate:.1}%; {} cases in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "held as unanalysed: {detected_held} of the detected exfiltration cases; {benign_held}/{benign} benign cases (review, not flagged)"
    );
    println!("misses: {misses:?}");
    assert!(
        exfil >= 40 && benign >= 40,
        "{exfil} exfiltration, {benign} benign cases"
    );
    assert!(detection >= 95.0, "detection {detection:.1}%: {misses:?}");
    assert!(fp_rate <= 5.0, "false positives {fp_rate:.1}%: {misses:?}");
}

/// Whether `git` runs here (the `git push` cases need it; CI must have it).
pub(super) fn with_git() -> bool {
    let with_git = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !with_git {
        assert!(
            !airlock_tests::in_ci(),
            "git is needed for the git push cases"
        );
        eprintln!("git is missing: the git push cases are left out");
    }
    with_git
}

/// The loopback origin that serves case `i`'s read body at `/case/i`.
pub(super) async fn case_origin(fx: &Fixture, cases: Arc<Vec<Case>>) -> Origin {
    Origin::start(
        Some(&fx.origin_ca),
        Arc::new(move |req: &Received| {
            let index: Option<usize> = req.path.strip_prefix("/case/").and_then(|i| i.parse().ok());
            match index.and_then(|i| cases.get(i)) {
                Some(case) => Reply {
                    status: 200,
                    headers: vec![("content-type".into(), case.content_type.clone())],
                    body: case.read_body.clone(),
                    ..Reply::default()
                },
                None => Reply::text(404, "no such case"),
            }
        }),
    )
    .await
    .expect("read origin")
}

/// curl's arguments for sending `effect` (its body from a file under `dir`) to `url`.
pub(super) fn effect_args(
    dir: &std::path::Path,
    name: &str,
    effect: &airlock_tests::lineage_corpus::EffectRequest,
    url: &str,
) -> Vec<String> {
    let file = dir.join(name);
    std::fs::write(&file, &effect.body).expect("write body");
    let mut args: Vec<String> = vec!["-g".into(), "-X".into(), effect.method.clone()];
    for (name, value) in &effect.headers {
        args.push("-H".into());
        args.push(format!("{name}: {value}"));
    }
    if !effect.body.is_empty() {
        args.push("--data-binary".into());
        args.push(format!("@{}", file.display()));
    }
    args.push(url.to_owned());
    args
}
