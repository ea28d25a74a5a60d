-- Run-time admission limits per tenant (docs: operations.md "Backpressure").
--
-- Queue limits live on wfe.queues (max_in_flight, paused); tenant limits
-- live here.  A tenant with no row is unlimited.

CREATE TABLE wfe.tenant_limits (
    tenant             text PRIMARY KEY
                       CONSTRAINT tenant_limits_tenant CHECK (tenant ~ '^[A-Za-z0-9_.-]{1,63}$'),
    max_runs_in_flight int CONSTRAINT tenant_limits_runs CHECK (max_runs_in_flight > 0),
    max_tasks_in_flight int CONSTRAINT tenant_limits_tasks CHECK (max_tasks_in_flight > 0),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    updated_by         text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE wfe.tenant_limits IS
'Per-tenant limits: runs in flight (refused at submit, 53400) and tasks in flight (held queued at release).  NULL: unlimited.';
-- settings, like wfe.queues: pg_dump keeps them (68_dump.sql)
SELECT pg_catalog.pg_extension_config_dump('wfe.tenant_limits', '');

CREATE FUNCTION wfe.configure_tenant(tenant text, max_runs_in_flight int DEFAULT NULL,
                                     max_tasks_in_flight int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF configure_tenant.tenant !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'tenant "%" is not valid', configure_tenant.tenant
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
    IF configure_tenant.max_runs_in_flight < 1 OR configure_tenant.max_tasks_in_flight < 1 THEN
        RAISE EXCEPTION 'max_runs_in_flight and max_tasks_in_flight must be positive or NULL (unlimited)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.tenant_limits AS t (tenant, max_runs_in_flight, max_tasks_in_flight)
    VALUES (configure_tenant.tenant, configure_tenant.max_runs_in_flight, configure_tenant.max_tasks_in_flight)
    ON CONFLICT (tenant) DO UPDATE
       SET max_runs_in_flight = excluded.max_runs_in_flight,
           max_tasks_in_flight = excluded.max_tasks_in_flight,
           updated_at = now(), updated_by = session_user;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight; NULL is unlimited.';

-- A broker queue's max_in_flight, at the dispatch: a task over the limit
-- stays queued without a message, and is dispatched when a task of the
-- queue ends (wfe._release_held, called by the engine), highest priority
-- first.  In flight: dispatched or running, or queued with a dispatch
-- message of its current fence still to publish.  Both take a transaction
-- advisory lock per queue, so two releases cannot both take the last slot;
-- the count is a statement of its own after it.  (Not the wfe.queues row:
-- configure_queue holds it while it re-dispatches through the engine, which
-- holds run locks; the advisory lock is always taken last.)
CREATE FUNCTION wfe._broker_in_flight(p_queue text)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT count(*)::int FROM wfe.run_stages AS st
     WHERE st.queue = p_queue
       AND (st.state IN ('dispatched', 'running')
            OR (st.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                               AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
END;
COMMENT ON FUNCTION wfe._broker_in_flight(text) IS
'Tasks of a broker queue in flight: dispatched, running, or queued with an unpublished dispatch of their current fence.';

CREATE FUNCTION wfe._broker_admit(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_limit int;
BEGIN
    SELECT q.max_in_flight INTO v_limit FROM wfe.queues AS q
     WHERE q.queue = p_queue AND q.max_in_flight IS NOT NULL;
    IF v_limit IS NULL THEN
        RETURN true;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_in_flight'), hashtext(p_queue));
    RETURN wfe._broker_in_flight(p_queue) < v_limit;
END
$$;
COMMENT ON FUNCTION wfe._broker_admit(text) IS
'May one more task of this broker queue be dispatched now (max_in_flight)?  Takes the queue''s advisory lock when it is limited.';

CREATE FUNCTION wfe._release_held(p_queue text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_limit int;
    v_room  int;
    c       record;
    n       int := 0;
BEGIN
    SELECT q.max_in_flight INTO v_limit FROM wfe.queues AS q
     WHERE q.queue = p_queue AND q.delivery = 'broker' AND NOT q.paused AND q.max_in_flight IS NOT NULL;
    IF v_limit IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_in_flight'), hashtext(p_queue));
    v_room := v_limit - wfe._broker_in_flight(p_queue);
    IF v_room <= 0 THEN
        RETURN 0;
    END IF;
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.queue = p_queue AND st.state = 'queued' AND st.handler IS NULL
                AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                 WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                                   AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')
              ORDER BY st.priority DESC, st.ready_at
              LIMIT v_room
    LOOP
        PERFORM wfe._dispatch(r, s) FROM wfe.runs AS r, wfe.run_stages AS s
          WHERE r.run_id = c.run_id AND s.run_id = c.run_id AND s.stage = c.stage;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._release_held(text) IS
'Room in a limited broker queue: dispatches its held tasks (queued, no message to publish), highest priority then oldest, up to max_in_flight.';
