//! The commit authority's side of release leases ([`airlock_ledger::LeaseStore`]): a run is
//! released only by the control instance holding its lease, every write of the release
//! carries the lease as its fence, and the lease is renewed in the background at a third
//! of its TTL while the release runs.
//!
//! When the renewal fails or the store says the lease is stale (another instance took
//! over), releasing stops: nothing new is sent, what is in flight is recorded if the
//! store still accepts it, and the rest is left for the next holder. A commit that finds
//! the run leased by another instance waits for it (polling the store every
//! [`POLL_EVERY`], at most [`WAIT_FOR_HOLDER`]) and takes the run over if that lease
//! expires with the run still `committing`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_ledger::{Lease, LedgerError, Refused, RunId, RunState};
use tracing::{info, warn};

use super::{blocking, CommitError};
use crate::Control;

/// How often a commit waiting for another holder looks at the store.
pub const POLL_EVERY: Duration = Duration::from_millis(200);

/// Longest a commit (or retry, or settlement) waits for another instance's live lease
/// before answering [`Refused::LeaseHeld`] (409 `lease_held`): ask again later.
pub const WAIT_FOR_HOLDER: Duration = Duration::from_secs(60);

/// The fence of one release: the lease every write carries, and whether it was lost.
/// Cheap to clone into each effect's release task.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    lease: Arc<Lease>,
    lost: Arc<AtomicBool>,
}

impl Fence {
    /// The lease to pass to the store's `_fenced` writes.
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Whether renewal failed or a write was fenced: start nothing new.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Notes that the lease is lost when `error` is the store's stale-lease refusal;
    /// returns whether it was.
    pub(crate) fn note(&self, error: &CommitError) -> bool {
        let stale = matches!(
            error,
            CommitError::Ledger(LedgerError::Refused(Refused::StaleLease { .. }))
        );
        if stale {
            self.lost.store(true, Ordering::SeqCst);
        }
        stale
    }
}

/// A lease this instance holds, renewed by a background task until given up or dropped.
pub(crate) struct Held {
    fence: Fence,
    renewer: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

impl Held {
    /// The fence of this lease.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Stops renewing and gives the lease up in the store, so that the next holder need
    /// not wait for it to expire. A failure is logged: the lease then simply expires.
    pub(crate) async fn give_up(self, shared: &Arc<Control>) {
        self.renewer.abort();
        let (ledger, lease) = (shared.ledger().clone(), self.fence.lease.clone());
        if let Err(error) = blocking(move || ledger.give_up_lease(&lease)).await {
            warn!(run.id = %self.fence.lease.run, error = %error, "giving up the release lease failed; it expires by itself");
        }
    }
}

/// What asking for a run's lease gave.
pub(crate) enum Claim {
    /// This instance holds it now.
    Held(Held),
    /// Another holder's lease is live.
    Busy(Refused),
}

/// Asks the store for `run`'s lease under this instance's holder id. The caller holds the
/// run's commit lock (one holder id never acquires concurrently with itself). Effects
/// the store turned from `releasing` into `unknown` (a dead holder's) are logged.
///
/// Errors: storage faults, an unknown run.
pub(crate) async fn claim(shared: &Arc<Control>, run: &RunId) -> Result<Claim, CommitError> {
    let (ledger, run_id) = (shared.ledger().clone(), run.clone());
    let (holder, ttl) = (shared.lease.holder.clone(), shared.lease.ttl_ms());
    let granted = blocking(move || match ledger.acquire_lease(&run_id, &holder, ttl) {
        Ok(granted) => Ok(Ok(granted)),
        Err(LedgerError::Refused(refused @ Refused::LeaseHeld { .. })) => Ok(Err(refused)),
        Err(other) => Err(other),
    })
    .await?;
    let (lease, recovered) = match granted {
        Ok(granted) => granted,
        Err(refused) => return Ok(Claim::Busy(refused)),
    };
    for effect in &recovered {
        warn!(effect.id = %effect.id, run.id = %effect.run_id, url = %effect.url, lease.token = lease.token,
              "effect was being released by a holder whose lease expired; marked unknown, not re-sent");
    }
    let fence = Fence {
        lease: Arc::new(lease),
        lost: Arc::default(),
    };
    let renewer = tokio::spawn(renew(shared.clone(), fence.clone()));
    Ok(Claim::Held(Held { fence, renewer }))
}

/// Renews the lease every third of its TTL until it fails, then marks it lost.
async fn renew(shared: Arc<Control>, fence: Fence) {
    let every = shared.lease.renew_every();
    loop {
        tokio::time::sleep(every).await;
        let (ledger, lease, ttl) = (
            shared.ledger().clone(),
            fence.lease.clone(),
            shared.lease.ttl_ms(),
        );
        if let Err(error) = blocking(move || ledger.renew_lease(&lease, ttl)).await {
            warn!(run.id = %fence.lease.run, lease.token = fence.lease.token, error = %error,
                  "renewing the release lease failed; releasing stops and the next holder finishes");
            fence.lost.store(true, Ordering::SeqCst);
            return;
        }
    }
}

/// Waits until `run` can be claimed by this instance or needs nothing more: `Ok(None)`
/// when the run is no longer `committing` (another holder finished it), `Ok(Some(held))`
/// once claimed (at once when no live lease exists).
///
/// Errors: [`Refused::LeaseHeld`] after [`WAIT_FOR_HOLDER`]; storage faults.
pub(crate) async fn claim_or_wait(
    shared: &Arc<Control>,
    run: &RunId,
    need_committing: bool,
) -> Result<Option<Held>, CommitError> {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_HOLDER;
    let mut told = false;
    loop {
        if need_committing && !committing(shared, run).await? {
            return Ok(None);
        }
        let refused = match claim(shared, run).await? {
            Claim::Held(held) => return Ok(Some(held)),
            Claim::Busy(refused) => refused,
        };
        if !told {
            info!(run.id = %run, reason = %refused, "waiting for another control instance's release");
            told = true;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CommitError::Ledger(refused.into()));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Whether `run` is `committing`.
///
/// Errors: storage faults.
pub(crate) async fn committing(shared: &Arc<Control>, run: &RunId) -> Result<bool, CommitError> {
    let (ledger, id) = (shared.ledger().clone(), run.clone());
    blocking(move || {
        Ok(ledger
            .run(&id)?
            .is_some_and(|r| r.state == RunState::Committing))
    })
    .await
}

/// The release lease settings of a control instance.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// This instance's holder id (`airlock serve` keeps it in the data directory's
    /// `instance-id`, so a restart on the same directory takes its own leases over at
    /// once).
    pub holder: String,
    /// How long a lease lasts unless renewed (`--release-lease-ttl`, 10 s by default);
    /// renewed every third of it. A dead instance's runs are taken over within the TTL
    /// plus a sweep ([`LeaseSettings::renew_every`]).
    pub ttl: Duration,
}

impl LeaseSettings {
    /// The default TTL: 10 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// The TTL in milliseconds (at least 1).
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How often a held lease is renewed and the takeover sweeper looks for runs of dead
    /// holders: a third of the TTL (at least 10 ms).
    pub fn renew_every(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(10))
    }
}
