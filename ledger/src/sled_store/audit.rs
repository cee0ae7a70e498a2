//! The audit log on sled ([`crate::AuditStore`]): tree `audit`, `seq` (big-endian u64) ->
//! entry, numbered under the write lock from the tree's last key, so numbers are
//! gap-free; no method removes a key (a prune leaves them).

use super::{decode, encode, Ledger, OrStorage as _};
use crate::audit::{AuditEntry, AuditPage, NewAuditEntry};
use crate::model::now_ms;
use crate::Result;

impl Ledger {
    /// [`crate::AuditStore::append_audit`] on sled. Durable.
    pub fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        let stored = {
            let _guard = self.lock();
            let last = match self.audit.last().or_storage()? {
                Some((key, _)) => seq_of(&key),
                None => 0,
            };
            let stored = entry.stored(last + 1, now_ms());
            self.audit
                .insert(stored.seq.to_be_bytes(), encode(&stored))
                .or_storage()?;
            stored
        };
        self.flush()?;
        Ok(stored)
    }

    /// [`crate::AuditStore::audit_page`] on sled: walks the tree from the cursor.
    pub fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>> {
        let limit = page.capped_limit();
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let iter: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> =
            match (page.after, page.newest_first) {
                (None, false) => Box::new(self.audit.iter()),
                (None, true) => Box::new(self.audit.iter().rev()),
                (Some(after), false) => {
                    Box::new(self.audit.range((after.saturating_add(1)).to_be_bytes()..))
                }
                (Some(after), true) => Box::new(self.audit.range(..after.to_be_bytes()).rev()),
            };
        for item in iter {
            let (key, bytes) = item.or_storage()?;
            let entry: AuditEntry = decode(&key, &bytes)?;
            if page.admits(&entry) {
                out.push(entry);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}

fn seq_of(key: &[u8]) -> u64 {
    key.try_into().map(u64::from_be_bytes).unwrap_or(0)
}
