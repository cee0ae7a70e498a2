-- airlock's PostgreSQL ledger, schema version 2 (ledger/src/postgres/leases.rs,
-- ledger/src/postgres/retention.rs): release leases with fencing tokens, and which runs
-- reference each body, so that pruning a run removes the bodies no other run needs.

-- One row per run ever leased (crate::lease): the holder, the fencing token (counts up per
-- run, never reused), and the expiry by the database's clock in ms since the Unix epoch.
CREATE TABLE release_leases (
    run_id text COLLATE "C" PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);

-- Which runs reference a body (an effect's request body, its releases' response bodies):
-- kept by a trigger on every effect write, so no writer can forget it.
CREATE TABLE body_refs (
    digest text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (digest, run_id)
);
CREATE INDEX body_refs_run ON body_refs (run_id);

CREATE FUNCTION airlock_effect_body_refs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO body_refs (digest, run_id)
    SELECT d, NEW.run_id FROM (
        SELECT NEW.record->>'body_digest' AS d
        UNION SELECT NEW.record->'release'->>'body_digest'
        UNION SELECT r->>'body_digest'
          FROM json_array_elements(CASE WHEN json_typeof(NEW.record->'earlier_releases') = 'array'
                                        THEN NEW.record->'earlier_releases' ELSE '[]'::json END) AS r
    ) AS digests
    WHERE d IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END;
$$;

CREATE TRIGGER effects_body_refs AFTER INSERT OR UPDATE ON effects
    FOR EACH ROW EXECUTE FUNCTION airlock_effect_body_refs();

-- Databases of schema version 1: the references of the effects already stored.
INSERT INTO body_refs (digest, run_id)
SELECT d, run_id FROM (
    SELECT run_id, record->>'body_digest' AS d FROM effects
    UNION SELECT run_id, record->'release'->>'body_digest' FROM effects
    UNION SELECT e.run_id, r->>'body_digest'
      FROM effects e,
           json_array_elements(CASE WHEN json_typeof(e.record->'earlier_releases') = 'array'
                                    THEN e.record->'earlier_releases' ELSE '[]'::json END) AS r
) AS digests
WHERE d IS NOT NULL
ON CONFLICT DO NOTHING;
