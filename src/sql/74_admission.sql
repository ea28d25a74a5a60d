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
-- tenant.  A task is in flight when it is dispatched or running, or queued
-- with a dispatch message of its current fence still to publish; stages of
-- in-database actions (handler) are not tasks.  A task over a limit stays
-- queued: a poll queue's claim_task takes no more than the room (claim.c),
-- a broker release writes no dispatch message (held), and when a task ends
-- the engine dispatches the held ones that now fit (wfe._release_held).
--
-- Each limit has a transaction lock (wfe._lock: the limit's name and the
-- queue or tenant; a lock no login can take, src/pg/locks.c), taken before the count, which is a statement of its own
-- after it, so two admissions cannot both take the last slot.  Lock order,
-- after the run locks and the wfe.queues row (configure_queue, a poll
-- claim): tenant locks in name order (C collation), then queue locks in name
-- order.  A transaction that decides several times (a step that ends one
-- task and releases the next, a tick round, a batch of callbacks) could be
-- asked for a lock out of that order: then it only tries it (wfe._lock_tenant,
-- wfe._lock_queue), so no two admissions ever wait for each other in a
-- circle.  A broker task a failed try kept held is not forgotten: the
-- tenant or queue goes into wfe.admission_recheck, and the background
-- worker's next round (or wfe.tick) releases what fits, in a transaction
-- that holds nothing yet.  The greatest tenant and queue a transaction has
-- locked are kept in two transaction-local settings (wfe_admission.tenant,
-- wfe_admission.queue).

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

-- Remember a missed try; the background worker is woken at commit.
CREATE FUNCTION wfe._recheck_later(p_queue text, p_tenant text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.admission_recheck (queue, tenant) VALUES (p_queue, p_tenant);
    SELECT wfe._wake(now());
END;
COMMENT ON FUNCTION wfe._recheck_later(text, text) IS
'Records a queue or tenant whose lock was busy out of order, for the next worker round, and wakes the worker at commit.';
REVOKE ALL ON FUNCTION wfe._recheck_later(text, text) FROM PUBLIC;

-- The worker round's first item: release what missed tries kept back.
CREATE FUNCTION wfe._recheck_admission()
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    n int := 0;
BEGIN
    FOR c IN WITH d AS (DELETE FROM wfe.admission_recheck RETURNING queue, tenant)
             SELECT x.queue, x.tenant FROM (SELECT DISTINCT d.queue, d.tenant FROM d) AS x
              ORDER BY x.tenant COLLATE "C", x.queue COLLATE "C"
    LOOP
        PERFORM wfe._notify_ready(q) FROM wfe._release_held(c.queue, c.tenant) AS q;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._recheck_admission() IS
'Releases the held tasks of the queues and tenants in wfe.admission_recheck (emptying it); returns how many it rechecked.';
REVOKE ALL ON FUNCTION wfe._recheck_admission() FROM PUBLIC;

-- Takes a tenant's task-limit lock: waits when that keeps the order, else only tries.
CREATE FUNCTION wfe._lock_tenant(p_tenant text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max text := coalesce(current_setting('wfe_admission.tenant', true), '');
BEGIN
    IF coalesce(current_setting('wfe_admission.queue', true), '') <> ''
       OR (v_max <> '' AND p_tenant COLLATE "C" <= v_max COLLATE "C") THEN
        -- out of order (or already held: a held lock is granted again at once)
        IF wfe._lock('wfe.max_tasks_in_flight', p_tenant, true) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(NULL, p_tenant);
        RETURN false;
    END IF;
    PERFORM wfe._lock('wfe.max_tasks_in_flight', p_tenant, false);
    PERFORM set_config('wfe_admission.tenant', p_tenant, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_tenant(text) IS
'Takes a tenant''s max_tasks_in_flight lock, waiting only in lock order (tenants by name before any queue); out of order it only tries, and a miss is rechecked later.';
REVOKE ALL ON FUNCTION wfe._lock_tenant(text) FROM PUBLIC;

-- Takes a limited broker queue's max_in_flight lock: waits when that keeps the order, else only tries.
CREATE FUNCTION wfe._lock_queue(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max text := coalesce(current_setting('wfe_admission.queue', true), '');
BEGIN
    IF v_max <> '' AND p_queue COLLATE "C" <= v_max COLLATE "C" THEN
        IF wfe._lock('wfe.max_in_flight', p_queue, true) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(p_queue, NULL);
        RETURN false;
    END IF;
    PERFORM wfe._lock('wfe.max_in_flight', p_queue, false);
    PERFORM set_config('wfe_admission.queue', p_queue, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_queue(text) IS
'Takes a broker queue''s max_in_flight lock, waiting only in lock order (queues by name, after the tenants); out of order it only tries, and a miss is rechecked later.  From then on tenant locks are only tried.';
REVOKE ALL ON FUNCTION wfe._lock_queue(text) FROM PUBLIC;

CREATE FUNCTION wfe._broker_in_flight(p_queue text)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT count(*)::int FROM wfe.run_stages AS st
     WHERE st.queue = p_queue
       AND (wfe._stage_handed_out(st.state)
            OR (st.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                               AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
END;
COMMENT ON FUNCTION wfe._broker_in_flight(text) IS
'Tasks of a broker queue in flight: dispatched, running, or queued with an unpublished dispatch of their current fence.';
REVOKE ALL ON FUNCTION wfe._broker_in_flight(text) FROM PUBLIC;

-- Through the tenant's unfinished runs (runs_unfinished_tenant): the cost
-- follows the tenant's runs in flight, not the size of wfe.run_stages.
CREATE FUNCTION wfe._tenant_in_flight(p_tenant text)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT count(*)::int FROM wfe.runs AS r JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE r.tenant = p_tenant AND r.finished_at IS NULL
       AND st.queue IS NOT NULL AND st.handler IS NULL
       AND (wfe._stage_handed_out(st.state)
            OR (st.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                               AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
END;
COMMENT ON FUNCTION wfe._tenant_in_flight(text) IS
'A tenant''s tasks in flight, poll and broker: dispatched, running, or queued with an unpublished dispatch of their current fence.';
REVOKE ALL ON FUNCTION wfe._tenant_in_flight(text) FROM PUBLIC;

CREATE FUNCTION wfe._broker_admit(p_queue text, p_tenant text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  int;
    v_tenant int;
BEGIN
    SELECT q.max_in_flight INTO v_queue FROM wfe.queues AS q
     WHERE q.queue = p_queue AND q.max_in_flight IS NOT NULL;
    SELECT t.max_tasks_in_flight INTO v_tenant FROM wfe.tenant_limits AS t
     WHERE t.tenant = p_tenant AND t.max_tasks_in_flight IS NOT NULL;
    IF v_queue IS NULL AND v_tenant IS NULL THEN
        RETURN true;
    END IF;
    -- the lock order: the tenant, then the queue; the counts after both
    IF v_tenant IS NOT NULL AND NOT wfe._lock_tenant(p_tenant) THEN
        RETURN false;               -- busy out of order: held, rechecked by the next worker round
    END IF;
    IF v_queue IS NOT NULL THEN
        IF NOT wfe._lock_queue(p_queue) THEN
            RETURN false;
        END IF;
        IF wfe._broker_in_flight(p_queue) >= v_queue THEN
            RETURN false;
        END IF;
    END IF;
    RETURN v_tenant IS NULL OR wfe._tenant_in_flight(p_tenant) < v_tenant;
END
$$;
COMMENT ON FUNCTION wfe._broker_admit(text, text) IS
'May one more task of this broker queue and tenant be dispatched now (max_in_flight, max_tasks_in_flight)?  Takes the limits'' locks, tenant first.';
REVOKE ALL ON FUNCTION wfe._broker_admit(text, text) FROM PUBLIC;

-- Room appeared: a task of p_queue and p_tenant ended, or (p_queue NULL)
-- the tenant's limit was raised or lifted, or (p_tenant NULL) the queue's.  Dispatches the held broker tasks that now fit
-- both limits -- those of p_queue when it is a limited broker queue, and
-- those of p_tenant in any broker queue when the tenant is limited --
-- highest priority first, then oldest; returns the poll queues whose
-- claimers should be woken (p_queue when it is a limited poll queue, and
-- the poll queues where a limited p_tenant has queued tasks).
CREATE FUNCTION wfe._release_held(p_queue text, p_tenant text)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_side  boolean;
    v_tenant_side boolean;
    v_limited     boolean;         -- p_tenant has a task limit
    v_bounded     boolean;         -- p_queue is a broker queue with a limit
    v_tenants     jsonb := '{}';    -- tenant -> room, for the tenants whose lock we hold
    v_queues      jsonb := '{}';    -- queue -> room, for the limited queues whose lock we hold
    t             record;
    c             record;
BEGIN
    v_bounded := EXISTS (SELECT 1 FROM wfe.queues AS q
                          WHERE q.queue = p_queue AND q.delivery = 'broker' AND NOT q.paused
                            AND q.max_in_flight IS NOT NULL);
    -- without a tenant, the queue's limit changed: lifted, everything held in it may go
    v_queue_side := v_bounded
                    OR (p_tenant IS NULL AND EXISTS (SELECT 1 FROM wfe.queues AS q
                                                      WHERE q.queue = p_queue AND q.delivery = 'broker'
                                                        AND NOT q.paused));
    v_limited := EXISTS (SELECT 1 FROM wfe.tenant_limits AS l
                          WHERE l.tenant = p_tenant AND l.max_tasks_in_flight IS NOT NULL);
    -- without a queue, the tenant's limit changed: lifted, everything of it held may go
    v_tenant_side := v_limited OR (p_queue IS NULL AND p_tenant IS NOT NULL);
    IF EXISTS (SELECT 1 FROM wfe.queues AS q
                WHERE q.queue = p_queue AND q.delivery = 'poll' AND NOT q.paused
                  AND q.max_in_flight IS NOT NULL) THEN
        RETURN NEXT p_queue;
    END IF;
    IF NOT v_queue_side AND NOT v_tenant_side THEN
        RETURN;
    END IF;

    -- The tenant locks first, in name order: p_tenant, and the limited
    -- tenants with tasks held in p_queue.
    FOR t IN SELECT l.tenant, l.max_tasks_in_flight FROM wfe.tenant_limits AS l
              WHERE l.max_tasks_in_flight IS NOT NULL
                AND ((v_limited AND l.tenant = p_tenant)
                     OR (v_queue_side AND EXISTS (SELECT 1 FROM wfe.run_stages AS st
                                                   WHERE st.queue = p_queue AND st.state = 'queued'
                                                     AND st.tenant = l.tenant)))
              ORDER BY l.tenant COLLATE "C"
    LOOP
        IF wfe._lock_tenant(t.tenant) THEN
            v_tenants := v_tenants || jsonb_build_object(t.tenant, t.max_tasks_in_flight);
        END IF;
    END LOOP;
    v_tenant_side := v_tenant_side AND (NOT v_limited OR v_tenants ? p_tenant);
    -- The tenants' rooms, counted after their locks (statements of their own).
    FOR t IN SELECT k AS name FROM jsonb_object_keys(v_tenants) AS k LOOP
        v_tenants := jsonb_set(v_tenants, ARRAY[t.name],
                               to_jsonb((v_tenants ->> t.name)::int - wfe._tenant_in_flight(t.name)));
    END LOOP;
    -- A task of a limited tenant ended: only if that left it exactly one
    -- slot was it at its limit before, so only then can a task of it be
    -- waiting for room (each end releases what fits, one after the other).
    IF v_limited AND p_queue IS NOT NULL AND (v_tenants ->> p_tenant)::int IS DISTINCT FROM 1 THEN
        v_tenant_side := false;
    END IF;
    IF v_tenant_side THEN
        -- its pollers (a queue without a wfe.queues row is an unlimited poll queue)
        RETURN QUERY SELECT DISTINCT st.queue
                       FROM wfe.runs AS r JOIN wfe.run_stages AS st ON st.run_id = r.run_id
                       LEFT JOIN wfe.queues AS q ON q.queue = st.queue
                      WHERE r.tenant = p_tenant AND r.finished_at IS NULL
                        AND st.state = 'queued' AND st.handler IS NULL AND st.queue IS NOT NULL
                        AND coalesce(q.delivery, 'poll') = 'poll' AND NOT coalesce(q.paused, false);
    END IF;
    IF NOT v_queue_side AND NOT v_tenant_side THEN
        RETURN;
    END IF;
    -- Then the queue locks, in name order: p_queue, and the limited broker
    -- queues where p_tenant has held tasks.
    FOR t IN SELECT q.queue, q.max_in_flight FROM wfe.queues AS q
              WHERE q.delivery = 'broker' AND NOT q.paused AND q.max_in_flight IS NOT NULL
                AND ((v_bounded AND q.queue = p_queue)
                     OR (v_tenant_side AND EXISTS (SELECT 1 FROM wfe.runs AS r JOIN wfe.run_stages AS st
                                                          ON st.run_id = r.run_id
                                                    WHERE r.tenant = p_tenant AND r.finished_at IS NULL
                                                      AND st.queue = q.queue AND st.state = 'queued')))
              ORDER BY q.queue COLLATE "C"
    LOOP
        IF wfe._lock_queue(t.queue) THEN
            v_queues := v_queues || jsonb_build_object(t.queue, t.max_in_flight);
        END IF;
    END LOOP;
    v_queue_side := v_queue_side AND (NOT v_bounded OR v_queues ? p_queue);
    -- The queues' rooms, counted after their locks.
    FOR t IN SELECT k AS name FROM jsonb_object_keys(v_queues) AS k LOOP
        v_queues := jsonb_set(v_queues, ARRAY[t.name],
                              to_jsonb((v_queues ->> t.name)::int - wfe._broker_in_flight(t.name)));
    END LOOP;

    -- the candidates: held in p_queue (its ready index), or held of p_tenant (its unfinished runs)
    FOR c IN SELECT h.run_id, h.stage, h.queue, h.tenant, q.max_in_flight IS NOT NULL AS queue_limited
               FROM (SELECT st.run_id, st.stage, st.queue, st.tenant, st.priority, st.ready_at, st.attempt, st.fence
                       FROM wfe.run_stages AS st
                      WHERE v_queue_side AND st.queue = p_queue AND st.state = 'queued' AND st.handler IS NULL
                     UNION
                     SELECT st.run_id, st.stage, st.queue, st.tenant, st.priority, st.ready_at, st.attempt, st.fence
                       FROM wfe.runs AS r JOIN wfe.run_stages AS st ON st.run_id = r.run_id
                      WHERE v_tenant_side AND r.tenant = p_tenant AND r.finished_at IS NULL
                        AND st.state = 'queued' AND st.handler IS NULL) AS h
               JOIN wfe.queues AS q ON q.queue = h.queue AND q.delivery = 'broker' AND NOT q.paused
              WHERE NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                 WHERE o.run_id = h.run_id AND o.stage = h.stage AND o.attempt = h.attempt
                                   AND o.fence = h.fence AND o.kind = 'dispatch' AND o.state <> 'published')
              ORDER BY h.priority DESC, h.ready_at, h.run_id, h.stage
    LOOP
        EXIT WHEN (NOT v_queue_side OR (v_bounded AND (v_queues ->> p_queue)::int <= 0))
              AND (NOT v_tenant_side OR (v_limited AND (v_tenants ->> p_tenant)::int <= 0));
        -- both limits must hold: a limit we do not hold the lock of (a
        -- tenant that was busy, or limited since) keeps its task held
        IF c.queue_limited AND coalesce((v_queues ->> c.queue)::int, 0) <= 0 THEN
            CONTINUE;
        END IF;
        IF v_tenants ? c.tenant THEN
            CONTINUE WHEN (v_tenants ->> c.tenant)::int <= 0;
        ELSIF EXISTS (SELECT 1 FROM wfe.tenant_limits AS l
                       WHERE l.tenant = c.tenant AND l.max_tasks_in_flight IS NOT NULL) THEN
            CONTINUE;
        END IF;
        PERFORM wfe._dispatch(r, s) FROM wfe.runs AS r, wfe.run_stages AS s
          WHERE r.run_id = c.run_id AND s.run_id = c.run_id AND s.stage = c.stage;
        IF c.queue_limited THEN
            v_queues := jsonb_set(v_queues, ARRAY[c.queue], to_jsonb((v_queues ->> c.queue)::int - 1));
        END IF;
        IF v_tenants ? c.tenant THEN
            v_tenants := jsonb_set(v_tenants, ARRAY[c.tenant], to_jsonb((v_tenants ->> c.tenant)::int - 1));
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe._release_held(text, text) IS
'Room in a limited broker queue or for a limited tenant: dispatches the held tasks that fit both limits, highest priority then oldest; returns the poll queues to wake.';
REVOKE ALL ON FUNCTION wfe._release_held(text, text) FROM PUBLIC;
