-- Keyed concurrency (docs: operations.md "Flow control"; dsl.md
-- "Flow-control keys").
--
-- A stage with `concurrency: {key, max}` binds its key at release
-- (run_stages.concurrency_key, concurrency_max); at most max attempts of
-- its queue and tenant with that key run at once.  The claim is the gate
-- (src/pg/concurrency.c; the decisions: src/core/flow/concurrency.c): it
-- locks each key its candidates name, counts the key's attempts in flight
-- and holds the candidates that do not fit -- they stay queued with
-- held_until 'infinity', out of the ready index, so no claim walks over
-- them.  The transaction that ends an attempt of the key (completed,
-- failed, retried later, timed out, cancelled) makes that many held
-- attempts ready again; when it cannot take the key's lock at once, it
-- leaves the key to the background worker's next round
-- (wfe.concurrency_recheck), which waits for it.

COMMENT ON COLUMN wfe.run_stages.concurrency_key IS
'The key bound at release for a stage with concurrency: {key, max} (a key over 128 bytes as its sha256 digest); NULL: none.';
COMMENT ON COLUMN wfe.run_stages.concurrency_max IS
'The stage''s concurrency.max: at most this many attempts of its queue, tenant and key run at once.';
GRANT SELECT (concurrency_key, concurrency_max) ON wfe.run_stages TO wfe_reader, wfe_operator;

-- A key's attempts in flight (the claim's count), and its queued ones not
-- held (the release's count): both bounded by max (LIMIT), whatever the backlog.
CREATE INDEX run_stages_keyed ON wfe.run_stages (queue, state, tenant, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND held_until IS NULL
      AND state IN ('queued', 'dispatched', 'running');
-- A key's held attempts, next first (the release).
CREATE INDEX run_stages_key_held ON wfe.run_stages (queue, tenant, concurrency_key, priority DESC, ready_at)
    WHERE concurrency_key IS NOT NULL AND state = 'queued' AND held_until = 'infinity';

-- Keys whose lock an ending attempt could not take at once: the next
-- worker round releases what fits (wfe._recheck_concurrency).  Key values
-- come from runs' data: no role reads this table.
CREATE TABLE wfe.concurrency_recheck (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text NOT NULL,
    tenant text NOT NULL,
    key    text NOT NULL,
    max    int NOT NULL,
    at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.concurrency_recheck IS
'A key of keyed concurrency whose lock an ending attempt could only try, and missed: the next worker round releases its held attempts that fit.';
REVOKE ALL ON wfe.concurrency_recheck FROM PUBLIC;

CREATE FUNCTION wfe._recheck_concurrency()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_recheck_concurrency' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._recheck_concurrency() IS
'Releases the held attempts that fit of the keys in wfe.concurrency_recheck (emptying it), waiting for each key''s lock in order; returns how many keys it rechecked.';
REVOKE ALL ON FUNCTION wfe._recheck_concurrency() FROM PUBLIC;
