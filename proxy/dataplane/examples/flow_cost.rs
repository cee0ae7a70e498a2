//! Prints what flow rules cost (docs/performance.md, "Flow rules"): the commit's final
//! lineage pass (every effect analysed again against every read of its run) and the flow
//! evaluation per effect, for a run with 1,000 analysed reads and 100 effects on a sled
//! ledger: `cargo run --release -p airlock-dataplane --example flow_cost [READS EFFECTS]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_dataplane::flows::RunSources;
use airlock_dataplane::lineage::{reanalyse_effects, Job, LineageWorker};
use airlock_ledger::{Ledger, NewEffect, Read, Store};
use airlock_policy::Policy;
use bytes::Bytes;

const POLICY: &str = r#"version = 1
[[rule]]
id = "vault-read"
host = "vault.internal.example"
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "docs-read"
host = "docs.example.com"
action = "pass"

[[rule]]
id = "hooks"
host = "hooks.example.net"
action = "stage"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
min_overlap_bytes = 24
action = "block"
"#;

/// A read body of about 2 KB: twelve customer rows, distinct per read.
fn read_body(read: usize) -> Vec<u8> {
    let rows: Vec<serde_json::Value> = (0..12)
        .map(|row| {
            let i = read * 12 + row;
            serde_json::json!({
                "id": i,
                "name": format!("Customer{} Surname{}", i % 977, i * 31 % 1009),
                "email": format!("user{i}@domain{}.example", i % 13),
                "note": format!("renewal {} due; account manager {}", i % 4, i * 7 % 101),
            })
        })
        .collect();
    serde_json::to_vec(&rows).unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reads: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let effects: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let dir = tempfile::tempdir()?;
    let ledger: Arc<dyn Store> = Arc::new(Ledger::open(dir.path())?);
    let policy = Policy::from_toml_str(POLICY, "<flow_cost>")?;
    let run = ledger.create_run(None)?;
    let worker = LineageWorker::start(ledger.clone());
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, "application/json".parse()?);
    let started = Instant::now();
    for i in 0..reads {
        let (host, rule, labels) = if i % 2 == 0 {
            (
                "vault.internal.example",
                "vault-read",
                vec!["secret".to_owned()],
            )
        } else {
            ("docs.example.com", "docs-read", Vec::new())
        };
        let read = Read {
            run_id: run.id.clone(),
            seq: 0,
            method: "GET".into(),
            url: format!("https://{host}/rows/{i}"),
            status: Some(200),
            request_bytes: 0,
            response_bytes: 0,
            response_digest: None,
            rule: Some(rule.into()),
            created_at_ms: airlock_ledger::now_ms(),
            error: None,
            audit: Vec::new(),
            labels,
        };
        // Submitted as the request path does; a full queue journals the read unanalysed,
        // so the producer waits for room instead (the example wants every read analysed).
        if i % 100 == 99 {
            while ledger.read_contents(&run.id)?.len() + 200 < i {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        worker.submit(Job::Read {
            read: Box::new(read),
            body: vec![Bytes::from(read_body(i))],
            headers: headers.clone(),
            digest_pending: true,
        });
    }
    let mut ids = Vec::with_capacity(effects);
    for e in 0..effects {
        // One effect in ten carries three rows of a vault read; the rest a status line.
        let body = if e % 10 == 0 {
            let rows: serde_json::Value = serde_json::from_slice(&read_body((e * 2) % reads))?;
            serde_json::json!({"rows": rows.as_array().map(|r| r[..3].to_vec())}).to_string()
        } else {
            format!(r#"{{"text":"build {e} passed on main; deployed to staging"}}"#)
        };
        let effect = stage_status(&*ledger, &run.id, &policy, &body)?;
        worker.submit(Job::Effect {
            effect: effect.id.clone(),
        });
        ids.push(effect.id);
    }
    let last = ids.last().cloned();
    while let Some(last) = &last {
        if ledger.effect_lineage(last)?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let pipeline = started.elapsed();
    let analysed = ledger.read_contents(&run.id)?.len();

    // What staging waits for under a policy with flows: one effect's analysis by the
    // worker, submit to stored, with the run's reads already analysed.
    let mut waits = Vec::new();
    for e in 0..20 {
        let body = format!(r#"{{"text":"late status {e}: all checks green"}}"#);
        let effect = stage_status(&*ledger, &run.id, &policy, &body)?;
        let done = worker.analysed(&effect.id);
        let started = Instant::now();
        worker.submit(Job::Effect {
            effect: effect.id.clone(),
        });
        let _ = done.blocking_recv();
        waits.push(started.elapsed());
    }
    waits.sort();

    let started = Instant::now();
    reanalyse_effects(&*ledger, &run.id, &ids)?;
    let final_lineage = started.elapsed();

    let started = Instant::now();
    let sources = RunSources::load(&*ledger, &run.id)?;
    let load = started.elapsed();
    let mut records = Vec::with_capacity(ids.len());
    for id in &ids {
        let effect = ledger.effect(id)?.ok_or("effect vanished")?;
        let lineage = ledger.effect_lineage(id)?;
        records.push((effect, lineage));
    }
    let started = Instant::now();
    let mut violating = 0;
    for (effect, lineage) in &records {
        if !sources
            .check(&policy, effect, lineage.as_ref())
            .violations
            .is_empty()
        {
            violating += 1;
        }
    }
    let evaluate = started.elapsed();
    let edges: usize = records
        .iter()
        .map(|(_, l)| l.as_ref().map_or(0, |l| l.edges.len()))
        .sum();

    println!("flow_cost: {reads} reads ({analysed} with stored analyses), {effects} effects, sled");
    println!(
        "  staging pipeline (reads + effects analysed by the worker): {:.1} ms",
        ms(pipeline)
    );
    println!(
        "  final lineage pass at commit: {:.1} ms total, {:.2} ms per effect",
        ms(final_lineage),
        ms(final_lineage) / effects.max(1) as f64
    );
    println!(
        "  one effect's analysis at staging (the airlock-flow wait): median {:.2} ms, max {:.2} ms of {}",
        ms(waits[waits.len() / 2]),
        ms(waits[waits.len() - 1]),
        waits.len()
    );
    println!(
        "  loading the run's reads and effects once: {:.2} ms",
        ms(load)
    );
    println!(
        "  flow evaluation: {:.1} us per effect ({violating} of {effects} violate; {edges} edges in all)",
        evaluate.as_secs_f64() * 1e6 / effects.max(1) as f64
    );
    Ok(())
}

/// Stages `body` as a POST to the hooks host under the `hooks` rule.
fn stage_status(
    ledger: &dyn Store,
    run: &airlock_ledger::RunId,
    policy: &Policy,
    body: &str,
) -> Result<airlock_ledger::Effect, airlock_ledger::LedgerError> {
    ledger.stage(NewEffect {
        run_id: run,
        method: "POST",
        url: "https://hooks.example.net/hooks/status",
        headers: Vec::new(),
        body: body.as_bytes(),
        rule: Some("hooks"),
        policy_revision: policy.revision(),
        placeholders: Vec::new(),
        depends_on: Vec::new(),
        inject: None,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
