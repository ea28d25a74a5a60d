-- Run-time admission limits per tenant (docs: operations.md "Backpressure").
--
-- Queue limits live on wfe.queues (max_in_flight, paused); tenant limits
-- live here.  A tenant with no row is unlimited.

CREATE TABLE wfe.tenant_limits (
    tenant             wfe.tenant_name PRIMARY KEY,
    max_runs_in_flight int CONSTRAINT tenant_limits_runs CHECK (max_runs_in_flight > 0),
    max_tasks_in_flight int CONSTRAINT tenant_limits_tasks CHECK (max_tasks_in_flight > 0),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    updated_by         text NOT NULL DEFAULT wfe._identity(),
    weight             int NOT NULL DEFAULT 1
                       CONSTRAINT tenant_limits_weight CHECK (weight BETWEEN 1 AND 10000)
);
COMMENT ON TABLE wfe.tenant_limits IS
'Per-tenant limits: runs in flight (refused at submit, 53400) and tasks in flight (held queued at the claim and the dispatch).  NULL: unlimited.';
COMMENT ON COLUMN wfe.tenant_limits.weight IS
'The tenant''s share on queues with fairness = ''tenant'': claims serve tenants with ready work in proportion to their weights.';
GRANT SELECT ON wfe.tenant_limits TO wfe_reader, wfe_operator;
-- settings, like wfe.queues: pg_dump keeps them (73_dump.sql)
SELECT pg_catalog.pg_extension_config_dump('wfe.tenant_limits', '');

CREATE FUNCTION wfe.configure_tenant(tenant text, max_runs_in_flight int DEFAULT NULL,
                                     max_tasks_in_flight int DEFAULT NULL, weight int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._check_tenant_name(configure_tenant.tenant);
    IF configure_tenant.max_runs_in_flight < 1 OR configure_tenant.max_tasks_in_flight < 1 THEN
        RAISE EXCEPTION 'max_runs_in_flight and max_tasks_in_flight must be positive or NULL (unlimited)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_tenant.weight NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'weight must be an integer between 1 and 10000, not %', configure_tenant.weight
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The tenant''s share on queues with fairness = ''tenant''; the default is 1, NULL keeps the tenant''s.';
    END IF;
    -- weight NULL: the tenant keeps its weight (1 when new)
    INSERT INTO wfe.tenant_limits AS t (tenant, max_runs_in_flight, max_tasks_in_flight, weight)
    VALUES (configure_tenant.tenant, configure_tenant.max_runs_in_flight, configure_tenant.max_tasks_in_flight,
            coalesce(configure_tenant.weight, 1))
    ON CONFLICT (tenant) DO UPDATE
       SET max_runs_in_flight = excluded.max_runs_in_flight,
           max_tasks_in_flight = excluded.max_tasks_in_flight,
           updated_at = now(), updated_by = wfe._identity(),
           weight = coalesce(configure_tenant.weight, t.weight);
    -- A raised or lifted task limit makes room now: the tenant's held broker
    -- tasks that fit are dispatched, and the pollers of the queues where it
    -- has queued tasks are woken.  A lowered one holds what comes next; the
    -- tasks in flight finish.
    PERFORM wfe._notify_ready(q) FROM wfe._release_held(NULL, configure_tenant.tenant) AS q;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears), NULL is unlimited; and its weight on fair queues (NULL keeps it).';
REVOKE ALL ON FUNCTION wfe.configure_tenant(text, int, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_tenant(text, int, int, int) TO wfe_admin;

-- Runs in flight: one more run of a tenant is admitted by wfe_admit_run
-- (src/pg/submit.c), for a submit and for an operator's reopening of a run.


-- Tasks in flight: max_in_flight of a queue, max_tasks_in_flight of a
-- tenant.  A task over a limit stays queued: a poll queue's claim takes no
-- more than the room, a broker release writes no dispatch message (held),
-- and when a task ends the engine dispatches the held ones that now fit.
-- The counts, the limits' locks, their order (tenants by name, then queues;
-- out of order a lock is only tried) and the release are C: src/pg/admission.c,
-- deciding with src/core/flow/admission.c.

-- Tenants and queues whose held tasks a failed try may have kept back.
CREATE TABLE wfe.admission_recheck (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text,
    tenant text,
    at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT admission_recheck_what CHECK (num_nonnulls(queue, tenant) = 1)
);
COMMENT ON TABLE wfe.admission_recheck IS
'A queue or tenant whose lock an admission could only try, and missed: the next worker round releases its held tasks (wfe._release_held).';

CREATE FUNCTION wfe._recheck_admission()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_recheck_admission' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._recheck_admission() IS
'Releases the held tasks of the queues and tenants in wfe.admission_recheck (emptying it); returns how many it rechecked.';
REVOKE ALL ON FUNCTION wfe._recheck_admission() FROM PUBLIC;

CREATE FUNCTION wfe._lock_tenant(p_tenant text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_lock_tenant_sql' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._lock_tenant(text) IS
'Takes a tenant''s max_tasks_in_flight lock, waiting only in lock order (tenants by name before any queue); out of order it only tries, and a miss is rechecked later.';
REVOKE ALL ON FUNCTION wfe._lock_tenant(text) FROM PUBLIC;

-- Room appeared: (p_queue NULL) the tenant's limit was raised or lifted,
-- or (p_tenant NULL) the queue's.  Dispatches the held broker tasks that
-- now fit both limits, highest priority first, then oldest; returns the
-- poll queues whose claimers should be woken.
CREATE FUNCTION wfe._release_held(p_queue text, p_tenant text)
RETURNS SETOF text AS 'MODULE_PATHNAME', 'wfe_release_held_sql' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._release_held(text, text) IS
'Room in a limited broker queue or for a limited tenant: dispatches the held tasks that fit both limits, highest priority then oldest; returns the poll queues to wake.';
REVOKE ALL ON FUNCTION wfe._release_held(text, text) FROM PUBLIC;
