//! Which ledger `airlock serve` opens: the sled ledger in `--data` (the embedded default),
//! or the PostgreSQL store given by `--store` (docs/fleet.md#postgresql-store). Either way
//! the CA, the admin token and the reviewer tokens stay in `--data`.

use std::path::Path;
use std::sync::Arc;

use airlock_ledger::{HealingLedger, PgStore, Store};

use super::StartError;
use crate::config::{ServeConfig, LEDGER_DIR};

/// The opened ledger and how to name it in messages.
pub(super) struct Opened {
    /// The store.
    pub(super) ledger: Arc<dyn Store>,
    /// `DATA/ledger` or `postgres USER@HOST:PORT/DATABASE`.
    pub(super) place: String,
    /// Whether it is the PostgreSQL store.
    pub(super) shared: bool,
}

/// Opens the ledger `config` names.
///
/// Errors: [`StartError::Ledger`] for the sled ledger (another airlock may hold it),
/// [`StartError::Store`] for a `--store` URL that is malformed or whose server cannot be
/// reached, refuses the login or has a newer schema.
pub(super) fn open(config: &ServeConfig, data_dir: &Path) -> Result<Opened, StartError> {
    match &config.store_url {
        Some(url) => {
            warn_of_libpq_environment(std::env::vars_os().map(|(k, _)| k));
            let store = PgStore::open(url, config.store_connections)
                .map_err(|source| StartError::Store { source })?;
            let place = format!("postgres {}", store.target());
            tracing::info!(store = %place, "ledger on PostgreSQL (--store); --ledger-cache-mib and --ledger-min-free-mib do not apply");
            Ok(Opened {
                ledger: Arc::new(store),
                place,
                shared: true,
            })
        }
        None => {
            let path = data_dir.join(LEDGER_DIR);
            let ledger: Arc<dyn Store> = HealingLedger::open(
                &path,
                config.ledger_cache_bytes,
                config.ledger_min_free_bytes,
            )
            .map_err(|source| StartError::Ledger {
                path: path.display().to_string(),
                source,
            })?;
            Ok(Opened {
                ledger,
                place: path.display().to_string(),
                shared: false,
            })
        }
    }
}

/// The error of a failed first read of the opened ledger (recovery, the run list).
pub(super) fn read_failed(opened: &Opened, source: airlock_ledger::LedgerError) -> StartError {
    if opened.shared {
        StartError::StoreRead {
            place: opened.place.clone(),
            source,
        }
    } else {
        StartError::Ledger {
            path: opened.place.clone(),
            source,
        }
    }
}

/// libpq's environment variables (PostgreSQL documentation, "Environment Variables"),
/// which the driver does not read: `--store`'s URL is the whole connection.
const LIBPQ_ENVIRONMENT: [&str; 12] = [
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGCHANNELBINDING",
];

/// The libpq variables among `names` (the environment's), which `--store` ignores.
fn libpq_variables_set(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    names
        .filter_map(|name| name.into_string().ok())
        .filter(|name| LIBPQ_ENVIRONMENT.contains(&name.as_str()))
        .collect()
}

/// Warns when libpq's variables are set: an operator who set `PGSSLMODE=verify-full`
/// would otherwise believe it applies.
fn warn_of_libpq_environment(names: impl Iterator<Item = std::ffi::OsString>) {
    let set = libpq_variables_set(names);
    if !set.is_empty() {
        tracing::warn!(
            variables = %set.join(", "),
            "libpq's environment variables are not read: put the connection's settings (sslmode, sslrootcert, user, password, …) in the --store URL"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn libpq_variables_are_picked_out_of_the_environment() {
        let names = ["PATH", "PGSSLMODE", "PGHOST", "PGX", "AIRLOCK_LOG"].map(Into::into);
        assert_eq!(
            super::libpq_variables_set(names.into_iter()),
            ["PGSSLMODE", "PGHOST"]
        );
    }
}
