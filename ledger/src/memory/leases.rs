//! Release leases in the in-memory model ([`crate::LeaseStore`]): one map entry per run,
//! checked and written under the store's one mutex with the effects they fence.

use super::{MemoryStore, State};
use crate::change::Change;
use crate::lease::{self, Lease};
use crate::model::{now_ms, Digest, Effect, EffectId, EffectState, Run, RunId};
use crate::rules;
use crate::store::LeaseStore;
use crate::{ReleaseOutcome, Result};

impl State {
    /// Checks `fence` against the lease of `run` now (`live`: see [`lease::check_fence`]).
    fn check_fence(&self, run: &RunId, fence: &Lease, live: bool) -> Result<()> {
        Ok(lease::check_fence(
            self.leases.get(run),
            run,
            fence,
            live,
            now_ms(),
        )?)
    }
}

impl LeaseStore for MemoryStore {
    fn acquire_lease(
        &self,
        run: &RunId,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(Lease, Vec<Effect>)> {
        self.write(|state| {
            state.must_run(run)?;
            let granted = lease::acquire(state.leases.get(run), run, holder, ttl_ms, now_ms())?;
            let mut recovered = Vec::new();
            for mut effect in state.effects_of(run) {
                if rules::recover(&mut effect) {
                    recovered.push(effect);
                }
            }
            state.put_effects(&recovered);
            state.leases.insert(run.clone(), granted.clone());
            let changes = recovered.iter().map(Change::of_effect).collect();
            Ok(((granted, recovered), changes))
        })
    }

    fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease> {
        self.write(|state| {
            let renewed = lease::renew(state.leases.get(&lease.run), lease, ttl_ms, now_ms())?;
            state.leases.insert(lease.run.clone(), renewed.clone());
            Ok((renewed, Vec::new()))
        })
    }

    fn give_up_lease(&self, lease: &Lease) -> Result<bool> {
        self.write(|state| {
            let Some(ended) = lease::give_up(state.leases.get(&lease.run), lease, now_ms()) else {
                return Ok((false, Vec::new()));
            };
            state.leases.insert(lease.run.clone(), ended);
            Ok((true, Vec::new()))
        })
    }

    fn lease(&self, run: &RunId) -> Result<Option<Lease>> {
        let now = now_ms();
        Ok(self
            .lock()
            .leases
            .get(run)
            .filter(|lease| lease.live_at(now))
            .cloned())
    }

    fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            state.check_fence(&effect.run_id, fence, true)?;
            Ok(rules::mark_releasing(effect, now_ms())?)
        })
    }

    fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            state.check_fence(&effect.run_id, fence, false)?;
            let body = outcome.body;
            let digest = Digest::sha256_of(body);
            rules::record_release(effect, outcome, digest.clone(), now_ms())?;
            state.bodies.entry(digest).or_insert_with(|| body.to_vec());
            Ok(())
        })
    }

    fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            state.check_fence(&effect.run_id, fence, false)?;
            Ok(rules::settle_unsent(effect, to, reason)?)
        })
    }

    fn finish_commit_fenced(&self, id: &RunId, fence: &Lease) -> Result<Run> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            state.check_fence(id, fence, false)?;
            if !rules::finish_commit(&mut run, &state.effects_of(id)) {
                return Ok((run, Vec::new()));
            }
            state.runs.insert(id.clone(), run.clone());
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }
}
