//! The conformance suite every [`Store`] backend must pass (feature `conformance`, and
//! the crate's own tests): contract tests per concern ([`contracts`]) and a model test
//! ([`model`]) that runs random operation sequences against a backend and the in-memory
//! model and asserts the same answers, as sled v0.34.7's own model tests do.
//!
//! A backend's test calls [`contracts::all`] (which runs [`outcomes::all`],
//! [`leases::all`] and [`retention::all`] too) with a [`Backend`] and runs
//! [`model::same_answers`] under proptest with [`model::operations`]. The functions panic
//! on the first broken contract: they are tests.

use crate::{HealingLedger, Ledger, MemoryStore, Store};

pub mod audit;
pub mod contracts;
pub mod leases;
pub mod model;
pub mod outcomes;
pub mod postgres;
pub mod retention;

/// How the suite gets stores of one backend.
pub trait Backend {
    /// A store over new, empty storage.
    fn fresh(&mut self) -> Box<dyn Store>;

    /// A store over the storage of the last [`Backend::fresh`] store, which the caller has
    /// dropped: for a durable backend, its files reopened, so that only what was durable
    /// is seen.
    fn reopen(&mut self) -> Box<dyn Store>;
}

/// The sled backend over temporary directories.
#[derive(Debug, Default)]
pub struct SledBackend {
    dir: Option<tempfile::TempDir>,
}

impl Backend for SledBackend {
    fn fresh(&mut self) -> Box<dyn Store> {
        // A test helper: a machine without a writable temporary directory cannot run it.
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Ledger::open(dir.path()).expect("open a new sled ledger");
        self.dir = Some(dir);
        Box::new(store)
    }

    fn reopen(&mut self) -> Box<dyn Store> {
        let dir = self.dir.as_ref().expect("reopen after fresh");
        // sled's flusher thread lets go of the directory lock a moment after the drop.
        let mut reopened = Ledger::open(dir.path());
        for _ in 0..100 {
            if reopened.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            reopened = Ledger::open(dir.path());
        }
        Box::new(reopened.expect("reopen the sled ledger"))
    }
}

/// The sled backend behind [`HealingLedger`] (what `airlock serve` runs), over temporary
/// directories, with no free-space floor: checks that it forwards every method.
#[derive(Debug, Default)]
pub struct HealingBackend {
    sled: SledBackend,
}

impl HealingBackend {
    fn wrap(path: &std::path::Path) -> Box<dyn Store> {
        let mut opened = HealingLedger::open(path, crate::DEFAULT_CACHE_BYTES, 0);
        for _ in 0..100 {
            if opened.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            opened = HealingLedger::open(path, crate::DEFAULT_CACHE_BYTES, 0);
        }
        let healing = opened.expect("open the healing sled ledger");
        Box::new(std::sync::Arc::into_inner(healing).expect("the only handle"))
    }
}

impl Backend for HealingBackend {
    fn fresh(&mut self) -> Box<dyn Store> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Self::wrap(dir.path());
        self.sled.dir = Some(dir);
        store
    }

    fn reopen(&mut self) -> Box<dyn Store> {
        let dir = self.sled.dir.as_ref().expect("reopen after fresh");
        Self::wrap(dir.path())
    }
}

/// The in-memory backend: reopening is another handle on the same records.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    store: MemoryStore,
}

impl Backend for MemoryBackend {
    fn fresh(&mut self) -> Box<dyn Store> {
        self.store = MemoryStore::new();
        Box::new(self.store.clone())
    }

    fn reopen(&mut self) -> Box<dyn Store> {
        Box::new(self.store.clone())
    }
}

#[cfg(test)]
mod tests;

/// Makes run `id` of the sled ledger in directory `path` look as a ledger written before
/// tokens were derived does: its record holds the plaintext `token` (the JSON field
/// `token`). For tests of the rewrite on open ([`crate::RunStore::hash_plaintext_tokens`]);
/// the caller holds no other handle on the ledger.
///
/// Errors: storage faults, and [`crate::LedgerError::NotFound`] for an unknown run.
pub fn write_plaintext_token(
    path: &std::path::Path,
    id: &crate::RunId,
    token: &str,
) -> crate::Result<()> {
    Ledger::open(path)?.write_plaintext_token(id, token)
}
