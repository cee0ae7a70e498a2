//! The PostgreSQL backend of the store ([`PgStore`]): one database that many airlock
//! processes share (`airlock serve --store postgres://…`, docs/fleet.md#postgresql-store).
//!
//! # Shape
//!
//! - **Connections on their own threads.** The trait is synchronous and is called from
//!   tokio workers and from `spawn_blocking`; the sync `postgres` client runs its own
//!   small runtime, which must not start inside another. So a small pool of threads
//!   (`postgres/pool.rs`) each owns one connection; a caller sends a job and blocks on its answer.
//! - **One transaction per method.** Every method runs in one `READ COMMITTED`
//!   transaction, all-or-nothing (`placeholder_count`, read on inspected requests, is one
//!   statement in its own implicit transaction: `postgres/freshness.rs`). Writes that
//!   touch a run lock its row first (`SELECT … FOR UPDATE`), then its effects, so writers
//!   of one run queue up and per-run sequence numbers (kept in `run_counters`, locked by
//!   the upsert that bumps them) are gap-free; `mark_releasing` re-reads the locked effect
//!   and so succeeds once across every process. Deadlocks and serialization failures are
//!   retried 8 times, then answered [`crate::LedgerError::Conflict`].
//! - **Durability.** Durable methods commit with `synchronous_commit` on (the server's
//!   setting; set it `on` for airlock); journal methods set it `off` for their
//!   transaction; [`crate::Store::flush`] forces a WAL flush.
//! - **Schema.** Migrations in `ledger/migrations/` are embedded and applied at open under
//!   an advisory lock (`postgres/schema.rs`); a database newer than the binary is refused.
//! - **Notifications.** Writes record their changes in an outbox table in their
//!   transaction and wake the other processes with a payload-less `NOTIFY` after commit; a
//!   listener thread reads other processes' rows into [`crate::Change`]s, on each wake-up
//!   and at least once a second (`postgres/notify.rs`).
//! - **Faults.** A lost connection answers [`crate::LedgerError::Storage`] and makes
//!   [`crate::Store::health`] report `ledger_degraded` until a reconnect succeeds; calls
//!   while the server cannot be reached answer [`crate::LedgerError::Degraded`]. The pool
//!   reconnects by itself.
//! - **TLS.** libpq's `sslmode` and `sslrootcert` (`postgres/tls.rs`, over rustls with
//!   ring): `verify-full` and `verify-ca` verify against the root file (or the built-in
//!   roots for `sslrootcert=system`); `require` and `prefer` with a root mean `verify-full`;
//!   TLS without a root is refused ([`PgOpenError::Tls`]), never unverified; `prefer` (the
//!   default) without a root and `disable` connect without TLS
//!   (docs/fleet.md#postgresql-store).

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use crate::change::{Change, Notifier};
use crate::store::{Health, Store};
use crate::Result;

mod audit;
mod effects;
mod freshness;
mod journal;
mod leases;
mod notify;
#[cfg(test)]
mod outbox_tests;
mod pool;
mod records;
mod retention;
mod runs;
mod schema;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
mod workspace;

pub use schema::SCHEMA_VERSION;

/// How many connections a [`PgStore`] keeps unless told otherwise (besides its listener).
pub const DEFAULT_CONNECTIONS: usize = 8;

/// Why a [`PgStore`] could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgOpenError {
    /// The connection string does not parse.
    #[error("the PostgreSQL URL does not parse: {reason} (expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)")]
    Url {
        /// The parser's complaint (it never contains the password).
        reason: String,
    },
    /// The URL's TLS parameters (`sslmode`, `sslrootcert`) are refused: an unknown mode,
    /// a mode that encrypts or verifies without `sslrootcert`, a contradictory pair, an
    /// unreadable or empty root file, or TLS over a unix socket (the table in
    /// docs/fleet.md#postgresql-store, after libpq's "SSL Mode Descriptions").
    #[error("the PostgreSQL URL's {parameter} is refused: {reason}")]
    Tls {
        /// `sslmode` or `sslrootcert`, or a client-certificate parameter (`sslcert`,
        /// `sslkey`, `sslpassword`, `sslcrl`, `sslcrldir`), which are not supported.
        parameter: &'static str,
        /// What is wrong and what to write instead (never the password).
        reason: String,
    },
    /// The server cannot be reached or refused the login.
    #[error("cannot connect to PostgreSQL at {target}: {source}")]
    Connect {
        /// `USER@HOST:PORT/DATABASE`, never the password.
        target: String,
        /// The driver's error.
        #[source]
        source: postgres::Error,
    },
    /// Applying the schema failed.
    #[error("cannot apply airlock's schema to PostgreSQL at {target}: {source}")]
    Migrate {
        /// `USER@HOST:PORT/DATABASE`.
        target: String,
        /// The driver's error.
        #[source]
        source: postgres::Error,
    },
    /// The database was migrated by a newer airlock.
    #[error("the PostgreSQL ledger has schema version {database}, newer than this airlock knows ({binary}): upgrade airlock")]
    SchemaTooNew {
        /// The version recorded in the database.
        database: i32,
        /// The newest version this binary has.
        binary: i32,
    },
    /// A thread could not be started.
    #[error("cannot start a PostgreSQL connection thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The PostgreSQL store. Cheap to share as `Arc<dyn Store>`; dropping it closes its
/// connections and its listener.
#[derive(Debug)]
pub struct PgStore {
    pool: pool::Pool,
    notifier: Arc<Notifier>,
    listener: notify::Listener,
    waker: notify::Waker,
}

impl PgStore {
    /// Connects to the database `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`,
    /// or libpq's `key=value` form), applies the schema, and starts `connections` pooled
    /// connections (at least 1) and a listener.
    ///
    /// Errors: [`PgOpenError`]: a malformed URL, refused TLS parameters, an unreachable
    /// server or a failed TLS handshake, a failed migration or a database newer than this
    /// binary.
    pub fn open(url: &str, connections: usize) -> std::result::Result<Self, PgOpenError> {
        let config = pool::parse_url(url)?;
        let target = pool::describe(&config);
        schema::migrate_on_thread(config.clone(), target.clone())?;
        let notifier = Arc::new(Notifier::new());
        let pool = pool::Pool::start(config.clone(), target, connections.max(1))?;
        let waker = notify::Waker::start(config.clone())?;
        let listener = notify::Listener::start(config, pool.clone(), notifier.clone())?;
        Ok(Self {
            pool,
            notifier,
            listener,
            waker,
        })
    }

    /// `USER@HOST:PORT/DATABASE` of the server, never the password.
    pub fn target(&self) -> &str {
        self.pool.target()
    }

    /// Runs `write` in a transaction (durable unless `journal`), announces its changes to
    /// the other processes inside it, and to this process's subscribers after it commits.
    fn write<T: Send + 'static>(
        &self,
        key: String,
        journal: bool,
        write: impl FnMut(&mut pool::Tx<'_>) -> Result<(T, Vec<Change>)> + Send + 'static,
    ) -> Result<T> {
        let origin = self.listener.origin().to_owned();
        let (out, changes) = self.pool.transaction(key, journal, origin, write)?;
        if !changes.is_empty() {
            self.waker.wake();
        }
        self.notifier.send(changes);
        Ok(out)
    }

    /// Runs `read` in a read-only transaction.
    fn read<T: Send + 'static>(
        &self,
        read: impl FnMut(&mut pool::Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.pool.read(read)
    }
}

impl Store for PgStore {
    fn flush(&self) -> Result<()> {
        // A transaction with an xid commits a WAL record and, with synchronous_commit
        // on, waits for the WAL to be flushed up to it: every journal write before it.
        self.write(String::from("flush"), false, |tx| {
            tx.batch_execute("SELECT txid_current()")
                .map_err(records::fault)?;
            Ok(((), Vec::new()))
        })
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.read(|tx| {
            let row = tx
                .query_one("SELECT pg_database_size(current_database())", &[])
                .map_err(records::fault)?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
    }

    fn cache_capacity(&self) -> u64 {
        0
    }

    fn subscribe(&self) -> Receiver<Change> {
        self.notifier.subscribe()
    }

    fn health(&self) -> Health {
        self.pool.health()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.listener.stop();
    }
}
