-- airlock's PostgreSQL ledger, schema version 4 (ledger/src/postgres/audit.rs): the audit
-- log, append-only. Entries are numbered under a transaction-scoped advisory lock, so the
-- numbers are gap-free across every instance; no statement of airlock's deletes or updates
-- a row, and a run's prune leaves its entries (there is no reference to runs).
CREATE TABLE audit_log (
    seq bigint PRIMARY KEY,
    at_ms bigint NOT NULL,
    run_id text COLLATE "C",
    record json NOT NULL
);
CREATE INDEX audit_log_run ON audit_log (run_id, seq) WHERE run_id IS NOT NULL;
