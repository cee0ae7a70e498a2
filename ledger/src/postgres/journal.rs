//! [`JournalStore`] and [`LineageStore`] on PostgreSQL: reads, denials and analyses,
//! numbered by the per-run counters and committed without waiting for the WAL flush
//! (journal methods are not durable on their own; the next durable commit carries them).

use super::pool::Tx;

use super::records::{big, bump, fault, json, parse, Counter};
use super::PgStore;
use crate::denials::{Denial, DENIALS_KEPT_PER_RUN};
use crate::lineage::{EffectLineage, ReadContent};
use crate::model::{EffectId, IssuedPlaceholder, Read, RunId};
use crate::store::{JournalStore, LineageStore};
use crate::Result;

/// Numbers and inserts `reads` (in order; one run's reads get consecutive numbers).
fn insert_reads(tx: &mut Tx<'_>, reads: &[Read]) -> Result<Vec<Read>> {
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        let mut read = read.clone();
        read.seq = bump(tx, &read.run_id, Counter::Reads, 1)?;
        tx.execute(
            "INSERT INTO reads (run_id, seq, record) VALUES ($1, $2, $3::text::json)",
            &[&read.run_id.0, &big(read.seq), &json(&read)?],
        )
        .map_err(fault)?;
        out.push(read);
    }
    Ok(out)
}

/// The records of a `(run_id, seq, record)` table for `run`, in sequence order.
fn of_run<T: serde::de::DeserializeOwned>(
    tx: &mut Tx<'_>,
    sql: &'static str,
    run: &RunId,
) -> Result<Vec<T>> {
    let rows = tx.query(sql, &[&run.0]).map_err(fault)?;
    rows.iter().map(|row| parse(&run.0, row.get(0))).collect()
}

impl JournalStore for PgStore {
    fn journal_read(&self, read: Read) -> Result<Read> {
        let key = read.run_id.0.clone();
        let mut reads = self.write(key, true, move |tx| {
            Ok((insert_reads(tx, std::slice::from_ref(&read))?, Vec::new()))
        })?;
        reads
            .pop()
            .ok_or_else(|| crate::LedgerError::storage("a journaled read went missing"))
    }

    fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        if reads.is_empty() {
            return Ok(Vec::new());
        }
        let key = reads[0].run_id.0.clone();
        self.write(key, true, move |tx| {
            Ok((insert_reads(tx, &reads)?, Vec::new()))
        })
    }

    fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        let run = run.clone();
        self.read(move |tx| {
            of_run(
                tx,
                "SELECT record::text FROM reads WHERE run_id = $1 ORDER BY seq",
                &run,
            )
        })
    }

    fn journal_denial(&self, denial: Denial) -> Result<u64> {
        let key = denial.run_id.0.clone();
        self.write(key, true, move |tx| {
            let mut denial = denial.clone();
            denial.seq = bump(tx, &denial.run_id, Counter::Denials, 1)?;
            if denial.seq <= DENIALS_KEPT_PER_RUN {
                tx.execute(
                    "INSERT INTO denials (run_id, seq, record) VALUES ($1, $2, $3::text::json)",
                    &[&denial.run_id.0, &big(denial.seq), &json(&denial)?],
                )
                .map_err(fault)?;
            }
            Ok((denial.seq, Vec::new()))
        })
    }

    fn denials(&self, run: &RunId) -> Result<Vec<Denial>> {
        let run = run.clone();
        self.read(move |tx| {
            of_run(
                tx,
                "SELECT record::text FROM denials WHERE run_id = $1 ORDER BY seq",
                &run,
            )
        })
    }
}

impl LineageStore for PgStore {
    fn placeholders(&self, run: &RunId) -> Result<Vec<IssuedPlaceholder>> {
        let run = run.clone();
        self.read(move |tx| {
            of_run(
                tx,
                "SELECT record::text FROM placeholders WHERE run_id = $1 ORDER BY value",
                &run,
            )
        })
    }

    /// Other processes issue placeholders in the same database.
    fn placeholders_shared(&self) -> bool {
        true
    }

    fn placeholder_count(&self, run: &RunId) -> Result<Option<u64>> {
        self.count_placeholders(run).map(Some)
    }

    fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        let (run, record) = (run.clone(), json(content)?);
        let seq = big(content.seq);
        // u64 fingerprints keep their bits in bigint.
        let prints: Vec<i64> = fingerprints.iter().map(|&f| f as i64).collect();
        self.write(run.0.clone(), true, move |tx| {
            tx.execute(
                "INSERT INTO read_contents (run_id, seq, record, fingerprints)
                 VALUES ($1, $2, $3::text::json, $4)
                 ON CONFLICT (run_id, seq) DO UPDATE
                 SET record = EXCLUDED.record, fingerprints = EXCLUDED.fingerprints",
                &[&run.0, &seq, &record, &prints],
            )
            .map_err(fault)?;
            Ok(((), Vec::new()))
        })
    }

    fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        let run = run.clone();
        self.read(move |tx| {
            let rows = tx
                .query(
                    "SELECT record::text, fingerprints FROM read_contents
                     WHERE run_id = $1 ORDER BY seq",
                    &[&run.0],
                )
                .map_err(fault)?;
            rows.iter()
                .map(|row| {
                    let content: ReadContent = parse(&run.0, row.get(0))?;
                    let prints: Vec<i64> = row.get(1);
                    Ok((content, prints.into_iter().map(|f| f as u64).collect()))
                })
                .collect()
        })
    }

    fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        let (effect, record) = (effect.clone(), json(lineage)?);
        self.write(effect.0.clone(), true, move |tx| {
            tx.execute(
                "INSERT INTO effect_lineage (effect_id, record) VALUES ($1, $2::text::json)
                 ON CONFLICT (effect_id) DO UPDATE SET record = EXCLUDED.record",
                &[&effect.0, &record],
            )
            .map_err(fault)?;
            Ok(((), Vec::new()))
        })
    }

    fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        let effect = effect.clone();
        self.read(move |tx| {
            let row = tx
                .query_opt(
                    "SELECT record::text FROM effect_lineage WHERE effect_id = $1",
                    &[&effect.0],
                )
                .map_err(fault)?;
            row.map(|row| parse(&effect.0, row.get(0))).transpose()
        })
    }
}
