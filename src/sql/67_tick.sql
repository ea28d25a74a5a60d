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
BEGIN
    UPDATE wfe.timers AS t SET fired_at = now() WHERE t.timer_id = p_timer.timer_id;
    PERFORM wfe._timer_fired(p_timer.run_id, p_timer.kind, p_timer.stage, p_timer.attempt, p_timer.fence);
END
$$;
COMMENT ON FUNCTION wfe._fire_timer(wfe.timers) IS
'Fires one timer: a retry queues a new attempt with a new fence, a delayed start starts the run, a run deadline fails it.';
REVOKE ALL ON FUNCTION wfe._fire_timer(wfe.timers) FROM PUBLIC;

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
    v_run_as  regrole;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    IF s.state <> 'queued' OR s.handler IS NULL THEN
        RETURN false;
    END IF;
    -- the attempt carries its execution deadline like a worker's: should
    -- its running state ever outlive this transaction, the clock ends it
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now(),
           deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)
     WHERE st.run_id = p_run_id AND st.stage = p_stage;
    PERFORM wfe._event(p_run_id, r.tenant, p_stage, s.attempt, 'stage.claimed',
                       jsonb_build_object('worker_id', p_by, 'handler', s.handler::text));
    BEGIN
        -- a subtransaction: a failing handler undoes only its own writes;
        -- it runs as the role that registered it (src/pg/handler.c)
        SELECT c.run_as INTO v_run_as FROM wfe.contracts AS c WHERE c.ref = s.worker;
        IF v_run_as IS NULL THEN
            RAISE EXCEPTION 'contract % records no role for its handler to run as', s.worker
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Register the handler again as a new contract version, as the role it should run as.';
        END IF;
        v_result := wfe._invoke_handler(s.handler, v_run_as, s.input);
        -- a result over the limits fails the attempt like any handler error
        PERFORM wfe._admit(v_result, 'the handler''s result');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        v_error := jsonb_build_object('code', 'handler.error', 'sqlstate', v_state, 'message', v_message);
    END;
    PERFORM wfe._action_done(p_run_id, p_stage,
                             CASE WHEN v_error IS NULL THEN coalesce(v_result, '{}') END, v_error);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._run_handler(bigint, text, text) IS
'Runs a queued in-database action''s handler in a subtransaction; an error fails the attempt (retried per policy).';
REVOKE ALL ON FUNCTION wfe._run_handler(bigint, text, text) FROM PUBLIC;

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
'One round by hand: fires due schedules and timers, times out expired attempts, runs queued in-database actions; returns how many it handled.';
REVOKE ALL ON FUNCTION wfe.tick(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.tick(int) TO wfe_operator;
