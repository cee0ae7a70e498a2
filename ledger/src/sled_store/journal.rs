//! The journal on sled: reads and denials.

use crate::model::{Read, RunId};
use crate::Result;

use super::{decode, encode, index_key, read_log_result, run_prefix, Ledger, OrStorage as _};
use crate::denials::{Denial, DENIALS_KEPT_PER_RUN};
use crate::LedgerError;

impl Ledger {
    // ----- reads ------------------------------------------------------------------------

    /// Journals a read ([`Ledger::journal_reads`] with one).
    pub fn journal_read(&self, read: Read) -> Result<Read> {
        self.journal_reads(vec![read])?
            .pop()
            .ok_or_else(|| LedgerError::storage("the read log returned no read"))
    }

    /// Journals several reads at once and returns them, in the order given, with their
    /// sequence numbers. The reads of one run get consecutive numbers and are appended to
    /// the run's read log as one record (`sled_store/read_log.rs`): one `write(2)` per
    /// run and batch, outside sled. Not flushed on its own (reads are lineage, not
    /// promises to a client): a killed process loses none, and the next durable write's
    /// flush makes them durable too.
    ///
    /// Errors: [`LedgerError::Storage`] with the I/O error of the read log.
    pub fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        // Group by run (remembering each read's place), keeping each run's reads in order.
        let count = reads.len();
        let mut groups: Vec<(RunId, Vec<usize>, Vec<Read>)> = Vec::new();
        for (place, read) in reads.into_iter().enumerate() {
            match groups.iter_mut().find(|(run, _, _)| *run == read.run_id) {
                Some((_, places, group)) => {
                    places.push(place);
                    group.push(read);
                }
                None => groups.push((read.run_id.clone(), vec![place], vec![read])),
            }
        }
        let mut out: Vec<Option<Read>> = (0..count).map(|_| None).collect();
        for (run, places, group) in groups {
            let group = self.read_log.append_reads(&run, group).or_storage()?;
            for (place, read) in places.into_iter().zip(group) {
                out[place] = Some(read);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// A run's reads in order: those a data directory from before the read log holds in
    /// its `reads` tree, then the read log's.
    ///
    /// Errors: [`LedgerError::Storage`] for an I/O fault, [`LedgerError::Corrupt`] for a
    /// damaged read log record or an old record that does not parse.
    pub fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        let mut out = Vec::new();
        for item in self.reads.scan_prefix(run_prefix(run)) {
            let (key, value) = item.or_storage()?;
            // A record is one read, or a batch of consecutive reads (a JSON array).
            if value.first() == Some(&b'[') {
                out.extend(decode::<Vec<Read>>(&key, &value)?);
            } else {
                out.push(decode(&key, &value)?);
            }
        }
        out.extend(read_log_result(run, self.read_log.reads(run))?);
        Ok(out)
    }

    /// How many reads `run` has journaled.
    ///
    /// Errors: as [`Ledger::reads`].
    pub(super) fn read_count(&self, run: &RunId) -> Result<u64> {
        let mut old = 0u64;
        for item in self.reads.scan_prefix(run_prefix(run)) {
            let (key, value) = item.or_storage()?;
            old += if value.first() == Some(&b'[') {
                decode::<Vec<serde::de::IgnoredAny>>(&key, &value)?.len() as u64
            } else {
                1
            };
        }
        Ok(old + read_log_result(run, self.read_log.read_count(run))?)
    }
}

impl Ledger {
    /// Journals a denial (not flushed on its own, like reads). Returns its sequence number;
    /// past [`DENIALS_KEPT_PER_RUN`] the number still counts but nothing is stored.
    pub fn journal_denial(&self, mut denial: Denial) -> Result<u64> {
        denial.seq = self.next_seq("denials", &denial.run_id)?;
        if denial.seq <= DENIALS_KEPT_PER_RUN {
            self.denials
                .insert(index_key(&denial.run_id, denial.seq), encode(&denial))
                .or_storage()?;
        }
        Ok(denial.seq)
    }

    /// A run's stored denials in order.
    pub fn denials(&self, run: &RunId) -> Result<Vec<Denial>> {
        self.denials
            .scan_prefix(run_prefix(run))
            .map(|item| {
                let (key, value) = item.or_storage()?;
                decode(&key, &value)
            })
            .collect()
    }
}
