//! Release leases: which control instance may release a run's effects now, with a fencing
//! token that every write of the release carries ([`crate::LeaseStore`]).
//!
//! One record per run ever leased: holder, token, expiry. Tokens count up per run and are
//! never reused (giving a lease up keeps its token), so a write carrying an older token
//! is recognised as stale. Expiry is decided by the store's clock, in milliseconds since
//! the Unix epoch. The pure functions here are the rules every backend applies; a SQL
//! backend states the same rules as the `WHERE` clauses given in each function's docs.

use serde::{Deserialize, Serialize};

use crate::error::Refused;
use crate::model::RunId;

/// A run's release lease as granted or renewed ([`crate::LeaseStore::acquire_lease`]).
/// Pass it back as the fence of every write of the release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The run it covers.
    pub run: RunId,
    /// Who holds it: one id per control instance (`airlock serve` keeps it in the data
    /// directory's `instance-id`).
    pub holder: String,
    /// The fencing token: 1 for a run's first lease, one more for each later grant.
    pub token: u64,
    /// When it expires, by the store's clock (ms since the Unix epoch).
    pub expires_at_ms: u64,
}

impl Lease {
    /// Whether the lease is live at `now_ms` (the store's clock): it expires at
    /// `expires_at_ms` exactly.
    pub fn live_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms
    }
}

/// Grants `holder` the lease of `run` for `ttl_ms` at `now_ms`, given the run's current
/// record: refused while another holder's lease is live; the same holder acquiring its
/// own live lease is granted a new token (its previous process died: holder ids are one
/// per process at a time). The new token is the old one plus one (1 for the first).
///
/// SQL: `INSERT … ON CONFLICT (run_id) DO UPDATE SET holder, token = token + 1,
/// expires_at = now + ttl WHERE expires_at <= now OR holder = $holder RETURNING …`.
///
/// Errors: [`Refused::LeaseHeld`] naming the holder and its expiry.
pub fn acquire(
    current: Option<&Lease>,
    run: &RunId,
    holder: &str,
    ttl_ms: u64,
    now_ms: u64,
) -> Result<Lease, Refused> {
    if let Some(current) = current {
        if current.live_at(now_ms) && current.holder != holder {
            return Err(Refused::LeaseHeld {
                run: run.clone(),
                holder: current.holder.clone(),
                expires_at_ms: current.expires_at_ms,
            });
        }
    }
    Ok(Lease {
        run: run.clone(),
        holder: holder.to_owned(),
        token: current.map_or(0, |c| c.token) + 1,
        expires_at_ms: now_ms.saturating_add(ttl_ms.max(1)),
    })
}

/// Checks that `fence` is the run's newest lease (`current`), and, when `live` is asked
/// (a write that starts a send), that it has not expired at `now_ms`.
///
/// SQL: the fenced write's `WHERE EXISTS (SELECT 1 FROM release_leases WHERE run_id = $run
/// AND token = $token [AND expires_at > now])`.
///
/// Errors: [`Refused::StaleLease`] (with the newest token, 0 when none) for a fence of
/// another run, an older token, or (with `live`) an expired lease.
pub fn check_fence(
    current: Option<&Lease>,
    run: &RunId,
    fence: &Lease,
    live: bool,
    now_ms: u64,
) -> Result<(), Refused> {
    let newest = current.map_or(0, |c| c.token);
    let ok = &fence.run == run
        && current.is_some_and(|c| c.token == fence.token && (!live || c.live_at(now_ms)));
    if ok {
        return Ok(());
    }
    Err(Refused::StaleLease {
        run: run.clone(),
        token: fence.token,
        newest,
        expired: newest == fence.token,
    })
}

/// Renews `lease` for `ttl_ms` from `now_ms`: only the newest, still-live lease of its
/// holder; an expired lease is lost (acquire again).
///
/// SQL: `UPDATE release_leases SET expires_at = now + ttl WHERE run_id = $run AND token =
/// $token AND holder = $holder AND expires_at > now RETURNING …`.
///
/// Errors: [`Refused::StaleLease`].
pub fn renew(
    current: Option<&Lease>,
    lease: &Lease,
    ttl_ms: u64,
    now_ms: u64,
) -> Result<Lease, Refused> {
    check_fence(current, &lease.run, lease, true, now_ms)?;
    Ok(Lease {
        expires_at_ms: now_ms.saturating_add(ttl_ms.max(1)),
        ..lease.clone()
    })
}

/// Gives `lease` up at `now_ms`: the record with its expiry set to `now_ms` (token kept),
/// or `None` (write nothing) when `lease` is not the newest one.
///
/// SQL: `UPDATE release_leases SET expires_at = now WHERE run_id = $run AND token = $token`.
pub fn give_up(current: Option<&Lease>, lease: &Lease, now_ms: u64) -> Option<Lease> {
    let current = current.filter(|c| c.token == lease.token && c.run == lease.run)?;
    Some(Lease {
        expires_at_ms: current.expires_at_ms.min(now_ms),
        ..current.clone()
    })
}
