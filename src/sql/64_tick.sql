-- One synchronous round of the engine's clocks and in-database actions:
-- wfe.tick().  The background worker calls the same functions on its own;
-- without it (no shared_preload_libraries) an operator or a cron job calls
-- wfe.tick() (docs: operations.md).
--
-- NB: a firing locks the timer (SKIP LOCKED), then the run, then the stage;
-- callbacks lock the run, then the stage, and never a timer, so the orders
-- cannot deadlock and two firers never fire one timer twice.  A round locks
-- its whole batch of timers first and fires them in run_id order, so two
-- firers cannot deadlock on each other's run locks either.

-- Fire one due timer whose row the caller has locked.
CREATE FUNCTION wfe._fire_timer(p_timer wfe.timers)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r wfe.runs;
    s wfe.run_stages;
BEGIN
    UPDATE wfe.timers AS t SET fired_at = now() WHERE t.timer_id = p_timer.timer_id;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_timer.run_id FOR NO KEY UPDATE;
    IF p_timer.kind = 'retry' THEN
        SELECT * INTO s FROM wfe.run_stages AS st
         WHERE st.run_id = p_timer.run_id AND st.stage = p_timer.stage FOR UPDATE;
        -- a timer made for a superseded attempt or fence does nothing
        IF s.state = 'retry_scheduled' AND s.attempt = p_timer.attempt AND s.fence = p_timer.fence
           AND (r.intent IS NULL OR s.kind = 'finaliser'
                OR (NOT s.awaits AND r.intent = 'completed')) THEN
            PERFORM wfe._enqueue(r, p_timer.stage, NULL, true);
        END IF;
    ELSIF p_timer.kind = 'not_before' THEN
        IF r.intent IS NULL AND NOT EXISTS (SELECT 1 FROM wfe.events AS e
                                             WHERE e.run_id = r.run_id AND e.type = 'run.started') THEN
            PERFORM wfe._start(r, (SELECT d.plan ->> 'entry' FROM wfe.definitions AS d
                                    WHERE d.definition_id = r.definition_id));
        END IF;
    ELSIF p_timer.kind = 'run_deadline' THEN
        IF r.intent IS NULL THEN
            PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.deadline_expired',
                               jsonb_build_object('deadline_at', r.deadline_at));
            PERFORM wfe._set_intent(r.run_id, 'failed', 'run deadline passed');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._fire_timer(wfe.timers) IS
'Fires one timer: a retry queues a new attempt with a new fence, a delayed start starts the run, a run deadline fails it.';

-- Time out one attempt whose deadline passed, if it still is the one that expired.
CREATE FUNCTION wfe._expire(p_run_id bigint, p_stage text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r       wfe.runs;
    s       wfe.run_stages;
    v_clock text;
BEGIN
    -- another firer (or a callback) holding the run decides this one
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    IF s.state NOT IN ('queued', 'dispatched', 'running') OR s.deadline_at IS NULL OR s.deadline_at > now() THEN
        RETURN false;
    END IF;
    v_clock := CASE
        WHEN s.state IN ('queued', 'dispatched') THEN 'queue'
        WHEN s.heartbeat_ms IS NOT NULL
             AND s.heartbeat_at + make_interval(secs => s.heartbeat_ms / 1000.0) <= now()
             AND s.started_at + make_interval(secs => s.exec_ms / 1000.0) > now() THEN 'heartbeat'
        ELSE 'execution' END;
    -- the expired attempt is fenced: whatever it reports later is stale
    UPDATE wfe.run_stages AS st
       SET state = 'timed_out', fence = st.fence + 1, deadline_at = NULL
     WHERE st.run_id = p_run_id AND st.stage = p_stage;
    PERFORM wfe._event(p_run_id, r.tenant, p_stage, s.attempt, 'stage.timed_out',
                       jsonb_build_object('clock', v_clock, 'deadline_at', s.deadline_at));
    PERFORM wfe._attempt_failed(r, p_stage,
                                jsonb_build_object('code', 'timeout.' || v_clock,
                                                   'message', format('%s deadline passed at %s', v_clock, s.deadline_at)),
                                true, 'timed_out');
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._expire(bigint, text) IS
'Times out an attempt past its queue, execution or heartbeat deadline: fenced, then retried or failed per policy.';

-- Run one queued in-database action (a contract with a handler).
CREATE FUNCTION wfe._run_handler(p_run_id bigint, p_stage text, p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r         wfe.runs;
    s         wfe.run_stages;
    v_result  jsonb;
    v_error   jsonb;
    v_state   text;
    v_message text;
    v_problem text;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    IF s.state <> 'queued' OR s.handler IS NULL THEN
        RETURN false;
    END IF;
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now()
     WHERE st.run_id = p_run_id AND st.stage = p_stage;
    PERFORM wfe._event(p_run_id, r.tenant, p_stage, s.attempt, 'stage.claimed',
                       jsonb_build_object('worker_id', p_by, 'handler', s.handler::text));
    BEGIN
        -- a subtransaction: a failing handler undoes only its own writes
        EXECUTE format('SELECT %s($1)', s.handler::oid::regproc) INTO v_result USING s.input;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        v_error := jsonb_build_object('code', 'handler.error', 'sqlstate', v_state, 'message', v_message);
    END;
    IF v_error IS NULL THEN
        v_result := coalesce(v_result, '{}');
        v_problem := wfe._result_problem(r, s, v_result);
        IF v_problem IS NOT NULL THEN
            v_error := jsonb_build_object('code', 'result.schema', 'message', v_problem);
        END IF;
    END IF;
    IF v_error IS NULL THEN
        PERFORM wfe._attempt_completed(r, p_stage, v_result);
    ELSE
        PERFORM wfe._attempt_failed(r, p_stage, v_error, true);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._run_handler(bigint, text, text) IS
'Runs a queued in-database action''s handler in a subtransaction; an error fails the attempt (retried per policy).';

CREATE FUNCTION wfe.tick(max int DEFAULT 1000)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    done int;
BEGIN
    IF tick.max IS NULL OR tick.max < 1 THEN
        RAISE EXCEPTION 'max must be positive, not %', tick.max USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- the background worker's round, in the caller's one transaction
    done := wfe._worker_round(tick.max);
    FOR i IN 1 .. tick.max LOOP
        EXIT WHEN NOT wfe._run_next_handler();
        done := done + 1;
    END LOOP;
    RETURN done;
END
$$;
COMMENT ON FUNCTION wfe.tick(int) IS
'One round by hand: fires due timers, times out expired attempts, runs queued in-database actions; returns how many it handled.';
