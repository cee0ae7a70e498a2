//! The audit log in the in-memory model ([`crate::AuditStore`]): a vector in `seq` order
//! under the store's one mutex.

use super::MemoryStore;
use crate::audit::{AuditEntry, AuditPage, NewAuditEntry};
use crate::model::now_ms;
use crate::store::AuditStore;
use crate::Result;

impl AuditStore for MemoryStore {
    fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        self.write(|state| {
            let stored = entry.stored(state.audit.len() as u64 + 1, now_ms());
            state.audit.push(stored.clone());
            Ok((stored, Vec::new()))
        })
    }

    fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>> {
        let state = self.lock();
        let admitted = |e: &&AuditEntry| page.admits(e);
        let limit = page.capped_limit();
        Ok(if page.newest_first {
            state
                .audit
                .iter()
                .rev()
                .filter(admitted)
                .take(limit)
                .cloned()
                .collect()
        } else {
            state
                .audit
                .iter()
                .filter(admitted)
                .take(limit)
                .cloned()
                .collect()
        })
    }
}
