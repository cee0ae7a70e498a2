//! [`EffectStore`] on PostgreSQL: staging under the run's row lock with its counters,
//! verdicts and release bookkeeping on the locked effect, recovery over the index of
//! `releasing` effects.

use super::pool::Tx;

use super::records::{
    self, big, count, fault, locked_run, no_effect, parse, put_body, put_effects, put_run,
    run_of_effect,
};
use super::PgStore;
use crate::change::Change;
use crate::model::{
    now_ms, Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder, NewEffect,
    Placeholder, PlaceholderSpec, Run, ValueKind,
};
use crate::rules;
use crate::store::EffectStore;
use crate::{LedgerError, ReleaseOutcome, Result, Settlement, Verdict};

impl PgStore {
    /// Locks effect `id`'s run and then the effect, lets `change` decide and change it,
    /// and stores it: one transaction.
    pub(super) fn update_effect(
        &self,
        id: &EffectId,
        mut change: impl FnMut(&mut Tx<'_>, &Run, &mut Effect) -> Result<()> + Send + 'static,
    ) -> Result<Effect> {
        let id = id.clone();
        self.write(id.0.clone(), false, move |tx| {
            let run_id = run_of_effect(tx, &id)?;
            let run = locked_run(tx, &run_id)?;
            let mut effect = records::effect(tx, &id, true)?.ok_or_else(|| no_effect(&id))?;
            change(tx, &run, &mut effect)?;
            put_effects(tx, std::slice::from_ref(&effect))?;
            let changes = vec![Change::of_effect(&effect)];
            Ok((effect, changes))
        })
    }

    /// Records a release's outcome ([`crate::rules::record_release`]) after `check` (a
    /// fence, for [`crate::LeaseStore::record_release_fenced`]) passed on the locked effect;
    /// the response body is stored by digest in the same transaction.
    pub(super) fn record_release_checked(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        mut check: impl FnMut(&mut Tx<'_>, &Effect) -> Result<()> + Send + 'static,
    ) -> Result<Effect> {
        let body = outcome.body.to_vec();
        let digest = Digest::sha256_of(&body);
        let (status, headers, body_len, error, resolved, delivery) = (
            outcome.status,
            outcome.headers,
            outcome.body_len,
            outcome.error,
            outcome.resolved,
            outcome.delivery,
        );
        self.update_effect(id, move |tx, _, effect| {
            check(tx, effect)?;
            let outcome = ReleaseOutcome {
                status,
                headers: headers.clone(),
                body: &body,
                body_len,
                error: error.clone(),
                resolved: resolved.clone(),
                delivery,
            };
            rules::record_release(effect, outcome, digest.clone(), now_ms())?;
            put_body(tx, &digest, &body)
        })
    }

    /// Locks effect `id`'s run, lets `change` decide over the run and its effects, and
    /// stores the changed effects and the run: what a retry and a settlement need.
    fn update_run_effects(
        &self,
        id: &EffectId,
        change: impl Fn(&mut Run, &[Effect]) -> std::result::Result<Vec<Effect>, crate::Refused>
            + Send
            + 'static,
    ) -> Result<Vec<Effect>> {
        let id = id.clone();
        self.write(id.0.clone(), false, move |tx| {
            let run_id = run_of_effect(tx, &id)?;
            let mut run = locked_run(tx, &run_id)?;
            let before = run.clone();
            let effects = records::effects_of(tx, &run_id)?;
            let changed = change(&mut run, &effects)?;
            put_effects(tx, &changed)?;
            let mut changes: Vec<Change> = changed.iter().map(Change::of_effect).collect();
            if run != before {
                put_run(tx, &run)?;
                changes.push(Change::RunChanged(run_id.clone()));
            }
            Ok((changed, changes))
        })
    }
}

/// Numbers the staged effect `seq` (taken with the run's lock) and allocates its
/// placeholders, under the run's lock.
fn number(tx: &mut Tx<'_>, effect: &mut Effect, specs: &[PlaceholderSpec], seq: u64) -> Result<()> {
    effect.seq = seq;
    let numbers = specs
        .iter()
        .filter(|spec| spec.kind == ValueKind::Number)
        .count() as u64;
    let (base, mut counted) = if numbers > 0 {
        let row = tx
            .query_one(
                "UPDATE run_counters
                 SET placeholder_base = COALESCE(placeholder_base, $2),
                     placeholders = placeholders + $3
                 WHERE run_id = $1
                 RETURNING placeholder_base, placeholders - $3",
                &[
                    &effect.run_id.0,
                    &big(rules::random_placeholder_base()),
                    &big(numbers),
                ],
            )
            .map_err(fault)?;
        (count(row.get(0)), count(row.get(1)))
    } else {
        (0, 0)
    };
    effect.placeholders = specs
        .iter()
        .map(|spec| {
            let (base, n) = match spec.kind {
                ValueKind::Number => {
                    counted += 1;
                    (base, counted)
                }
                ValueKind::String | ValueKind::SlackTs | ValueKind::Sha1 | ValueKind::Url => (0, 0),
            };
            Placeholder {
                value: rules::placeholder_value(spec.kind, base, n),
                kind: spec.kind,
                pointer: spec.pointer.clone(),
                real: None,
            }
        })
        .collect();
    Ok(())
}

impl EffectStore for PgStore {
    fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        let digest = Digest::sha256_of(new.body);
        let body = new.body.to_vec();
        let specs = new.placeholders.clone();
        // Built here (the id, the time, the notes); numbered in the transaction.
        let template = rules::new_effect(
            NewEffect {
                placeholders: Vec::new(),
                ..new
            },
            notes,
            EffectId::generate(),
            0,
            digest.clone(),
            Vec::new(),
            now_ms(),
        );
        self.write(template.run_id.0.clone(), false, move |tx| {
            let (run, seq) = records::locked_run_and_seq(tx, &template.run_id)?;
            rules::check_stage(&run)?;
            let seq =
                seq.ok_or_else(|| LedgerError::storage("an open run got no sequence number"))?;
            let mut effect = template.clone();
            number(tx, &mut effect, &specs, seq)?;
            let changes = Change::of_staged(&effect);
            records::insert_staged(tx, &effect, &digest, &body, &changes)?;
            for placeholder in &effect.placeholders {
                let issued = IssuedPlaceholder {
                    value: placeholder.value.clone(),
                    kind: placeholder.kind,
                    effect: effect.id.clone(),
                };
                tx.execute(
                    "INSERT INTO placeholders (run_id, value, effect_id, record)
                     VALUES ($1, $2, $3, $4::text::json)
                     ON CONFLICT (run_id, value) DO UPDATE
                     SET effect_id = EXCLUDED.effect_id, record = EXCLUDED.record",
                    &[
                        &effect.run_id.0,
                        &issued.value,
                        &effect.id.0,
                        &records::json(&issued)?,
                    ],
                )
                .map_err(fault)?;
            }
            Ok((effect, changes))
        })
    }

    fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        let id = id.clone();
        self.read(move |tx| records::effect(tx, &id, false))
    }

    fn effects(&self, run: &crate::RunId) -> Result<Vec<Effect>> {
        let run = run.clone();
        self.read(move |tx| {
            records::run(tx, &run, false)?.ok_or_else(|| records::no_run(&run))?;
            records::effects_of(tx, &run)
        })
    }

    fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        let digest = digest.clone();
        self.read(move |tx| {
            let row = tx
                .query_opt("SELECT body FROM bodies WHERE digest = $1", &[&digest.0])
                .map_err(fault)?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        let by = by.to_owned();
        self.update_effect(id, move |_, run, effect| {
            Ok(rules::decide_effect(effect, run, verdict, &by, now_ms())?)
        })
    }

    fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect> {
        let (by, flows) = (by.to_owned(), flows.to_vec());
        self.update_effect(id, move |_, run, effect| {
            Ok(rules::approve_explicitly(
                effect,
                run,
                &by,
                &flows,
                now_ms(),
            )?)
        })
    }

    fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        self.update_effect(id, |_, _, effect| {
            Ok(rules::mark_releasing(effect, now_ms())?)
        })
    }

    fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        self.record_release_checked(id, outcome, |_, _| Ok(()))
    }

    fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        let reason = reason.to_owned();
        self.update_effect(id, move |_, _, effect| {
            Ok(rules::settle_unsent(effect, to, &reason)?)
        })
    }

    fn recover(&self) -> Result<Vec<Effect>> {
        self.write(String::from("recover"), false, |tx| {
            let rows = tx
                .query(
                    // The partial index on `releasing` effects, not a scan; runs with a
                    // live release lease are another instance's to settle.
                    "SELECT e.id, e.record::text FROM effects e
                     WHERE e.state = 'releasing'
                       AND NOT EXISTS (
                           SELECT 1 FROM release_leases l
                           WHERE l.run_id = e.run_id
                             AND l.expires_at_ms
                                 > (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                     ORDER BY e.id FOR UPDATE OF e",
                    &[],
                )
                .map_err(fault)?;
            let mut changed = Vec::new();
            for row in &rows {
                let mut effect: Effect = parse(row.get(0), row.get(1))?;
                if rules::recover(&mut effect) {
                    changed.push(effect);
                }
            }
            put_effects(tx, &changed)?;
            let changes = changed.iter().map(Change::of_effect).collect();
            Ok((changed, changes))
        })
    }

    fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>> {
        let (target, by) = (id.clone(), by.to_owned());
        self.update_run_effects(id, move |run, effects| {
            rules::outcome::retry(run, effects, &target, &by, now_ms())
        })
    }

    fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>> {
        let (target, settlement, by) = (id.clone(), settlement.clone(), by.to_owned());
        self.update_run_effects(id, move |run, effects| {
            rules::outcome::settle(run, effects, &target, &settlement, &by, now_ms())
        })
    }
}
