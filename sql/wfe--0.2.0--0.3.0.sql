-- wfe--0.2.0--0.3.0.sql: what ALTER EXTENSION wfe UPDATE TO '0.3.0' runs
-- on a database that has wfe 0.2.0.
--
-- How this file is maintained: as sql/wfe--0.1.0--0.2.0.sql says in its
-- header (written by hand in the same commit as the change to src/sql it
-- follows; test/tap/005_upgrade.pl upgrades a database with runs in flight
-- through the chain 0.1.0 -> 0.2.0 -> 0.3.0 and compares its catalog with a
-- fresh CREATE EXTENSION's).  sql/wfe--0.2.0.sql is 0.2.0's install script
-- as released (commit 669fd53), frozen: never edit it.
\echo Use "ALTER EXTENSION wfe UPDATE TO '0.3.0'" to load this file. \quit

-- The layout (0.3.0): comments in these bodies name the files' new paths.
CREATE OR REPLACE FUNCTION wfe._run_handler(p_run_id bigint, p_stage text, p_by text DEFAULT 'wfe.tick')
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
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now()
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

CREATE OR REPLACE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
BEGIN
    IF ack_cancel.run_id IS NULL OR ack_cancel.stage IS NULL OR ack_cancel.attempt IS NULL
       OR ack_cancel.fence IS NULL THEN
        RAISE EXCEPTION 'run_id, stage, attempt and fence must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(ack_cancel.stage, 'stage');
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = ack_cancel.run_id AND st.stage = ack_cancel.stage;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    -- who may call back: the callbacks' rule (src/pg/grants.c)
    IF NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'report for') THEN
        RETURN 'unknown';
    END IF;
    -- the cancelled attempt is the one whose fence the cancel superseded
    -- (stage.cancelled names it; 0.1.0 grew fences by one)
    IF s.attempt <> ack_cancel.attempt OR s.state <> 'cancelled'
       OR NOT EXISTS (SELECT 1 FROM wfe.events AS e
                       WHERE e.run_id = s.run_id AND e.stage = s.stage AND e.attempt = s.attempt
                         AND e.type = 'stage.cancelled'
                         AND coalesce((e.detail ->> 'cancelled_fence')::bigint,
                                      (e.detail ->> 'fence')::bigint - 1) = ack_cancel.fence)
    THEN
        PERFORM wfe._event(s.run_id, s.tenant, s.stage, ack_cancel.attempt, 'callback.stale',
                           jsonb_build_object('callback', 'ack_cancel', 'fence', ack_cancel.fence));
        RETURN 'stale';
    END IF;
    PERFORM wfe._event(s.run_id, s.tenant, s.stage, s.attempt, 'stage.cancel_acknowledged',
                       jsonb_build_object('fence', ack_cancel.fence));
    RETURN 'accepted';
END
$$;



-- Operators act for their tenants only, within the admission limits, and
-- count reopened runs against max_runs_in_flight (issue 20, items 1, 10,
-- 12; docs: operations.md "Security model").  The run admission a submit
-- passes is one function, wfe._admit_run, which wfe._operate calls too;
-- the operators' functions check their arguments and the run's tenant
-- through wfe._operator_target, which replaces wfe._require_stage.
CREATE FUNCTION wfe._admit_run(p_tenant text, p_again text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_limit int;
    v_live  bigint;
BEGIN
    SELECT t.max_runs_in_flight INTO v_limit FROM wfe.tenant_limits AS t
     WHERE t.tenant = p_tenant AND t.max_runs_in_flight IS NOT NULL;
    IF v_limit IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_runs_in_flight'), hashtext(p_tenant));
    SELECT count(*) INTO v_live FROM wfe.runs AS x WHERE x.tenant = p_tenant AND x.finished_at IS NULL;
    IF v_live >= v_limit THEN
        RAISE EXCEPTION 'tenant "%" has % runs in flight, its max_runs_in_flight', p_tenant, v_live
            USING ERRCODE = 'configuration_limit_exceeded',
                  DETAIL = format('Limit max_runs_in_flight = %s (wfe.tenant_limits).', v_limit),
                  HINT = format('%s again when a run has finished, or raise the limit with wfe.configure_tenant.',
                                p_again);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._admit_run(text, text) IS
'Admits one more run of a tenant in flight (a submit, or a redrive or skip_stage reopening a failed run): 53400 at its max_runs_in_flight.';
REVOKE ALL ON FUNCTION wfe._admit_run(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL,
                           options jsonb DEFAULT '{}')
RETURNS TABLE (run_id bigint, accepted boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    d          wfe.definitions;
    r          wfe.runs;
    v_context  jsonb := coalesce(submit.context, '{}');
    v_opts     jsonb := coalesce(submit.options, '{}');
    v_tenant   text;
    v_priority int := 0;
    v_deadline bigint;
    v_start    timestamptz;
    v_existing bigint;
    v_bad      text;
BEGIN
    IF submit.workflow IS NULL THEN
        RAISE EXCEPTION 'workflow must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- the admission limits, before anything is built from the arguments
    PERFORM wfe._admit_name(submit.workflow, 'workflow');
    PERFORM wfe._admit_name(submit.idempotency_key, 'idempotency_key');
    PERFORM wfe._admit(v_context, 'context');
    PERFORM wfe._admit(v_opts, 'options');
    IF jsonb_typeof(v_context) <> 'object' THEN
        RAISE EXCEPTION 'context must be a JSON object, not %', jsonb_typeof(v_context)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(v_opts) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, not %', jsonb_typeof(v_opts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(v_opts) = 'object' THEN
        PERFORM wfe._admit_name(k, 'submit option key') FROM jsonb_object_keys(v_opts) AS k;
        IF jsonb_typeof(v_opts -> 'execution_context') = 'string' THEN
            PERFORM wfe._admit_name(v_opts ->> 'execution_context', 'execution_context');
        END IF;
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(v_opts) AS k
     WHERE k NOT IN ('tenant', 'execution_context', 'run_deadline_ms', 'priority', 'not_before');
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown submit option: %', v_bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Options are tenant, execution_context, run_deadline_ms, priority and not_before.';
    END IF;
    v_tenant := coalesce(v_opts ->> 'tenant', 'default');
    IF v_tenant !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'tenant "%" is not valid', v_tenant
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
    -- a role submits only for the tenants it acts for, the default one too
    IF NOT wfe._tenant_ok(v_tenant) THEN
        RAISE EXCEPTION 'role "%" does not act for tenant "%"', wfe._caller(), v_tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps a role to a tenant with wfe.add_tenant_member(role, tenant).';
    END IF;
    IF v_opts ? 'priority' THEN
        IF jsonb_typeof(v_opts -> 'priority') <> 'number'
           OR (v_opts ->> 'priority')::numeric NOT BETWEEN -1000000 AND 1000000
           OR (v_opts ->> 'priority')::numeric % 1 <> 0 THEN
            RAISE EXCEPTION 'priority must be an integer between -1000000 and 1000000, not %', v_opts -> 'priority'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_priority := (v_opts ->> 'priority')::int;
    END IF;
    IF v_opts ? 'run_deadline_ms' THEN
        IF jsonb_typeof(v_opts -> 'run_deadline_ms') <> 'number'
           OR (v_opts ->> 'run_deadline_ms')::numeric < 1
           OR (v_opts ->> 'run_deadline_ms')::numeric % 1 <> 0 THEN
            RAISE EXCEPTION 'run_deadline_ms must be a positive integer, not %', v_opts -> 'run_deadline_ms'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF v_opts ? 'not_before' THEN
        BEGIN
            v_start := (v_opts ->> 'not_before')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'not_before must be a timestamp, not %', v_opts -> 'not_before'
                USING ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    IF v_opts ? 'execution_context' AND jsonb_typeof(v_opts -> 'execution_context') <> 'string' THEN
        RAISE EXCEPTION 'execution_context must be a string' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    d := wfe._submittable(submit.workflow);
    v_deadline := coalesce((v_opts ->> 'run_deadline_ms')::bigint, (d.plan ->> 'run_deadline_ms')::bigint);

    -- The definition's context_schema, checked by the one validator.
    IF jsonb_typeof(d.plan -> 'context_schema') IN ('object', 'boolean') THEN
        v_bad := wfe._validate(d.plan -> 'context_schema', v_context);
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'context does not satisfy the context_schema of %@%: %', d.workflow, d.version, v_bad
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The message names the context path and the schema keyword it breaks.';
        END IF;
    END IF;

    IF submit.idempotency_key IS NOT NULL THEN
        v_existing := wfe._idempotent_run(v_tenant, d.workflow, submit.idempotency_key, v_context);
        IF v_existing IS NOT NULL THEN
            -- an insert, not a counter on the run: no lock on a run in flight
            PERFORM wfe._event(v_existing, v_tenant, NULL, NULL, 'run.deduplicated',
                               jsonb_build_object('by', session_user));
            RETURN QUERY SELECT v_existing, false;
            RETURN;
        END IF;
    END IF;

    -- Admission: the tenant's runs in flight (wfe.configure_tenant)
    PERFORM wfe._admit_run(v_tenant, 'Submit');

    INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version,
                               compiler_version, engine_version, contracts, context, execution_context,
                               idempotency_key, priority, not_before, deadline_at, form)
    VALUES (v_tenant, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe'),
            (SELECT coalesce(jsonb_object_agg(c.ref, jsonb_build_object('kind', c.kind, 'queue', c.queue,
                                                                         'handler', c.handler::text)), '{}')
               FROM wfe.contracts AS c
              WHERE c.ref IN (SELECT jsonb_array_elements_text(d.plan -> 'contracts'))),
            v_context, coalesce(v_opts ->> 'execution_context', d.plan ->> 'context'),
            submit.idempotency_key, v_priority, v_start,
            now() + make_interval(secs => v_deadline / 1000.0), d.plan ->> 'form')
    ON CONFLICT (tenant, workflow, idempotency_key)
       WHERE idempotency_key IS NOT NULL AND state NOT IN ('failed', 'cancelled')
       DO NOTHING
    RETURNING x.* INTO r;
    IF NOT FOUND THEN
        -- A concurrent submit with the same key won: answer with its run.
        -- (Should that run have failed in between, the key is free again:
        -- the caller's retry starts a new run.)
        v_existing := wfe._idempotent_run(v_tenant, d.workflow, submit.idempotency_key, v_context);
        IF v_existing IS NULL THEN
            RAISE EXCEPTION 'idempotency key "%" was released while this submit ran', submit.idempotency_key
                USING ERRCODE = 'serialization_failure',
                      HINT = 'Submit again: the run that held the key has ended failed or cancelled.';
        END IF;
        PERFORM wfe._event(v_existing, v_tenant, NULL, NULL, 'run.deduplicated',
                           jsonb_build_object('by', session_user));
        RETURN QUERY SELECT v_existing, false;
        RETURN;
    END IF;

    INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority,
                                awaits, exec_ms, queue_ms, heartbeat_ms)
    SELECT r.run_id, ps.stage, r.tenant, ps.ordinal, ps.type,
           CASE WHEN ps.type = 'worker' THEN ps.spec ->> 'queue' ELSE c.queue END,
           coalesce(ps.spec ->> 'worker', ps.spec ->> 'action'), c.handler, r.priority,
           coalesce((ps.spec ->> 'awaits')::boolean, true),
           (ps.spec ->> 'execution_deadline_ms')::int, (ps.spec ->> 'queue_deadline_ms')::int,
           (ps.spec ->> 'heartbeat_ms')::int
      FROM wfe.plan_stages AS ps
      LEFT JOIN wfe.contracts AS c ON c.ref = coalesce(ps.spec ->> 'worker', ps.spec ->> 'action')
     WHERE ps.definition_id = d.definition_id;

    INSERT INTO wfe.events (run_id, tenant, type, detail)
    VALUES (r.run_id, r.tenant, 'run.submitted',
            jsonb_build_object('workflow', r.workflow, 'version', r.version,
                               'digest', r.definition_digest, 'idempotency_key', r.idempotency_key));
    IF r.deadline_at IS NOT NULL THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'run_deadline', r.deadline_at);
        PERFORM wfe._wake(r.deadline_at);
    END IF;
    IF v_start IS NOT NULL AND v_start > now() THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'not_before', v_start);
        PERFORM wfe._wake(v_start);
    ELSE
        PERFORM wfe._start_run(r.run_id);
    END IF;
    RETURN QUERY SELECT r.run_id, true;
END
$$;
COMMENT ON FUNCTION wfe.submit(text, jsonb, text, jsonb) IS
'Starts a run of the active (or a named approved) version, in the caller''s transaction; an idempotency key returns the earlier run with accepted = false.';

CREATE OR REPLACE FUNCTION wfe.cache_invalidate(key text DEFAULT NULL, contract text DEFAULT NULL,
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

COMMENT ON FUNCTION wfe._operate(bigint, text, text, text, text, text) IS
'An operator''s redrive, skip, fail or redispatch of one stage, through the step core under the run''s lock; 55000 when the core refuses, 53400 when reopening the run would pass its tenant''s max_runs_in_flight.';

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

CREATE OR REPLACE FUNCTION wfe.redrive(run_id bigint, stage text, reason text DEFAULT NULL)
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
    PERFORM wfe._operate(redrive.run_id, redrive.stage, 'redrive', NULL, session_user, redrive.reason);
    PERFORM wfe._resolve_dead_letters(redrive.run_id, redrive.stage, 'redriven');
END
$$;
COMMENT ON FUNCTION wfe.redrive(bigint, text, text) IS
'Runs a failed or timed-out task again: a new attempt with a new fence; a run that ended failed is reopened and goes on from there.';

CREATE OR REPLACE FUNCTION wfe.skip_stage(run_id bigint, stage text, result jsonb DEFAULT '{}', reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._admit(skip_stage.result, 'the result');
    PERFORM wfe._operator_target(skip_stage.run_id, skip_stage.stage, skip_stage.reason);
    PERFORM wfe._operate(skip_stage.run_id, skip_stage.stage, 'skip',
                         coalesce(skip_stage.result, '{}')::text, session_user, skip_stage.reason);
    PERFORM wfe._resolve_dead_letters(skip_stage.run_id, skip_stage.stage, 'skipped');
END
$$;
COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';

CREATE OR REPLACE FUNCTION wfe.fail_stage(run_id bigint, stage text, reason text)
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
    PERFORM wfe._operate(fail_stage.run_id, fail_stage.stage, 'fail', fail_stage.reason, session_user,
                         fail_stage.reason);
    PERFORM wfe._resolve_dead_letters(fail_stage.run_id, fail_stage.stage, 'failed');
END
$$;
COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';

CREATE OR REPLACE FUNCTION wfe.redispatch(run_id bigint, stage text, reason text DEFAULT NULL)
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
    SELECT st.queue, q.delivery = 'broker', q.paused INTO v_queue, v_broker, v_paused
      FROM wfe.run_stages AS st LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.run_id = redispatch.run_id AND st.stage = redispatch.stage;
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
    PERFORM wfe._operate(redispatch.run_id, redispatch.stage, 'redispatch', NULL, session_user,
                         redispatch.reason);
END
$$;
COMMENT ON FUNCTION wfe.redispatch(bigint, text, text) IS
'Sends a queued or dispatched broker attempt again: same attempt, new fence, a new dispatch message (the old one''s accept is stale).';

CREATE OR REPLACE FUNCTION wfe.replay(run_id bigint, reason text DEFAULT NULL)
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
                       jsonb_build_object('by', session_user, 'reason', replay.reason, 'replay', v_new));
    PERFORM wfe._event(v_new, r.tenant, NULL, NULL, 'run.replay_of',
                       jsonb_build_object('by', session_user, 'reason', replay.reason, 'replay_of', r.run_id));
    PERFORM wfe._resolve_dead_letters(r.run_id, NULL, 'replayed');
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION wfe.replay(bigint, text) IS
'Starts a new run of an ended run''s pinned definition with its context, tenant, execution context and priority; the new run''s replay_of names the old one.';

CREATE OR REPLACE FUNCTION wfe.redrive_dead_letters(queue text, since timestamptz DEFAULT '-infinity', reason text DEFAULT NULL)
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

DROP FUNCTION wfe._require_stage(bigint, text);
