//! Release leases on sled ([`crate::LeaseStore`]): tree `release_leases`, run id -> the
//! run's newest [`Lease`] (JSON), read and written under the store's write lock with the
//! effects and runs they fence, then flushed.

use std::collections::HashSet;

use super::{decode, encode, Ledger, OrStorage as _};
use crate::change::Change;
use crate::lease::{self, Lease};
use crate::model::{now_ms, Digest, Effect, EffectId, EffectState, Run, RunId};
use crate::{rules, ReleaseOutcome, Result};

impl Ledger {
    /// The stored lease of `run` (live or not). The caller holds the write lock when it
    /// acts on the answer.
    fn stored_lease(&self, run: &RunId) -> Result<Option<Lease>> {
        match self.release_leases.get(run.0.as_bytes()).or_storage()? {
            Some(bytes) => Ok(Some(decode(run.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    fn put_lease(&self, lease: &Lease) -> Result<()> {
        self.release_leases
            .insert(lease.run.0.as_bytes(), encode(lease))
            .or_storage()?;
        Ok(())
    }

    /// The runs whose lease is live now.
    pub(super) fn live_leases(&self) -> Result<HashSet<RunId>> {
        let now = now_ms();
        let mut out = HashSet::new();
        for item in self.release_leases.iter() {
            let (key, value) = item.or_storage()?;
            let lease: Lease = decode(&key, &value)?;
            if lease.live_at(now) {
                out.insert(lease.run);
            }
        }
        Ok(out)
    }

    fn check_fence(&self, run: &RunId, fence: &Lease, live: bool) -> Result<()> {
        Ok(lease::check_fence(
            self.stored_lease(run)?.as_ref(),
            run,
            fence,
            live,
            now_ms(),
        )?)
    }

    /// [`crate::LeaseStore::acquire_lease`] on sled: the lease and the recovered effects
    /// written under the write lock, then flushed. Durable.
    ///
    /// Errors: as the trait method.
    pub fn acquire_lease(
        &self,
        run: &RunId,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(Lease, Vec<Effect>)> {
        let _guard = self.lock();
        self.must_run(run)?;
        let granted = lease::acquire(
            self.stored_lease(run)?.as_ref(),
            run,
            holder,
            ttl_ms,
            now_ms(),
        )?;
        let mut recovered = Vec::new();
        for mut effect in self.effects_unlocked(run)? {
            if rules::recover(&mut effect) {
                self.put_effect(&effect)?;
                recovered.push(effect);
            }
        }
        self.put_lease(&granted)?;
        self.flush_and_send(recovered.iter().map(Change::of_effect))?;
        Ok((granted, recovered))
    }

    /// [`crate::LeaseStore::renew_lease`] on sled. Durable.
    ///
    /// Errors: as the trait method.
    pub fn renew_lease(&self, held: &Lease, ttl_ms: u64) -> Result<Lease> {
        let renewed = {
            let _guard = self.lock();
            let renewed = lease::renew(
                self.stored_lease(&held.run)?.as_ref(),
                held,
                ttl_ms,
                now_ms(),
            )?;
            self.put_lease(&renewed)?;
            renewed
        };
        self.flush()?;
        Ok(renewed)
    }

    /// [`crate::LeaseStore::give_up_lease`] on sled. Durable.
    ///
    /// Errors: storage faults.
    pub fn give_up_lease(&self, held: &Lease) -> Result<bool> {
        {
            let _guard = self.lock();
            let Some(ended) =
                lease::give_up(self.stored_lease(&held.run)?.as_ref(), held, now_ms())
            else {
                return Ok(false);
            };
            self.put_lease(&ended)?;
        }
        self.flush()?;
        Ok(true)
    }

    /// [`crate::LeaseStore::lease`] on sled: the live lease of `run`.
    pub fn lease(&self, run: &RunId) -> Result<Option<Lease>> {
        let now = now_ms();
        Ok(self.stored_lease(run)?.filter(|l| l.live_at(now)))
    }

    /// [`crate::LeaseStore::mark_releasing_fenced`] on sled. Durable.
    ///
    /// Errors: as the trait method.
    pub fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            ledger.check_fence(&effect.run_id, fence, true)?;
            Ok(rules::mark_releasing(effect, now_ms())?)
        })
    }

    /// [`crate::LeaseStore::record_release_fenced`] on sled. Durable.
    ///
    /// Errors: as the trait method.
    pub fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            ledger.check_fence(&effect.run_id, fence, false)?;
            let body = outcome.body;
            let digest = Digest::sha256_of(body);
            rules::record_release(effect, outcome, digest.clone(), now_ms())?;
            ledger.put_body(&digest, body, &effect.run_id)
        })
    }

    /// [`crate::LeaseStore::settle_unsent_fenced`] on sled. Durable.
    ///
    /// Errors: as the trait method.
    pub fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            ledger.check_fence(&effect.run_id, fence, false)?;
            Ok(rules::settle_unsent(effect, to, reason)?)
        })
    }

    /// [`crate::LeaseStore::finish_commit_fenced`] on sled. Durable.
    ///
    /// Errors: as the trait method.
    pub fn finish_commit_fenced(&self, id: &RunId, fence: &Lease) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        self.check_fence(id, fence, false)?;
        let effects = self.effects_unlocked(id)?;
        if !rules::finish_commit(&mut run, &effects) {
            return Ok(run);
        }
        self.put_run(&run)?;
        self.flush_and_send([Change::RunChanged(id.clone())])?;
        Ok(run)
    }
}
