-- The stage result cache (docs: dsl.md "Result cache").
--
-- One entry per key: the accepted, valid result of an attempt of a stage
-- with `cache:`, stored under the key of the stage's bound input, contract
-- and tenant (src/pg/cache.c computes it; the key material is
-- src/core/engine/cachekey.h), with an absolute expiry and the digest of the
-- result.  Only the engine writes entries (and wfe.cache_invalidate
-- removes them).  Read back at release, an entry is checked: expired is a
-- miss; a result that no longer matches result_digest is corrupt, one the
-- current output contract refuses is invalid -- both recorded as events,
-- then a miss.  The origin (run_id, stage, attempt) is kept, not
-- referenced: retention may remove the run while its result still serves.
CREATE TABLE wfe.cache_entries (
    key           text PRIMARY KEY
                  CONSTRAINT cache_entries_key CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    tenant        text NOT NULL,
    contract      text NOT NULL,
    result        jsonb NOT NULL,
    result_digest text NOT NULL,
    run_id        bigint NOT NULL,
    stage         text NOT NULL,
    attempt       int NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
COMMENT ON TABLE wfe.cache_entries IS
'The stage result cache: accepted results of stages with cache:, by key (sha256 of bound input, contract and tenant), with expiry, digest and origin.';
GRANT SELECT ON wfe.cache_entries TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.cache_entries.key IS
'sha256: and the hex SHA-256 of the key material (docs/dsl.md "Result cache")';
COMMENT ON COLUMN wfe.cache_entries.result_digest IS
'sha256: of the result''s canonical JSON, as stored; a read that finds otherwise records stage.cache_corrupt';
COMMENT ON COLUMN wfe.cache_entries.run_id IS 'Origin: the run whose attempt produced the result';
COMMENT ON COLUMN wfe.cache_entries.expires_at IS 'Absolute expiry (stored at now() + ttl_ms); expired entries are misses, and retention removes them';
CREATE INDEX cache_entries_expiry ON wfe.cache_entries (expires_at);
CREATE INDEX cache_entries_contract ON wfe.cache_entries (tenant, contract);
-- run-time state like the runs they came from: pg_dump keeps them (73_dump.sql)
SELECT pg_catalog.pg_extension_config_dump('wfe.cache_entries', '');

-- Remove entries by key, by contract or by tenant (at least one); the
-- caller's tenants bound what it may remove.
CREATE FUNCTION wfe.cache_invalidate(key text DEFAULT NULL, contract text DEFAULT NULL,
                                     tenant text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n bigint;
BEGIN
    IF key IS NULL AND contract IS NULL AND tenant IS NULL THEN
        RAISE EXCEPTION 'cache_invalidate needs a key, a contract or a tenant'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'wfe.cache_invalidate(tenant => ''t'') removes all of a tenant''s entries.';
    END IF;
    PERFORM wfe._admit_name(key, 'key');
    PERFORM wfe._admit_name(contract, 'contract');
    PERFORM wfe._admit_name(tenant, 'tenant');
    IF tenant IS NOT NULL AND NOT wfe._tenant_ok(tenant) THEN
        RAISE EXCEPTION 'role "%" does not act for tenant "%"', wfe._caller()::regrole, left(tenant, 80)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps roles to tenants with wfe.add_tenant_member(role, tenant).';
    END IF;
    DELETE FROM wfe.cache_entries AS e
     WHERE (key IS NULL OR e.key = key)
       AND (contract IS NULL OR e.contract = contract)
       AND (tenant IS NULL OR e.tenant = tenant)
       AND wfe._tenant_ok(e.tenant);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe.cache_invalidate(text, text, text) IS
'Removes result cache entries by key, contract and/or tenant (of the tenants the caller acts for); returns how many.';
REVOKE ALL ON FUNCTION wfe.cache_invalidate(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.cache_invalidate(text, text, text) TO wfe_operator;
