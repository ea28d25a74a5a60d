-- Rate limits: token buckets (docs: operations.md "Flow control").
--
-- A stage names a bucket (`rate_limit: NAME`, or `{name, key}` for one
-- bucket per bound key value); each attempt takes one token before it can
-- be claimed (src/pg/ratelimit.c; the arithmetic is src/core/flow/).  An
-- attempt that finds no token stays queued with held_until set, out of the
-- ready index, so claims never walk over it; the background worker's timer
-- clears held_until when its token is due (wfe._release_rate_held), and
-- the next claim takes it.

CREATE TABLE wfe.rate_limits (
    name       text PRIMARY KEY,
    per_second double precision NOT NULL CONSTRAINT rate_limits_rate CHECK (per_second > 0),
    burst      int NOT NULL CONSTRAINT rate_limits_burst CHECK (burst >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT wfe._identity()
);
COMMENT ON TABLE wfe.rate_limits IS
'Token buckets stages name with rate_limit: per_second tokens a second, at most burst at once.';
GRANT SELECT ON wfe.rate_limits TO wfe_reader, wfe_operator;
SELECT pg_catalog.pg_extension_config_dump('wfe.rate_limits', '');

-- The buckets' state, kept in shared memory under shared_preload_libraries
-- (src/bgw/ratebuckets.c: a restart refills them) and in this table
-- without it (each claim then locks its bucket's row until it commits).
-- The unkeyed bucket of a limit is (name, '', '') and
-- shared by all tenants; a keyed one is per tenant and key value, so one
-- tenant's keys never drain (or show) another's.  No role reads this table:
-- key values come from runs' data.
CREATE TABLE wfe.rate_buckets (
    name         text NOT NULL REFERENCES wfe.rate_limits ON DELETE CASCADE,
    tenant       text NOT NULL,
    key          text NOT NULL,
    tokens       double precision NOT NULL,
    at           timestamptz NOT NULL,
    held_through timestamptz,
    PRIMARY KEY (name, tenant, key)
);
COMMENT ON TABLE wfe.rate_buckets IS
'The state of each token bucket: tokens as of at, and the due of the last attempt held (held_through).  Keyed buckets are per tenant; readable by no wfe role.';
REVOKE ALL ON wfe.rate_buckets FROM PUBLIC;

CREATE FUNCTION wfe._rate_buckets_reset(p_name text, p_drop boolean)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_rate_buckets_reset' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._rate_buckets_reset(text, boolean) IS
'configure_rate_limit''s part in shared memory: the limit''s buckets forget their held horizon, or are dropped.';
REVOKE ALL ON FUNCTION wfe._rate_buckets_reset(text, boolean) FROM PUBLIC;

CREATE FUNCTION wfe._rate_buckets_count(p_name text, p_tenant text)
RETURNS int AS 'MODULE_PATHNAME', 'wfe_rate_buckets_count' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._rate_buckets_count(text, text) IS
'How many buckets of a rate limit shared memory holds (a tenant''s keyed ones and its overflow bucket; all with NULL); NULL without shared memory.';
REVOKE ALL ON FUNCTION wfe._rate_buckets_count(text, text) FROM PUBLIC;

CREATE FUNCTION wfe.configure_rate_limit(name text, per_second numeric, burst int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_burst int;
    v_queue text;
BEGIN
    IF configure_rate_limit.name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(configure_rate_limit.name, 'rate limit name');
    IF configure_rate_limit.name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
        RAISE EXCEPTION 'rate limit name "%" is not valid', configure_rate_limit.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use letters, digits, ".", "_" and "-", starting with a letter or digit.';
    END IF;
    IF configure_rate_limit.per_second IS NULL THEN
        -- dropped: its queued attempts wait until it is configured again
        PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, true);
        UPDATE wfe.run_stages AS st SET held_until = 'infinity'
         WHERE st.rate_limit = configure_rate_limit.name AND st.state = 'queued';
        DELETE FROM wfe.rate_limits AS l WHERE l.name = configure_rate_limit.name;
        RETURN;
    END IF;
    IF configure_rate_limit.per_second <= 0 THEN
        RAISE EXCEPTION 'per_second must be positive, not %', configure_rate_limit.per_second
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL drops the rate limit.';
    END IF;
    IF configure_rate_limit.burst < 1 THEN
        RAISE EXCEPTION 'burst must be at least 1, not %', configure_rate_limit.burst
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL is one second''s tokens (at least 1).';
    END IF;
    v_burst := coalesce(configure_rate_limit.burst, greatest(1, ceil(configure_rate_limit.per_second))::int);
    INSERT INTO wfe.rate_limits AS l (name, per_second, burst)
    VALUES (configure_rate_limit.name, configure_rate_limit.per_second, v_burst)
    ON CONFLICT (name) DO UPDATE
       SET per_second = excluded.per_second, burst = excluded.burst,
           updated_at = now(), updated_by = wfe._identity();
    -- a new bucket starts full; a changed one keeps its tokens, within the new burst
    INSERT INTO wfe.rate_buckets AS b (name, tenant, key, tokens, at)
    VALUES (configure_rate_limit.name, '', '', v_burst, now())
    ON CONFLICT (name, tenant, key) DO NOTHING;
    UPDATE wfe.rate_buckets AS b SET tokens = least(b.tokens, v_burst), held_through = NULL
     WHERE b.name = configure_rate_limit.name;
    PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, false);
    -- what waited for it (or for the old rate) is tried again now
    FOR v_queue IN WITH x AS (UPDATE wfe.run_stages AS st SET held_until = NULL
                               WHERE st.rate_limit = configure_rate_limit.name AND st.held_until IS NOT NULL
                               RETURNING st.queue)
                   SELECT DISTINCT x.queue FROM x
    LOOP
        PERFORM wfe._notify_ready(v_queue);
        -- a broker queue's are dispatched, through every gate, by the worker's next round (admission.c)
        INSERT INTO wfe.admission_recheck (queue)
        SELECT q.queue FROM wfe.queues AS q WHERE q.queue = v_queue AND q.delivery = 'broker' AND NOT q.paused;
        IF FOUND THEN
            PERFORM wfe._wake(now());
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe.configure_rate_limit(text, numeric, int) IS
'Creates or changes a token bucket: per_second tokens a second, at most burst (default one second''s, at least 1); per_second NULL drops it.';
REVOKE ALL ON FUNCTION wfe.configure_rate_limit(text, numeric, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_rate_limit(text, numeric, int) TO wfe_admin;

CREATE FUNCTION wfe._release_rate_held(p_max int)
RETURNS int AS 'MODULE_PATHNAME', 'wfe_release_rate_held' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._release_rate_held(int) IS
'Makes up to p_max attempts whose rate-limit token is due ready again, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
REVOKE ALL ON FUNCTION wfe._release_rate_held(int) FROM PUBLIC;

