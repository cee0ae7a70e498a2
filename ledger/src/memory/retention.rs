//! Retention in the in-memory model: the recovery index, paged run listings and pruning
//! a finished run, by
//! the same rules as sled ([`crate::rules::retention`]). A body is kept when any
//! remaining effect references it, found by looking at every remaining effect: the model
//! is obviously right rather than fast.

use std::collections::HashSet;
use std::ops::Bound;

use super::{MemoryStore, State};
use crate::change::Change;
use crate::model::{Effect, EffectState, Run, RunId};
use crate::rules::retention::{body_digests, check_finished};
use crate::store::{Pruned, RunPage};
use crate::Result;

impl MemoryStore {
    /// [`crate::RunStore::prune_run`]: [`State::prune_run`] under the lock, announced.
    pub(super) fn prune_and_announce(&self, id: &RunId) -> Result<Pruned> {
        self.write(|state| {
            let pruned = state.prune_run(id)?;
            let changes = vec![
                Change::RunChanged(id.clone()),
                Change::PlaceholdersIssued(id.clone()),
            ];
            Ok((pruned, changes))
        })
    }
}

impl State {
    pub(super) fn put_effects(&mut self, effects: &[Effect]) {
        for effect in effects {
            self.put_effect(effect.clone());
        }
    }

    /// Stores an effect and keeps the recovery index `in_flight` in step with its state.
    pub(super) fn put_effect(&mut self, effect: Effect) {
        if effect.state == EffectState::Releasing {
            self.in_flight.insert(effect.id.clone());
        } else {
            self.in_flight.remove(&effect.id);
        }
        self.effects.insert(effect.id.clone(), effect);
    }

    /// [`crate::RunStore::runs_page`]: a range of the ordered run map from the cursor.
    pub(super) fn runs_page(&self, page: &RunPage) -> Vec<Run> {
        let range = match (&page.after, page.newest_first) {
            (None, _) => self.runs.range::<RunId, _>(..),
            (Some(after), false) => self
                .runs
                .range::<RunId, _>((Bound::Excluded(after), Bound::Unbounded)),
            (Some(after), true) => self.runs.range::<RunId, _>(..after),
        };
        let runs: Box<dyn Iterator<Item = &Run>> = if page.newest_first {
            Box::new(range.rev().map(|(_, run)| run))
        } else {
            Box::new(range.map(|(_, run)| run))
        };
        runs.take(page.limit).cloned().collect()
    }

    /// [`crate::RunStore::prune_run`]: checks, then removes every record of the run.
    ///
    /// Errors: [`crate::Refused::NotFinished`]; [`crate::LedgerError::NotFound`].
    pub(super) fn prune_run(&mut self, id: &RunId) -> Result<Pruned> {
        let run = self.must_run(id)?.clone();
        let effects = self.effects_of(id);
        check_finished(&run, &effects, self.workspaces.get(id))?;
        let digests: HashSet<_> = effects
            .iter()
            .flat_map(|e| body_digests(e).cloned())
            .collect();
        let mut pruned = Pruned::default();
        for effect in &effects {
            self.effects.remove(&effect.id);
            self.effect_lineage.remove(&effect.id);
            self.in_flight.remove(&effect.id);
            pruned.effects += 1;
        }
        let of_run = |key: &(RunId, u64)| key.0 != *id;
        self.run_effects.retain(|key, _| of_run(key));
        let reads_before = self.reads.len();
        self.reads.retain(|key, _| of_run(key));
        pruned.reads = (reads_before - self.reads.len()) as u64;
        self.read_content.retain(|key, _| of_run(key));
        let denials_before = self.denials.len();
        self.denials.retain(|key, _| of_run(key));
        pruned.denials = (denials_before - self.denials.len()) as u64;
        let placeholders_before = self.placeholders.len();
        self.placeholders.retain(|(run, _), _| run != id);
        pruned.placeholders = (placeholders_before - self.placeholders.len()) as u64;
        self.workspaces.remove(id);
        self.counters.remove(id);
        self.leases.remove(id);
        let referenced: HashSet<_> = self
            .effects
            .values()
            .flat_map(|e| body_digests(e).cloned())
            .collect();
        for digest in digests {
            if referenced.contains(&digest) {
                pruned.bodies_kept += 1;
            } else if self.bodies.remove(&digest).is_some() {
                pruned.bodies_removed += 1;
            }
        }
        self.runs.remove(id);
        Ok(pruned)
    }
}
