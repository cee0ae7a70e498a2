//! Lineage on sled: placeholders, read content analyses and effect lineage.

use rand::Rng as _;

use super::{decode, encode, run_prefix, Ledger};
use crate::lineage::{placeholder_edges, Edge, EffectLineage, ReadContent};
use crate::model::{EffectId, Placeholder, PlaceholderSpec, RunId, ValueKind};
use crate::Result;

fn seq_key(run: &RunId, seq: u64) -> Vec<u8> {
    super::index_key(run, seq)
}

impl Ledger {
    /// Allocates placeholder values for a new effect: numbers from a per-run random base in
    /// [10^15, 9 * 10^15) (16 digits, within JSON's safe integers), strings `ph_` plus 24
    /// random characters. Called under the write lock.
    pub(crate) fn allocate_placeholders(
        &self,
        run: &RunId,
        specs: &[PlaceholderSpec],
    ) -> Result<Vec<Placeholder>> {
        let mut out = Vec::new();
        for spec in specs {
            let value = match spec.kind {
                ValueKind::Number => {
                    let base_key = format!("placeholder-base/{run}");
                    let base = match self.counters.get(base_key.as_bytes())? {
                        Some(bytes) => <[u8; 8]>::try_from(bytes.as_ref())
                            .map(u64::from_be_bytes)
                            .unwrap_or(0),
                        None => {
                            let base: u64 = rand::thread_rng()
                                .gen_range(1_000_000_000_000_000..9_000_000_000_000_000);
                            self.counters
                                .insert(base_key.as_bytes(), &base.to_be_bytes())?;
                            base
                        }
                    };
                    (base + self.next_seq("placeholders", run)?).to_string()
                }
                ValueKind::String => {
                    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyz23456789";
                    let mut rng = rand::thread_rng();
                    let tail: String = (0..24)
                        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
                        .collect();
                    format!("ph_{tail}")
                }
            };
            out.push(Placeholder {
                value,
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
                let (key, value) = item?;
                decode(&key, &value)
            })
            .collect()
    }

    /// Stores the analysis of read `seq`'s response: its winnowed fingerprints (sorted) and
    /// notable values.
    pub fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        let key = seq_key(run, content.seq);
        let mut bytes = Vec::with_capacity(fingerprints.len() * 8);
        for hash in fingerprints {
            bytes.extend_from_slice(&hash.to_le_bytes());
        }
        self.read_hashes.insert(key.clone(), bytes)?;
        self.read_content.insert(key, encode(content))?;
        Ok(())
    }

    /// The analyses of `run`'s reads with their fingerprints, in read order.
    pub fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        let mut out = Vec::new();
        for item in self.read_content.scan_prefix(run_prefix(run)) {
            let (key, value) = item?;
            let content: ReadContent = decode(&key, &value)?;
            let hashes = self
                .read_hashes
                .get(&key)?
                .map(|bytes| {
                    bytes
                        .chunks_exact(8)
                        .filter_map(|c| <[u8; 8]>::try_from(c).ok())
                        .map(u64::from_le_bytes)
                        .collect()
                })
                .unwrap_or_default();
            out.push((content, hashes));
        }
        Ok(out)
    }

    /// Stores an effect's content analysis and read -> effect edges.
    pub fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        self.effect_lineage
            .insert(effect.0.as_bytes(), encode(lineage))?;
        Ok(())
    }

    /// An effect's content analysis, once it finished.
    pub fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        match self.effect_lineage.get(effect.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(effect.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// Every edge of a run: read -> effect edges from content analysis and
    /// effect -> effect edges from placeholders, in effect staging order.
    pub fn edges(&self, run: &RunId) -> Result<Vec<Edge>> {
        let mut out = Vec::new();
        for effect in self.effects(run)? {
            out.extend(placeholder_edges(&effect));
            if let Some(lineage) = self.effect_lineage(&effect.id)? {
                out.extend(lineage.edges);
            }
        }
        Ok(out)
    }
}
