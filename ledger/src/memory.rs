//! The in-memory model of the ledger: every record in ordered maps under one mutex,
//! obviously atomic, nothing on disk. It answers exactly as the sled store does for the
//! same operations (same rules, same orders, same numbering), which the conformance
//! suite checks, so it serves as the model of property tests and lets the request path
//! be tested in-process. Durable only in the sense of "visible to every later call".

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::change::{Change, Notifier};
use crate::denials::Denial;
use crate::lineage::{EffectLineage, ReadContent};
use crate::model::{
    now_ms, Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder, NewEffect,
    Placeholder, Read, Run, RunFlag, RunId, ValueKind,
};
use crate::rules::{self, CommitStart};
use crate::store::{EffectStore, Pruned, RunPage, RunStore, Store};
use crate::workspace::WorkspaceRecord;
use crate::{LedgerError, ReleaseOutcome, Result, Settlement, Verdict};

mod audit;
mod journal;
mod leases;
mod outcomes;
mod retention;
mod workspace;

/// The in-memory store. Clones are handles on one store (as reopening is for sled): they
/// share its records and its subscribers.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    notifier: Arc<Notifier>,
}

/// Per-run counters, as sled keeps them under `COUNTER/RUN`.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    effects: u64,
    reads: u64,
    denials: u64,
    placeholders: u64,
    placeholder_base: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    runs: BTreeMap<RunId, Run>,
    effects: BTreeMap<EffectId, Effect>,
    run_effects: BTreeMap<(RunId, u64), EffectId>,
    reads: BTreeMap<(RunId, u64), Read>,
    bodies: HashMap<Digest, Vec<u8>>,
    counters: HashMap<RunId, Counters>,
    placeholders: BTreeMap<(RunId, String), IssuedPlaceholder>,
    read_content: BTreeMap<(RunId, u64), (ReadContent, Vec<u64>)>,
    effect_lineage: HashMap<EffectId, EffectLineage>,
    workspaces: HashMap<RunId, WorkspaceRecord>,
    denials: BTreeMap<(RunId, u64), Denial>,
    /// The recovery index: effects in `releasing`, kept by [`State::put_effect`].
    in_flight: BTreeSet<EffectId>,
    /// Each run's release lease (the newest one; kept after it expires, for its token).
    leases: HashMap<RunId, crate::Lease>,
    /// The audit log in `seq` order (entry `i` has `seq` `i + 1`).
    audit: Vec<crate::AuditEntry>,
}

impl State {
    fn must_run(&self, id: &RunId) -> Result<&Run> {
        self.runs.get(id).ok_or_else(|| LedgerError::NotFound {
            kind: "run",
            id: id.0.clone(),
        })
    }

    fn must_effect(&self, id: &EffectId) -> Result<&Effect> {
        self.effects.get(id).ok_or_else(|| LedgerError::NotFound {
            kind: "effect",
            id: id.0.clone(),
        })
    }

    fn must_workspace(&self, run: &RunId) -> Result<&WorkspaceRecord> {
        self.workspaces
            .get(run)
            .ok_or_else(|| LedgerError::NotFound {
                kind: "workspace of run",
                id: run.0.clone(),
            })
    }

    fn counters(&mut self, run: &RunId) -> &mut Counters {
        self.counters.entry(run.clone()).or_default()
    }

    /// A run's effects in staging order (the run need not exist).
    fn effects_of(&self, run: &RunId) -> Vec<Effect> {
        self.run_effects
            .range((run.clone(), 0)..=(run.clone(), u64::MAX))
            .filter_map(|(_, id)| self.effects.get(id).cloned())
            .collect()
    }

    fn journal_read(&mut self, mut read: Read) -> Read {
        let counters = self.counters(&read.run_id);
        counters.reads += 1;
        read.seq = counters.reads;
        self.reads
            .insert((read.run_id.clone(), read.seq), read.clone());
        read
    }
}

fn run_range<'m, V>(
    map: &'m BTreeMap<(RunId, u64), V>,
    run: &RunId,
) -> impl Iterator<Item = &'m V> + 'm {
    map.range((run.clone(), 0)..=(run.clone(), u64::MAX))
        .map(|(_, value)| value)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every method changes the state only after all its checks passed, and nothing
        // in between can panic, so a poisoned lock still guards consistent records.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `change` under the lock, then announces what it returned with its answer.
    fn write<T>(&self, change: impl FnOnce(&mut State) -> Result<(T, Vec<Change>)>) -> Result<T> {
        let (out, changes) = {
            let mut state = self.lock();
            change(&mut state)?
        };
        self.notifier.send(changes);
        Ok(out)
    }

    /// Reads effect `id`, lets `change` decide and change it, and stores it.
    fn update_effect(
        &self,
        id: &EffectId,
        change: impl FnOnce(&mut State, &mut Effect) -> Result<()>,
    ) -> Result<Effect> {
        self.write(|state| {
            let mut effect = state.must_effect(id)?.clone();
            change(state, &mut effect)?;
            state.put_effect(effect.clone());
            let changes = vec![Change::of_effect(&effect)];
            Ok((effect, changes))
        })
    }
}

impl Store for MemoryStore {
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64> {
        Ok(0)
    }

    fn cache_capacity(&self) -> u64 {
        0
    }

    fn subscribe(&self) -> Receiver<Change> {
        self.notifier.subscribe()
    }
}

impl RunStore for MemoryStore {
    fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run> {
        let run = rules::new_run(RunId::generate(), profile, source, now_ms());
        self.write(|state| {
            state.runs.insert(run.id.clone(), run.clone());
            let changes = vec![Change::RunChanged(run.id.clone())];
            Ok((run, changes))
        })
    }

    fn run(&self, id: &RunId) -> Result<Option<Run>> {
        Ok(self.lock().runs.get(id).cloned())
    }

    fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize> {
        self.write(|state| {
            let rewritten = state
                .runs
                .values_mut()
                .filter_map(|run| tokens.seal(run).then_some(()))
                .count();
            Ok((rewritten, Vec::new()))
        })
    }

    fn runs(&self) -> Result<Vec<Run>> {
        Ok(self.lock().runs.values().cloned().collect())
    }

    fn runs_page(&self, page: &RunPage) -> Result<Vec<Run>> {
        Ok(self.lock().runs_page(page))
    }

    fn prune_run(&self, id: &RunId) -> Result<Pruned> {
        self.prune_and_announce(id)
    }

    fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            let stored = rules::flag_run(&mut run, flag);
            state.runs.insert(id.clone(), run);
            let changes = stored
                .then(|| Change::RunChanged(id.clone()))
                .into_iter()
                .collect();
            Ok((stored, changes))
        })
    }

    fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            if !rules::seal(&mut run, by, now_ms())? {
                return Ok((run, Vec::new()));
            }
            state.runs.insert(id.clone(), run.clone());
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }

    fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            let effects = state.effects_of(id);
            let approved =
                match rules::begin_commit(&mut run, &effects, approve_pending, by, now_ms())? {
                    CommitStart::Begun(approved) => approved,
                    start => return Ok(((run, start.proceeds()), Vec::new())),
                };
            state.put_effects(&approved);
            state.runs.insert(id.clone(), run.clone());
            let mut changes: Vec<Change> = approved.iter().map(Change::of_effect).collect();
            changes.push(Change::RunChanged(id.clone()));
            changes.push(Change::RunClosed(id.clone()));
            Ok(((run, true), changes))
        })
    }

    fn finish_commit(&self, id: &RunId) -> Result<Run> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            if !rules::finish_commit(&mut run, &state.effects_of(id)) {
                return Ok((run, Vec::new()));
            }
            state.runs.insert(id.clone(), run.clone());
            Ok((run, vec![Change::RunChanged(id.clone())]))
        })
    }

    fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        self.write(|state| {
            let mut run = state.must_run(id)?.clone();
            let effects = state.effects_of(id);
            let Some(discarded) = rules::abort(&mut run, &effects, by, now_ms())? else {
                return Ok((run, Vec::new()));
            };
            state.put_effects(&discarded);
            state.runs.insert(id.clone(), run.clone());
            let mut changes: Vec<Change> = discarded.iter().map(Change::of_effect).collect();
            changes.push(Change::RunChanged(id.clone()));
            changes.push(Change::RunClosed(id.clone()));
            Ok((run, changes))
        })
    }
}

impl EffectStore for MemoryStore {
    fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        let digest = Digest::sha256_of(new.body);
        self.write(|state| {
            rules::check_stage(state.must_run(new.run_id)?)?;
            let run_id = new.run_id;
            let body = new.body;
            let counters = state.counters(run_id);
            counters.effects += 1;
            let seq = counters.effects;
            let mut placeholders = Vec::with_capacity(new.placeholders.len());
            for spec in &new.placeholders {
                let (base, count) = match spec.kind {
                    ValueKind::Number => {
                        let base = *counters
                            .placeholder_base
                            .get_or_insert_with(rules::random_placeholder_base);
                        counters.placeholders += 1;
                        (base, counters.placeholders)
                    }
                    ValueKind::String | ValueKind::SlackTs | ValueKind::Sha1 | ValueKind::Url => {
                        (0, 0)
                    }
                };
                placeholders.push(Placeholder {
                    value: rules::placeholder_value(spec.kind, base, count),
                    kind: spec.kind,
                    pointer: spec.pointer.clone(),
                    real: None,
                });
            }
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
                state.placeholders.insert(
                    (run_id.clone(), placeholder.value.clone()),
                    IssuedPlaceholder {
                        value: placeholder.value.clone(),
                        kind: placeholder.kind,
                        effect: effect.id.clone(),
                    },
                );
            }
            state.bodies.entry(digest).or_insert_with(|| body.to_vec());
            state.put_effect(effect.clone());
            state
                .run_effects
                .insert((run_id.clone(), seq), effect.id.clone());
            let changes = Change::of_staged(&effect);
            Ok((effect, changes))
        })
    }

    fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        Ok(self.lock().effects.get(id).cloned())
    }

    fn effects(&self, run: &RunId) -> Result<Vec<Effect>> {
        let state = self.lock();
        state.must_run(run)?;
        Ok(state.effects_of(run))
    }

    fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().bodies.get(digest).cloned())
    }

    fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            let run = state.must_run(&effect.run_id)?;
            Ok(rules::decide_effect(effect, run, verdict, by, now_ms())?)
        })
    }

    fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            let run = state.must_run(&effect.run_id)?;
            Ok(rules::approve_explicitly(effect, run, by, flows, now_ms())?)
        })
    }

    fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        self.update_effect(id, |_, effect| Ok(rules::mark_releasing(effect, now_ms())?))
    }

    fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        self.update_effect(id, |state, effect| {
            let body = outcome.body;
            let digest = Digest::sha256_of(body);
            rules::record_release(effect, outcome, digest.clone(), now_ms())?;
            state.bodies.entry(digest).or_insert_with(|| body.to_vec());
            Ok(())
        })
    }

    fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        self.update_effect(id, |_, effect| {
            Ok(rules::settle_unsent(effect, to, reason)?)
        })
    }

    fn recover(&self) -> Result<Vec<Effect>> {
        self.write(|state| {
            let mut changed = Vec::new();
            let now = now_ms();
            let leased: std::collections::HashSet<RunId> = state
                .leases
                .values()
                .filter(|lease| lease.live_at(now))
                .map(|lease| lease.run.clone())
                .collect();
            let in_flight: Vec<EffectId> = state.in_flight.iter().cloned().collect();
            for id in in_flight {
                let Some(mut effect) = state.effects.get(&id).cloned() else {
                    state.in_flight.remove(&id);
                    continue;
                };
                if !leased.contains(&effect.run_id) && rules::recover(&mut effect) {
                    changed.push(effect.clone());
                    state.put_effect(effect);
                }
            }
            let changes = changed.iter().map(Change::of_effect).collect();
            Ok((changed, changes))
        })
    }

    fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>> {
        self.update_run_effects(id, |run, effects| {
            rules::outcome::retry(run, effects, id, by, now_ms())
        })
    }

    fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>> {
        self.update_run_effects(id, |run, effects| {
            rules::outcome::settle(run, effects, id, settlement, by, now_ms())
        })
    }
}
