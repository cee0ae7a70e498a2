//! The schema: migrations embedded from `ledger/migrations/`, applied at open in one
//! transaction under an advisory lock (several instances may start at once), recorded in
//! `airlock_schema_version`; a database newer than this binary is refused.

use super::tls::Config;
use super::PgOpenError;

/// The migrations, in order: `(version, SQL)`. Version N is `ledger/migrations/000N_*.sql`.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../migrations/0001_ledger.sql")),
    (
        2,
        include_str!("../../migrations/0002_leases_retention.sql"),
    ),
    (3, include_str!("../../migrations/0003_change_outbox.sql")),
    (4, include_str!("../../migrations/0004_audit.sql")),
];

/// The newest schema version this binary knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The advisory lock key that serializes migrations of airlock's schema: "airlock" in
/// ASCII, as a number.
const MIGRATION_LOCK: i64 = 0x0061_6972_6c6f_636b;

/// Connects once and migrates, on a thread of its own (the sync client must not run
/// inside a caller's async runtime).
///
/// Errors: [`PgOpenError::Connect`], [`PgOpenError::Migrate`], [`PgOpenError::SchemaTooNew`],
/// [`PgOpenError::Thread`].
pub(super) fn migrate_on_thread(config: Config, target: String) -> Result<(), PgOpenError> {
    let handle = std::thread::Builder::new()
        .name("airlock-pg-migrate".into())
        .spawn(move || {
            let mut client = config.connect().map_err(|source| PgOpenError::Connect {
                target: target.clone(),
                source,
            })?;
            migrate(&mut client, &target)
        })
        .map_err(PgOpenError::Thread)?;
    handle.join().unwrap_or_else(|_| {
        Err(PgOpenError::Thread(std::io::Error::other(
            "migration thread panicked",
        )))
    })
}

/// Applies the migrations the database lacks, in one transaction.
fn migrate(client: &mut postgres::Client, target: &str) -> Result<(), PgOpenError> {
    let failed = |source| PgOpenError::Migrate {
        target: target.to_owned(),
        source,
    };
    let mut tx = client.transaction().map_err(failed)?;
    tx.query("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(failed)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS airlock_schema_version (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .map_err(failed)?;
    let current: i32 = tx
        .query_one(
            "SELECT COALESCE(max(version), 0) FROM airlock_schema_version",
            &[],
        )
        .map_err(failed)?
        .get(0);
    if current > SCHEMA_VERSION {
        return Err(PgOpenError::SchemaTooNew {
            database: current,
            binary: SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql).map_err(failed)?;
        tx.execute(
            "INSERT INTO airlock_schema_version (version) VALUES ($1)",
            &[version],
        )
        .map_err(failed)?;
    }
    tx.commit().map_err(failed)
}
