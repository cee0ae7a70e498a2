//! The in-memory model's one write over an effect, its run and the run's other effects:
//! what a retry and a settlement need ([`crate::rules::outcome`]).

use super::MemoryStore;
use crate::change::Change;
use crate::model::{Effect, EffectId, Run};
use crate::Result;

impl MemoryStore {
    /// Reads effect `id`, its run and the run's effects, lets `change` decide, and stores
    /// the changed effects and the run.
    pub(super) fn update_run_effects(
        &self,
        id: &EffectId,
        change: impl FnOnce(&mut Run, &[Effect]) -> std::result::Result<Vec<Effect>, crate::Refused>,
    ) -> Result<Vec<Effect>> {
        self.write(|state| {
            let run_id = state.must_effect(id)?.run_id.clone();
            let mut run = state.must_run(&run_id)?.clone();
            let before = run.clone();
            let effects = state.effects_of(&run_id);
            let changed = change(&mut run, &effects)?;
            state.put_effects(&changed);
            let mut changes: Vec<Change> = changed.iter().map(Change::of_effect).collect();
            if run != before {
                state.runs.insert(run_id.clone(), run);
                changes.push(Change::RunChanged(run_id));
            }
            Ok((changed, changes))
        })
    }
}
