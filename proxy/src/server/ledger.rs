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
