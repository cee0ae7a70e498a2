//! Change notifications across processes: every write `pg_notify`s its [`Change`]s on
//! channel [`CHANNEL`] inside its transaction (so they are delivered at commit, and never
//! for a rolled-back write), tagged with the writing store's origin; a listener thread
//! per store LISTENs and hands the other origins' changes to its [`Notifier`]. A store
//! hands its own changes to its subscribers itself, right after the commit and before the
//! method returns, so they arrive promptly, in the order of its writes, and once.
//!
//! Payload: `ORIGIN CHUNK|TOKEN|TOKEN…`, each token `r:RUN` (run changed), `x:RUN`
//! (closed), `p:RUN` (placeholders issued), `e:RUN:EFFECT` or `w:RUN` (workspace), cut
//! into chunks under PostgreSQL's 8000-byte payload limit.
//!
//! While the listener cannot reach the server the store reports itself degraded (until a
//! pooled connection reaches it again). After the listener loses its connection it
//! reconnects and, since notifications sent
//! meanwhile are lost, announces every closed run as [`Change::RunClosed`] and every run
//! with placeholders as [`Change::PlaceholdersIssued`], which is what the caches follow.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use super::pool::{fault, Pool, Tx};
use super::tls::Config;
use super::PgOpenError;
use crate::change::{Change, Notifier};
use crate::model::{EffectId, RunId};
use crate::Result;

/// The channel airlock's stores notify and listen on.
pub const CHANNEL: &str = "airlock_changes";

/// Bytes of payload per notification, under PostgreSQL's limit of 8000.
const CHUNK_BYTES: usize = 7000;

/// How long the listener waits for a notification before checking whether to stop.
const POLL: Duration = Duration::from_millis(100);

/// Announces `changes` from `origin` inside `tx` (nothing when there are none).
///
/// Errors: storage faults.
pub(super) fn announce(tx: &mut Tx<'_>, origin: &str, changes: &[Change]) -> Result<()> {
    let mut chunk = 0usize;
    let mut payload = String::new();
    for change in changes {
        let token = encode(change);
        if !payload.is_empty() && payload.len() + token.len() + 1 > CHUNK_BYTES {
            send(tx, &payload)?;
            payload.clear();
        }
        if payload.is_empty() {
            chunk += 1;
            payload = format!("{origin} {chunk}");
        }
        payload.push('|');
        payload.push_str(&token);
    }
    if !payload.is_empty() {
        send(tx, &payload)?;
    }
    Ok(())
}

fn send(tx: &mut Tx<'_>, payload: &str) -> Result<()> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
        .map_err(fault)?;
    Ok(())
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

/// The changes of a payload, unless it came from `origin` (or does not parse).
fn changes_of(payload: &str, origin: &str) -> Vec<Change> {
    let mut parts = payload.split('|');
    let from = parts
        .next()
        .and_then(|head| head.split_once(' '))
        .map(|(from, _)| from);
    if from.is_none_or(|from| from == origin) {
        return Vec::new();
    }
    parts.filter_map(decode).collect()
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
        let (ready, is_ready) = std::sync::mpsc::sync_channel(1);
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
        // Wait (briefly) until LISTEN is in force, so a write made right after open by
        // another process is heard.
        let _ = is_ready.recv_timeout(Duration::from_secs(5));
        Ok(Self { origin, stop })
    }

    /// This store's origin tag in payloads.
    pub(super) fn origin(&self) -> &str {
        &self.origin
    }

    /// Asks the thread to end (within [`POLL`]).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
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
    fn run(self, ready: std::sync::mpsc::SyncSender<()>) {
        let mut first = true;
        let mut quiet = false;
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
            if first {
                first = false;
                let _ = ready.try_send(());
            } else if let Err(error) = self.resync(&mut client) {
                warn(&format!("PostgreSQL listener cannot resync: {error}"));
                continue;
            }
            self.follow(&mut client);
        }
    }

    fn listen(&self) -> std::result::Result<Client, postgres::Error> {
        let mut client = self.config.connect()?;
        client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        Ok(client)
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

    /// Hands notifications on until the connection breaks or the store is dropped.
    fn follow(&self, client: &mut Client) {
        while !self.stop.load(Ordering::SeqCst) {
            {
                let mut notifications = client.notifications();
                let mut heard = notifications.timeout_iter(POLL);
                loop {
                    match heard.next() {
                        Ok(Some(note)) => {
                            self.notifier.send(changes_of(note.payload(), &self.origin))
                        }
                        Ok(None) => break,
                        Err(error) => {
                            if !self.stop.load(Ordering::SeqCst) {
                                warn(&format!("PostgreSQL listener lost its connection: {error}"));
                            }
                            break;
                        }
                    }
                }
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

/// The ledger crate does not log; a listener fault is reported on stderr.
fn warn(message: &str) {
    eprintln!("airlock ledger: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_skip_their_own_origin() {
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
        let payload = format!(
            "A 1|{}",
            changes.iter().map(encode).collect::<Vec<_>>().join("|")
        );
        assert_eq!(changes_of(&payload, "B"), changes);
        assert!(changes_of(&payload, "A").is_empty());
    }
}
