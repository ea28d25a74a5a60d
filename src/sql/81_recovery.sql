-- Operator recovery (docs: operations.md "Recovery"): redrive, skip, fail,
-- re-dispatch, replay, and the bulk redrive of dead letters.
--
-- Each action on a stage goes through the engine (wfe._operate, src/pg/engine.c,
-- over the step core's wfe_step_operate): the run is locked, the core
-- decides whether the action may act now (55000 says why not) and what it
-- moves, and the same fences as every callback hold (a late report of a
-- redriven or failed-by-hand attempt is answered stale).  Each records an
-- event with who (wfe._identity()) and why; each closes the stage's open dead
-- letters with its name.
--
-- Tenants and limits (docs: operations.md "Security model", "Tenants"):
-- every action first checks its arguments against the admission limits and
-- then finds its run through wfe._run, so an operator acts only on runs of
-- the tenants it acts for, and another tenant's run is answered exactly as
-- one that does not exist (42704) -- before it is locked, or anything of it
-- but its tenant read, so no message, SQLSTATE or lock wait tells the two
-- apart.  An action that
-- reopens an ended run is admitted against its tenant's max_runs_in_flight
-- like a submit (wfe._operate; wfe_admit_run, src/pg/submit.c).

CREATE FUNCTION wfe._operate(run_id bigint, stage text, operation text, value text, by text, why text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_operate' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._operate(bigint, text, text, text, text, text) IS
'An operator''s redrive, skip, fail or redispatch of one stage, through the step core under the run''s lock; 55000 when the core refuses, 53400 when reopening the run would pass its tenant''s max_runs_in_flight.';
REVOKE ALL ON FUNCTION wfe._operate(bigint, text, text, text, text, text) FROM PUBLIC;

-- The stage's open dead letters are resolved by an operator's action.
CREATE FUNCTION wfe._resolve_dead_letters(p_run_id bigint, p_stage text, p_resolution text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.dead_letters AS d
       SET resolved_at = now(), resolved_by = wfe._identity(), resolution = p_resolution
     WHERE d.run_id = p_run_id AND (p_stage IS NULL OR d.stage = p_stage) AND d.resolved_at IS NULL;
END;
COMMENT ON FUNCTION wfe._resolve_dead_letters(bigint, text, text) IS
'Closes the open dead letters of a stage (or, stage NULL, of a run) with how an operator resolved them.';
REVOKE ALL ON FUNCTION wfe._resolve_dead_letters(bigint, text, text) FROM PUBLIC;

-- Arguments every action on a stage needs, checked in this order: present
-- (22004), within the admission limits (54000, 22023), and naming a run of
-- a tenant the caller acts for (42704, as for no run at all).
CREATE FUNCTION wfe._operator_target(p_run_id bigint, p_stage text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_run_id IS NULL OR p_stage IS NULL THEN
        RAISE EXCEPTION 'run_id and stage must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(p_stage, 'stage');
    PERFORM wfe._admit_name(p_reason, 'reason');
    PERFORM wfe._run(p_run_id);
END
$$;
COMMENT ON FUNCTION wfe._operator_target(bigint, text, text) IS
'Checks an operator action''s run, stage and reason: 22004, 54000, 22023, and 42704 when there is no such run or it is of a tenant the caller does not act for.';
REVOKE ALL ON FUNCTION wfe._operator_target(bigint, text, text) FROM PUBLIC;

CREATE FUNCTION wfe.redrive(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_code text;
BEGIN
    PERFORM wfe._operator_target(redrive.run_id, redrive.stage, redrive.reason);
    -- a binding failure has no attempt to run again: the run's context and
    -- the results it read do not change, so its input would fail again
    SELECT st.error ->> 'code' INTO v_code FROM wfe.run_stages AS st
     WHERE st.run_id = redrive.run_id AND st.stage = redrive.stage AND st.state = 'failed';
    IF v_code LIKE 'binding.%' THEN
        RAISE EXCEPTION 'cannot redrive stage "%" of run %: its input could not be bound (%)', redrive.stage,
                        redrive.run_id, v_code
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The run''s context and results do not change, so binding would fail again: skip_stage completes it by hand, replay starts a new run.';
    END IF;
    PERFORM wfe._operate(redrive.run_id, redrive.stage, 'redrive', NULL, wfe._identity(), redrive.reason);
    PERFORM wfe._resolve_dead_letters(redrive.run_id, redrive.stage, 'redriven');
END
$$;
COMMENT ON FUNCTION wfe.redrive(bigint, text, text) IS
'Runs a failed or timed-out task again: a new attempt with a new fence; a run that ended failed is reopened and goes on from there.';
REVOKE ALL ON FUNCTION wfe.redrive(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.redrive(bigint, text, text) TO wfe_operator;

CREATE FUNCTION wfe.skip_stage(run_id bigint, stage text, result jsonb DEFAULT '{}', reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._admit(skip_stage.result, 'the result');
    PERFORM wfe._operator_target(skip_stage.run_id, skip_stage.stage, skip_stage.reason);
    PERFORM wfe._operate(skip_stage.run_id, skip_stage.stage, 'skip',
                         coalesce(skip_stage.result, '{}')::text, wfe._identity(), skip_stage.reason);
    PERFORM wfe._resolve_dead_letters(skip_stage.run_id, skip_stage.stage, 'skipped');
END
$$;
COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';
REVOKE ALL ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) TO wfe_operator;

CREATE FUNCTION wfe.fail_stage(run_id bigint, stage text, reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fail_stage.reason IS NULL THEN
        RAISE EXCEPTION 'reason must not be null' USING ERRCODE = 'null_value_not_allowed',
              HINT = 'Say why: the worker sees it in the error, and the event log keeps it.';
    END IF;
    PERFORM wfe._operator_target(fail_stage.run_id, fail_stage.stage, fail_stage.reason);
    PERFORM wfe._operate(fail_stage.run_id, fail_stage.stage, 'fail', fail_stage.reason, wfe._identity(),
                         fail_stage.reason);
    PERFORM wfe._resolve_dead_letters(fail_stage.run_id, fail_stage.stage, 'failed');
END
$$;
COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';
REVOKE ALL ON FUNCTION wfe.fail_stage(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.fail_stage(bigint, text, text) TO wfe_operator;

CREATE FUNCTION wfe.redispatch(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  text;
    v_broker boolean;
    v_paused boolean;
BEGIN
    PERFORM wfe._operator_target(redispatch.run_id, redispatch.stage, redispatch.reason);
    -- (a map's own row has no queue: wfe._operate says to name an element, 42809)
    SELECT st.queue, q.delivery = 'broker', q.paused INTO v_queue, v_broker, v_paused
      FROM wfe.run_stages AS st LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.run_id = redispatch.run_id AND st.stage = redispatch.stage AND st.kind <> 'map';
    IF FOUND AND NOT coalesce(v_broker, false) THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is a poll queue', redispatch.stage,
                        redispatch.run_id, coalesce(v_queue, '(none)')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Poll workers claim queued tasks with wfe.claim_task; nothing is dispatched.';
    END IF;
    IF FOUND AND v_paused THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is paused', redispatch.stage,
                        redispatch.run_id, v_queue
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Resume it with wfe.configure_queue(..., paused => false): its tasks are dispatched then.';
    END IF;
    PERFORM wfe._operate(redispatch.run_id, redispatch.stage, 'redispatch', NULL, wfe._identity(),
                         redispatch.reason);
END
$$;
COMMENT ON FUNCTION wfe.redispatch(bigint, text, text) IS
'Sends a queued or dispatched broker attempt again: same attempt, new fence, a new dispatch message (the old one''s accept is stale).';
REVOKE ALL ON FUNCTION wfe.redispatch(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.redispatch(bigint, text, text) TO wfe_operator;

CREATE FUNCTION wfe.replay(run_id bigint, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r     wfe.runs;
    v_new bigint;
BEGIN
    IF replay.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(replay.reason, 'reason');
    r := wfe._run(replay.run_id);
    IF r.finished_at IS NULL THEN
        RAISE EXCEPTION 'cannot replay run %: it is %', r.run_id, r.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Replay a run that has ended; cancel it first (wfe.cancel_run) to replay it now.';
    END IF;
    -- the same pinned definition (name@version: even once retired), context,
    -- tenant, execution context and priority; no idempotency key
    SELECT s.run_id INTO v_new
      FROM wfe.submit(r.workflow || '@' || r.version, r.context, NULL,
                      jsonb_build_object('tenant', r.tenant, 'priority', r.priority)
                      || CASE WHEN r.execution_context IS NULL THEN '{}'::jsonb
                              ELSE jsonb_build_object('execution_context', r.execution_context) END) AS s;
    UPDATE wfe.runs AS x SET replay_of = r.run_id WHERE x.run_id = v_new;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.replayed',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay', v_new));
    PERFORM wfe._event(v_new, r.tenant, NULL, NULL, 'run.replay_of',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay_of', r.run_id));
    PERFORM wfe._resolve_dead_letters(r.run_id, NULL, 'replayed');
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION wfe.replay(bigint, text) IS
'Starts a new run of an ended run''s pinned definition with its context, tenant, execution context and priority; the new run''s replay_of names the old one.';
REVOKE ALL ON FUNCTION wfe.replay(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.replay(bigint, text) TO wfe_operator;

CREATE FUNCTION wfe.redrive_dead_letters(queue text, since timestamptz DEFAULT '-infinity', reason text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c    record;
    n    int := 0;
    held int := 0;
BEGIN
    IF redrive_dead_letters.queue IS NULL OR redrive_dead_letters.since IS NULL THEN
        RAISE EXCEPTION 'queue and since must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(redrive_dead_letters.queue, 'queue');
    PERFORM wfe._admit_name(redrive_dead_letters.reason, 'reason');
    -- the dead letters of the tenants the caller acts for (a queue is
    -- shared: other tenants' are not seen, as in wfe.dead_letters), in run
    -- order, so two bulk redrives cannot deadlock; one subtransaction each,
    -- so a stage that moved on meanwhile is passed over, not fatal, and so
    -- is one whose run its tenant's max_runs_in_flight keeps closed
    FOR c IN SELECT DISTINCT d.run_id, d.stage
               FROM wfe.dead_letters AS d
               JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
              WHERE d.resolved_at IS NULL AND d.at >= redrive_dead_letters.since
                AND st.queue = redrive_dead_letters.queue AND wfe._tenant_ok(d.tenant)
              ORDER BY d.run_id, d.stage
    LOOP
        BEGIN
            PERFORM wfe.redrive(c.run_id, c.stage, redrive_dead_letters.reason);
            n := n + 1;
        EXCEPTION
            WHEN object_not_in_prerequisite_state THEN
                NULL;
            WHEN configuration_limit_exceeded THEN
                held := held + 1;
        END;
    END LOOP;
    IF held > 0 THEN
        RAISE NOTICE 'redrive_dead_letters passed over % stage(s): reopening their runs would pass their tenants'' max_runs_in_flight', held
            USING HINT = 'Their dead letters stay open: redrive them when runs have finished, or raise the limit with wfe.configure_tenant.';
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) IS
'Redrives every stage with an open dead letter on queue since a time, of the tenants the caller acts for; returns how many (stages that can no longer be redriven, or whose runs max_runs_in_flight keeps closed, are passed over).';
REVOKE ALL ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) TO wfe_operator;
