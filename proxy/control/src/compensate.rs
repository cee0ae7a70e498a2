//! Compensations (docs/design.md "Commit authority"): after a commit, the released effects of a
//! run whose adapters know an inverse (close the PR, delete the comment, `chat.delete`,
//! delete the pushed ref) get compensating effects, staged in a new sealed run (profile
//! `compensate:RUN`) in reverse release order, each pending review like any effect. They
//! are approximate: a compensation is a new event, not an erasure — the notification
//! already went out. Releasing them is a normal commit of that run.

use std::sync::Arc;

use airlock_ledger::{
    Effect, EffectNotes, EffectState, Header, HeaderText, LedgerError, NewEffect, Run, RunId,
    RunState,
};
use serde::Serialize;

use crate::Control;
use airlock_adapters::{self as adapters, Call};
use airlock_dataplane::lineage::substitute;

/// The profile of a compensation run for `run`.
pub fn profile_for(run: &RunId) -> String {
    format!("compensate:{run}")
}

/// Why compensations could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompensateError {
    /// The ledger refused or failed (unknown run: `NotFound`).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The run has not been committed: nothing was released, so nothing needs undoing.
    #[error("run {run} is {state}: only a committed or partially committed run has released effects to compensate")]
    NotCommitted {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
    },
    /// Compensations were already made for the run.
    #[error("run {run} already has compensations in run {by}")]
    AlreadyCompensated {
        /// The run.
        run: RunId,
        /// The run holding its compensations.
        by: RunId,
    },
}

/// A compensating effect, staged in the compensation run.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Compensating {
    /// Its id (`eff_…`).
    #[schema(value_type = String)]
    pub id: airlock_ledger::EffectId,
    /// Its place in the compensation run's staging order, from 1.
    pub seq: u64,
    /// The request method.
    pub method: String,
    /// The request URL.
    pub url: String,
    /// Its state (`staged`).
    #[schema(value_type = String)]
    pub state: airlock_ledger::EffectState,
    /// What the adapter says it does.
    pub summary: String,
    /// The released effect it undoes (`eff_…`).
    #[schema(value_type = Option<String>)]
    pub compensates: Option<airlock_ledger::EffectId>,
}

/// A released effect with no known inverse.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NotCompensable {
    /// The effect.
    pub effect: String,
    /// Its summary.
    pub summary: String,
    /// Why.
    pub reason: String,
}

/// What `compensate` made.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CompensationReport {
    /// The committed run (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// The sealed run holding the compensating effects (`null` when there are none).
    #[schema(value_type = Option<String>)]
    pub compensation_run: Option<RunId>,
    /// The compensating effects, in the order they would be released.
    pub effects: Vec<Compensating>,
    /// Released effects no adapter can undo.
    pub not_compensable: Vec<NotCompensable>,
    /// The honest caveat.
    pub note: &'static str,
}

/// What every compensation report says of compensations.
pub const NOTE: &str = "compensations are approximate: each is a new request that undoes what it can (close, delete, revert); notifications, e-mails and webhooks the original effects caused already went out. Review and approve them, then commit the compensation run.";

/// `effect`'s URL and body with the real values of its parents' placeholders.
fn as_released(effect: &Effect, body: &[u8], run_effects: &[Effect]) -> (String, Vec<u8>) {
    let mut url = effect.url.clone();
    let mut text = String::from_utf8_lossy(body).into_owned();
    let binary = std::str::from_utf8(body).is_err();
    for dependency in &effect.depends_on {
        let Some(placeholder) = run_effects
            .iter()
            .find(|e| e.id == dependency.effect)
            .and_then(|p| {
                p.placeholders
                    .iter()
                    .find(|ph| ph.value == dependency.value)
            })
        else {
            continue;
        };
        if let Some(real) = &placeholder.real {
            url = substitute(&url, &placeholder.value, placeholder.kind, real);
            text = substitute(&text, &placeholder.value, placeholder.kind, real);
        }
    }
    let body = if binary {
        body.to_vec()
    } else {
        text.into_bytes()
    };
    (url, body)
}

/// A JSON answer holding the real values of `effect`'s placeholders at their pointers
/// (`{"number": 42}` for `/number` = 42), for an effect settled delivered whose origin's
/// answer airlock never saw; empty when no real value is known.
fn answer_from_placeholders(effect: &Effect) -> Vec<u8> {
    let mut answer = serde_json::Value::Object(serde_json::Map::new());
    let mut any = false;
    for placeholder in &effect.placeholders {
        let Some(real) = &placeholder.real else {
            continue;
        };
        let value = match placeholder.kind {
            airlock_ledger::ValueKind::Number => real
                .parse::<i64>()
                .map(serde_json::Value::from)
                .unwrap_or_else(|_| serde_json::Value::String(real.clone())),
            airlock_ledger::ValueKind::String
            | airlock_ledger::ValueKind::SlackTs
            | airlock_ledger::ValueKind::Sha1
            | airlock_ledger::ValueKind::Url => serde_json::Value::String(real.clone()),
        };
        // RFC 6901: `/a/b` names key `b` of object `a`; `~1` is `/`, `~0` is `~`.
        let keys: Vec<String> = placeholder
            .pointer
            .split('/')
            .skip(1)
            .map(|key| key.replace("~1", "/").replace("~0", "~"))
            .collect();
        let Some((last, parents)) = keys.split_last() else {
            continue;
        };
        let mut node = &mut answer;
        for key in parents {
            node = match node {
                serde_json::Value::Object(map) => map
                    .entry(key.clone())
                    .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new())),
                _ => break,
            };
        }
        if let serde_json::Value::Object(map) = node {
            map.insert(last.clone(), value);
            any = true;
        }
    }
    if any {
        answer.to_string().into_bytes()
    } else {
        Vec::new()
    }
}

/// Makes the compensating effects of `run` (see the module docs).
///
/// Errors: unknown run, a run not committed, compensations already made, storage faults.
pub fn compensate(
    shared: &Arc<Control>,
    run: &RunId,
) -> Result<CompensationReport, CompensateError> {
    let ledger = &shared.ledger();
    let original: Run = ledger.run(run)?.ok_or_else(|| LedgerError::NotFound {
        kind: "run",
        id: run.to_string(),
    })?;
    if !matches!(
        original.state,
        RunState::Committed | RunState::PartiallyCommitted
    ) {
        return Err(CompensateError::NotCommitted {
            run: run.clone(),
            state: original.state,
        });
    }
    let profile = profile_for(run);
    if let Some(existing) = ledger
        .runs()?
        .into_iter()
        .find(|r| r.profile.as_deref() == Some(profile.as_str()))
    {
        return Err(CompensateError::AlreadyCompensated {
            run: run.clone(),
            by: existing.id,
        });
    }
    let effects = ledger.effects(run)?;
    let mut released: Vec<&Effect> = effects
        .iter()
        .filter(|e| e.state == EffectState::Released)
        .collect();
    // Reverse release order: the last released is undone first.
    released.sort_by_key(|e| {
        std::cmp::Reverse((
            e.release
                .as_ref()
                .and_then(|r| r.finished_at_ms)
                .unwrap_or(0),
            e.seq,
        ))
    });
    let mut planned = Vec::new();
    let mut not_compensable = Vec::new();
    for effect in released {
        let body = ledger.body(&effect.body_digest)?.unwrap_or_default();
        let mut response = match effect.release.as_ref().and_then(|r| r.body_digest.clone()) {
            Some(digest) => ledger.body(&digest)?.unwrap_or_default(),
            None => Vec::new(),
        };
        if response.is_empty() {
            // Settled delivered: airlock never saw the answer; the real values a reviewer
            // supplied stand for it.
            response = answer_from_placeholders(effect);
        }
        let (url, body) = as_released(effect, &body, &effects);
        let mut substituted = effect.clone();
        substituted.url = url;
        let adapter = adapters::of_effect(effect);
        let found = adapter.compensations(&Call::of_effect(&substituted, &body), &response);
        if found.is_empty() {
            not_compensable.push(NotCompensable {
                effect: effect.id.to_string(),
                summary: adapters::summary_of(effect),
                reason: format!(
                    "the {} adapter knows no inverse of this request",
                    adapter.name()
                ),
            });
        }
        for compensation in found {
            planned.push((effect, compensation));
        }
    }
    if planned.is_empty() {
        return Ok(CompensationReport {
            run: run.clone(),
            compensation_run: None,
            effects: Vec::new(),
            not_compensable,
            note: NOTE,
        });
    }
    let target = ledger.create_run(Some(profile))?;
    let mut staged = Vec::new();
    for (effect, compensation) in planned {
        let mut headers: Vec<Header> = effect
            .headers
            .iter()
            .filter(|h| {
                !matches!(
                    h.name.as_str(),
                    "content-type" | "content-length" | "content-encoding"
                )
            })
            .cloned()
            .collect();
        if let Some(content_type) = &compensation.content_type {
            headers.push(Header {
                name: "content-type".into(),
                value: HeaderText::from_bytes(content_type.as_bytes()),
            });
        }
        let revision = shared.policy().current().revision().to_owned();
        let new = ledger.stage_with(
            NewEffect {
                run_id: &target.id,
                method: &compensation.method,
                url: &compensation.url,
                headers,
                body: &compensation.body,
                rule: effect.rule.as_deref(),
                policy_revision: &revision,
                placeholders: Vec::new(),
                depends_on: Vec::new(),
                // The inverse goes to the same API with the same credential.
                inject: effect.inject.as_deref(),
            },
            EffectNotes {
                summary: Some(compensation.summary),
                adapter: effect.adapter.clone(),
                compensates: Some(effect.id.clone()),
                idempotency: None,
                context: effect.context.clone(),
            },
        )?;
        staged.push(new);
    }
    ledger.seal(&target.id, "compensate")?;
    tracing::info!(run.id = %run, compensation.run = %target.id, effects = staged.len(), "compensations staged");
    Ok(CompensationReport {
        run: run.clone(),
        compensation_run: Some(target.id),
        effects: staged
            .iter()
            .map(|e| Compensating {
                id: e.id.clone(),
                seq: e.seq,
                method: e.method.clone(),
                url: e.url.clone(),
                state: e.state,
                summary: adapters::summary_of(e),
                compensates: e.compensates.clone(),
            })
            .collect(),
        not_compensable,
        note: NOTE,
    })
}
