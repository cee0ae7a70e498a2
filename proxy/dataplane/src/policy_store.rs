//! The policy in force and its hot reload: validate, build, swap atomically, count generations.
//!
//! Requests take one [`Snapshot`] ([`PolicyStore::current`]) and decide everything about
//! themselves with it, so a reload never splits one request between two policies.
//! Reloads come from three places: the policy file changing on disk (polled every
//! [`WATCH_INTERVAL`]; a change is a change of content, so editors that replace the file
//! by rename are seen), `SIGHUP`, and `POST /v1/policy` on the admin API. A reload that
//! fails to parse or compile keeps the last good policy and reports why (docs/policy.md
//! invariant 6: an invalid reload keeps the last good policy).
//!
//! The dialer's `allow_private` check ([`airlock_net::dial::PrivateAccess`]) reads the policy
//! in force when it dials, not the request's snapshot: a pooled upstream connection outlives
//! the request that opened it.

// The store itself may read what it holds (clippy.toml bans current() elsewhere in the
// data plane's request path).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_ledger::now_ms;
use airlock_policy::{Policy, PolicyError};
use arc_swap::ArcSwap;

use crate::secrets::{CredentialError, Credentials};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

/// How often the policy file is checked for a change of content.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// One compiled policy with the text it came from and its place in the reload history.
#[derive(Debug)]
pub struct Snapshot {
    /// The compiled policy.
    pub policy: Policy,
    /// The text it was compiled from (the manifest shows the rules as written).
    pub text: String,
    /// 1 for the policy loaded at start, +1 for every successful reload.
    pub generation: u64,
    /// Where it came from: `file` (start, watch or SIGHUP) or `admin` (`POST /v1/policy`).
    pub source: ReloadSource,
    /// When it was swapped in, ms since the Unix epoch.
    pub loaded_at_ms: u64,
    /// The values of the policy's credentials, read when it was loaded (never logged).
    pub credentials: Credentials,
}

impl std::ops::Deref for Snapshot {
    type Target = Policy;

    fn deref(&self) -> &Policy {
        &self.policy
    }
}

/// What asked for a policy to be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadSource {
    /// The policy file (at start, on a change seen by the watcher, or on SIGHUP).
    File,
    /// A policy text posted to the admin API.
    Admin,
}

/// The result of a reload attempt that did not fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reloaded {
    /// The revision now in force.
    pub revision: String,
    /// Its generation.
    pub generation: u64,
    /// False when the new text compiled to the revision already in force (nothing swapped).
    pub changed: bool,
}

/// Why a policy could not be loaded: the file, or one of its credentials' sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The policy (or baseline) file cannot be read, parsed or compiled.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A credential's value cannot be read.
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

/// A failed reload: the error, with the revision and generation that stay in force.
#[derive(Debug, thiserror::Error)]
#[error("{error} (policy {revision}, generation {generation}, stays in force)")]
pub struct ReloadError {
    /// Why the new policy was refused.
    #[source]
    pub error: Box<LoadError>,
    /// The revision still in force.
    pub revision: String,
    /// The generation still in force.
    pub generation: u64,
}

/// The policy in force, swappable while requests are being decided.
pub struct PolicyStore {
    current: ArcSwap<Snapshot>,
    path: PathBuf,
    /// The operator baseline (`--baseline`), re-read and applied on every load.
    baseline: Option<PathBuf>,
    /// The data directory (the placeholder key lives there).
    data_dir: PathBuf,
    generation: AtomicU64,
    /// Serialises reloads, and remembers the file content last seen so an unchanged file
    /// is not reloaded (which would undo a policy posted to the admin API).
    reload: Mutex<FileSeen>,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
}

#[derive(Default)]
struct FileSeen {
    digest: Option<[u8; 32]>,
    unreadable: bool,
}

/// The dialer asks the policy of the moment whether a special-purpose address may be
/// dialed (`allow_private`, docs/policy.md invariant 1).
impl airlock_net::dial::PrivateAccess for PolicyStore {
    fn allows_private(&self, host: &str, port: u16, ip: std::net::IpAddr) -> bool {
        self.current().allows_private(host, port, ip)
    }
}

impl PolicyStore {
    /// Loads the policy file at `path` as generation 1, with the operator `baseline`
    /// (deny rules evaluated first) when one is given.
    ///
    /// # Errors
    /// A file cannot be read, or does not parse or compile.
    pub fn load(
        path: &Path,
        baseline: Option<&Path>,
        data_dir: &Path,
    ) -> Result<PolicyStore, LoadError> {
        let text = read_policy(path)?;
        let policy = compile(&text, &path.display().to_string(), baseline)?;
        let credentials = Credentials::resolve(&policy, data_dir)?;
        let digest = Sha256::digest(text.as_bytes()).into();
        Ok(PolicyStore {
            current: ArcSwap::from_pointee(Snapshot {
                policy,
                text,
                generation: 1,
                source: ReloadSource::File,
                loaded_at_ms: now_ms(),
                credentials,
            }),
            path: path.to_owned(),
            baseline: baseline.map(Path::to_owned),
            data_dir: data_dir.to_owned(),
            generation: AtomicU64::new(1),
            reload: Mutex::new(FileSeen {
                digest: Some(digest),
                unreadable: false,
            }),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        })
    }

    /// The policy in force now. Hold the returned snapshot for the whole of one decision.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The policy file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(successful reloads, failed reloads)` since start, for `/metrics`.
    pub fn reload_counts(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.reload_failures.load(Ordering::Relaxed),
        )
    }

    /// Re-reads the policy file and swaps it in when its content changed since it was
    /// last read (`force` reloads even an unchanged file, as SIGHUP does).
    ///
    /// # Errors
    /// The file cannot be read or is invalid; the last good policy stays in force.
    pub fn reload_file(&self, force: bool) -> Result<Reloaded, ReloadError> {
        let mut seen = self.reload.lock().unwrap_or_else(|e| e.into_inner());
        let text = match read_policy(&self.path) {
            Ok(text) => {
                seen.unreadable = false;
                text
            }
            // A file that stays unreadable (being replaced, deleted) is reported once.
            Err(error) if seen.unreadable && !force => {
                let current = self.current();
                return Err(ReloadError {
                    error: Box::new(error.into()),
                    revision: current.revision().to_owned(),
                    generation: current.generation,
                });
            }
            Err(error) => {
                seen.unreadable = true;
                return Err(self.failed(error.into()));
            }
        };
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if !force && seen.digest == Some(digest) {
            let current = self.current();
            return Ok(Reloaded {
                revision: current.revision().to_owned(),
                generation: current.generation,
                changed: false,
            });
        }
        seen.digest = Some(digest);
        let origin = self.path.display().to_string();
        self.swap(text, &origin, ReloadSource::File, force)
    }

    /// Validates `text` and swaps it in (the admin API's `POST /v1/policy`). The policy
    /// file is not written: the file stays the policy of the next start, and a later
    /// change to it replaces this one.
    ///
    /// # Errors
    /// The text is invalid; the last good policy stays in force.
    pub fn replace(&self, text: String) -> Result<Reloaded, ReloadError> {
        let _serial = self.reload.lock().unwrap_or_else(|e| e.into_inner());
        self.swap(text, "<POST /v1/policy>", ReloadSource::Admin, false)
    }

    /// Compiles and swaps; the caller holds the reload lock.
    ///
    /// Credentials are read afresh with every policy; `force` swaps even when the text is
    /// unchanged, so `SIGHUP` also picks up rotated credential values.
    fn swap(
        &self,
        text: String,
        origin: &str,
        source: ReloadSource,
        force: bool,
    ) -> Result<Reloaded, ReloadError> {
        let policy = compile(&text, origin, self.baseline.as_deref())
            .map_err(|error| self.failed(error.into()))?;
        let credentials = Credentials::resolve(&policy, &self.data_dir)
            .map_err(|error| self.failed(error.into()))?;
        let current = self.current();
        if !force && policy.revision() == current.revision() {
            return Ok(Reloaded {
                revision: current.revision().to_owned(),
                generation: current.generation,
                changed: false,
            });
        }
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let revision = policy.revision().to_owned();
        self.current.store(Arc::new(Snapshot {
            policy,
            text,
            generation,
            source,
            loaded_at_ms: now_ms(),
            credentials,
        }));
        self.reloads.fetch_add(1, Ordering::Relaxed);
        info!(policy.revision = %revision, policy.generation = generation,
              policy.previous = %current.revision(), source = ?source, "policy reloaded");
        Ok(Reloaded {
            revision,
            generation,
            changed: true,
        })
    }

    fn failed(&self, error: LoadError) -> ReloadError {
        self.reload_failures.fetch_add(1, Ordering::Relaxed);
        let current = self.current();
        let failure = ReloadError {
            error: Box::new(error),
            revision: current.revision().to_owned(),
            generation: current.generation,
        };
        warn!(error = %failure, "policy reload refused; the last good policy stays in force");
        failure
    }

    /// Watches the policy file (content polled every [`WATCH_INTERVAL`]) and reloads on
    /// SIGHUP, until the returned task is dropped or aborted.
    pub fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            #[cfg(unix)]
            let mut hangup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            let mut tick = tokio::time::interval(WATCH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                #[cfg(unix)]
                let force = match hangup.as_mut() {
                    Some(hangup) => tokio::select! {
                        _ = tick.tick() => false,
                        _ = hangup.recv() => true,
                    },
                    None => {
                        tick.tick().await;
                        false
                    }
                };
                #[cfg(not(unix))]
                let force = {
                    tick.tick().await;
                    false
                };
                if force {
                    info!(path = %store.path.display(), "SIGHUP: reloading the policy file");
                }
                let store = store.clone();
                // Reading and compiling are blocking work; keep them off the reactor.
                let _ = tokio::task::spawn_blocking(move || store.reload_file(force)).await;
            }
        })
    }
}

/// Compiles a project policy and applies the baseline file (read afresh) to it.
fn compile(text: &str, origin: &str, baseline: Option<&Path>) -> Result<Policy, PolicyError> {
    let policy = Policy::from_toml_str(text, origin)?;
    match baseline {
        Some(path) => policy.with_baseline(Policy::load(path)?, &path.display().to_string()),
        None => Ok(policy),
    }
}

fn read_policy(path: &Path) -> Result<String, PolicyError> {
    std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
        origin: path.display().to_string(),
        source,
    })
}
