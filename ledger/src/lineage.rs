//! Lineage: which data each effect carries (read -> effect edges from content
//! fingerprints, credential-looking values and header values) and which effects depend on
//! which (effect -> effect edges through placeholders), and the release readiness that
//! follows from them.

use std::collections::HashMap;

use rand::Rng as _;
use serde::{Deserialize, Serialize};

use crate::model::{Effect, EffectId, EffectState, Placeholder, PlaceholderSpec, RunId, ValueKind};
use crate::{decode, encode, run_prefix, Ledger, Result};

/// What an edge says about its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// The effect carries passages of the read's response body.
    Content,
    /// The effect carries a credential-looking value that arrived in the read.
    Credential,
    /// The effect carries a response header value of the read.
    Header,
    /// The effect carries a placeholder the source effect handed out.
    Placeholder,
}

/// Where an edge starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EdgeSource {
    /// A journaled read.
    Read {
        /// The read's sequence number in its run.
        seq: u64,
    },
    /// An earlier effect.
    Effect {
        /// The effect.
        id: EffectId,
    },
}

/// One lineage edge into an effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    /// Where it starts.
    pub from: EdgeSource,
    /// The effect it ends at.
    pub to: EffectId,
    /// What it says.
    pub kind: EdgeKind,
    /// Bytes of the effect's (normalised) body inside shared passages.
    #[serde(default)]
    pub overlap_bytes: u64,
    /// `overlap_bytes` per mille of the effect's normalised body.
    #[serde(default)]
    pub overlap_permille: u32,
    /// A short sample of the shared text, or the value found.
    #[serde(default)]
    pub excerpt: Option<String>,
    /// More detail: the view the passage was found in, the header name, where a
    /// placeholder was found.
    #[serde(default)]
    pub detail: Option<String>,
}

/// The content analysis of an effect and its read -> effect edges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectLineage {
    /// When the analysis finished, ms since the Unix epoch.
    pub analyzed_at_ms: u64,
    /// Fingerprints taken of the effect's body.
    pub fingerprints: usize,
    /// Bounds cut the analysis short.
    pub truncated: bool,
    /// Why part of the analysis was skipped.
    pub skipped: Option<String>,
    /// Edges from reads into the effect.
    pub edges: Vec<Edge>,
    /// Reads of the run whose analysis was cut short or skipped (queue full, work budget):
    /// edges from them may be missing, and the reviewer is told so.
    #[serde(default)]
    pub incomplete_reads: Vec<u64>,
}

/// A value of a read worth finding again in effects: a credential-looking token in its
/// body or a response header value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notable {
    /// `credential` or `header`.
    pub kind: EdgeKind,
    /// The header name, for header values.
    pub name: Option<String>,
    /// The value.
    pub value: String,
}

/// The stored analysis of a read's response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadContent {
    /// The read's sequence number.
    pub seq: u64,
    /// Notable values.
    pub notable: Vec<Notable>,
    /// Fingerprints taken.
    pub fingerprints: usize,
    /// Bounds cut the analysis short.
    pub truncated: bool,
    /// Why part of the analysis was skipped.
    pub skipped: Option<String>,
}

impl ReadContent {
    /// The record of a read whose body was not analysed, and why.
    pub fn not_analysed(seq: u64, reason: String) -> Self {
        Self {
            seq,
            notable: Vec::new(),
            fingerprints: 0,
            truncated: false,
            skipped: Some(reason),
        }
    }
}

/// Whether an approved effect can be released now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every effect it depends on was released.
    Ready,
    /// An effect it depends on is still to be released.
    Wait,
    /// An effect it depends on will never be released: skip it, with this reason.
    Skip(String),
}

/// Readiness of `effect` given the current states of the run's effects (`states`).
/// Dependencies always point to earlier effects (a placeholder is issued before it can be
/// carried), so the dependency graph has no cycles by construction.
pub fn readiness(effect: &Effect, states: &HashMap<EffectId, EffectState>) -> Readiness {
    let mut wait = false;
    for dependency in &effect.depends_on {
        match states.get(&dependency.effect) {
            Some(EffectState::Released) => {}
            Some(EffectState::Approved | EffectState::Releasing) => wait = true,
            Some(state) => {
                return Readiness::Skip(format!(
                    "depends on {} ({state}), whose placeholder {} it carries",
                    dependency.effect, dependency.value
                ))
            }
            None => {
                return Readiness::Skip(format!(
                    "depends on {}, which is not in this run",
                    dependency.effect
                ))
            }
        }
    }
    if wait {
        Readiness::Wait
    } else {
        Readiness::Ready
    }
}

/// The stored record of a read's analysis.
pub fn read_content(
    seq: u64,
    notable: Vec<Notable>,
    fingerprints: usize,
    analysis: &crate::fingerprint::Analysis,
) -> ReadContent {
    ReadContent {
        seq,
        notable,
        fingerprints,
        truncated: analysis.truncated,
        skipped: analysis.skipped.clone(),
    }
}

fn seq_key(run: &RunId, seq: u64) -> Vec<u8> {
    crate::index_key(run, seq)
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

/// The effect -> effect edges of an effect's dependencies.
pub fn placeholder_edges(effect: &Effect) -> Vec<Edge> {
    effect
        .depends_on
        .iter()
        .map(|dependency| Edge {
            from: EdgeSource::Effect {
                id: dependency.effect.clone(),
            },
            to: effect.id.clone(),
            kind: EdgeKind::Placeholder,
            overlap_bytes: 0,
            overlap_permille: 0,
            excerpt: Some(dependency.value.clone()),
            detail: Some(format!("placeholder found in {}", dependency.found_in)),
        })
        .collect()
}

#[cfg(test)]
mod tests;
