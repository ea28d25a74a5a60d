-- The worker protocol: claim, accept, heartbeat, complete, fail (docs: runtime.md).
--
-- Every callback names (run, stage, attempt, fence) and is answered with one
-- outcome word.  The checks run in a fixed order -- unknown, duplicate or
-- conflict, late, stale, invalid_result, accepted -- and every rejected
-- callback leaves an event row and changes nothing else.  The callbacks are
-- C (src/engine.c): the gate and the transition are the step core's.

CREATE FUNCTION wfe.claim_task(queue text, worker_id text, max_tasks int DEFAULT 1, lease_ms int DEFAULT NULL)
RETURNS SETOF wfe.task
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- the claim's plan is the same whatever the arguments: plan it once per session
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    IF claim_task.queue IS NULL OR claim_task.worker_id IS NULL THEN
        RAISE EXCEPTION 'queue and worker_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF claim_task.max_tasks IS NULL OR claim_task.max_tasks NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_tasks must be between 1 and 1000, not %', claim_task.max_tasks
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF claim_task.lease_ms IS NOT NULL AND claim_task.lease_ms < 1 THEN
        RAISE EXCEPTION 'lease_ms must be positive, not %', claim_task.lease_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- SKIP LOCKED: a claimer never waits for another and never takes a row
    -- another is taking; the state change makes the attempt unclaimable.
    -- The picked rows are found by walking the ready index and updated by
    -- their tuple ids, so the claim never joins against (or scans) the
    -- whole stage table, whatever max_tasks and the table size
    -- (test/tap/006_claim_plan.pl).
    RETURN QUERY
    WITH claimed AS (
        UPDATE wfe.run_stages AS st
           SET state = 'running', claimed_by = claim_task.worker_id,
               started_at = now(), heartbeat_at = now(),
               deadline_at = now() + make_interval(secs => least(
                   coalesce(claim_task.lease_ms, st.exec_ms),
                   coalesce(st.heartbeat_ms, 2147483647)) / 1000.0)
         WHERE st.ctid = ANY (ARRAY(
                   SELECT p.ctid
                     FROM wfe.run_stages AS p
                    WHERE p.queue = claim_task.queue AND p.state = 'queued'
                      -- paused queues keep their tasks; broker queues are served by the broker
                      AND NOT EXISTS (SELECT 1 FROM wfe.queues AS q
                                       WHERE q.queue = claim_task.queue AND (q.paused OR q.delivery = 'broker'))
                    ORDER BY p.priority DESC, p.ready_at
                    LIMIT claim_task.max_tasks
                      FOR UPDATE SKIP LOCKED))
        RETURNING st.*
    ), logged AS (
        INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
        SELECT c.run_id, c.tenant, c.stage, c.attempt, 'stage.claimed',
               jsonb_build_object('worker_id', claim_task.worker_id)
          FROM claimed AS c
    )
    SELECT c.run_id, c.stage, c.attempt, c.fence, c.queue, c.worker, c.input, NULL::jsonb,
           c.deadline_at, c.heartbeat_ms, r.definition_digest,
           wfe._message_id(c.run_id, c.stage, c.attempt, c.fence, 'dispatch'), c.tenant
      FROM claimed AS c
      JOIN wfe.runs AS r ON r.run_id = c.run_id
      -- the worker must be awake when the execution deadline passes
      CROSS JOIN LATERAL wfe._wake(c.deadline_at) AS w
     ORDER BY c.priority DESC, c.ready_at;

    IF NOT FOUND AND EXISTS (SELECT 1 FROM wfe.queues AS q
                              WHERE q.queue = claim_task.queue AND q.delivery = 'broker') THEN
        RAISE EXCEPTION 'queue "%" is in broker delivery mode', claim_task.queue
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Its tasks are dispatched through RabbitMQ and started with wfe.accept_task; '
                         'wfe.configure_queue(queue, ''poll'') makes it a poll queue.';
    END IF;
    IF NOT FOUND
       AND NOT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.queue = claim_task.queue)
       AND NOT EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = claim_task.queue) THEN
        RAISE EXCEPTION 'queue "%" does not exist', claim_task.queue
            USING ERRCODE = 'undefined_object',
                  HINT = 'Queues come from the contracts registry (wfe.register_worker, wfe.register_action).';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe.claim_task(text, text, int, int) IS
'Claims up to max_tasks ready tasks of a poll queue (SKIP LOCKED, highest priority then oldest), marks them running with an execution deadline.';

CREATE FUNCTION wfe.accept_task(run_id bigint, stage text, attempt int, fence bigint, worker_id text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_accept_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt; a redelivery answers duplicate.';

CREATE FUNCTION wfe.heartbeat(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_heartbeat'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) IS
'Records that a running attempt is alive, pushing out its heartbeat deadline; late or stale tells the worker to stop.';

CREATE FUNCTION wfe.complete_task(run_id bigint, stage text, attempt int, fence bigint,
                                  result jsonb DEFAULT '{}')
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_complete_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) IS
'Reports an attempt''s result: accepted, duplicate, conflict, stale, late, invalid_result or unknown.';

CREATE FUNCTION wfe.fail_task(run_id bigint, stage text, attempt int, fence bigint, error jsonb DEFAULT '{}',
                              retryable boolean DEFAULT true)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_fail_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) IS
'Reports a failed attempt: retried after a backoff while attempts remain (if retryable), else the stage fails and routes on.';

-- Batch reports: many completions in one call and one transaction, each
-- through the same gate as wfe.complete_task.  Runs are locked in run_id
-- (then stage) order whatever the order of the array, so two batches that
-- share runs cannot deadlock; the answers come back in that order.
CREATE FUNCTION wfe.complete_tasks(reports jsonb)
RETURNS TABLE (run_id bigint, stage text, outcome text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r   record;
    v_n int := 0;
BEGIN
    IF complete_tasks.reports IS NULL THEN
        RAISE EXCEPTION 'reports must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(complete_tasks.reports) <> 'array' THEN
        RAISE EXCEPTION 'reports must be a JSON array, not %', jsonb_typeof(complete_tasks.reports)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR r IN SELECT x.n, x.rep FROM jsonb_array_elements(complete_tasks.reports) WITH ORDINALITY AS x(rep, n) LOOP
        IF jsonb_typeof(r.rep) <> 'object'
           OR jsonb_typeof(r.rep -> 'run_id') IS DISTINCT FROM 'number'
           OR jsonb_typeof(r.rep -> 'stage') IS DISTINCT FROM 'string'
           OR jsonb_typeof(r.rep -> 'attempt') IS DISTINCT FROM 'number'
           OR jsonb_typeof(r.rep -> 'fence') IS DISTINCT FROM 'number' THEN
            RAISE EXCEPTION 'report % must be an object with numbers run_id, attempt and fence and a string stage', r.n
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Report %s is %s.', r.n, left(r.rep::text, 200));
        END IF;
        v_n := v_n + 1;
    END LOOP;
    IF v_n > 1000 THEN
        RAISE EXCEPTION 'at most 1000 reports per call, not %', v_n USING ERRCODE = 'program_limit_exceeded';
    END IF;
    FOR r IN SELECT (x.rep ->> 'run_id')::bigint AS run_id, x.rep ->> 'stage' AS stage,
                    (x.rep ->> 'attempt')::int AS attempt, (x.rep ->> 'fence')::bigint AS fence,
                    coalesce(x.rep -> 'result', '{}') AS result
               FROM jsonb_array_elements(complete_tasks.reports) AS x(rep)
              ORDER BY 1, 2
    LOOP
        run_id := r.run_id;
        stage := r.stage;
        outcome := wfe.complete_task(r.run_id, r.stage, r.attempt, r.fence, r.result);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe.complete_tasks(jsonb) IS
'Reports many completed attempts in one transaction ([{"run_id","stage","attempt","fence","result"}, ...]); one outcome per report, in run_id order.';
