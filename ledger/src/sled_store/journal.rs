//! The journal on sled: reads and denials.

use crate::model::{Read, RunId};
use crate::Result;

use super::{decode, encode, index_key, run_prefix, Ledger, OrStorage as _};
use crate::denials::{Denial, DENIALS_KEPT_PER_RUN};

impl Ledger {
    // ----- reads ------------------------------------------------------------------------

    /// Journals a read. Not flushed on its own (reads are lineage, not promises to a client);
    /// sled flushes within 200 ms, and every staging flush carries it too.
    pub fn journal_read(&self, mut read: Read) -> Result<Read> {
        read.seq = self.next_seq("reads", &read.run_id)?;
        self.reads
            .insert(index_key(&read.run_id, read.seq), encode(&read))
            .or_storage()?;
        Ok(read)
    }

    /// Journals several reads at once and returns them, in the order given, with their
    /// sequence numbers. The reads of one run get consecutive numbers and are stored as one record
    /// (one JSON array under the first one's key): a busy agent's reads then cost one
    /// counter update and one tree insert per batch instead of per read. Not flushed on
    /// its own, like [`Ledger::journal_read`].
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
        for (run, places, mut group) in groups {
            if group.len() == 1 {
                if let Some(read) = group.pop() {
                    out[places[0]] = Some(self.journal_read(read)?);
                }
                continue;
            }
            let last = self.next_seqs("reads", &run, group.len() as u64)?;
            let first = last + 1 - group.len() as u64;
            for (i, read) in group.iter_mut().enumerate() {
                read.seq = first + i as u64;
            }
            self.reads
                .insert(index_key(&run, first), encode(&group))
                .or_storage()?;
            for (place, read) in places.into_iter().zip(group) {
                out[place] = Some(read);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// A run's reads in order.
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
        Ok(out)
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
