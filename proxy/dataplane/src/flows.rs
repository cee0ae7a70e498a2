//! Flow decisions over an effect's lineage: which `[[flow]]` rules (docs/policy.md#flow-rules)
//! the edges into an effect violate, with the edge, its source and the carried excerpt.
//!
//! The data plane asks once the lineage worker has analysed a freshly staged effect (to
//! tell the agent in the `airlock-flow` header and to hold `review = "auto"`), and the
//! control plane asks again for the API, the review UI, approvals and the commit's final
//! pass. The decision itself is [`airlock_policy::Policy::evaluate_flows`]; this module
//! gathers its inputs from the ledger.

pub mod pass;

use std::collections::HashMap;
use std::time::Duration;

use airlock_ledger::{
    placeholder_edges, Edge, EdgeKind, EdgeSource, Effect, EffectId, EffectLineage, LedgerError,
    Read, Store,
};
use airlock_policy::{EdgeClass, FlowAction, FlowEdge, FlowSource, FlowTarget, Policy};
use serde::Serialize;

/// The response header that tells the agent a staged effect is held by flow rules:
/// `airlock-flow: review; flow="no-secrets-out"` (or `block`), one entry per flow, comma
/// separated.
pub const FLOW_HEADER: &str = "airlock-flow";

/// How long staging waits for the lineage worker before answering (only when the policy
/// has flows). Past it the answer goes without the header and the commit's final pass
/// decides.
pub const STAGING_WAIT: Duration = Duration::from_secs(2);

/// One flow an effect violates, as the API, the UI and the CLI show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The flow's id.
    pub flow: String,
    /// `block` or `review`.
    pub action: FlowAction,
    /// The flow's reason.
    pub reason: String,
    /// The labels that matched (`secret`, `credential`, `unanalysed`…).
    pub labels: Vec<String>,
    /// The edge that carries the most, with its excerpt (none for `unanalysed`).
    pub edge: Option<Edge>,
    /// Where the edge starts: the read's `METHOD URL` or the source effect's id.
    pub source: Option<String>,
}

/// The flow decision on one effect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlowCheck {
    /// Whether the effect's lineage was analysed when this was decided.
    pub analysed: bool,
    /// Why its lineage is incomplete, when it is (the `unanalysed` label).
    pub incomplete: Option<String>,
    /// The violations, blocks first.
    pub violations: Vec<Violation>,
}

impl FlowCheck {
    /// The `block` violations.
    pub fn blocks(&self) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(|v| v.action == FlowAction::Block)
    }

    /// Ids of the `review` flows violated.
    pub fn review_flows(&self) -> Vec<String> {
        self.violations
            .iter()
            .filter(|v| v.action == FlowAction::Review)
            .map(|v| v.flow.clone())
            .collect()
    }

    /// Whether the approval on `effect` releases it under this decision: no block, and
    /// every review flow acknowledged by a reviewer's own approval of it.
    pub fn approval_suffices(&self, effect: &Effect) -> bool {
        if self.blocks().next().is_some() {
            return false;
        }
        let review = self.review_flows();
        if review.is_empty() {
            return true;
        }
        effect
            .approval
            .as_ref()
            .is_some_and(|a| a.explicit && review.iter().all(|f| a.flows.contains(f)))
    }

    /// The `airlock-flow` header value: `review; flow="ID", block; flow="ID"`.
    pub fn header_value(&self) -> Option<String> {
        if self.violations.is_empty() {
            return None;
        }
        Some(
            self.violations
                .iter()
                .map(|v| format!("{}; flow=\"{}\"", v.action.as_str(), v.flow))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

/// The reads and effects of one run, loaded once for deciding many of its effects.
pub struct RunSources {
    /// Why the run's lineage has a hole, when it was flagged so
    /// ([`crate::gaps::LINEAGE_INCOMPLETE`]): every effect is then unanalysed.
    gap: Option<String>,
    reads: HashMap<u64, Read>,
    effects: HashMap<EffectId, Effect>,
    /// The stored lineage of each effect of the run, for lineage carried through
    /// placeholders.
    lineages: HashMap<EffectId, EffectLineage>,
}

/// How many placeholder hops lineage is followed back through.
const MAX_PLACEHOLDER_HOPS: usize = 8;

impl RunSources {
    /// Loads the reads and effects of `run`.
    ///
    /// Errors: storage faults.
    pub fn load(ledger: &dyn Store, run: &airlock_ledger::RunId) -> Result<Self, LedgerError> {
        let effects: HashMap<EffectId, Effect> = ledger
            .effects(run)?
            .into_iter()
            .map(|e| (e.id.clone(), e))
            .collect();
        let mut lineages = HashMap::new();
        for id in effects.keys() {
            if let Some(lineage) = ledger.effect_lineage(id)? {
                lineages.insert(id.clone(), lineage);
            }
        }
        let gap = ledger.run(run)?.and_then(|r| {
            r.flags
                .into_iter()
                .find(|f| f.code == crate::gaps::LINEAGE_INCOMPLETE)
                .map(|f| f.detail)
        });
        Ok(Self {
            gap,
            reads: ledger.reads(run)?.into_iter().map(|r| (r.seq, r)).collect(),
            effects,
            lineages,
        })
    }

    /// The read -> effect edges of the effects `effect` carries placeholders of, and of
    /// theirs (at most [`MAX_PLACEHOLDER_HOPS`] back), as edges into `effect`: the value
    /// substituted at release is the parent's response, which can echo whatever the
    /// parent carried, so a secret posted to its own origin and handed back as a
    /// placeholder still counts where the placeholder goes.
    fn carried_through_placeholders(&self, effect: &Effect) -> Vec<Edge> {
        let mut out = Vec::new();
        let mut seen: std::collections::HashSet<EffectId> = std::collections::HashSet::new();
        let mut frontier: Vec<(EffectId, usize)> = effect
            .depends_on
            .iter()
            .map(|d| (d.effect.clone(), 1))
            .collect();
        while let Some((parent, hops)) = frontier.pop() {
            if hops > MAX_PLACEHOLDER_HOPS || !seen.insert(parent.clone()) {
                continue;
            }
            if let Some(lineage) = self.lineages.get(&parent) {
                for edge in lineage
                    .edges
                    .iter()
                    .filter(|e| e.kind != EdgeKind::Placeholder)
                {
                    let mut carried = edge.clone();
                    carried.to = effect.id.clone();
                    carried.detail = Some(format!(
                        "carried through the placeholder of effect {parent}: {}",
                        edge.detail.as_deref().unwrap_or("shared data")
                    ));
                    out.push(carried);
                }
            }
            if let Some(record) = self.effects.get(&parent) {
                frontier.extend(
                    record
                        .depends_on
                        .iter()
                        .map(|d| (d.effect.clone(), hops + 1)),
                );
            }
        }
        out
    }

    /// The flows `effect` violates under `policy`, given its lineage (`None`: not
    /// analysed yet).
    pub fn check(
        &self,
        policy: &Policy,
        effect: &Effect,
        lineage: Option<&EffectLineage>,
    ) -> FlowCheck {
        let incomplete = incomplete(lineage).or_else(|| self.gap.clone());
        if policy.flows().is_empty() {
            return FlowCheck {
                analysed: lineage.is_some(),
                incomplete,
                violations: Vec::new(),
            };
        }
        let mut edges: Vec<Edge> = lineage.map(|l| l.edges.clone()).unwrap_or_default();
        edges.extend(placeholder_edges(effect));
        edges.extend(self.carried_through_placeholders(effect));
        let hosts: Vec<Option<(String, u16)>> = edges
            .iter()
            .map(|edge| match &edge.from {
                EdgeSource::Read { seq } => self.reads.get(seq).and_then(|r| host_port(&r.url)),
                EdgeSource::Effect { id } => self.effects.get(id).and_then(|e| host_port(&e.url)),
            })
            .collect();
        let mut inputs: Vec<FlowEdge<'_>> = Vec::with_capacity(edges.len());
        let mut index: Vec<usize> = Vec::with_capacity(edges.len());
        for (i, edge) in edges.iter().enumerate() {
            let Some((host, port)) = &hosts[i] else {
                continue;
            };
            let (rule, labels): (Option<&str>, &[String]) = match &edge.from {
                EdgeSource::Read { seq } => match self.reads.get(seq) {
                    Some(read) => (read.rule.as_deref(), &read.labels),
                    None => continue,
                },
                EdgeSource::Effect { id } => match self.effects.get(id) {
                    Some(source) => (source.rule.as_deref(), &[]),
                    None => continue,
                },
            };
            inputs.push(FlowEdge {
                source: FlowSource {
                    host,
                    port: *port,
                    rule,
                    labels,
                },
                class: match edge.kind {
                    EdgeKind::Content => EdgeClass::Content,
                    EdgeKind::Header => EdgeClass::Header,
                    EdgeKind::Credential => EdgeClass::Credential,
                    EdgeKind::Placeholder => EdgeClass::Placeholder,
                },
                overlap_bytes: edge.overlap_bytes,
            });
            index.push(i);
        }
        let (host, port) = host_port(&effect.url).unwrap_or_default();
        let target = FlowTarget {
            host: &host,
            port,
            unanalysed: incomplete.as_deref(),
        };
        let violations = policy
            .evaluate_flows(&target, &inputs)
            .into_iter()
            .map(|verdict| {
                let edge = verdict.edge.map(|i| edges[index[i]].clone());
                let source = edge.as_ref().map(|edge| match &edge.from {
                    EdgeSource::Read { seq } => self
                        .reads
                        .get(seq)
                        .map(|r| format!("read {seq}: {} {}", r.method, r.url))
                        .unwrap_or_else(|| format!("read {seq}")),
                    EdgeSource::Effect { id } => format!("effect {id}"),
                });
                Violation {
                    flow: verdict.flow,
                    action: verdict.action,
                    reason: verdict.reason,
                    labels: verdict.labels,
                    edge,
                    source,
                }
            })
            .collect();
        FlowCheck {
            analysed: lineage.is_some(),
            incomplete,
            violations,
        }
    }
}

/// The flows `effect` violates now, from its stored lineage.
///
/// Errors: storage faults.
pub fn check_effect(
    ledger: &dyn Store,
    policy: &Policy,
    effect: &Effect,
) -> Result<FlowCheck, LedgerError> {
    if policy.flows().is_empty() {
        return Ok(FlowCheck {
            analysed: true,
            ..FlowCheck::default()
        });
    }
    let lineage = ledger.effect_lineage(&effect.id)?;
    let sources = RunSources::load(ledger, &effect.run_id)?;
    Ok(sources.check(policy, effect, lineage.as_ref()))
}

/// Why an effect's lineage is incomplete, when it is: not analysed (yet), a truncated or
/// skipped body, or reads of its run whose analysis was cut short.
fn incomplete(lineage: Option<&EffectLineage>) -> Option<String> {
    let Some(lineage) = lineage else {
        return Some("not analysed yet".to_owned());
    };
    if let Some(skipped) = &lineage.skipped {
        return Some(skipped.clone());
    }
    if lineage.truncated {
        return Some(
            "the body was longer than the analysis bounds; only its start was analysed".to_owned(),
        );
    }
    if !lineage.incomplete_reads.is_empty() {
        let reads: Vec<String> = lineage
            .incomplete_reads
            .iter()
            .take(8)
            .map(u64::to_string)
            .collect();
        return Some(format!(
            "reads {} of the run were not fully analysed",
            reads.join(", ")
        ));
    }
    None
}

/// The host and port of an absolute URL (the scheme's default port when none is given).
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let host = uri.host()?.to_owned();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    Some((host, port))
}

/// Waits (at most [`STAGING_WAIT`]) for the lineage worker to analyse the effect just
/// staged, then decides its flows under the staging request's `policy` snapshot. `None`
/// when the policy has no flows or the wait ran out.
pub async fn at_staging(
    plane: &std::sync::Arc<crate::DataPlane>,
    policy: &std::sync::Arc<crate::policy_store::Snapshot>,
    effect: &EffectId,
) -> Option<FlowCheck> {
    if policy.flows().is_empty() {
        return None;
    }
    let analysed = plane.lineage.analysed(effect);
    let ledger = plane.ledger.clone();
    let id = effect.clone();
    let done =
        tokio::task::spawn_blocking(move || ledger.effect_lineage(&id).ok().flatten().is_some())
            .await
            .unwrap_or(false);
    if !done && tokio::time::timeout(STAGING_WAIT, analysed).await.is_err() {
        return None;
    }
    let ledger = plane.ledger.clone();
    let policy = policy.clone();
    let id = effect.clone();
    tokio::task::spawn_blocking(move || {
        let effect = ledger.effect(&id).ok().flatten()?;
        check_effect(&*ledger, &policy, &effect).ok()
    })
    .await
    .ok()
    .flatten()
}

/// Labelled reads whose responses are still streaming, per run: what they carry reached
/// the agent but is analysed only when they end, so the commit's final pass holds a run's
/// effects while any is open ([`StreamingGuard`] counts one).
#[derive(Debug, Default, Clone)]
pub struct Streaming(std::sync::Arc<std::sync::Mutex<HashMap<airlock_ledger::RunId, usize>>>);

impl Streaming {
    /// Counts one streaming read of `run` until the guard is dropped.
    pub fn enter(&self, run: &airlock_ledger::RunId) -> StreamingGuard {
        if let Ok(mut map) = self.0.lock() {
            *map.entry(run.clone()).or_default() += 1;
        }
        StreamingGuard {
            streaming: self.clone(),
            run: run.clone(),
        }
    }

    /// How many reads of `run` stream now.
    pub fn count(&self, run: &airlock_ledger::RunId) -> usize {
        self.0
            .lock()
            .map(|map| map.get(run).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

/// One streaming labelled read, counted until dropped.
#[derive(Debug)]
pub struct StreamingGuard {
    streaming: Streaming,
    run: airlock_ledger::RunId,
}

impl Drop for StreamingGuard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.streaming.0.lock() {
            if let Some(count) = map.get_mut(&self.run) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    map.remove(&self.run);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use airlock_ledger::{EffectStore as _, MemoryStore, NewEffect, RunFlag, RunStore as _};
    use airlock_policy::Policy;

    use super::check_effect;

    #[test]
    fn a_run_whose_read_went_unjournaled_holds_its_effects_as_unanalysed() {
        let policy = Policy::from_toml_str(
            r#"version = 1
[[rule]]
id = "hooks"
host = "hooks.example"
action = "stage"

[[flow]]
id = "undecodable"
from = ["unanalysed"]
to = "external"
action = "review"
"#,
            "<test>",
        )
        .expect("policy");
        let ledger = MemoryStore::new();
        let run = ledger.create_run(None).expect("run");
        let effect = ledger
            .stage(NewEffect {
                run_id: &run.id,
                method: "POST",
                url: "https://hooks.example/h",
                headers: Vec::new(),
                body: b"plain text",
                rule: Some("hooks"),
                policy_revision: policy.revision(),
                placeholders: Vec::new(),
                depends_on: Vec::new(),
                inject: None,
            })
            .expect("stage");
        // Analysed, with nothing flagged.
        crate::lineage::reanalyse_effects(&ledger, &run.id, std::slice::from_ref(&effect.id))
            .expect("analyse");
        let check = check_effect(&ledger, &policy, &effect).expect("check");
        assert_eq!(check.incomplete, None, "{check:?}");
        assert!(check.violations.is_empty(), "{check:?}");
        // A read of the run was not journaled: the run is flagged, the effect unanalysed.
        ledger
            .flag_run(
                &run.id,
                RunFlag {
                    code: crate::gaps::LINEAGE_INCOMPLETE.to_owned(),
                    detail: "a read of https://vault.example/x was not journaled".to_owned(),
                    at_ms: 0,
                },
            )
            .expect("flag");
        let check = check_effect(&ledger, &policy, &effect).expect("check");
        assert!(
            check
                .incomplete
                .as_deref()
                .is_some_and(|why| why.contains("not journaled")),
            "{check:?}"
        );
        assert_eq!(check.violations.len(), 1, "{check:?}");
        assert_eq!(check.violations[0].flow, "undecodable");
    }
}
