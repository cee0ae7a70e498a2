//! [`AuditStore`] on PostgreSQL: table `audit_log` (migration 0004), one row per entry,
//! numbered under a transaction-scoped advisory lock so that every instance appends in
//! one gap-free order; the rows are never updated or deleted.

use super::records::{big, count, fault, json, parse};
use super::PgStore;
use crate::audit::{AuditEntry, AuditPage, NewAuditEntry};
use crate::store::AuditStore;
use crate::Result;

/// The advisory lock key that serializes audit appends: "audit" in ASCII, as a number.
const AUDIT_LOCK: i64 = 0x0061_7564_6974;

impl AuditStore for PgStore {
    fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        self.write(String::from("audit"), false, move |tx| {
            tx.query("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK])
                .map_err(fault)?;
            let row = tx
                .query_one(
                    "SELECT COALESCE(max(seq), 0),
                            (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                     FROM audit_log",
                    &[],
                )
                .map_err(fault)?;
            let stored = entry.clone().stored(count(row.get(0)) + 1, count(row.get(1)));
            tx.execute(
                "INSERT INTO audit_log (seq, at_ms, run_id, record) VALUES ($1, $2, $3, $4::text::json)",
                &[
                    &big(stored.seq),
                    &big(stored.at_ms),
                    &stored.run.as_ref().map(|r| r.0.clone()),
                    &json(&stored)?,
                ],
            )
            .map_err(fault)?;
            Ok((stored, Vec::new()))
        })
    }

    fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>> {
        let page = page.clone();
        self.read(move |tx| {
            let limit = big(page.capped_limit() as u64);
            let after = page.after.map(big);
            let run = page.run.as_ref().map(|r| r.0.clone());
            let sql = if page.newest_first {
                "SELECT seq, record::text FROM audit_log
                 WHERE ($1::bigint IS NULL OR seq < $1) AND ($2::text IS NULL OR run_id = $2)
                 ORDER BY seq DESC LIMIT $3"
            } else {
                "SELECT seq, record::text FROM audit_log
                 WHERE ($1::bigint IS NULL OR seq > $1) AND ($2::text IS NULL OR run_id = $2)
                 ORDER BY seq LIMIT $3"
            };
            let rows = tx.query(sql, &[&after, &run, &limit]).map_err(fault)?;
            rows.iter()
                .map(|row| {
                    let seq: i64 = row.get(0);
                    let text: String = row.get(1);
                    parse(&format!("audit/{seq}"), &text)
                })
                .collect()
        })
    }
}
