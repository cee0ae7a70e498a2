//! PostgreSQL-only behaviour across instances on one database: gap-free numbering and
//! at-most-once `mark_releasing` under concurrency, notifications from another instance,
//! the schema version check, URL errors and health through a lost server.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::conformance::contracts::new_effect;
use crate::conformance::postgres::TestServer;
use crate::{
    Change, EffectStore, JournalStore, LedgerError, LineageStore, PgOpenError, PgStore, Refused,
    RunStore, Store, Verdict,
};

fn two_stores() -> Option<(TestServer, Arc<PgStore>, Arc<PgStore>)> {
    let server = TestServer::start()?;
    let url = server.database();
    let a = Arc::new(PgStore::open(&url, 4).expect("open A"));
    let b = Arc::new(PgStore::open(&url, 4).expect("open B"));
    Some((server, a, b))
}

#[test]
fn staging_from_two_instances_numbers_effects_gap_free() {
    let Some((_server, a, b)) = two_stores() else {
        return;
    };
    let run = a.create_run(None).expect("run");
    const THREADS: usize = 8;
    const EACH: usize = 25;
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|n| {
            let store = if n % 2 == 0 { a.clone() } else { b.clone() };
            let (run, start) = (run.id.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (0..EACH)
                    .map(|i| {
                        let body = format!("{n}-{i}");
                        store
                            .stage(new_effect(&run, body.as_bytes(), Vec::new()))
                            .expect("stage")
                            .seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let seqs: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a staging thread"))
        .collect();
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    let total = (THREADS * EACH) as u64;
    assert_eq!(unique.len() as u64, total, "sequence numbers repeat");
    assert_eq!(unique, (1..=total).collect(), "sequence numbers have gaps");
    let listed: Vec<u64> = b
        .effects(&run.id)
        .expect("effects")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(listed, (1..=total).collect::<Vec<_>>());
}

#[test]
fn mark_releasing_raced_from_two_instances_succeeds_once() {
    let Some((_server, a, b)) = two_stores() else {
        return;
    };
    for round in 0..10 {
        let run = a.create_run(None).expect("run");
        let effect = a
            .stage(new_effect(
                &run.id,
                format!("{round}").as_bytes(),
                Vec::new(),
            ))
            .expect("stage");
        a.decide_effect(&effect.id, Verdict::Approve, "t")
            .expect("approve");
        a.begin_commit(&run.id, false, "t").expect("commit");
        let start = Arc::new(Barrier::new(4));
        let racers: Vec<_> = (0..4)
            .map(|n| {
                let store = if n % 2 == 0 { a.clone() } else { b.clone() };
                let (id, start) = (effect.id.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    store.mark_releasing(&id)
                })
            })
            .collect();
        let results: Vec<_> = racers
            .into_iter()
            .map(|r| r.join().expect("racer"))
            .collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        for result in results.into_iter().filter_map(|r| r.err()) {
            assert!(
                matches!(
                    result,
                    LedgerError::Refused(Refused::EffectTransition { .. })
                ),
                "the losers are refused: {result:?}"
            );
        }
    }
}

#[test]
fn staging_raced_with_an_abort_from_another_instance_leaves_no_staged_effect() {
    let Some((_server, a, b)) = two_stores() else {
        return;
    };
    for round in 0..3 {
        let run = a.create_run(None).expect("run");
        const THREADS: usize = 8;
        let start = Arc::new(Barrier::new(THREADS + 1));
        let handles: Vec<_> = (0..THREADS)
            .map(|n| {
                let store = if n % 2 == 0 { a.clone() } else { b.clone() };
                let (run, start) = (run.id.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut staged = 0u64;
                    loop {
                        match store.stage(new_effect(&run, b"x", Vec::new())) {
                            Ok(_) => staged += 1,
                            Err(LedgerError::Refused(Refused::RunNotOpen { .. })) => {
                                return staged;
                            }
                            Err(other) => panic!("round {round}: {other:?}"),
                        }
                    }
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_millis(30));
        b.abort(&run.id, "t").expect("abort");
        let staged: u64 = handles
            .into_iter()
            .map(|h| h.join().expect("a staging thread"))
            .sum();
        let effects = a.effects(&run.id).expect("effects");
        assert_eq!(
            effects.len() as u64,
            staged,
            "round {round}: every acknowledged stage is listed"
        );
        let left: Vec<_> = effects
            .iter()
            .filter(|e| e.state != crate::EffectState::Discarded)
            .map(|e| (e.seq, e.state))
            .collect();
        assert!(
            left.is_empty(),
            "round {round}: staged after the abort: {left:?}"
        );
        assert!(
            staged > 0,
            "round {round}: something was staged before the abort"
        );
    }
}

#[test]
fn a_write_through_one_instance_is_announced_to_the_other() {
    let Some((_server, a, b)) = two_stores() else {
        return;
    };
    let changes_b = b.subscribe();
    let changes_a = a.subscribe();
    let run = a.create_run(None).expect("run");
    let staged = a
        .stage(new_effect(
            &run.id,
            b"x",
            vec![crate::PlaceholderSpec {
                pointer: "/id".into(),
                kind: crate::ValueKind::Number,
            }],
        ))
        .expect("stage");
    a.abort(&run.id, "t").expect("abort");
    let expected = vec![
        Change::RunChanged(run.id.clone()),
        Change::EffectChanged {
            run: run.id.clone(),
            effect: staged.id.clone(),
        },
        Change::PlaceholdersIssued(run.id.clone()),
        Change::EffectChanged {
            run: run.id.clone(),
            effect: staged.id.clone(),
        },
        Change::RunChanged(run.id.clone()),
        Change::RunClosed(run.id.clone()),
    ];
    // A's own subscriber has them already, in order, once.
    let own: Vec<Change> = changes_a.try_iter().collect();
    assert_eq!(own, expected);
    // B hears them from the server, in commit order.
    let started = Instant::now();
    let mut heard = Vec::new();
    while heard.len() < expected.len() {
        match changes_b.recv_timeout(Duration::from_secs(5)) {
            Ok(change) => heard.push(change),
            Err(_) => break,
        }
    }
    assert_eq!(heard, expected, "after {:?}", started.elapsed());
    // And nothing twice on A: its own notifications came back from the server too.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(changes_a.try_iter().count(), 0);
}

#[test]
fn a_database_newer_than_the_binary_is_refused() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    drop(PgStore::open(&url, 1).expect("first open migrates"));
    let bump = url.clone();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&bump, postgres::NoTls).expect("connect");
        client
            .batch_execute("INSERT INTO airlock_schema_version (version) VALUES (999)")
            .expect("bump the version");
    })
    .join()
    .expect("thread");
    match PgStore::open(&url, 1) {
        Err(PgOpenError::SchemaTooNew { database, binary }) => {
            assert_eq!((database, binary), (999, super::SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[test]
fn bad_urls_and_tls_are_refused_without_the_password() {
    let error =
        PgStore::open("postgres://u:s3cret@127.0.0.1:notaport/db", 1).expect_err("bad port");
    assert!(matches!(error, PgOpenError::Url { .. }), "{error:?}");
    assert!(!error.to_string().contains("s3cret"), "{error}");
    let error = PgStore::open("postgres://u@127.0.0.1/db?sslmode=require", 1).expect_err("tls");
    assert!(matches!(error, PgOpenError::Tls { .. }), "{error:?}");
    // A port nothing listens on: unreachable, named without the password.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let error = PgStore::open(&format!("postgres://u:s3cret@127.0.0.1:{port}/db"), 1)
        .expect_err("unreachable");
    assert!(matches!(error, PgOpenError::Connect { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains(&format!("u@127.0.0.1:{port}/db")), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn a_lost_server_degrades_health_until_a_reconnect_succeeds() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let store = PgStore::open(&url, 2).expect("open");
    let run = store.create_run(None).expect("run");
    assert!(store.health().writable);
    server.stop();
    // Before anyone calls, the listener's lost connection already degrades the health.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.health().writable && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(store.health().reason, Some("ledger_degraded"));
    // The call that finds a connection lost is a storage fault, a call that cannot
    // reconnect is refused as degraded (which one comes first depends on the thread).
    for _ in 0..3 {
        let error = store.create_run(None).expect_err("the server is down");
        assert!(
            matches!(
                error,
                LedgerError::Storage { .. } | LedgerError::Degraded { .. }
            ),
            "{error:?}"
        );
    }
    let error = store
        .create_run(None)
        .expect_err("the server is still down");
    assert!(matches!(error, LedgerError::Degraded { .. }), "{error:?}");
    assert!(
        error.to_string().contains("refused"),
        "names the cause: {error}"
    );
    let health = store.health();
    assert!(!health.writable);
    assert_eq!(health.reason, Some("ledger_degraded"));
    assert!(health.storage_faults >= 1);
    server.restart();
    // Nobody writes: the store reconnects by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.health().writable && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = store.health();
    assert!(health.writable, "{health:?}");
    assert!(health.recoveries >= 1);
    assert_eq!(
        store.run(&run.id).expect("read").map(|r| r.id),
        Some(run.id)
    );
}

#[test]
fn records_with_nul_characters_round_trip() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let store = PgStore::open(&server.database(), 1).expect("open");
    let run = store
        .create_run(Some("nul\u{0}profile".into()))
        .expect("run");
    let mut read = crate::conformance::contracts::new_read(&run.id, "https://example.com/a\u{0}b");
    read.error = Some("bad\u{0}".into());
    let read = store.journal_read(read).expect("journal a read with NUL");
    assert_eq!(store.reads(&run.id).expect("reads"), vec![read]);
    assert_eq!(
        store.run(&run.id).expect("run").map(|r| r.profile),
        Some(Some("nul\u{0}profile".to_owned()))
    );
}

#[test]
fn a_placeholder_staged_through_one_instance_is_counted_by_the_other_at_once() {
    let Some((_server, a, b)) = two_stores() else {
        return;
    };
    assert!(a.placeholders_shared() && b.placeholders_shared());
    let run = a.create_run(None).expect("run").id;
    assert_eq!(b.placeholder_count(&run).expect("count"), Some(0));
    let specs = || {
        vec![
            crate::PlaceholderSpec {
                pointer: "/id".into(),
                kind: crate::ValueKind::Number,
            },
            crate::PlaceholderSpec {
                pointer: "/node".into(),
                kind: crate::ValueKind::String,
            },
        ]
    };
    for n in 1..=20u64 {
        a.stage(new_effect(&run, b"x", specs())).expect("stage");
        // No wait for the notification: the count is read from the database.
        assert_eq!(b.placeholder_count(&run).expect("count"), Some(2 * n));
    }
    assert_eq!(b.placeholders(&run).expect("placeholders").len(), 40);
    a.abort(&run, "t").expect("abort");
    a.prune_run(&run).expect("prune");
    assert_eq!(b.placeholder_count(&run).expect("count"), Some(0), "pruned");
    assert_eq!(
        b.placeholder_count(&crate::RunId("run_unknown".into()))
            .expect("count"),
        Some(0)
    );
}

#[test]
fn the_placeholder_count_is_read_from_the_primary_key() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let store = PgStore::open(&url, 1).expect("open");
    let run = store.create_run(None).expect("run").id;
    let plans = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        // 2,000 runs of 5 placeholders beside the one asked about, with statistics; the
        // plan before and after VACUUM (which sets the visibility map, as autovacuum does
        // for a long-lived ledger).
        client
            .batch_execute(
                "INSERT INTO runs (id, state, record)
                 SELECT 'run_' || r, 'open', '{}' FROM generate_series(1, 2000) r;
                 INSERT INTO placeholders (run_id, value, effect_id, record)
                 SELECT 'run_' || r, 'v' || p, 'eff', '{}'
                 FROM generate_series(1, 2000) r, generate_series(1, 5) p;
                 ANALYZE placeholders",
            )
            .expect("fill");
        let explain = |client: &mut postgres::Client, run: &str| {
            let rows = client
                .query(
                    &format!("EXPLAIN (ANALYZE, COSTS OFF) {}", super::freshness::COUNT),
                    &[&run],
                )
                .expect("explain");
            rows.iter()
                .map(|row| row.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut plans = vec![explain(&mut client, &run.0), explain(&mut client, "run_7")];
        client.batch_execute("VACUUM placeholders").expect("vacuum");
        plans.push(explain(&mut client, "run_7"));
        plans
    })
    .join()
    .expect("thread");
    for plan in &plans {
        eprintln!("figure: the placeholder count's plan:\n{plan}");
        assert!(plan.contains("placeholders_pkey"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "{plan}");
    }
    assert!(plans[2].contains("Index Only Scan"), "{}", plans[2]);
}

#[test]
fn a_plaintext_token_is_rewritten_as_its_keyed_hash_by_either_instance_and_still_works() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let a = PgStore::open(&url, 2).expect("open A");
    let b = PgStore::open(&url, 2).expect("open B");
    let tokens = crate::RunTokens::from_key([9; 32]);
    let run = a.create_run(None).expect("run");
    let old = "ffeeddccbbaa99887766554433221100ffeeddccbbaa9988";
    // The record as a ledger written before tokens were derived holds it.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let mut record = serde_json::to_value(&run).expect("json");
    record["token"] = serde_json::json!(old);
    client
        .execute(
            "UPDATE runs SET record = $2::text::json WHERE id = $1",
            &[&run.id.0, &record.to_string()],
        )
        .expect("an old record");
    assert!(tokens.verify(&b.run(&run.id).expect("read").expect("run"), old));
    assert_eq!(a.hash_plaintext_tokens(&tokens).expect("rewrite"), 1);
    assert_eq!(b.hash_plaintext_tokens(&tokens).expect("again"), 0);
    let text: String = client
        .query_one("SELECT record::text FROM runs WHERE id = $1", &[&run.id.0])
        .expect("row")
        .get(0);
    assert!(!text.contains(old), "{text}");
    assert!(b
        .authenticate(&tokens, &run.id.0, old)
        .expect("auth")
        .is_some());
    assert!(b
        .authenticate(&tokens, &run.id.0, &tokens.token_for(&run.id))
        .expect("auth")
        .is_none());
}
