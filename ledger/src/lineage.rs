//! Lineage: which data each effect carries (read -> effect edges from content
//! fingerprints, credential-looking values and header values) and which effects depend on
//! which (effect -> effect edges through placeholders), and the release readiness that
//! follows from them.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::{Effect, EffectId, EffectState};

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
            Some(EffectState::Unknown) => {
                return Readiness::Skip(format!(
                    "depends on {} (unknown: it may or may not have reached its origin), whose placeholder {} it carries; a reviewer who checked the origin settles it (`airlock settle {} --delivered`), and this effect is then released",
                    dependency.effect, dependency.value, dependency.effect
                ))
            }
            Some(EffectState::Failed) => {
                return Readiness::Skip(format!(
                    "depends on {} (failed), whose placeholder {} it carries; it is released if {} is retried and released",
                    dependency.effect, dependency.value, dependency.effect
                ))
            }
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
