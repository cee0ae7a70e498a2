//! JSON renderings of ledger records for the admin API: runs with counts, effect
//! summaries, bodies and headers for reviewers (credentials redacted), lineage edges.

use std::collections::HashMap;

use airlock_dataplane::flows::FlowCheck;
use airlock_ledger::{Effect, EffectId, Run};
use base64::Engine as _;
use serde_json::Value;

use super::views::{ApprovalView, BodyView, EdgeSourceView, EdgeView, HeaderView};
use crate::Control;
use airlock_net::headers::is_credential;

/// A run as the admin API shows it (`GET /v1/runs/{id}` and every answer that returns a
/// run; some add fields of their own).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct RunView {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub id: airlock_ledger::RunId,
    /// `open`, `sealed`, `committing`, `committed`, `partially_committed` or `aborted`.
    #[schema(value_type = String)]
    pub state: airlock_ledger::RunState,
    /// The profile named at creation.
    pub profile: Option<String>,
    /// The source address or CIDR bound to the run (`--transparent`, `--dns`).
    pub source: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The run's effects counted by state (`staged`, `approved`, …).
    pub effects: std::collections::BTreeMap<&'static str, u64>,
    /// Commit and abort decisions, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<airlock_ledger::DecisionRecord>,
    /// Flags raised on the run (a placeholder headed off its host, …).
    #[schema(value_type = Vec<Object>)]
    pub flags: Vec<airlock_ledger::RunFlag>,
    /// `HOST:PORT` sandboxes reach the proxy at.
    pub proxy: String,
}

/// A run with its effect counts by state.
pub(super) fn run_view(shared: &Control, run: &Run, effects: &[Effect]) -> RunView {
    let mut counts = std::collections::BTreeMap::new();
    for effect in effects {
        *counts.entry(effect.state.as_str()).or_insert(0) += 1;
    }
    RunView {
        id: run.id.clone(),
        state: run.state,
        profile: run.profile.clone(),
        source: run.source.clone(),
        created_at_ms: run.created_at_ms,
        effects: counts,
        decisions: run.decisions.clone(),
        flags: run.flags.clone(),
        proxy: shared.advertised.authority(),
    }
}

/// An effect as listed (`GET /v1/runs/{id}/effects`) and the base of every answer about
/// one effect.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EffectSummary {
    /// The effect id (`eff_…`).
    #[schema(value_type = String)]
    pub id: EffectId,
    /// Its run.
    #[schema(value_type = String)]
    pub run: airlock_ledger::RunId,
    /// Its place in the run's staging order, from 1.
    pub seq: u64,
    /// The request method.
    pub method: String,
    /// The request URL.
    pub url: String,
    /// The rule that staged it.
    pub rule: Option<String>,
    /// `staged`, `approved`, `rejected`, `releasing`, `released`, `failed`, `unknown`,
    /// `skipped` or `discarded`.
    #[schema(value_type = String)]
    pub state: airlock_ledger::EffectState,
    /// Why it is in that state, when airlock knows.
    pub state_reason: Option<String>,
    /// The staged body's length in bytes.
    pub body_len: u64,
    /// Staging time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The origin's status at release.
    pub release_status: Option<u16>,
    /// What the adapter says the effect does.
    pub summary: String,
    /// The adapter that recognised it (`webhook` when none did).
    pub adapter: String,
    /// The effect this one compensates.
    #[schema(value_type = Option<String>)]
    pub compensates: Option<EffectId>,
    /// Whether `POST /v1/effects/{id}/retry` may release it again.
    pub retriable: bool,
    /// Release attempts so far.
    pub attempts: usize,
    /// The idempotency key sent with every attempt.
    #[schema(value_type = Option<Object>)]
    pub idempotency: Option<airlock_ledger::Idempotency>,
    /// What to do next about a failed or unknown release.
    pub next: Option<String>,
}

/// `GET /v1/runs` → a page of runs, newest first, and the cursor of the next page.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct RunList {
    /// The runs of this page.
    pub runs: Vec<RunView>,
    /// The cursor of the next page (`GET /v1/runs?after=NEXT`); `null` on the last page.
    pub next: Option<String>,
}

/// `GET /v1/runs/{id}/effects` → the run's effects in staging order, and what a commit of
/// exactly these carries.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EffectList {
    /// The run.
    #[schema(value_type = String)]
    pub run: airlock_ledger::RunId,
    /// Each effect's summary with its flow decision in brief.
    pub effects: Vec<super::views::ListedEffect>,
    /// `{through_seq, digest}` (docs/admin-api.md#expectations).
    #[schema(value_type = Object)]
    pub expect: crate::runs::expect::Expectation,
}

/// The summary of an effect used in lists, as JSON (lists add fields).
pub(super) fn effect_summary(effect: &Effect) -> Value {
    serde_json::to_value(summary_of(effect)).unwrap_or_default()
}

/// The summary of an effect.
pub(super) fn summary_of(effect: &Effect) -> EffectSummary {
    EffectSummary {
        id: effect.id.clone(),
        run: effect.run_id.clone(),
        seq: effect.seq,
        method: effect.method.clone(),
        url: effect.url.clone(),
        rule: effect.rule.clone(),
        state: effect.state,
        state_reason: effect.state_reason.clone(),
        body_len: effect.body_len,
        created_at_ms: effect.created_at_ms,
        release_status: effect.release.as_ref().and_then(|r| r.status),
        summary: airlock_adapters::summary_of(effect),
        adapter: effect.adapter.as_deref().unwrap_or("webhook").to_owned(),
        compensates: effect.compensates.clone(),
        // The ways out of a doubtful or failed release (docs/admin-api.md).
        retriable: airlock_ledger::rules::outcome::is_retriable(effect),
        attempts: effect.earlier_releases.len() + usize::from(effect.release.is_some()),
        idempotency: effect.idempotency.clone(),
        next: crate::outcomes::next_step(effect),
    }
}

/// Renders a body for reviewers: UTF-8 text as `text`, anything else as `base64`.
pub(super) fn body_view(bytes: &[u8]) -> BodyView {
    match std::str::from_utf8(bytes) {
        Ok(text) => BodyView::Text {
            text: text.to_owned(),
        },
        Err(_) => BodyView::Base64 {
            base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        },
    }
}

/// Headers for reviewers, credential values as `[redacted]`.
pub(super) fn headers_view(headers: &[airlock_ledger::Header]) -> Vec<HeaderView> {
    headers
        .iter()
        .map(|h| {
            let value = if is_credential(&h.name) {
                "[redacted]".to_owned()
            } else {
                String::from_utf8_lossy(h.value.as_bytes()).into_owned()
            };
            HeaderView {
                name: h.name.clone(),
                value,
            }
        })
        .collect()
}

/// A lineage edge for the API: `from` is `read:SEQ` or an effect id; reads carry their
/// method and URL so a reviewer can read the edge on its own.
pub(super) fn edge_view(edge: &airlock_ledger::Edge, reads: &[airlock_ledger::Read]) -> EdgeView {
    let (from, source) = match &edge.from {
        airlock_ledger::EdgeSource::Read { seq } => {
            let read = reads.iter().find(|r| r.seq == *seq);
            (
                format!("read:{seq}"),
                EdgeSourceView::Read {
                    kind: "read",
                    seq: *seq,
                    method: read.map(|r| r.method.clone()),
                    url: read.map(|r| r.url.clone()),
                },
            )
        }
        airlock_ledger::EdgeSource::Effect { id } => (
            id.to_string(),
            EdgeSourceView::Effect {
                kind: "effect",
                id: id.clone(),
            },
        ),
    };
    EdgeView {
        from,
        source,
        to: edge.to.clone(),
        kind: edge.kind,
        overlap_bytes: edge.overlap_bytes,
        overlap_permille: edge.overlap_permille,
        excerpt: edge.excerpt.clone(),
        detail: edge.detail.clone(),
    }
}

/// An effect's approval: whether a reviewer approved this effect by itself, and the
/// `review` flows it violated then (shown to them). `None` when it is not approved.
pub(super) fn approval_view(effect: &Effect) -> Option<ApprovalView> {
    effect.approval.as_ref().map(|a| ApprovalView {
        by: a.by.clone(),
        at_ms: a.at_ms,
        body_digest: a.body_digest.clone(),
        explicit: a.explicit,
        flows: a.flows.clone(),
    })
}

/// The violations of an effect in a list, kept short (`[{flow, action}]`), and whether
/// flow rules hold it now (`flow_hold`: `"held"`, `"blocked"` or `None`).
pub(super) fn flows_brief(
    effect: &Effect,
    check: Option<&FlowCheck>,
) -> (Vec<super::views::FlowBrief>, Option<&'static str>) {
    let brief = check
        .map(|c| {
            c.violations
                .iter()
                .map(|v| super::views::FlowBrief {
                    flow: v.flow.clone(),
                    action: v.action,
                })
                .collect()
        })
        .unwrap_or_default();
    (brief, check.and_then(|c| crate::flows::hold(effect, c)))
}

/// A run's effects that flow rules hold now: `{held: [ID…], blocked: [ID…]}`.
pub(super) fn run_flows(
    effects: &[Effect],
    checks: &HashMap<EffectId, FlowCheck>,
) -> super::views::RunFlows {
    let (mut held, mut blocked) = (Vec::new(), Vec::new());
    for effect in effects {
        match checks
            .get(&effect.id)
            .and_then(|c| crate::flows::hold(effect, c))
        {
            Some("blocked") => blocked.push(effect.id.clone()),
            Some(_) => held.push(effect.id.clone()),
            None => {}
        }
    }
    super::views::RunFlows { held, blocked }
}
