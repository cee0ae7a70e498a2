//! Effects on sled: staging, reviewers' verdicts, release bookkeeping and recovery.

use super::{decode, encode, index_key, run_prefix, Ledger, OrStorage as _};
use crate::change::Change;
use crate::model::{
    now_ms, Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder, NewEffect, Run,
    RunId,
};
use crate::{rules, LedgerError, ReleaseOutcome, Result, Settlement, Verdict};

impl Ledger {
    /// [`crate::EffectStore::stage`] on sled: stores the body by digest and the record,
    /// then flushes. Only after this returns may the client be answered.
    ///
    /// Errors: [`crate::Refused::RunNotOpen`] when the run is sealed, committing, finished
    /// or aborted; [`LedgerError::NotFound`] for an unknown run.
    pub fn stage(&self, new: NewEffect<'_>) -> Result<Effect> {
        self.stage_with(new, EffectNotes::default())
    }

    /// [`Ledger::stage`] with an adapter's notes (summary, adapter name, compensated
    /// effect) stored on the effect. Same errors.
    pub fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        let digest = Digest::sha256_of(new.body);
        let effect = {
            let _guard = self.lock();
            let run = self.must_run(new.run_id)?;
            rules::check_stage(&run)?;
            let seq = self.next_seq("effects", new.run_id)?;
            let placeholders = self.allocate_placeholders(new.run_id, &new.placeholders)?;
            let run_id = new.run_id;
            let body = new.body;
            let effect = rules::new_effect(
                new,
                notes,
                EffectId::generate(),
                seq,
                digest.clone(),
                placeholders,
                now_ms(),
            );
            for placeholder in &effect.placeholders {
                let issued = IssuedPlaceholder {
                    value: placeholder.value.clone(),
                    kind: placeholder.kind,
                    effect: effect.id.clone(),
                };
                let mut key = run_prefix(run_id);
                key.extend_from_slice(placeholder.value.as_bytes());
                self.placeholders
                    .insert(key, encode(&issued))
                    .or_storage()?;
            }
            self.put_body(&digest, body, run_id)?;
            self.put_effect(&effect)?;
            self.run_effects
                .insert(index_key(run_id, seq), effect.id.0.as_bytes())
                .or_storage()?;
            effect
        };
        // Outside the lock so that concurrent stagers share one flush.
        if let Err(error) = self.flush() {
            // The client is told it failed, so the effect must never be listed, here or
            // (when the records reached the disk anyway) in a store reopened from it.
            self.unacknowledged_lock()
                .insert(effect.id.clone(), (effect.run_id.clone(), effect.seq));
            let _ = self
                .run_effects
                .remove(index_key(&effect.run_id, effect.seq));
            let _ = self.effects.remove(effect.id.0.as_bytes());
            return Err(error);
        }
        self.notifier.send(Change::of_staged(&effect));
        Ok(effect)
    }

    fn unacknowledged_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<EffectId, (RunId, u64)>> {
        self.unacknowledged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The effects whose staging failed at the flush (their clients were told so), with
    /// their run and sequence number; they are never listed.
    pub fn unacknowledged(&self) -> Vec<(EffectId, RunId, u64)> {
        self.unacknowledged_lock()
            .iter()
            .map(|(id, (run, seq))| (id.clone(), run.clone(), *seq))
            .collect()
    }

    /// Removes the records of effects whose staging failed in an earlier store of this
    /// directory (`gone`, from [`Ledger::unacknowledged`]), durably, so that what reached
    /// the disk of them is never listed. Returns how many records were found.
    ///
    /// Errors: storage faults.
    pub fn remove_unacknowledged(&self, gone: &[(EffectId, RunId, u64)]) -> Result<usize> {
        let mut found = 0;
        {
            let _guard = self.lock();
            for (id, run, seq) in gone {
                let key = index_key(run, *seq);
                if self.run_effects.get(&key).or_storage()?.as_deref() == Some(id.0.as_bytes()) {
                    self.run_effects.remove(key).or_storage()?;
                }
                if self.effects.remove(id.0.as_bytes()).or_storage()?.is_some() {
                    found += 1;
                }
            }
        }
        self.flush()?;
        Ok(found)
    }

    /// Stores `body` under its digest (once) and notes that `run` references it
    /// (`body_refs`), the reference first so that a body is never stored unreferenced.
    pub(super) fn put_body(&self, digest: &Digest, body: &[u8], run: &RunId) -> Result<()> {
        self.room_for(body.len())?;
        self.body_refs
            .insert(super::retention::body_ref_key(digest, run), &[])
            .or_storage()?;
        if !self.bodies.contains_key(digest.0.as_bytes()).or_storage()? {
            self.bodies.insert(digest.0.as_bytes(), body).or_storage()?;
        }
        Ok(())
    }

    /// Writes an effect's record and keeps the recovery index (`in_flight`) in step: the
    /// entry is written before a record in `releasing`, and removed after a record in a
    /// state `releasing` leads to, so the index holds every effect a crash can leave
    /// `releasing` (an extra entry is dropped by [`Ledger::recover`]).
    pub(crate) fn put_effect(&self, effect: &Effect) -> Result<()> {
        let key = effect.id.0.as_bytes();
        if effect.state == EffectState::Releasing {
            self.in_flight
                .insert(key, effect.run_id.0.as_bytes())
                .or_storage()?;
        }
        self.effects.insert(key, encode(effect)).or_storage()?;
        if matches!(
            effect.state,
            EffectState::Released | EffectState::Failed | EffectState::Unknown
        ) {
            self.in_flight.remove(key).or_storage()?;
        }
        Ok(())
    }

    /// [`crate::EffectStore::effect`] on sled.
    pub fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        if self.unacknowledged_lock().contains_key(id) {
            return Ok(None);
        }
        match self.effects.get(id.0.as_bytes()).or_storage()? {
            Some(bytes) => Ok(Some(decode(id.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    pub(super) fn must_effect(&self, id: &EffectId) -> Result<Effect> {
        self.effect(id)?.ok_or_else(|| LedgerError::NotFound {
            kind: "effect",
            id: id.0.clone(),
        })
    }

    /// [`crate::EffectStore::effects`] on sled: a run's effects in staging order.
    ///
    /// Errors: [`LedgerError::NotFound`] for an unknown run.
    pub fn effects(&self, run: &RunId) -> Result<Vec<Effect>> {
        self.must_run(run)?;
        self.effects_unlocked(run)
    }

    pub(super) fn effects_unlocked(&self, run: &RunId) -> Result<Vec<Effect>> {
        let mut out = Vec::new();
        for item in self.run_effects.scan_prefix(run_prefix(run)) {
            let (_, id) = item.or_storage()?;
            let id = EffectId(String::from_utf8_lossy(&id).into_owned());
            if let Some(effect) = self.effect(&id)? {
                out.push(effect);
            }
        }
        Ok(out)
    }

    /// [`crate::EffectStore::body`] on sled: a stored body by digest.
    pub fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ok(self
            .bodies
            .get(digest.0.as_bytes())
            .or_storage()?
            .map(|b| b.to_vec()))
    }

    /// Reads effect `id` under the write lock, lets `change` decide and change it, and
    /// writes it back durably, announcing it.
    pub(super) fn update_effect(
        &self,
        id: &EffectId,
        change: impl FnOnce(&Self, &mut Effect) -> Result<()>,
    ) -> Result<Effect> {
        let _guard = self.lock();
        let mut effect = self.must_effect(id)?;
        change(self, &mut effect)?;
        self.put_effect(&effect)?;
        self.flush_and_send([Change::EffectChanged {
            run: effect.run_id.clone(),
            effect: effect.id.clone(),
        }])?;
        Ok(effect)
    }

    /// [`crate::EffectStore::decide_effect`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`] or [`crate::Refused::RunTransition`].
    pub fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            let run = ledger.must_run(&effect.run_id)?;
            Ok(rules::decide_effect(effect, &run, verdict, by, now_ms())?)
        })
    }

    /// [`crate::EffectStore::approve_explicitly`] on sled. Durable.
    ///
    /// Errors: as [`Self::decide_effect`].
    pub fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            let run = ledger.must_run(&effect.run_id)?;
            Ok(rules::approve_explicitly(
                effect,
                &run,
                by,
                flows,
                now_ms(),
            )?)
        })
    }

    /// [`crate::EffectStore::mark_releasing`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`] unless the effect is `approved`.
    pub fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        self.update_effect(id, |_, effect| Ok(rules::mark_releasing(effect, now_ms())?))
    }

    /// [`crate::EffectStore::record_release`] on sled: the response body stored by
    /// digest. Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`].
    pub fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        self.update_effect(id, |ledger, effect| {
            let body = outcome.body;
            let digest = Digest::sha256_of(body);
            rules::record_release(effect, outcome, digest.clone(), now_ms())?;
            ledger.put_body(&digest, body, &effect.run_id)
        })
    }

    /// [`crate::EffectStore::settle_unsent`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::EffectTransition`].
    pub fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        self.update_effect(id, |_, effect| {
            Ok(rules::settle_unsent(effect, to, reason)?)
        })
    }

    /// [`crate::EffectStore::retry`] on sled: the effects and the run written under the
    /// write lock, then flushed. Durable.
    ///
    /// Errors: as the trait method.
    pub fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>> {
        self.update_run_effects(id, |run, effects| {
            rules::outcome::retry(run, effects, id, by, now_ms())
        })
    }

    /// [`crate::EffectStore::settle`] on sled, written as [`Ledger::retry`]. Durable.
    ///
    /// Errors: as the trait method.
    pub fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>> {
        self.update_run_effects(id, |run, effects| {
            rules::outcome::settle(run, effects, id, settlement, by, now_ms())
        })
    }

    /// Reads effect `id`, its run and the run's effects under the write lock, lets
    /// `change` decide, and writes the changed effects and the run, then flushes and
    /// announces them.
    fn update_run_effects(
        &self,
        id: &EffectId,
        change: impl FnOnce(&mut Run, &[Effect]) -> std::result::Result<Vec<Effect>, crate::Refused>,
    ) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let effect = self.must_effect(id)?;
        let mut run = self.must_run(&effect.run_id)?;
        let before = run.clone();
        let effects = self.effects_unlocked(&run.id)?;
        let changed = change(&mut run, &effects)?;
        let mut changes = Vec::with_capacity(changed.len() + 1);
        for effect in &changed {
            self.put_effect(effect)?;
            changes.push(Change::of_effect(effect));
        }
        if run != before {
            self.put_run(&run)?;
            changes.push(Change::RunChanged(run.id.clone()));
        }
        self.flush_and_send(changes)?;
        Ok(changed)
    }

    /// [`crate::EffectStore::recover`] on sled: reads the recovery index `in_flight`
    /// (effect id order), never every effect, leaving those of runs with a live release
    /// lease alone; an entry whose effect is gone or no longer `releasing` is dropped.
    /// Durable.
    pub fn recover(&self) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let leased = self.live_leases()?;
        let mut changed = Vec::new();
        for item in self.in_flight.iter() {
            let (key, run) = item.or_storage()?;
            if leased.contains(&RunId(String::from_utf8_lossy(&run).into_owned())) {
                continue;
            }
            let id = EffectId(String::from_utf8_lossy(&key).into_owned());
            let recovered = self
                .effect(&id)?
                .map(|mut effect| rules::recover(&mut effect).then_some(effect))
                .unwrap_or(None);
            match recovered {
                Some(effect) => {
                    self.put_effect(&effect)?;
                    changed.push(effect);
                }
                None => {
                    self.in_flight.remove(&key).or_storage()?;
                }
            }
        }
        self.flush_and_send(changed.iter().map(|effect| Change::EffectChanged {
            run: effect.run_id.clone(),
            effect: effect.id.clone(),
        }))?;
        Ok(changed)
    }
}
