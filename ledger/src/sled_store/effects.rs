//! Effects on sled: staging, reviewers' verdicts, release bookkeeping and recovery.

use super::{decode, encode, index_key, run_prefix, Ledger};
use crate::error::{LedgerError, Refused};
use crate::model::{
    now_ms, DecisionRecord, Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder,
    NewEffect, ReleaseRecord, RunId, RunState,
};
use crate::{ReleaseOutcome, Result, Verdict};

impl Ledger {
    /// Stages an effect: stores its body by digest and the record, then flushes to disk.
    /// Only after this returns may the client be answered.
    ///
    /// Errors: [`Refused::RunNotOpen`] when the run is sealed, committing, finished or
    /// aborted; [`LedgerError::NotFound`] for an unknown run.
    pub fn stage(&self, new: NewEffect<'_>) -> Result<Effect> {
        self.stage_with(new, EffectNotes::default())
    }

    /// [`Ledger::stage`] with an adapter's notes (summary, adapter name, compensated
    /// effect) stored on the effect. Same errors.
    pub fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        let digest = Digest::sha256_of(new.body);
        let effect = {
            let _guard = self.lock();
            let run = self.must_run(new.run_id)?;
            if run.state != RunState::Open {
                return Err(Refused::RunNotOpen {
                    run: run.id,
                    state: run.state,
                }
                .into());
            }
            let seq = self.next_seq("effects", new.run_id)?;
            let placeholders = self.allocate_placeholders(new.run_id, &new.placeholders)?;
            let effect = Effect {
                id: EffectId::generate(),
                run_id: new.run_id.clone(),
                seq,
                method: new.method.to_owned(),
                url: new.url.to_owned(),
                headers: new.headers,
                body_digest: digest.clone(),
                body_len: new.body.len() as u64,
                rule: new.rule.map(str::to_owned),
                policy_revision: new.policy_revision.to_owned(),
                created_at_ms: now_ms(),
                state: EffectState::Staged,
                state_reason: None,
                decisions: Vec::new(),
                release: None,
                placeholders,
                depends_on: new.depends_on,
                inject: new.inject.map(str::to_owned),
                approval: None,
                summary: notes.summary,
                adapter: notes.adapter,
                compensates: notes.compensates,
            };
            for placeholder in &effect.placeholders {
                let issued = IssuedPlaceholder {
                    value: placeholder.value.clone(),
                    kind: placeholder.kind,
                    effect: effect.id.clone(),
                };
                let mut key = run_prefix(new.run_id);
                key.extend_from_slice(placeholder.value.as_bytes());
                self.placeholders.insert(key, encode(&issued))?;
            }
            if !self.bodies.contains_key(digest.0.as_bytes())? {
                self.bodies.insert(digest.0.as_bytes(), new.body)?;
            }
            self.put_effect(&effect)?;
            self.run_effects
                .insert(index_key(new.run_id, seq), effect.id.0.as_bytes())?;
            effect
        };
        // Outside the lock so that concurrent stagers share one flush.
        self.flush()?;
        Ok(effect)
    }

    pub(crate) fn put_effect(&self, effect: &Effect) -> Result<()> {
        self.effects
            .insert(effect.id.0.as_bytes(), encode(effect))?;
        Ok(())
    }

    /// The effect with this id, if any.
    pub fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        match self.effects.get(id.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(id.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    pub(crate) fn must_effect(&self, id: &EffectId) -> Result<Effect> {
        self.effect(id)?.ok_or_else(|| LedgerError::NotFound {
            kind: "effect",
            id: id.0.clone(),
        })
    }

    /// A run's effects in staging order.
    ///
    /// Errors: [`LedgerError::NotFound`] for an unknown run.
    pub fn effects(&self, run: &RunId) -> Result<Vec<Effect>> {
        self.must_run(run)?;
        self.effects_unlocked(run)
    }

    pub(crate) fn effects_unlocked(&self, run: &RunId) -> Result<Vec<Effect>> {
        let mut out = Vec::new();
        for item in self.run_effects.scan_prefix(run_prefix(run)) {
            let (_, id) = item?;
            let id = EffectId(String::from_utf8_lossy(&id).into_owned());
            if let Some(effect) = self.effect(&id)? {
                out.push(effect);
            }
        }
        Ok(out)
    }

    /// A stored body by digest.
    pub fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ok(self.bodies.get(digest.0.as_bytes())?.map(|b| b.to_vec()))
    }

    /// Records a reviewer's verdict. Allowed while the effect is pending (`staged`,
    /// `approved`, `rejected`) and its run is open or sealed. Flushed.
    ///
    /// Errors: [`Refused::EffectTransition`] or [`Refused::RunTransition`].
    pub fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        let _guard = self.lock();
        let mut effect = self.must_effect(id)?;
        let run = self.must_run(&effect.run_id)?;
        let to = match verdict {
            Verdict::Approve => EffectState::Approved,
            Verdict::Reject => EffectState::Rejected,
        };
        if !matches!(run.state, RunState::Open | RunState::Sealed) {
            return Err(Refused::RunTransition {
                run: run.id,
                state: run.state,
                action: if verdict == Verdict::Approve {
                    "changed by approving an effect"
                } else {
                    "changed by rejecting an effect"
                },
            }
            .into());
        }
        if !effect.state.can_become(to) {
            return Err(Refused::EffectTransition {
                effect: effect.id,
                from: effect.state,
                to,
            }
            .into());
        }
        effect.state = to;
        effect.approval = match verdict {
            Verdict::Approve => Some(crate::approval::Approval::of(&effect, by)),
            Verdict::Reject => None,
        };
        effect.decisions.push(DecisionRecord {
            kind: if verdict == Verdict::Approve {
                "approve"
            } else {
                "reject"
            }
            .into(),
            by: by.into(),
            at_ms: now_ms(),
        });
        self.put_effect(&effect)?;
        self.flush()?;
        Ok(effect)
    }

    /// Marks an approved effect `releasing`, durably, just before it is sent.
    ///
    /// Errors: [`Refused::EffectTransition`] unless the effect is `approved`.
    pub fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        let _guard = self.lock();
        let mut effect = self.must_effect(id)?;
        if !effect.state.can_become(EffectState::Releasing) {
            return Err(Refused::EffectTransition {
                effect: effect.id,
                from: effect.state,
                to: EffectState::Releasing,
            }
            .into());
        }
        effect.state = EffectState::Releasing;
        effect.release = Some(ReleaseRecord {
            started_at_ms: now_ms(),
            finished_at_ms: None,
            status: None,
            headers: Vec::new(),
            body_digest: None,
            body_len: 0,
            error: None,
        });
        self.put_effect(&effect)?;
        self.flush()?;
        Ok(effect)
    }

    /// Records the outcome of a release: `released` when `outcome.error` is `None`, else
    /// `failed`. The captured response body is stored by digest; resolved placeholders get
    /// their real values. Flushed.
    pub fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        let ReleaseOutcome {
            status,
            headers,
            body,
            body_len,
            error,
            resolved,
        } = outcome;
        let _guard = self.lock();
        let mut effect = self.must_effect(id)?;
        let to = if error.is_none() {
            EffectState::Released
        } else {
            EffectState::Failed
        };
        if !effect.state.can_become(to) {
            return Err(Refused::EffectTransition {
                effect: effect.id,
                from: effect.state,
                to,
            }
            .into());
        }
        let digest = Digest::sha256_of(body);
        if !self.bodies.contains_key(digest.0.as_bytes())? {
            self.bodies.insert(digest.0.as_bytes(), body)?;
        }
        let release = effect.release.get_or_insert(ReleaseRecord {
            started_at_ms: now_ms(),
            finished_at_ms: None,
            status: None,
            headers: Vec::new(),
            body_digest: None,
            body_len: 0,
            error: None,
        });
        release.finished_at_ms = Some(now_ms());
        release.status = status;
        release.headers = headers;
        release.body_digest = Some(digest);
        release.body_len = body_len;
        release.error = error.clone();
        effect.state = to;
        effect.state_reason = error;
        for (value, real) in resolved {
            if let Some(placeholder) = effect.placeholders.iter_mut().find(|p| p.value == value) {
                placeholder.real = real;
            }
        }
        self.put_effect(&effect)?;
        self.flush()?;
        Ok(effect)
    }

    /// Ends an approved effect without sending it: `skipped` (a dependency was not
    /// released) or `failed` (it could not be prepared, e.g. a placeholder has no real
    /// value). Flushed.
    pub fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        let _guard = self.lock();
        let mut effect = self.must_effect(id)?;
        if !matches!(to, EffectState::Skipped | EffectState::Failed) || !effect.state.can_become(to)
        {
            return Err(Refused::EffectTransition {
                effect: effect.id,
                from: effect.state,
                to,
            }
            .into());
        }
        effect.state = to;
        effect.state_reason = Some(reason.to_owned());
        self.put_effect(&effect)?;
        self.flush()?;
        Ok(effect)
    }

    /// Recovery after a restart: every effect left `releasing` becomes `unknown` (it may or
    /// may not have reached its origin; it is never re-sent silently). Returns them. Flushed.
    pub fn recover(&self) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let mut changed = Vec::new();
        for item in self.effects.iter() {
            let (key, value) = item?;
            let mut effect: Effect = decode(&key, &value)?;
            if effect.state == EffectState::Releasing {
                effect.state = EffectState::Unknown;
                effect.state_reason = Some(
                    "airlock stopped while releasing this effect; it may or may not have reached the origin"
                        .into(),
                );
                self.put_effect(&effect)?;
                changed.push(effect);
            }
        }
        self.flush()?;
        Ok(changed)
    }
}
