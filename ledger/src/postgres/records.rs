//! SQL helpers over the schema (ledger/migrations/): reading and writing the JSON records
//! of runs and effects, locking in the one order every write uses (run row, then its
//! effects), and the per-run counters. Reusable by later methods (export, prune …).

use super::pool::Tx;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::{Digest, Effect, EffectId, Run, RunId};
use crate::{LedgerError, Result};

pub(super) use super::pool::fault;

/// The JSON text of a record.
pub(super) fn json<T: Serialize>(record: &T) -> Result<String> {
    serde_json::to_string(record).map_err(|source| LedgerError::Corrupt {
        key: String::from("(record being written)"),
        source,
    })
}

/// Parses the JSON text of the record stored under `key`.
pub(super) fn parse<T: DeserializeOwned>(key: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|source| LedgerError::Corrupt {
        key: key.to_owned(),
        source,
    })
}

/// A sequence number or count as PostgreSQL's bigint.
pub(super) fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A bigint read back as a count.
pub(super) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// [`LedgerError::NotFound`] for a run.
pub(super) fn no_run(id: &RunId) -> LedgerError {
    LedgerError::NotFound {
        kind: "run",
        id: id.0.clone(),
    }
}

/// [`LedgerError::NotFound`] for an effect.
pub(super) fn no_effect(id: &EffectId) -> LedgerError {
    LedgerError::NotFound {
        kind: "effect",
        id: id.0.clone(),
    }
}

/// The run `id`, if any; `lock` takes its row lock until the transaction ends.
pub(super) fn run(tx: &mut Tx<'_>, id: &RunId, lock: bool) -> Result<Option<Run>> {
    let sql = if lock {
        "SELECT record::text FROM runs WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT record::text FROM runs WHERE id = $1"
    };
    let row = tx.query_opt(sql, &[&id.0]).map_err(fault)?;
    row.map(|row| parse(&id.0, row.get(0))).transpose()
}

/// The run `id`, locked as [`locked_run`] does, and, when it is open, its next effect
/// sequence number taken from `run_counters` (locking that row until the transaction
/// ends): one statement, one round trip, for staging. `None` when the run is not open
/// (nothing is taken).
///
/// Errors: [`LedgerError::NotFound`] when there is no run `id`; storage faults.
pub(super) fn locked_run_and_seq(tx: &mut Tx<'_>, id: &RunId) -> Result<(Run, Option<u64>)> {
    let row = tx
        .query_opt(
            "WITH run AS (
                 SELECT record::text AS record, state FROM runs WHERE id = $1 FOR UPDATE
             ), counted AS (
                 INSERT INTO run_counters (run_id, effects)
                 SELECT $1, 1 FROM run WHERE run.state = 'open'
                 ON CONFLICT (run_id) DO UPDATE SET effects = run_counters.effects + 1
                 RETURNING effects
             )
             SELECT run.record, (SELECT effects FROM counted) FROM run",
            &[&id.0],
        )
        .map_err(fault)?
        .ok_or_else(|| no_run(id))?;
    let run = parse(&id.0, row.get(0))?;
    let seq: Option<i64> = row.get(1);
    Ok((run, seq.map(count)))
}

/// The run `id`, locked; [`LedgerError::NotFound`] when there is none.
pub(super) fn locked_run(tx: &mut Tx<'_>, id: &RunId) -> Result<Run> {
    run(tx, id, true)?.ok_or_else(|| no_run(id))
}

/// Inserts or replaces a run's record.
pub(super) fn put_run(tx: &mut Tx<'_>, run: &Run) -> Result<()> {
    tx.execute(
        "INSERT INTO runs (id, state, record) VALUES ($1, $2, $3::text::json)
         ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, record = EXCLUDED.record",
        &[&run.id.0, &run.state.as_str(), &json(run)?],
    )
    .map_err(fault)?;
    Ok(())
}

/// The run of effect `id` (unlocked; the caller locks the run next).
pub(super) fn run_of_effect(tx: &mut Tx<'_>, id: &EffectId) -> Result<RunId> {
    let row = tx
        .query_opt("SELECT run_id FROM effects WHERE id = $1", &[&id.0])
        .map_err(fault)?
        .ok_or_else(|| no_effect(id))?;
    Ok(RunId(row.get(0)))
}

/// The effect `id`, if any; `lock` takes its row lock.
pub(super) fn effect(tx: &mut Tx<'_>, id: &EffectId, lock: bool) -> Result<Option<Effect>> {
    let sql = if lock {
        "SELECT record::text FROM effects WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT record::text FROM effects WHERE id = $1"
    };
    let row = tx.query_opt(sql, &[&id.0]).map_err(fault)?;
    row.map(|row| parse(&id.0, row.get(0))).transpose()
}

/// A run's effects in staging order (the run need not exist); the caller holds the run's
/// lock when it means to change them.
pub(super) fn effects_of(tx: &mut Tx<'_>, run: &RunId) -> Result<Vec<Effect>> {
    let rows = tx
        .query(
            "SELECT id, record::text FROM effects WHERE run_id = $1 ORDER BY seq",
            &[&run.0],
        )
        .map_err(fault)?;
    rows.iter()
        .map(|row| parse(row.get(0), row.get(1)))
        .collect()
}

/// Stores a newly staged effect, its request body and its outbox row (the changes it
/// announces) in one statement, one round trip instead of three, and marks `tx` as
/// announced.
pub(super) fn insert_staged(
    tx: &mut Tx<'_>,
    effect: &Effect,
    digest: &Digest,
    body: &[u8],
    changes: &[crate::change::Change],
) -> Result<()> {
    let origin = tx.origin().to_owned();
    let payload = super::notify::payload(changes);
    tx.execute(
        "WITH body AS (
             INSERT INTO bodies (digest, body) VALUES ($6, $7) ON CONFLICT (digest) DO NOTHING
         ), change AS (
             INSERT INTO changes (origin, payload) SELECT $8, $9 WHERE $9 <> ''
         )
         INSERT INTO effects (id, run_id, seq, state, record) VALUES ($1, $2, $3, $4, $5::text::json)",
        &[
            &effect.id.0,
            &effect.run_id.0,
            &big(effect.seq),
            &effect.state.as_str(),
            &json(effect)?,
            &digest.0,
            &body,
            &origin,
            &payload,
        ],
    )
    .map_err(fault)?;
    tx.mark_announced();
    Ok(())
}

/// Replaces the records of existing effects.
pub(super) fn put_effects(tx: &mut Tx<'_>, effects: &[Effect]) -> Result<()> {
    for effect in effects {
        tx.execute(
            "UPDATE effects SET state = $2, record = $3::text::json WHERE id = $1",
            &[&effect.id.0, &effect.state.as_str(), &json(effect)?],
        )
        .map_err(fault)?;
    }
    Ok(())
}

/// Stores a body under its digest unless it is there already.
pub(super) fn put_body(tx: &mut Tx<'_>, digest: &Digest, body: &[u8]) -> Result<()> {
    tx.execute(
        "INSERT INTO bodies (digest, body) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING",
        &[&digest.0, &body],
    )
    .map_err(fault)?;
    Ok(())
}

/// Which per-run journal counter to bump (effects are numbered by
/// [`locked_run_and_seq`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Counter {
    Reads,
    Denials,
}

/// Adds `by` to a run's counter, locking its counter row until the transaction ends, and
/// returns the new value.
pub(super) fn bump(tx: &mut Tx<'_>, run: &RunId, counter: Counter, by: u64) -> Result<u64> {
    let sql = match counter {
        Counter::Reads => {
            "INSERT INTO run_counters (run_id, reads) VALUES ($1, $2)
             ON CONFLICT (run_id) DO UPDATE SET reads = run_counters.reads + EXCLUDED.reads
             RETURNING reads"
        }
        Counter::Denials => {
            "INSERT INTO run_counters (run_id, denials) VALUES ($1, $2)
             ON CONFLICT (run_id) DO UPDATE SET denials = run_counters.denials + EXCLUDED.denials
             RETURNING denials"
        }
    };
    let row = tx.query_one(sql, &[&run.0, &big(by)]).map_err(fault)?;
    Ok(count(row.get(0)))
}

/// The number of effects staged in `run` so far (0 when none).
pub(super) fn effects_count(tx: &mut Tx<'_>, run: &RunId) -> Result<u64> {
    let row = tx
        .query_opt(
            "SELECT effects FROM run_counters WHERE run_id = $1",
            &[&run.0],
        )
        .map_err(fault)?;
    Ok(row.map_or(0, |row| count(row.get(0))))
}
