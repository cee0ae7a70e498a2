//! Lineage on sled: placeholders, read content analyses (in the read log) and effect lineage.

use super::{decode, encode, run_prefix, Ledger, OrStorage as _};
use crate::lineage::{Edge, EffectLineage, ReadContent};
use crate::model::{EffectId, Placeholder, PlaceholderSpec, RunId, ValueKind};
use crate::{rules, Result};

impl Ledger {
    /// Allocates placeholder values for a new effect ([`rules::placeholder_value`]): the
    /// run's number base is kept in `counters` under `placeholder-base/RUN`, the count under
    /// `placeholders/RUN`. Called under the write lock.
    pub(crate) fn allocate_placeholders(
        &self,
        run: &RunId,
        specs: &[PlaceholderSpec],
    ) -> Result<Vec<Placeholder>> {
        let mut out = Vec::new();
        for spec in specs {
            let (base, seq) = match spec.kind {
                ValueKind::Number => {
                    let base_key = format!("placeholder-base/{run}");
                    let base = match self.counters.get(base_key.as_bytes()).or_storage()? {
                        Some(bytes) => <[u8; 8]>::try_from(bytes.as_ref())
                            .map(u64::from_be_bytes)
                            .unwrap_or(0),
                        None => {
                            let base = rules::random_placeholder_base();
                            self.counters
                                .insert(base_key.as_bytes(), &base.to_be_bytes())
                                .or_storage()?;
                            base
                        }
                    };
                    (base, self.next_seq("placeholders", run)?)
                }
                ValueKind::String | ValueKind::SlackTs | ValueKind::Sha1 | ValueKind::Url => (0, 0),
            };
            out.push(Placeholder {
                value: rules::placeholder_value(spec.kind, base, seq),
                kind: spec.kind,
                pointer: spec.pointer.clone(),
                real: None,
            });
        }
        Ok(out)
    }

    /// Every placeholder issued in `run`.
    pub fn placeholders(&self, run: &RunId) -> Result<Vec<crate::model::IssuedPlaceholder>> {
        self.placeholders
            .scan_prefix(run_prefix(run))
            .map(|item| {
                let (key, value) = item.or_storage()?;
                decode(&key, &value)
            })
            .collect()
    }

    /// Stores the analysis of read `seq`'s response: its winnowed fingerprints (sorted) and
    /// notable values, appended to the run's analysis log (`sled_store/read_log.rs`), not flushed on
    /// its own (like the reads).
    ///
    /// Errors: [`crate::LedgerError::Storage`] with the read log's I/O error.
    pub fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        self.analysis_log
            .append_content(run, content, fingerprints)
            .or_storage()
    }

    /// The analyses of `run`'s reads with their fingerprints, in read order, one per read
    /// (the last stored): those a data directory from before the read log holds in
    /// `read_content` and `read_hashes`, and the read log's.
    ///
    /// Errors: [`crate::LedgerError::Storage`] for an I/O fault,
    /// [`crate::LedgerError::Corrupt`] for a damaged read log record or an old record that
    /// does not parse.
    pub fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        let mut out = Vec::new();
        for item in self.read_content.scan_prefix(run_prefix(run)) {
            let (key, value) = item.or_storage()?;
            let content: ReadContent = decode(&key, &value)?;
            let hashes = self
                .read_hashes
                .get(&key)
                .or_storage()?
                .map(|bytes| super::fingerprints_of(&bytes))
                .unwrap_or_default();
            out.push((content, hashes));
        }
        out.extend(super::read_log_result(
            run,
            self.analysis_log.contents(run),
        )?);
        // The worker stores analyses in read order; a stable sort keeps that when another
        // writer's came in between.
        out.sort_by_key(|(content, _)| content.seq);
        // A read analysed again (the log is append-only) answers with its last analysis,
        // as the trait's "replacing an earlier one" says: the old trees come first and the
        // log in the order it was written, so the last of equal seqs is the newest.
        out.reverse();
        out.dedup_by_key(|(content, _)| content.seq);
        out.reverse();
        Ok(out)
    }

    /// Stores an effect's content analysis and read -> effect edges.
    pub fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        self.effect_lineage
            .insert(effect.0.as_bytes(), encode(lineage))
            .or_storage()?;
        Ok(())
    }

    /// An effect's content analysis, once it finished.
    pub fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        match self.effect_lineage.get(effect.0.as_bytes()).or_storage()? {
            Some(bytes) => Ok(Some(decode(effect.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// [`crate::LineageStore::edges`] on sled: every edge of a run, in effect staging order.
    ///
    /// Errors: [`crate::LedgerError::NotFound`] for an unknown run.
    pub fn edges(&self, run: &RunId) -> Result<Vec<Edge>> {
        crate::LineageStore::edges(self, run)
    }
}
