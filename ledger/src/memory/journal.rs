//! The journal and lineage in the in-memory model: reads, denials, read contents, lineage.

use super::{run_range, MemoryStore};
use crate::denials::{Denial, DENIALS_KEPT_PER_RUN};
use crate::lineage::{EffectLineage, ReadContent};
use crate::model::{EffectId, IssuedPlaceholder, Read, RunId};
use crate::store::{JournalStore, LineageStore};
use crate::Result;

impl JournalStore for MemoryStore {
    fn journal_read(&self, read: Read) -> Result<Read> {
        Ok(self.lock().journal_read(read))
    }

    fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        let mut state = self.lock();
        Ok(reads
            .into_iter()
            .map(|read| state.journal_read(read))
            .collect())
    }

    fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        Ok(run_range(&self.lock().reads, run).cloned().collect())
    }

    fn journal_denial(&self, mut denial: Denial) -> Result<u64> {
        let mut state = self.lock();
        let counters = state.counters(&denial.run_id);
        counters.denials += 1;
        denial.seq = counters.denials;
        let seq = denial.seq;
        if seq <= DENIALS_KEPT_PER_RUN {
            state.denials.insert((denial.run_id.clone(), seq), denial);
        }
        Ok(seq)
    }

    fn denials(&self, run: &RunId) -> Result<Vec<Denial>> {
        Ok(run_range(&self.lock().denials, run).cloned().collect())
    }
}

impl LineageStore for MemoryStore {
    fn placeholders(&self, run: &RunId) -> Result<Vec<IssuedPlaceholder>> {
        let state = self.lock();
        Ok(state
            .placeholders
            .iter()
            .filter(|((of, _), _)| of == run)
            .map(|(_, issued)| issued.clone())
            .collect())
    }

    fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        self.lock().read_content.insert(
            (run.clone(), content.seq),
            (content.clone(), fingerprints.to_vec()),
        );
        Ok(())
    }

    fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        Ok(run_range(&self.lock().read_content, run).cloned().collect())
    }

    fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        self.lock()
            .effect_lineage
            .insert(effect.clone(), lineage.clone());
        Ok(())
    }

    fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        Ok(self.lock().effect_lineage.get(effect).cloned())
    }
}
