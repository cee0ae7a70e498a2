//! [`LeaseStore`] on PostgreSQL: release leases in `release_leases` (migration 0002), read
//! and written under the run's row lock, expiry by the database's clock so that every
//! instance agrees on it; the fenced writes check the run's newest token in the same
//! transaction as the write they guard. The rules are [`crate::lease`]'s.

use super::pool::Tx;
use super::records::{self, big, count, fault, locked_run, put_effects, put_run};
use super::PgStore;
use crate::change::Change;
use crate::lease::{self, Lease};
use crate::model::{now_ms, Effect, EffectId, EffectState, Run, RunId};
use crate::rules;
use crate::store::LeaseStore;
use crate::{ReleaseOutcome, Result};

/// The database's clock, in ms since the Unix epoch: every instance's leases expire by
/// the same clock.
fn db_now_ms(tx: &mut Tx<'_>) -> Result<u64> {
    let row = tx
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .map_err(fault)?;
    Ok(count(row.get(0)))
}

/// The lease record of `run` (expired or not), if it was ever leased. The caller holds
/// the run's row lock, which every lease write takes first.
fn stored(tx: &mut Tx<'_>, run: &RunId) -> Result<Option<Lease>> {
    let row = tx
        .query_opt(
            "SELECT holder, token, expires_at_ms FROM release_leases WHERE run_id = $1",
            &[&run.0],
        )
        .map_err(fault)?;
    Ok(row.map(|row| Lease {
        run: run.clone(),
        holder: row.get(0),
        token: count(row.get(1)),
        expires_at_ms: count(row.get(2)),
    }))
}

fn put(tx: &mut Tx<'_>, lease: &Lease) -> Result<()> {
    tx.execute(
        "INSERT INTO release_leases (run_id, holder, token, expires_at_ms)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id) DO UPDATE
         SET holder = EXCLUDED.holder, token = EXCLUDED.token,
             expires_at_ms = EXCLUDED.expires_at_ms",
        &[
            &lease.run.0,
            &lease.holder,
            &big(lease.token),
            &big(lease.expires_at_ms),
        ],
    )
    .map_err(fault)?;
    Ok(())
}

/// Checks `fence` against the newest lease of `run` ([`lease::check_fence`]); `live`
/// also requires it unexpired. The caller holds the run's row lock.
fn check(tx: &mut Tx<'_>, run: &RunId, fence: &Lease, live: bool) -> Result<()> {
    let now = db_now_ms(tx)?;
    let current = stored(tx, run)?;
    lease::check_fence(current.as_ref(), run, fence, live, now)?;
    Ok(())
}

impl LeaseStore for PgStore {
    fn acquire_lease(
        &self,
        run: &RunId,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(Lease, Vec<Effect>)> {
        let (run, holder) = (run.clone(), holder.to_owned());
        self.write(run.0.clone(), false, move |tx| {
            locked_run(tx, &run)?;
            let now = db_now_ms(tx)?;
            let granted = lease::acquire(stored(tx, &run)?.as_ref(), &run, &holder, ttl_ms, now)?;
            let mut recovered = Vec::new();
            for mut effect in records::effects_of(tx, &run)? {
                if rules::recover(&mut effect) {
                    recovered.push(effect);
                }
            }
            put_effects(tx, &recovered)?;
            put(tx, &granted)?;
            let changes = recovered.iter().map(Change::of_effect).collect();
            Ok(((granted, recovered), changes))
        })
    }

    fn renew_lease(&self, held: &Lease, ttl_ms: u64) -> Result<Lease> {
        let held = held.clone();
        self.write(held.run.0.clone(), false, move |tx| {
            // The run's lock when it exists; an unknown run simply has no lease.
            records::run(tx, &held.run, true)?;
            let now = db_now_ms(tx)?;
            let renewed = lease::renew(stored(tx, &held.run)?.as_ref(), &held, ttl_ms, now)?;
            put(tx, &renewed)?;
            Ok((renewed, Vec::new()))
        })
    }

    fn give_up_lease(&self, held: &Lease) -> Result<bool> {
        let held = held.clone();
        self.write(held.run.0.clone(), false, move |tx| {
            // The run's lock when it exists; an unknown run simply has no lease.
            records::run(tx, &held.run, true)?;
            let now = db_now_ms(tx)?;
            let Some(ended) = lease::give_up(stored(tx, &held.run)?.as_ref(), &held, now) else {
                return Ok((false, Vec::new()));
            };
            put(tx, &ended)?;
            Ok((true, Vec::new()))
        })
    }

    fn lease(&self, run: &RunId) -> Result<Option<Lease>> {
        let run = run.clone();
        self.read(move |tx| {
            let now = db_now_ms(tx)?;
            Ok(stored(tx, &run)?.filter(|l| l.live_at(now)))
        })
    }

    fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect> {
        let fence = fence.clone();
        self.update_effect(id, move |tx, _, effect| {
            check(tx, &effect.run_id, &fence, true)?;
            Ok(rules::mark_releasing(effect, now_ms())?)
        })
    }

    fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect> {
        let fence = fence.clone();
        self.record_release_checked(id, outcome, move |tx, effect| {
            check(tx, &effect.run_id, &fence, false)
        })
    }

    fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect> {
        let (fence, reason) = (fence.clone(), reason.to_owned());
        self.update_effect(id, move |tx, _, effect| {
            check(tx, &effect.run_id, &fence, false)?;
            Ok(rules::settle_unsent(effect, to, &reason)?)
        })
    }

    fn finish_commit_fenced(&self, id: &RunId, fence: &Lease) -> Result<Run> {
        let (id, fence) = (id.clone(), fence.clone());
        self.write(id.0.clone(), false, move |tx| {
            let mut run = locked_run(tx, &id)?;
            check(tx, &id, &fence, false)?;
            let effects = records::effects_of(tx, &id)?;
            if !rules::finish_commit(&mut run, &effects) {
                return Ok((run, Vec::new()));
            }
            put_run(tx, &run)?;
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }
}
