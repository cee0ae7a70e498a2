-- airlock's PostgreSQL ledger, schema version 1 (ledger/src/postgres.rs).
-- Records are the serde JSON of the ledger's models (ledger/src/model.rs), in `json`
-- columns (kept as written; `jsonb` refuses the escape \u0000, which a record may hold),
-- beside the columns queries need. Identifiers and placeholder values sort bytewise (COLLATE "C"),
-- as the trait's "identifier order" and "value order" say. Tables of a run's own records
-- reference runs ON DELETE CASCADE; the journal (reads, denials, analyses) may precede its
-- run, so it carries run_id without a reference and a prune deletes it by run_id.

CREATE TABLE runs (
    id text COLLATE "C" PRIMARY KEY,
    state text NOT NULL,
    record json NOT NULL
);

-- Per-run counters (effects, reads, denials, number placeholders), bumped by an upsert
-- that locks the row until the transaction ends: gap-free numbers under concurrency.
-- Keyed by run id without a reference: reads and denials may be journaled for a run
-- this store never created.
CREATE TABLE run_counters (
    run_id text COLLATE "C" PRIMARY KEY,
    effects bigint NOT NULL DEFAULT 0,
    reads bigint NOT NULL DEFAULT 0,
    denials bigint NOT NULL DEFAULT 0,
    placeholders bigint NOT NULL DEFAULT 0,
    placeholder_base bigint
);

CREATE TABLE effects (
    id text COLLATE "C" PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    state text NOT NULL,
    record json NOT NULL,
    UNIQUE (run_id, seq)
);

-- Start-up recovery reads only the effects left releasing.
CREATE INDEX effects_releasing ON effects (id) WHERE state = 'releasing';

-- Bodies of effects and of release responses, by SHA-256 digest, shared across runs.
CREATE TABLE bodies (
    digest text COLLATE "C" PRIMARY KEY,
    body bytea NOT NULL
);

CREATE TABLE placeholders (
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    value text COLLATE "C" NOT NULL,
    effect_id text COLLATE "C" NOT NULL,
    record json NOT NULL,
    PRIMARY KEY (run_id, value)
);

CREATE TABLE reads (
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    record json NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE denials (
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    record json NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- A read's content analysis and its winnowed fingerprints (u64 stored as the same bits
-- in bigint, sorted as the caller gave them).
CREATE TABLE read_contents (
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    record json NOT NULL,
    fingerprints bigint[] NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE effect_lineage (
    effect_id text COLLATE "C" PRIMARY KEY,
    record json NOT NULL
);

CREATE TABLE workspaces (
    run_id text COLLATE "C" PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    record json NOT NULL
);
