//! The connection pool: threads that each own one sync `postgres` connection (its own
//! small runtime, never inside a caller's), a queue of jobs, transactions with bounded
//! retries, reconnection, and the health the pool reports.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres::config::Host;
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement, Transaction};

use super::tls::{self, Config};
use super::{notify, PgOpenError};
use crate::change::Change;
use crate::store::Health;
use crate::{LedgerError, Result};

/// Attempts of one transaction that the server aborted for a deadlock or a serialization
/// failure, before the caller is answered [`LedgerError::Conflict`].
pub const MAX_ATTEMPTS: u32 = 8;

/// How long connecting may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses a connection string (URL or `key=value`) and its TLS parameters
/// (`sslmode`, `sslrootcert`: postgres/tls.rs); libpq's client-certificate parameters
/// are refused by name.
///
/// Errors: [`PgOpenError::Url`], [`PgOpenError::Tls`].
pub(super) fn parse_url(url: &str) -> std::result::Result<Config, PgOpenError> {
    if let Some(parameter) = tls::client_certificate_parameter(url) {
        return Err(PgOpenError::Tls {
            parameter,
            reason: "client certificates are not supported by airlock's PostgreSQL store: \
                     log in with a password (SCRAM) over sslmode=verify-full, and remove \
                     sslcert, sslkey, sslpassword, sslcrl and sslcrldir"
                .into(),
        });
    }
    let (url, sslmode, sslrootcert) = tls::split(url);
    let config = postgres::Config::from_str(&url).map_err(|e| PgOpenError::Url {
        reason: e.to_string(),
    })?;
    if config.get_hosts().is_empty() {
        return Err(PgOpenError::Url {
            reason: "no host given".into(),
        });
    }
    let tls = tls::Tls::decide(
        sslmode.as_deref(),
        sslrootcert.as_deref(),
        config.get_hosts(),
    )?;
    let mut config = Config::new(config, tls);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("airlock");
    }
    Ok(config)
}

/// `USER@HOST:PORT/DATABASE` of `config`, for messages: never the password.
pub(super) fn describe(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => String::from("?"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
}

/// A storage fault from the driver.
pub(super) fn fault(error: postgres::Error) -> LedgerError {
    LedgerError::storage(error)
}

/// An error and its sources, `: `-separated (the driver's own message omits the cause).
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether `error` is a server abort that retrying the whole transaction may cure.
fn retryable(error: &LedgerError) -> bool {
    let LedgerError::Storage { source } = error else {
        return false;
    };
    source
        .downcast_ref::<postgres::Error>()
        .and_then(postgres::Error::code)
        .is_some_and(|code| {
            *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        })
}

/// Whether the pool can write, and its fault counts.
#[derive(Debug, Default)]
struct HealthState {
    degraded: AtomicBool,
    detail: Mutex<Option<String>>,
    faults: AtomicU64,
    recoveries: AtomicU64,
    /// Bumped by every fault: a connection opened before the last fault is not trusted
    /// (the server may have ended it without the client knowing yet) and is reopened.
    generation: AtomicU64,
}

impl HealthState {
    fn fault(&self, detail: String) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.faults.fetch_add(1, Ordering::Relaxed);
        *self.detail.lock().unwrap_or_else(|e| e.into_inner()) = Some(detail);
        self.degraded.store(true, Ordering::SeqCst);
    }

    fn ok(&self) {
        if self.degraded.swap(false, Ordering::SeqCst) {
            self.recoveries.fetch_add(1, Ordering::Relaxed);
            *self.detail.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// One thread's connection, opened lazily and again after it broke.
struct Conn {
    config: Config,
    client: Option<Client>,
    health: Arc<HealthState>,
    /// The fault generation when `client` was opened.
    generation: u64,
    /// Statements prepared on `client`.
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// The open connection, reconnecting when there is none or it closed.
    ///
    /// Errors: [`LedgerError::Degraded`] when the server cannot be reached.
    fn client(&mut self) -> Result<&mut Client> {
        let generation = self.health.generation.load(Ordering::SeqCst);
        if self.client.as_ref().is_none_or(Client::is_closed) || self.generation != generation {
            self.client = None;
            self.statements.clear();
            self.generation = generation;
            let connected = self.config.connect().and_then(|mut client| {
                // Durable methods rely on it whatever the server's default.
                client.batch_execute("SET synchronous_commit = on")?;
                Ok(client)
            });
            match connected {
                Ok(client) => self.client = Some(client),
                Err(error) => {
                    let reason = format!("cannot connect to PostgreSQL: {}", chain(&error));
                    self.health.fault(reason.clone());
                    return Err(LedgerError::Degraded { reason });
                }
            }
        }
        self.client
            .as_mut()
            .ok_or_else(|| LedgerError::storage("no PostgreSQL connection"))
    }

    /// After a failed job: a closed connection is a fault that degrades the store.
    fn check(&mut self, error: &LedgerError) {
        let closed = self.client.as_ref().is_none_or(Client::is_closed);
        if closed
            && matches!(
                error,
                LedgerError::Storage { .. } | LedgerError::Degraded { .. }
            )
        {
            self.health
                .fault(format!("lost the PostgreSQL connection: {}", chain(error)));
            self.client = None;
        }
    }
}

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// A transaction on a pooled connection, whose statements are prepared once per
/// connection (one round trip per query after the first, instead of two).
pub(super) struct Tx<'t> {
    tx: Transaction<'t>,
    statements: &'t mut HashMap<&'static str, Statement>,
    /// The writing store's origin tag, for a write that records its changes in the outbox
    /// itself ([`Tx::announced`]).
    origin: &'t str,
    /// Set by a write that inserted its own outbox row (folded into another statement, to
    /// save a round trip): the transaction then does not announce its changes again.
    announced: bool,
}

impl Tx<'_> {
    /// The writing store's origin tag (empty for reads).
    pub(super) fn origin(&self) -> &str {
        self.origin
    }

    /// Records that this write inserted its outbox row itself.
    pub(super) fn mark_announced(&mut self) {
        self.announced = true;
    }

    fn statement(&mut self, sql: &'static str) -> std::result::Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// The rows of `sql`.
    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        let statement = self.statement(sql)?;
        self.tx.query(&statement, params)
    }

    /// The one row of `sql`.
    pub(super) fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Row, postgres::Error> {
        let statement = self.statement(sql)?;
        self.tx.query_one(&statement, params)
    }

    /// The row of `sql`, if any.
    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error> {
        let statement = self.statement(sql)?;
        self.tx.query_opt(&statement, params)
    }

    /// Runs `sql`; the rows it changed.
    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<u64, postgres::Error> {
        let statement = self.statement(sql)?;
        self.tx.execute(&statement, params)
    }

    /// Runs `sql` (statements without parameters) by the simple protocol.
    pub(super) fn batch_execute(&mut self, sql: &str) -> std::result::Result<(), postgres::Error> {
        self.tx.batch_execute(sql)
    }
}

/// A pooled connection outside a transaction ([`Pool::single`]), with the same prepared
/// statements as its [`Tx`]s.
pub(super) struct Single<'c> {
    client: &'c mut Client,
    statements: &'c mut HashMap<&'static str, Statement>,
}

impl Single<'_> {
    /// The one row of `sql`, a statement of its own.
    pub(super) fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Row, postgres::Error> {
        let statement = match self.statements.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let statement = self.client.prepare(sql)?;
                self.statements.insert(sql, statement.clone());
                statement
            }
        };
        self.client.query_one(&statement, params)
    }
}

#[derive(Debug)]
struct Inner {
    jobs: Mutex<Sender<Job>>,
    target: String,
    health: Arc<HealthState>,
    /// A ping is queued or running: at most one at a time.
    pinging: Arc<AtomicBool>,
}

/// Handles on the pool's queue; the threads end when the last handle is dropped.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Starts `connections` threads; each connects on its first job.
    ///
    /// Errors: [`PgOpenError::Thread`].
    pub(super) fn start(
        config: Config,
        target: String,
        connections: usize,
    ) -> std::result::Result<Self, PgOpenError> {
        let (sender, receiver) = channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let health = Arc::new(HealthState::default());
        for n in 0..connections {
            let receiver: Arc<Mutex<Receiver<Job>>> = receiver.clone();
            let mut conn = Conn {
                config: config.clone(),
                client: None,
                health: health.clone(),
                generation: 0,
                statements: HashMap::new(),
            };
            std::thread::Builder::new()
                .name(format!("airlock-pg-{n}"))
                .spawn(move || loop {
                    let job = {
                        let queue = receiver.lock().unwrap_or_else(|e| e.into_inner());
                        match queue.recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        }
                    };
                    job(&mut conn);
                })
                .map_err(PgOpenError::Thread)?;
        }
        Ok(Self {
            inner: Arc::new(Inner {
                jobs: Mutex::new(sender),
                target,
                health,
                pinging: Arc::new(AtomicBool::new(false)),
            }),
        })
    }

    /// `USER@HOST:PORT/DATABASE`.
    pub(super) fn target(&self) -> &str {
        &self.inner.target
    }

    /// The store's health: degraded from a lost connection until a job succeeds again.
    pub(super) fn health(&self) -> Health {
        let state = &self.inner.health;
        let degraded = state.degraded.load(Ordering::SeqCst);
        Health {
            writable: !degraded,
            reason: degraded.then_some("ledger_degraded"),
            detail: if degraded {
                state
                    .detail
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
            } else {
                None
            },
            storage_faults: state.faults.load(Ordering::Relaxed),
            recoveries: state.recoveries.load(Ordering::Relaxed),
            repaired_files: 0,
        }
    }

    /// Marks the store degraded (the listener lost the server): [`Pool::ping`] clears it
    /// once a pooled connection reaches the server again.
    pub(super) fn fault(&self, detail: String) {
        if !self.degraded() {
            self.inner.health.fault(detail);
        }
    }

    /// Whether a lost connection degraded the store.
    pub(super) fn degraded(&self) -> bool {
        self.inner.health.degraded.load(Ordering::SeqCst)
    }

    fn submit(&self, job: Job) -> Result<()> {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| LedgerError::storage("the PostgreSQL connection threads stopped"))
    }

    /// Runs `job` on a pooled connection and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (answer, answered) = sync_channel(1);
        self.submit(Box::new(move |conn| {
            let _ = answer.send(job(conn));
        }))?;
        answered
            .recv()
            .map_err(|_| LedgerError::storage("a PostgreSQL connection thread died"))?
    }

    /// Runs `write` in one transaction, retried on deadlocks and serialization failures,
    /// announcing its changes (with `origin`) inside it. `journal` commits without
    /// waiting for the WAL flush. Returns what `write` returned once committed.
    ///
    /// Errors: what `write` returns; [`LedgerError::Storage`] for the driver's faults;
    /// [`LedgerError::Conflict`] (naming `key`) after [`MAX_ATTEMPTS`].
    pub(super) fn transaction<T: Send + 'static>(
        &self,
        key: String,
        journal: bool,
        origin: String,
        mut write: impl FnMut(&mut Tx<'_>) -> Result<(T, Vec<Change>)> + Send + 'static,
    ) -> Result<(T, Vec<Change>)> {
        self.call(move |conn| {
            for attempt in 0..MAX_ATTEMPTS {
                let result = attempt_once(conn, journal, &origin, &mut write);
                match result {
                    Err(error) if retryable(&error) => {
                        std::thread::sleep(Duration::from_millis(u64::from(attempt) * 3 + 1));
                    }
                    Err(error) => {
                        conn.check(&error);
                        return Err(error);
                    }
                    Ok(done) => {
                        conn.health.ok();
                        return Ok(done);
                    }
                }
            }
            Err(LedgerError::Conflict { key })
        })
    }

    /// Runs `read` in one transaction (retried as [`Pool::transaction`]).
    pub(super) fn read<T: Send + 'static>(
        &self,
        mut read: impl FnMut(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (out, _) = self.transaction(String::from("read"), false, String::new(), move |tx| {
            Ok((read(tx)?, Vec::new()))
        })?;
        Ok(out)
    }

    /// Runs `read` on a pooled connection outside an explicit transaction: each statement
    /// it runs is a transaction of its own (PostgreSQL's implicit one, `READ COMMITTED`,
    /// so it sees every commit made before it started), in one round trip where
    /// [`Pool::read`] takes three (`BEGIN`, the query, `COMMIT`). For the per-request
    /// reads of the request path, which run one statement.
    ///
    /// Errors: what `read` returns; [`LedgerError::Storage`] for the driver's faults;
    /// [`LedgerError::Degraded`] while the server cannot be reached.
    pub(super) fn single<T: Send + 'static>(
        &self,
        read: impl FnOnce(&mut Single<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.call(move |conn| {
            let result = conn.client().map(|_| ()).and_then(|()| {
                let Conn {
                    client, statements, ..
                } = &mut *conn;
                let client = client
                    .as_mut()
                    .ok_or_else(|| LedgerError::storage("no PostgreSQL connection"))?;
                read(&mut Single { client, statements })
            });
            match &result {
                Ok(_) => conn.health.ok(),
                Err(error) => conn.check(error),
            }
            result
        })
    }

    /// Asks a pooled connection to prove the server writable again (reconnecting), without
    /// waiting: what clears a degraded health when no caller writes.
    pub(super) fn ping(&self) {
        if self.inner.pinging.swap(true, Ordering::SeqCst) {
            return;
        }
        let pinging = self.inner.pinging.clone();
        let _ = self.submit(Box::new(move |conn| {
            let result = conn
                .client()
                .and_then(|client| client.batch_execute("SELECT 1").map_err(fault));
            match result {
                Ok(()) => conn.health.ok(),
                Err(error) => conn.check(&error),
            }
            pinging.store(false, Ordering::SeqCst);
        }));
    }
}

/// One attempt of a transaction: begin, write, announce, commit.
fn attempt_once<T>(
    conn: &mut Conn,
    journal: bool,
    origin: &str,
    write: &mut impl FnMut(&mut Tx<'_>) -> Result<(T, Vec<Change>)>,
) -> Result<(T, Vec<Change>)> {
    conn.client()?;
    let Conn {
        client, statements, ..
    } = conn;
    let client = client
        .as_mut()
        .ok_or_else(|| LedgerError::storage("no PostgreSQL connection"))?;
    let mut tx = Tx {
        tx: client.transaction().map_err(fault)?,
        statements,
        origin,
        announced: false,
    };
    if journal {
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(fault)?;
    }
    let (out, changes) = write(&mut tx)?;
    if !tx.announced {
        notify::announce(&mut tx, origin, &changes)?;
    }
    tx.tx.commit().map_err(fault)?;
    Ok((out, changes))
}
