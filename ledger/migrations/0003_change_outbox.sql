-- airlock's PostgreSQL ledger, schema version 3 (ledger/src/postgres/notify.rs): change
-- notifications as rows of an outbox instead of pg_notify payloads.
--
-- A transaction that calls pg_notify takes a database-wide lock at commit and holds it
-- through its WAL flush, so every durable write of every instance committed one at a time
-- (no group commit): about 1,300 staged effects/s however many clients. A write now
-- inserts its changes here, in its own transaction; a payload-less NOTIFY sent afterwards,
-- without waiting for a flush, wakes the listeners, which read the rows after the newest
-- id they have seen (and the ids they saw skipped, which commit out of order).

-- One row per committed write that changed something: the writing store's origin (a ULID
-- per open store), and its changes as `|`-separated tokens (`r:RUN`, `x:RUN`, `p:RUN`,
-- `e:RUN:EFFECT`, `w:RUN`). Rows older than a few minutes are pruned by the listeners.
CREATE TABLE changes (
    id bigserial PRIMARY KEY,
    origin text COLLATE "C" NOT NULL,
    payload text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Rows are appended in time order: a BRIN index finds the old ones to prune.
CREATE INDEX changes_at ON changes USING brin (at);
