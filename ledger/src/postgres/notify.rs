//! Change notifications across processes, through an outbox (schema version 3,
//! `ledger/migrations/0003_change_outbox.sql`).
//!
//! - **Writing.** A write inserts its [`Change`]s as one row of `changes` (its store's
//!   origin and the payload) inside its transaction, so they exist from its commit on and
//!   never for a rolled-back write ([`announce`]). After the commit the store asks its
//!   [`Waker`] for a payload-less `NOTIFY` on [`CHANNEL`], sent on a connection of its own
//!   without waiting for a WAL flush; wake-ups asked for while one is being sent are
//!   coalesced into one. A `NOTIFY` inside the write would take PostgreSQL's database-wide
//!   notify lock at commit and hold it through the WAL flush, so that notifying commits of
//!   every instance could not share flushes (docs/fleet.md, "Throughput").
//! - **Reading.** A listener thread per store LISTENs on [`CHANNEL`] and, on each wake-up
//!   and at least every [`POLL`], reads the rows after the newest id it has seen, plus the
//!   ids it saw skipped: ids are taken at insert, and concurrent writers commit out of
//!   order, so a skipped id is looked for again until every transaction that was running
//!   when it was first missed has ended (the snapshot's `xmin` passed that read's `xmax`;
//!   then it was read, or it never commits), however long that takes. The poll covers a writer that died between its commit and its
//!   `NOTIFY`. Rows of other origins are handed to the store's [`Notifier`]; a store hands
//!   its own changes to its subscribers itself, right after the commit and before the
//!   method returns, so they arrive promptly, in the order of its writes, and once.
//! - **Pruning.** Listeners delete rows older than [`RETENTION_SECS`], at start and every
//!   [`PRUNE_EVERY`].
//!
//! Payload: `TOKEN|TOKEN…`, each token `r:RUN` (run changed), `x:RUN` (closed), `p:RUN`
//! (placeholders issued), `e:RUN:EFFECT` or `w:RUN` (workspace).
//!
//! While the listener cannot reach the server the store reports itself degraded (until a
//! pooled connection reaches it again). After a reconnect it reads on from where it was,
//! since the rows are still there; after an outage longer than half of [`RETENTION_SECS`]
//! (rows it missed may be pruned), or when the table's ids went back (a restored
//! database), it also announces every closed run as [`Change::RunClosed`] and every run
//! with placeholders as [`Change::PlaceholdersIssued`], which is what the caches follow.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use super::pool::{fault, Pool, Tx};
use super::tls::Config;
use super::PgOpenError;
use crate::change::{Change, Notifier};
use crate::model::{EffectId, RunId};
use crate::Result;

/// The channel airlock's stores notify (without payload) and listen on.
pub const CHANNEL: &str = "airlock_changes";

/// The longest a listener goes without reading the outbox, wake-up or not.
pub const POLL: Duration = Duration::from_secs(1);

/// Seconds an outbox row is kept (by the database's clock).
pub const RETENTION_SECS: f64 = 300.0;

/// How often a listener prunes the outbox.
pub const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// The `application_name` of a listener's connection (`pg_stat_activity`).
pub const LISTENER_NAME: &str = "airlock-listen";

/// How long the listener waits for a notification before checking whether to stop.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Ids below the newest at start that a new listener checks for writes still committing.
const START_WINDOW: i64 = 256;

/// Skipped ids a listener tracks at most (more means ids were burnt, not in flight).
const MAX_GAPS: usize = 4096;

/// Records `changes` from `origin` in the outbox inside `tx` (nothing when there are none).
///
/// Errors: storage faults.
pub(super) fn announce(tx: &mut Tx<'_>, origin: &str, changes: &[Change]) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let payload = payload(changes);
    tx.execute(
        "INSERT INTO changes (origin, payload) VALUES ($1, $2)",
        &[&origin, &payload],
    )
    .map_err(fault)?;
    Ok(())
}

/// The outbox payload of `changes`: their tokens, `|`-separated.
pub(super) fn payload(changes: &[Change]) -> String {
    changes.iter().map(encode).collect::<Vec<_>>().join("|")
}

fn encode(change: &Change) -> String {
    match change {
        Change::RunChanged(run) => format!("r:{run}"),
        Change::RunClosed(run) => format!("x:{run}"),
        Change::PlaceholdersIssued(run) => format!("p:{run}"),
        Change::EffectChanged { run, effect } => format!("e:{run}:{effect}"),
        Change::WorkspaceChanged(run) => format!("w:{run}"),
    }
}

fn decode(token: &str) -> Option<Change> {
    let (kind, rest) = token.split_once(':')?;
    let run = |text: &str| RunId::parse(text);
    Some(match kind {
        "r" => Change::RunChanged(run(rest)?),
        "x" => Change::RunClosed(run(rest)?),
        "p" => Change::PlaceholdersIssued(run(rest)?),
        "w" => Change::WorkspaceChanged(run(rest)?),
        "e" => {
            let (of, effect) = rest.split_once(':')?;
            Change::EffectChanged {
                run: run(of)?,
                effect: EffectId::parse(effect)?,
            }
        }
        _ => return None,
    })
}

/// The changes of a payload (tokens that do not parse are skipped).
fn changes_of(payload: &str) -> impl Iterator<Item = Change> + '_ {
    payload.split('|').filter_map(decode)
}

/// Sends the payload-less `NOTIFY` after commits, from a thread and connection of its own.
#[derive(Debug)]
pub(super) struct Waker {
    signal: SyncSender<()>,
}

impl Waker {
    /// Starts the thread (it connects on its first wake-up); it ends with the store.
    ///
    /// Errors: [`PgOpenError::Thread`].
    pub(super) fn start(config: Config) -> std::result::Result<Self, PgOpenError> {
        // One pending wake-up at most: a commit while one waits is covered by it.
        let (signal, woken) = sync_channel(1);
        std::thread::Builder::new()
            .name("airlock-pg-wake".into())
            .spawn(move || wake_loop(&config, &woken))
            .map_err(PgOpenError::Thread)?;
        Ok(Self { signal })
    }

    /// Asks for a `NOTIFY` after this point, without waiting for it.
    pub(super) fn wake(&self) {
        match self.signal.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

fn wake_loop(config: &Config, woken: &Receiver<()>) {
    let mut client: Option<Client> = None;
    while woken.recv().is_ok() {
        if client.as_ref().is_none_or(Client::is_closed) {
            client = config
                .connect()
                .and_then(|mut c| {
                    // Nothing waits on the flush of a wake-up: the rows are durable already.
                    c.batch_execute("SET synchronous_commit = off")?;
                    Ok(c)
                })
                .ok();
        }
        let sent = client
            .as_mut()
            .map(|c| c.batch_execute(&format!("NOTIFY {CHANNEL}")));
        if !matches!(sent, Some(Ok(()))) {
            // The listeners' poll covers a lost wake-up; do not spin on a gone server.
            client = None;
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The listener thread of one store.
#[derive(Debug)]
pub(super) struct Listener {
    origin: String,
    stop: Arc<AtomicBool>,
}

impl Listener {
    /// Starts listening (on a thread of its own, connecting there).
    ///
    /// Errors: [`PgOpenError::Thread`].
    pub(super) fn start(
        config: Config,
        pool: Pool,
        notifier: Arc<Notifier>,
    ) -> std::result::Result<Self, PgOpenError> {
        let origin = ulid::Ulid::new().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, is_ready) = sync_channel(1);
        let thread = Follower {
            config,
            pool,
            notifier,
            origin: origin.clone(),
            stop: stop.clone(),
        };
        std::thread::Builder::new()
            .name("airlock-pg-listen".into())
            .spawn(move || thread.run(ready))
            .map_err(PgOpenError::Thread)?;
        // Wait (briefly) until LISTEN is in force and the cursor is set, so a write made
        // right after open by another process is heard.
        let _ = is_ready.recv_timeout(Duration::from_secs(5));
        Ok(Self { origin, stop })
    }

    /// This store's origin tag in outbox rows.
    pub(super) fn origin(&self) -> &str {
        &self.origin
    }

    /// Asks the thread to end (within [`STOP_CHECK`]).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Where a listener is in the outbox.
#[derive(Debug, Default)]
struct Cursor {
    /// The newest id read.
    last: i64,
    /// Ids below `last` not read yet, each with its horizon: the `xmax` of the snapshot in
    /// which it was first missed. The writer that took the id had its transaction id by
    /// then, below the horizon; once a snapshot's `xmin` reaches the horizon that writer
    /// has ended, so the id was either read in that snapshot or never commits.
    gaps: BTreeMap<i64, i64>,
    /// Whether `last` was set from the table.
    started: bool,
}

impl Cursor {
    /// Takes row `id`, read in a snapshot whose `xmax` is `horizon`, into account;
    /// whether it is new to this listener.
    fn take(&mut self, id: i64, horizon: i64) -> bool {
        if id > self.last {
            let skipped = (self.last + 1).max(id - MAX_GAPS as i64)..id;
            for gap in skipped {
                self.gaps.insert(gap, horizon);
            }
            while self.gaps.len() > MAX_GAPS {
                self.gaps.pop_first();
            }
            self.last = id;
            true
        } else {
            self.gaps.remove(&id).is_some()
        }
    }

    /// After a read in a snapshot whose `xmin` is `xmin`: forgets the gaps whose writers
    /// have all ended (their rows, if any, were in that read).
    fn expire(&mut self, xmin: i64) {
        self.gaps.retain(|_, horizon| *horizon > xmin);
    }
}

struct Follower {
    config: Config,
    pool: Pool,
    notifier: Arc<Notifier>,
    origin: String,
    stop: Arc<AtomicBool>,
}

impl Follower {
    fn run(self, ready: SyncSender<()>) {
        let mut cursor = Cursor::default();
        let mut quiet = false;
        let mut heard = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            let mut client = match self.listen() {
                Ok(client) => client,
                Err(error) => {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let reason = format!(
                        "the PostgreSQL listener cannot connect: {}",
                        super::pool::chain(&error)
                    );
                    if !std::mem::replace(&mut quiet, true) {
                        warn(&format!("{reason}; retrying"));
                    }
                    // The server is likely gone: say so before a caller finds out, and let
                    // a pooled connection prove it back.
                    self.pool.fault(reason);
                    self.pool.ping();
                    std::thread::sleep(Duration::from_millis(250));
                    continue;
                }
            };
            quiet = false;
            let resynced = if cursor.started {
                self.catch_up(&mut client, &mut cursor, heard.elapsed())
            } else {
                self.start_cursor(&mut client, &mut cursor)
            };
            if let Err(error) = resynced {
                warn(&format!("PostgreSQL listener cannot resync: {error}"));
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            let _ = ready.try_send(());
            self.follow(&mut client, &mut cursor, &mut heard);
        }
    }

    fn listen(&self) -> std::result::Result<Client, postgres::Error> {
        let mut client = self.config.connect()?;
        // Its only writes are prunes of the outbox, which need no flush; its name tells an
        // operator (and the tests) which connection listens.
        client.batch_execute(&format!(
            "SET synchronous_commit = off; SET application_name = '{LISTENER_NAME}'; LISTEN {CHANNEL}"
        ))?;
        Ok(client)
    }

    /// Sets the cursor of a new listener: after the newest row, with the recent ids not
    /// yet visible (writes still committing) as gaps. Rows before it are history.
    fn start_cursor(
        &self,
        client: &mut Client,
        cursor: &mut Cursor,
    ) -> std::result::Result<(), postgres::Error> {
        let row = client.query_one(
            "SELECT COALESCE(max(id), 0), pg_snapshot_xmax(pg_current_snapshot())::text::bigint
             FROM changes",
            &[],
        )?;
        let (newest, horizon): (i64, i64) = (row.get(0), row.get(1));
        let seen: Vec<i64> = client
            .query(
                "SELECT id FROM changes WHERE id > $1",
                &[&(newest - START_WINDOW)],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        cursor.last = newest;
        cursor.gaps = ((newest - START_WINDOW).max(0) + 1..newest)
            .filter(|id| !seen.contains(id))
            .map(|id| (id, horizon))
            .collect();
        cursor.started = true;
        self.prune(client);
        Ok(())
    }

    /// After a reconnect: reads on from the cursor, and announces what pruned or lost rows
    /// could have said when the outage was long or the table's ids went back.
    fn catch_up(
        &self,
        client: &mut Client,
        cursor: &mut Cursor,
        since_heard: Duration,
    ) -> std::result::Result<(), postgres::Error> {
        let newest: i64 = client
            .query_one("SELECT COALESCE(max(id), 0) FROM changes", &[])?
            .get(0);
        if newest < cursor.last {
            *cursor = Cursor::default();
            self.start_cursor(client, cursor)?;
            return self.resync(client);
        }
        if since_heard.as_secs_f64() > RETENTION_SECS / 2.0 {
            self.resync(client)?;
        }
        self.read(client, cursor)
    }

    /// Announces what notifications lost during an outage could have said.
    fn resync(&self, client: &mut Client) -> std::result::Result<(), postgres::Error> {
        let closed = client.query(
            "SELECT id FROM runs WHERE state NOT IN ('open', 'sealed') ORDER BY id",
            &[],
        )?;
        let issued = client.query("SELECT DISTINCT run_id FROM placeholders", &[])?;
        let mut changes = Vec::new();
        for row in closed {
            if let Some(run) = RunId::parse(row.get(0)) {
                changes.push(Change::RunClosed(run));
            }
        }
        for row in issued {
            if let Some(run) = RunId::parse(row.get(0)) {
                changes.push(Change::PlaceholdersIssued(run));
            }
        }
        self.notifier.send(changes);
        Ok(())
    }

    /// Reads the rows after the cursor and in its gaps, and hands other origins' changes on.
    fn read(
        &self,
        client: &mut Client,
        cursor: &mut Cursor,
    ) -> std::result::Result<(), postgres::Error> {
        let gaps: Vec<i64> = cursor.gaps.keys().copied().collect();
        // The rows and the bounds of the snapshot they were read in, in one statement (a
        // row with no id when none is new).
        let rows = client.query(
            "WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s)
             SELECT c.id, c.origin, c.payload,
                    pg_snapshot_xmin(snap.s)::text::bigint, pg_snapshot_xmax(snap.s)::text::bigint
             FROM snap LEFT JOIN changes c ON c.id > $1 OR c.id = ANY($2)
             ORDER BY c.id",
            &[&cursor.last, &gaps],
        )?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let (xmin, xmax): (i64, i64) = (first.get(3), first.get(4));
        let mut changes = Vec::new();
        for row in &rows {
            let Some(id) = row.get::<_, Option<i64>>(0) else {
                continue;
            };
            let (origin, payload): (&str, &str) = (row.get(1), row.get(2));
            if cursor.take(id, xmax) && origin != self.origin {
                changes.extend(changes_of(payload));
            }
        }
        cursor.expire(xmin);
        self.notifier.send(changes);
        Ok(())
    }

    /// Deletes outbox rows older than [`RETENTION_SECS`] (best effort: any listener may).
    fn prune(&self, client: &mut Client) {
        let _ = client.execute(
            "DELETE FROM changes WHERE at < clock_timestamp() - make_interval(secs => $1)",
            &[&RETENTION_SECS],
        );
    }

    /// Reads on every wake-up and every [`POLL`] until the connection breaks or the store
    /// is dropped.
    fn follow(&self, client: &mut Client, cursor: &mut Cursor, heard: &mut Instant) {
        let mut next_read = Instant::now() + POLL;
        let mut next_prune = Instant::now() + PRUNE_EVERY;
        while !self.stop.load(Ordering::SeqCst) {
            let woken = {
                let mut notifications = client.notifications();
                let first = notifications.timeout_iter(STOP_CHECK).next();
                // Wake-ups that queued meanwhile are covered by one read.
                let more = notifications.iter().count();
                match (first, more) {
                    (Err(error), _) | (_, Err(error)) => Err(error),
                    (Ok(first), Ok(more)) => Ok(first.is_some() || more > 0),
                }
            };
            let result = match woken {
                Ok(woken) if woken || Instant::now() >= next_read => {
                    next_read = Instant::now() + POLL;
                    self.read(client, cursor)
                }
                Ok(_) => Ok(()),
                Err(error) => Err(error),
            };
            match result {
                Ok(()) => *heard = Instant::now(),
                Err(error) => {
                    if client.is_closed() {
                        if !self.stop.load(Ordering::SeqCst) {
                            warn(&format!("PostgreSQL listener lost its connection: {error}"));
                        }
                        return;
                    }
                    warn(&format!(
                        "PostgreSQL listener cannot read the outbox: {error}"
                    ));
                }
            }
            if Instant::now() >= next_prune {
                next_prune = Instant::now() + PRUNE_EVERY;
                self.prune(client);
            }
            if client.is_closed() {
                return;
            }
            if self.pool.degraded() {
                self.pool.ping();
            }
        }
    }
}

/// A listener fault, in the binary's log (target `airlock_ledger::postgres::notify`).
fn warn(message: &str) {
    tracing::warn!(component = "ledger", "{message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        let run = RunId::generate();
        let effect = EffectId::generate();
        let changes = vec![
            Change::RunChanged(run.clone()),
            Change::RunClosed(run.clone()),
            Change::PlaceholdersIssued(run.clone()),
            Change::EffectChanged {
                run: run.clone(),
                effect,
            },
            Change::WorkspaceChanged(run),
        ];
        let payload = changes.iter().map(encode).collect::<Vec<_>>().join("|");
        assert_eq!(changes_of(&payload).collect::<Vec<_>>(), changes);
        assert_eq!(changes_of("q:1|r:not-a-run").count(), 0);
    }

    #[test]
    fn a_cursor_takes_each_id_once_and_looks_for_a_skipped_one_until_its_writer_ended() {
        let mut cursor = Cursor {
            last: 10,
            ..Cursor::default()
        };
        // Read in a snapshot with xmin 500 and xmax 510: writers 500..510 may be running.
        assert!(cursor.take(11, 510));
        assert!(cursor.take(14, 510), "14 is new; 12 and 13 are gaps");
        cursor.expire(500);
        assert_eq!(
            cursor.gaps.keys().copied().collect::<Vec<_>>(),
            vec![12, 13]
        );
        assert!(!cursor.take(14, 520), "taken once");
        assert!(!cursor.take(11, 520), "taken once");
        // However many reads later, while a transaction begun before xid 510 still runs.
        for xmin in 501..510 {
            cursor.expire(xmin);
        }
        assert_eq!(cursor.gaps.len(), 2, "kept while their writers may run");
        assert!(cursor.take(13, 530), "a gap that commits late is new");
        assert!(!cursor.take(13, 530));
        cursor.expire(510);
        assert!(
            cursor.gaps.is_empty(),
            "12's writer has ended without committing it"
        );
        assert!(!cursor.take(12, 540), "and it is not taken after that");
        assert!(cursor.take(20_000, 540));
        assert_eq!(cursor.gaps.len(), MAX_GAPS, "bounded");
        assert_eq!(cursor.gaps.keys().next(), Some(&(20_000 - MAX_GAPS as i64)));
    }
}
