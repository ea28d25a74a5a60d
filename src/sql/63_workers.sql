-- The worker protocol: claim, accept, heartbeat, complete, fail (docs: runtime.md).
--
-- Every callback names (run, stage, attempt, fence) and is answered with one
-- outcome word.  The checks run in a fixed order -- unknown, late, stale,
-- duplicate/conflict, invalid_result, accepted -- and every rejected callback
-- leaves an event row and changes nothing else.

-- Record a rejected callback that passed the gate (duplicate, conflict, stale).
CREATE FUNCTION wfe._reject(p_stage wfe.run_stages, p_callback text, p_outcome text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._event(p_stage.run_id, p_stage.tenant, p_stage.stage, p_stage.attempt,
                       'callback.' || p_outcome,
                       jsonb_build_object('callback', p_callback, 'state', p_stage.state,
                                          'reported', p_stage.outcome));
    RETURN p_outcome;
END
$$;
COMMENT ON FUNCTION wfe._reject(wfe.run_stages, text, text) IS
'Records a rejected callback on the event log and returns its outcome word.';

-- The checks every callback shares, under the run's and the stage's locks.
-- A report (p_report 'completed' or 'failed', with its result or error in
-- p_value) is also checked against what the attempt already reported.
-- outcome is NULL when the callback may proceed.
CREATE FUNCTION wfe._callback_gate(p_run_id bigint, p_stage text, p_attempt int, p_fence bigint,
                                   p_callback text, p_report text DEFAULT NULL, p_value jsonb DEFAULT NULL,
                                   OUT outcome text, OUT run wfe.runs, OUT stage wfe.run_stages)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_run_id IS NULL OR p_stage IS NULL OR p_attempt IS NULL OR p_fence IS NULL THEN
        RAISE EXCEPTION 'run_id, stage, attempt and fence must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- lock order: the run, then the stage
    SELECT * INTO run FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE;
    IF FOUND THEN
        SELECT * INTO stage FROM wfe.run_stages AS st
         WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    END IF;
    outcome := CASE
        WHEN run.run_id IS NULL OR stage.stage IS NULL THEN 'unknown'
        -- finalisers complete a run after its intent; so do the tasks it did
        -- not wait for (awaits: false), once it completed
        WHEN run.intent IS NOT NULL AND stage.kind <> 'finaliser'
             AND (stage.awaits OR run.intent <> 'completed') THEN 'late'
        WHEN stage.attempt = 0 OR p_attempt <> stage.attempt OR p_fence <> stage.fence THEN 'stale'
    END;
    IF outcome IS NOT NULL THEN
        PERFORM wfe._event(p_run_id, coalesce(run.tenant, ''), p_stage, p_attempt, 'callback.' || outcome,
                           jsonb_build_object('callback', p_callback, 'fence', p_fence,
                                              'current_attempt', stage.attempt,
                                              'current_fence', stage.fence));
    ELSIF p_report IS NOT NULL AND stage.outcome IS NOT NULL THEN
        outcome := wfe._reject(stage, p_callback,
                               CASE WHEN stage.outcome = p_report
                                         AND (CASE p_report WHEN 'completed' THEN stage.result
                                                            ELSE stage.error END) = p_value
                                    THEN 'duplicate' ELSE 'conflict' END);
    ELSIF p_report IS NOT NULL AND stage.state NOT IN ('queued', 'dispatched', 'running') THEN
        outcome := wfe._reject(stage, p_callback, 'stale');
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._callback_gate(bigint, text, int, bigint, text, text, jsonb) IS
'Locks the run and the stage and answers unknown, late, stale, duplicate or conflict (recording the rejection), or NULL to proceed.';

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
    RETURN QUERY
    WITH picked AS (
        SELECT st.run_id, st.stage
          FROM wfe.run_stages AS st
         WHERE st.queue = claim_task.queue AND st.state = 'queued'
           -- paused queues keep their tasks; broker queues are served by the broker
           AND NOT EXISTS (SELECT 1 FROM wfe.queues AS q
                            WHERE q.queue = claim_task.queue AND (q.paused OR q.delivery = 'broker'))
         ORDER BY st.priority DESC, st.ready_at
         LIMIT claim_task.max_tasks
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE wfe.run_stages AS st
           SET state = 'running', claimed_by = claim_task.worker_id,
               started_at = now(), heartbeat_at = now(),
               deadline_at = now() + make_interval(secs => least(
                   coalesce(claim_task.lease_ms, st.exec_ms),
                   coalesce(st.heartbeat_ms, 2147483647)) / 1000.0)
          FROM picked
         WHERE st.run_id = picked.run_id AND st.stage = picked.stage
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
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    g record;
BEGIN
    g := wfe._callback_gate(accept_task.run_id, accept_task.stage, accept_task.attempt,
                            accept_task.fence, 'accept_task');
    IF g.outcome IS NOT NULL THEN
        RETURN g.outcome;
    END IF;
    IF (g.stage).state NOT IN ('queued', 'dispatched') THEN
        -- a redelivered envelope: the attempt is already under way or done
        RETURN wfe._reject(g.stage, 'accept_task',
                           CASE WHEN (g.stage).state = 'running' OR (g.stage).outcome IS NOT NULL
                                THEN 'duplicate' ELSE 'stale' END);
    END IF;
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = accept_task.worker_id, started_at = now(), heartbeat_at = now(),
           deadline_at = now() + make_interval(secs => least(st.exec_ms, coalesce(st.heartbeat_ms, 2147483647)) / 1000.0)
     WHERE st.run_id = accept_task.run_id AND st.stage = accept_task.stage;
    PERFORM wfe._wake(now() + make_interval(secs => least((g.stage).exec_ms,
                                                          coalesce((g.stage).heartbeat_ms, 2147483647)) / 1000.0));
    PERFORM wfe._event(accept_task.run_id, (g.run).tenant, accept_task.stage, accept_task.attempt,
                       'stage.accepted', jsonb_build_object('worker_id', accept_task.worker_id));
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt; a redelivery answers duplicate.';

CREATE FUNCTION wfe.heartbeat(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    g record;
BEGIN
    g := wfe._callback_gate(heartbeat.run_id, heartbeat.stage, heartbeat.attempt, heartbeat.fence,
                            'heartbeat');
    IF g.outcome IS NOT NULL THEN
        RETURN g.outcome;
    END IF;
    IF (g.stage).state <> 'running' THEN
        RETURN wfe._reject(g.stage, 'heartbeat', 'stale');
    END IF;
    -- a heartbeat extends the heartbeat deadline, never the execution deadline
    UPDATE wfe.run_stages AS st
       SET heartbeat_at = now(),
           deadline_at = CASE WHEN st.heartbeat_ms IS NULL THEN st.deadline_at
                              ELSE least(st.started_at + make_interval(secs => st.exec_ms / 1000.0),
                                         now() + make_interval(secs => st.heartbeat_ms / 1000.0)) END
     WHERE st.run_id = heartbeat.run_id AND st.stage = heartbeat.stage;
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) IS
'Records that a running attempt is alive, pushing out its heartbeat deadline; late or stale tells the worker to stop.';

CREATE FUNCTION wfe.complete_task(run_id bigint, stage text, attempt int, fence bigint,
                                  result jsonb DEFAULT '{}')
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    g         record;
    v_result  jsonb := coalesce(complete_task.result, '{}');
    v_problem text;
BEGIN
    g := wfe._callback_gate(complete_task.run_id, complete_task.stage, complete_task.attempt,
                            complete_task.fence, 'complete_task', 'completed', v_result);
    IF g.outcome IS NOT NULL THEN
        RETURN g.outcome;
    END IF;
    v_problem := wfe._result_problem(g.run, g.stage, v_result);
    IF v_problem IS NOT NULL THEN
        PERFORM wfe._event(complete_task.run_id, (g.run).tenant, complete_task.stage, complete_task.attempt,
                           'stage.invalid_result', jsonb_build_object('error', v_problem));
        PERFORM wfe._attempt_failed(g.run, complete_task.stage,
                                    jsonb_build_object('code', 'result.schema', 'message', v_problem), true);
        RETURN 'invalid_result';
    END IF;
    PERFORM wfe._attempt_completed(g.run, complete_task.stage, v_result);
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) IS
'Reports an attempt''s result: accepted, duplicate, conflict, stale, late, invalid_result or unknown.';

CREATE FUNCTION wfe.fail_task(run_id bigint, stage text, attempt int, fence bigint, error jsonb DEFAULT '{}',
                              retryable boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    g       record;
    v_error jsonb := coalesce(fail_task.error, '{}');
BEGIN
    g := wfe._callback_gate(fail_task.run_id, fail_task.stage, fail_task.attempt, fail_task.fence,
                            'fail_task', 'failed', v_error);
    IF g.outcome IS NOT NULL THEN
        RETURN g.outcome;
    END IF;
    PERFORM wfe._attempt_failed(g.run, fail_task.stage, v_error, coalesce(fail_task.retryable, true));
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) IS
'Reports a failed attempt: retried after a backoff while attempts remain (if retryable), else the stage fails and routes on.';
