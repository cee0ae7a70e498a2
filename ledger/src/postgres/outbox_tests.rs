//! The change outbox across instances (`postgres/notify.rs`): a change is heard by another
//! instance however its wake-up went: with none (a writer that died after its commit),
//! committed out of order behind a later id, or written while the listener was
//! reconnecting; and rows past their retention are pruned.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::notify::{LISTENER_NAME, POLL};
use crate::conformance::postgres::TestServer;
use crate::{Change, PgStore, RunId, Store};

/// A plain client of the test database (the sync driver, off any runtime).
fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("connect")
}

/// The changes `changes` delivers within `within`, until `want` is among them.
fn hear(changes: &Receiver<Change>, want: &Change, within: Duration) -> Vec<Change> {
    let deadline = Instant::now() + within;
    let mut heard = Vec::new();
    while !heard.contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match changes.recv_timeout(left) {
            Ok(change) => heard.push(change),
            Err(_) => break,
        }
    }
    heard
}

fn insert_row(client: &mut postgres::Client, change: &str) {
    client
        .execute(
            "INSERT INTO changes (origin, payload) VALUES ('elsewhere', $1)",
            &[&change],
        )
        .expect("insert a change row");
}

#[test]
fn a_change_committed_without_a_wakeup_is_heard_by_the_poll() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let b = PgStore::open(&url, 1).expect("open B");
    let changes = b.subscribe();
    // A writer that committed its row and died before its NOTIFY.
    let run = RunId::generate();
    insert_row(&mut client(&url), &format!("x:{run}"));
    let started = Instant::now();
    let heard = hear(&changes, &Change::RunClosed(run.clone()), POLL * 3);
    assert_eq!(heard, vec![Change::RunClosed(run)]);
    let took = started.elapsed();
    eprintln!("heard a change with no wake-up after {took:?}");
}

#[test]
fn a_change_that_commits_behind_a_later_id_is_heard() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let b = PgStore::open(&url, 1).expect("open B");
    let changes = b.subscribe();
    let (early, late) = (RunId::generate(), RunId::generate());
    // `slow` takes the lower id first and commits last.
    let mut slow = client(&url);
    let mut tx = slow.transaction().expect("begin");
    tx.execute(
        "INSERT INTO changes (origin, payload) VALUES ('elsewhere', $1)",
        &[&format!("x:{early}")],
    )
    .expect("insert");
    let mut fast = client(&url);
    insert_row(&mut fast, &format!("x:{late}"));
    fast.batch_execute("NOTIFY airlock_changes")
        .expect("notify");
    let heard = hear(&changes, &Change::RunClosed(late.clone()), POLL * 3);
    assert_eq!(heard, vec![Change::RunClosed(late)], "the later id first");
    tx.commit().expect("commit");
    fast.batch_execute("NOTIFY airlock_changes")
        .expect("notify");
    let heard = hear(&changes, &Change::RunClosed(early.clone()), POLL * 3);
    assert_eq!(
        heard,
        vec![Change::RunClosed(early)],
        "the skipped id, once it commits"
    );
}

#[test]
fn changes_written_while_the_listener_reconnects_are_heard_after() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let b = PgStore::open(&url, 1).expect("open B");
    let changes = b.subscribe();
    // A database can only be closed to connections from another one.
    let mut admin = client(&server.url_of("postgres"));
    let mut writer = client(&url);
    let db: String = writer
        .query_one("SELECT current_database()", &[])
        .expect("name")
        .get(0);
    // Keep the listener out: no new connection to the database, then end its own.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" WITH ALLOW_CONNECTIONS false"
        ))
        .expect("disallow connections");
    let ended: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1 AND datname = $2",
            &[&LISTENER_NAME, &db],
        )
        .expect("terminate")
        .get(0);
    assert_eq!(ended, 1, "B's listener");
    // Written (by a connection that was already open) while B's listener is away.
    let runs: Vec<RunId> = (0..5).map(|_| RunId::generate()).collect();
    for run in &runs {
        insert_row(&mut writer, &format!("x:{run}"));
    }
    writer
        .batch_execute("NOTIFY airlock_changes")
        .expect("notify");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        changes.try_iter().next().is_none(),
        "nothing is heard while the listener is away"
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" WITH ALLOW_CONNECTIONS true"
        ))
        .expect("allow connections");
    let last = Change::RunClosed(runs[runs.len() - 1].clone());
    let heard = hear(&changes, &last, Duration::from_secs(10));
    let want: Vec<Change> = runs.iter().cloned().map(Change::RunClosed).collect();
    assert_eq!(heard, want, "read on from where it was, in order, once");
    let back: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = $2",
            &[&LISTENER_NAME, &db],
        )
        .expect("count")
        .get(0);
    assert_eq!(back, 1, "the listener reconnected");
}

#[test]
fn outbox_rows_past_their_retention_are_pruned() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    drop(PgStore::open(&url, 1).expect("first open migrates"));
    let mut admin = client(&url);
    admin
        .batch_execute(
            "INSERT INTO changes (origin, payload, at) VALUES
                 ('old', 'r:x', clock_timestamp() - interval '10 minutes'),
                 ('new', 'r:y', clock_timestamp())",
        )
        .expect("insert");
    let store = PgStore::open(&url, 1).expect("open");
    let left: Vec<String> = admin
        .query("SELECT origin FROM changes ORDER BY id", &[])
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        left,
        vec!["new".to_owned()],
        "pruned at the listener's start"
    );
    drop(store);
}

/// A write whose commit takes longer than any fixed wait (a stalled disk, a lock, a
/// paused process) is still heard: its skipped id is looked for until its transaction has
/// ended. (With a 30 s forgetting time, a run aborted this slowly stayed open on every
/// other instance for good.)
#[test]
fn a_change_whose_commit_is_held_for_35_s_is_still_heard() {
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let b = PgStore::open(&url, 1).expect("open B");
    let changes = b.subscribe();
    let slow_run = RunId::generate();
    let mut slow = client(&url);
    let mut tx = slow.transaction().expect("begin");
    tx.execute(
        "INSERT INTO changes (origin, payload) VALUES ('elsewhere', $1)",
        &[&format!("x:{slow_run}")],
    )
    .expect("insert");
    // Others commit meanwhile, past the held id, and the listener reads again and again.
    let mut fast = client(&url);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(35) {
        let run = RunId::generate();
        insert_row(&mut fast, &format!("x:{run}"));
        fast.batch_execute("NOTIFY airlock_changes")
            .expect("notify");
        let heard = hear(&changes, &Change::RunClosed(run.clone()), POLL * 3);
        assert!(heard.contains(&Change::RunClosed(run)), "{heard:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    tx.commit().expect("commit at last");
    fast.batch_execute("NOTIFY airlock_changes")
        .expect("notify");
    let heard = hear(&changes, &Change::RunClosed(slow_run.clone()), POLL * 3);
    assert!(
        heard.contains(&Change::RunClosed(slow_run)),
        "the held change is heard once it commits: {heard:?}"
    );
}
