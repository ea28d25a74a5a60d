-- wfe--0.1.0--0.2.0.sql: what ALTER EXTENSION wfe UPDATE TO '0.2.0' runs
-- on a database that has wfe 0.1.0.
--
-- How this file is maintained
--
-- * It is written by hand, in the same commit as the change to src/sql/*.sql
--   it follows.  A fresh CREATE EXTENSION wfe builds 0.2.0 from src/sql; this
--   file must take a 0.1.0 database to exactly the same schema, and keep its
--   data.  test/tap/005_upgrade.pl checks both: it upgrades a 0.1.0 database
--   with runs in flight, finishes those runs, and compares its catalog with a
--   fresh 0.2.0 database's (test/tap/catalog.sql).  A difference fails the
--   test, which prints the objects that differ (+ missing here, - left over
--   from 0.1.0, ~ different), then the diff.  Run it alone with
--   WFE_TAP_ONLY='005_*' test/harness/run-all.sh tap.
-- * sql/wfe--0.1.0.sql is 0.1.0's install script as released (commit
--   52c2cd5), frozen: never edit it.  CREATE EXTENSION wfe VERSION '0.1.0'
--   runs it against the current wfe.so.
-- * The statements, by kind of change in src/sql:
--   - a new function, table, index, type, trigger: the same CREATE statement,
--     with its COMMENT ON and its GRANT (90_grants.sql, 91_runtime_grants.sql);
--   - a function whose body or attributes changed: CREATE OR REPLACE FUNCTION
--     with the whole new text copied from src/sql (the check compares
--     pg_get_functiondef, so the text must be the same);
--   - a function whose arguments or result type changed: DROP FUNCTION the
--     old signature, then CREATE the new one, and give it its COMMENT ON and
--     GRANTs again (DROP removes them);
--   - a new column: ALTER TABLE ... ADD COLUMN appends it, so add it at the
--     end of the CREATE TABLE in src/sql too (column order is compared: it
--     is the row type's order); a NOT NULL column needs a DEFAULT or a
--     backfill of the rows that exist;
--   - a new table holding users' data: pg_extension_config_dump, as in
--     src/sql/68_dump.sql;
--   - a dropped object: DROP it here (that also ends its membership);
--   - a new group role: the idempotent DO block of src/sql/10_roles.sql.
-- * Data: rows written by 0.1.0 must mean the same under 0.2.0.  Runs are in
--   flight during an upgrade (tasks claimed, retries and timers pending,
--   forks half joined, finalisers queued): if 0.2.0 stores a run's state
--   differently, convert those rows here, so that the workers' reports with
--   0.1.0 fences, the pending timers and the tick finish them.
-- * wfe.so: the new library serves both versions until the update is run,
--   and must keep exporting every C symbol that sql/wfe--0.1.0.sql binds
--   (grep "MODULE_PATHNAME" in it): wfe_compile_sql, wfe_plan_mermaid_sql,
--   wfe_validate_sql, wfe_bind_input_sql, wfe_eval_decision_sql,
--   wfe_stage_state_guard, wfe_run_state_guard, wfe_stage_transitions,
--   wfe_run_transitions, wfe_wake, wfe_worker_status.  The background
--   worker of the new library must cope with a 0.1.0 schema until the
--   update (at worst, log an error each round and go on).
-- * ALTER EXTENSION runs this file in one transaction, as the superuser, with
--   search_path set to wfe, pg_temp; as in src/sql, qualify every name
--   anyway.  No BEGIN or COMMIT here.
-- * When 0.2.0 is released this file is frozen too, and so is the install
--   script: copy the wfe--0.2.0.sql that make builds to sql/wfe--0.2.0.sql
--   (as was done for 0.1.0), make test/tap/upgrade/0.2.0/ like
--   upgrade/0.1.0/, start sql/wfe--0.2.0--0.3.0.sql, and point
--   test/tap/005_upgrade.pl at 0.2.0 (its header says what to change).
\echo Use "ALTER EXTENSION wfe UPDATE TO '0.2.0'" to load this file. \quit


-- 0.2.0: the run engine is C (src/engine.c over src/core/step.c).  The
-- tables are unchanged, so runs in flight go on as they are: 0.1.0's rows,
-- fences and timers mean the same to the new engine.  What changes is
-- functions: the recursive PL/pgSQL state machine goes, the engine's entry
-- points come, the callbacks become C, the claim walks the ready index.

-- wfe.run_stages: one CHECK (a C function) for the six with IN lists, which
-- the executor rebuilt from their text on every statement writing the table.
CREATE FUNCTION wfe._stage_row_ok(kind text, state text, attempt int, fence bigint,
                                   outcome text, skip_reason text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_stage_row_ok' LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION wfe._stage_row_ok(text, text, int, bigint, text, text) IS
'The CHECK of wfe.run_stages: known kind and state, attempt and fence not negative, outcome and skip_reason NULL or known.';
REVOKE ALL ON FUNCTION wfe._stage_row_ok(text, text, int, bigint, text, text) FROM PUBLIC;
ALTER TABLE wfe.run_stages
    DROP CONSTRAINT run_stages_kind,
    DROP CONSTRAINT run_stages_state,
    DROP CONSTRAINT run_stages_attempt,
    DROP CONSTRAINT run_stages_fence,
    DROP CONSTRAINT run_stages_outcome,
    DROP CONSTRAINT run_stages_skip_reason,
    ADD CONSTRAINT run_stages_valid
        CHECK (wfe._stage_row_ok(kind, state, attempt, fence, outcome, skip_reason));

-- The 0.1.0 state machine (replaced by the step core).
DROP FUNCTION wfe._activate(wfe.runs, text, text, text);
DROP FUNCTION wfe._arrive(wfe.runs, wfe.run_stages, text, text);
DROP FUNCTION wfe._attempt_completed(wfe.runs, text, jsonb);
DROP FUNCTION wfe._attempt_failed(wfe.runs, text, jsonb, boolean, text);
DROP FUNCTION wfe._backoff(jsonb, int);
DROP FUNCTION wfe._callback_gate(bigint, text, int, bigint, text, text, jsonb);
DROP FUNCTION wfe._enqueue(wfe.runs, text, jsonb, boolean);
DROP FUNCTION wfe._finish(bigint);
DROP FUNCTION wfe._next_finaliser(bigint);
DROP FUNCTION wfe._reject(wfe.run_stages, text, text);
DROP FUNCTION wfe._result_problem(wfe.runs, wfe.run_stages, jsonb);
DROP FUNCTION wfe._root(wfe.runs, boolean, jsonb);
DROP FUNCTION wfe._route(wfe.runs, text, text, text, text);
DROP FUNCTION wfe._set_intent(bigint, text, text);
DROP FUNCTION wfe._skip_unreachable(wfe.runs, text, text);
DROP FUNCTION wfe._spec(bigint, text);
DROP FUNCTION wfe._stage_done(wfe.runs, wfe.run_stages, text);
DROP FUNCTION wfe._start(wfe.runs, text);
DROP FUNCTION wfe._task_consider(wfe.runs, text);
DROP FUNCTION wfe._task_done(wfe.runs, text);
DROP FUNCTION wfe._tasks_maybe_complete(bigint);
DROP FUNCTION wfe._expire(bigint, text);

-- The engine's entry points (src/sql/61_runtime_core.sql).
CREATE FUNCTION wfe._start_run(run_id bigint)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_start_run' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._start_run(bigint) IS
'Releases a new run''s first stages: the entry (stages form) or every task without dependencies.';

CREATE FUNCTION wfe._timer_fired(run_id bigint, kind text, stage text, attempt int, fence bigint)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_timer_fired' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._timer_fired(bigint, text, text, int, bigint) IS
'A due timer: a retry queues a new attempt with a new fence, a delayed start starts the run, a run deadline fails it.';

CREATE FUNCTION wfe._expire(run_id bigint, stage text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_expire' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._expire(bigint, text) IS
'Times out an attempt past its queue, execution or heartbeat deadline: fenced, then retried or failed per policy.';

CREATE FUNCTION wfe._action_done(run_id bigint, stage text, result jsonb, error jsonb)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_action_done' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._action_done(bigint, text, jsonb, jsonb) IS
'An in-database action''s attempt ended: its result is checked like a worker''s; an error is retried per policy.';

CREATE FUNCTION wfe._cancel(run_id bigint, reason text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_cancel' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._cancel(bigint, text) IS
'Sets a run''s cancelled intent: in-flight attempts fenced and asked to stop, unstarted stages skipped, finalisers run.';

REVOKE ALL ON FUNCTION wfe._start_run(bigint), wfe._timer_fired(bigint, text, text, int, bigint),
    wfe._expire(bigint, text), wfe._action_done(bigint, text, jsonb, jsonb), wfe._cancel(bigint, text)
    FROM PUBLIC;

-- Changed functions (the same signatures: their grants stay).
CREATE OR REPLACE FUNCTION wfe._fire_timer(p_timer wfe.timers)
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
        -- it runs as the role that registered it (src/handler.c)
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

CREATE OR REPLACE FUNCTION wfe.accept_task(run_id bigint, stage text, attempt int, fence bigint, worker_id text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_accept_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt; a redelivery answers duplicate.';

CREATE OR REPLACE FUNCTION wfe.heartbeat(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_heartbeat'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) IS
'Records that a running attempt is alive, pushing out its heartbeat deadline; late or stale tells the worker to stop.';

CREATE OR REPLACE FUNCTION wfe.complete_task(run_id bigint, stage text, attempt int, fence bigint,
                                  result jsonb DEFAULT '{}')
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_complete_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) IS
'Reports an attempt''s result: accepted, duplicate, conflict, stale, late, invalid_result or unknown.';

CREATE OR REPLACE FUNCTION wfe.fail_task(run_id bigint, stage text, attempt int, fence bigint, error jsonb DEFAULT '{}',
                              retryable boolean DEFAULT true)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_fail_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) IS
'Reports a failed attempt: retried after a backoff while attempts remain (if retryable), else the stage fails and routes on.';

CREATE OR REPLACE FUNCTION wfe.cancel_run(run_id bigint, reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs;
BEGIN
    IF cancel_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(cancel_run.reason, 'reason');
    -- another tenant's run is answered as one that does not exist (and not locked)
    IF NOT coalesce((SELECT wfe._tenant_ok(x.tenant) FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id), false) THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF r.intent IS NOT NULL THEN
        PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'callback.late',
                           jsonb_build_object('callback', 'cancel_run', 'by', session_user));
        RETURN 'late';
    END IF;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.cancel_requested',
                       jsonb_build_object('by', session_user, 'reason', cancel_run.reason));
    PERFORM wfe._cancel(r.run_id, coalesce(cancel_run.reason, 'cancelled by ' || session_user));
    -- nothing is left to do about its dead letters
    UPDATE wfe.dead_letters AS d SET resolved_at = now(), resolved_by = session_user, resolution = 'cancelled'
     WHERE d.run_id = r.run_id AND d.resolved_at IS NULL;
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.cancel_run(bigint, text) IS
'Cancels a run: in-flight attempts are fenced and asked to stop, unstarted stages skipped, finalisers run; answers accepted, late or unknown.';

CREATE OR REPLACE FUNCTION wfe.claim_task(queue text, worker_id text, max_tasks int DEFAULT 1, lease_ms int DEFAULT NULL)
RETURNS SETOF wfe.task
AS 'MODULE_PATHNAME', 'wfe_claim_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.claim_task(text, text, int, int) IS
'Claims up to max_tasks ready tasks of a poll queue (SKIP LOCKED, highest priority then oldest), marks them running with an execution deadline.';

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
    v_limit    int;
    v_live     bigint;
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

    -- Admission: the tenant's runs in flight (wfe.configure_tenant).  One
    -- submit of a limited tenant at a time counts and inserts, so two cannot
    -- both take the last slot; the count is a statement of its own after the
    -- lock, so (under READ COMMITTED) it sees what the previous one committed.
    SELECT t.max_runs_in_flight INTO v_limit FROM wfe.tenant_limits AS t
     WHERE t.tenant = v_tenant AND t.max_runs_in_flight IS NOT NULL;
    IF v_limit IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('wfe.max_runs_in_flight'), hashtext(v_tenant));
        SELECT count(*) INTO v_live FROM wfe.runs AS x WHERE x.tenant = v_tenant AND x.finished_at IS NULL;
        IF v_live >= v_limit THEN
            RAISE EXCEPTION 'tenant "%" has % runs in flight, its max_runs_in_flight', v_tenant, v_live
                USING ERRCODE = 'configuration_limit_exceeded',
                      DETAIL = format('Limit max_runs_in_flight = %s (wfe.tenant_limits).', v_limit),
                      HINT = 'Submit again when a run has finished, or raise the limit with wfe.configure_tenant.';
        END IF;
    END IF;

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

-- The batch call (src/sql/63_workers.sql).
CREATE FUNCTION wfe.complete_tasks(reports jsonb)
RETURNS TABLE (run_id bigint, stage text, outcome text)
AS 'MODULE_PATHNAME', 'wfe_complete_tasks'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.complete_tasks(jsonb) IS
'Reports many completed attempts in one transaction ([{"run_id","stage","attempt","fence","result"}, ...]); one outcome per report, in run_id order.';

REVOKE ALL ON FUNCTION wfe.complete_tasks(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.complete_tasks(jsonb) TO wfe_worker;


-- The outbox publisher (src/sql/67_outbox.sql, src/publisher.c): the mark
-- is one statement for the rows and their stages (wfe._mark_published
-- replaces wfe._mark_dispatched), and the claim is told which rows the
-- publisher still holds, because it claims the next batch while the last
-- one is in flight.  Until this update has run, the new library's publisher
-- cannot claim (an error each round, in the server log): outbox rows wait,
-- as while the broker is down, and are published after it.
DROP FUNCTION wfe._mark_dispatched(bigint[]);
DROP FUNCTION wfe._outbox_claim(text, bigint, int);
CREATE FUNCTION wfe._outbox_claim(p_holder text, p_token bigint, p_max int, p_held bigint[])
RETURNS TABLE (id bigint, kind text, exchange text, routing_key text, message_id uuid,
               run_id bigint, created_at timestamptz, headers text, body text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token) THEN
        RETURN;
    END IF;
    -- rows this publisher claimed and no longer holds (their mark failed)
    -- are pending again, and picked again below
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by = p_holder AND o.id <> ALL (p_held);
    -- NB: pick along the pending index and update by primary key, so the
    -- claim costs the same however much published history the table holds
    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT o.id FROM wfe.outbox AS o
         WHERE o.state = 'pending' AND o.available_at <= now()
         ORDER BY o.available_at, o.id LIMIT p_max
           FOR UPDATE SKIP LOCKED
    )
    UPDATE wfe.outbox AS o
       SET state = 'claimed', claimed_by = p_holder, claimed_at = now(), attempts = o.attempts + 1
     WHERE o.id = ANY (ARRAY(SELECT picked.id FROM picked))
    RETURNING o.id, o.kind, o.exchange, o.routing_key, o.message_id, o.run_id, o.created_at,
              o.headers::text, o.body::text;
END
$$;
COMMENT ON FUNCTION wfe._outbox_claim(text, bigint, int, bigint[]) IS
'Publisher: claims up to p_max pending outbox rows (SKIP LOCKED, id order) while holding the lease; rows it claimed earlier and no longer holds (not in p_held) go back to pending first.';
REVOKE ALL ON FUNCTION wfe._outbox_claim(text, bigint, int, bigint[]) FROM PUBLIC;
CREATE FUNCTION wfe._mark_published(p_ids bigint[], p_by text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    WITH published AS (
        UPDATE wfe.outbox AS o
           SET state = 'published', published_at = now(), last_error = NULL
          FROM unnest(p_ids) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_by
        RETURNING o.kind, o.run_id, o.stage, o.attempt, o.fence
    ), dispatched AS (
        UPDATE wfe.run_stages AS st
           SET state = 'dispatched'
          FROM published AS o
         WHERE o.kind = 'dispatch' AND st.run_id = o.run_id AND st.stage = o.stage
           AND st.attempt = o.attempt AND st.fence = o.fence AND st.state = 'queued'
    )
    SELECT count(*) INTO n FROM published;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._mark_published(bigint[], text) IS
'Marks the confirmed rows p_by holds claimed published, and moves the attempts of their dispatches from queued to dispatched.';
REVOKE ALL ON FUNCTION wfe._mark_published(bigint[], text) FROM PUBLIC;
CREATE OR REPLACE FUNCTION wfe._outbox_mark(p_holder text, p_token bigint, p_published bigint[],
                                 p_failed bigint[], p_error text, p_unroutable bigint[])
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    -- fenced: a publisher that lost the lease marks nothing (its rows are
    -- claimed by a dead holder and go back to pending on repair)
    PERFORM 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token FOR SHARE;
    IF NOT FOUND THEN
        RAISE WARNING 'wfe publisher % lost its lease (token %): nothing marked', p_holder, p_token;
        RETURN 0;
    END IF;
    n := wfe._mark_published(p_published, p_holder);
    -- not confirmed: pending again after an exponential backoff
    IF cardinality(p_failed) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL, last_error = p_error,
               available_at = now() + make_interval(secs => least(60, 0.1 * power(2, least(o.attempts, 10))))
          FROM unnest(p_failed) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
    END IF;
    IF cardinality(p_unroutable) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL,
               last_error = 'unroutable: no queue is bound for ' || o.exchange || ' ' || o.routing_key,
               available_at = now() + make_interval(secs => least(300, power(2, least(o.attempts, 8))))
          FROM unnest(p_unroutable) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
        RAISE WARNING 'wfe publisher: % outbox rows were unroutable and stay pending (ids %)',
              cardinality(p_unroutable), p_unroutable;
    END IF;
    RETURN n;
END
$$;
CREATE OR REPLACE FUNCTION wfe.outbox_ack(ids bigint[], relay text)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF outbox_ack.ids IS NULL OR outbox_ack.relay IS NULL THEN
        RAISE EXCEPTION 'ids and relay must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN wfe._mark_published(outbox_ack.ids, outbox_ack.relay);
END
$$;

-- Pausing and resuming a queue, for wfe_operator (src/sql/67_outbox.sql,
-- 91_runtime_grants.sql), and wfe_admin may read the queues it configures.
CREATE FUNCTION wfe._set_queue_paused(p_queue text, p_paused boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
BEGIN
    SELECT s.delivery, s.max_in_flight INTO q
      FROM wfe.queues AS s WHERE s.queue = p_queue FOR UPDATE;
    PERFORM wfe.configure_queue(p_queue, coalesce(q.delivery, 'poll'), q.max_in_flight, p_paused);
END
$$;
COMMENT ON FUNCTION wfe._set_queue_paused(text, boolean) IS
'Sets only a queue''s paused flag (an unconfigured queue becomes a configured poll queue).';

CREATE FUNCTION wfe.pause_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(pause_queue.queue, true);
END;
COMMENT ON FUNCTION wfe.pause_queue(text) IS
'Pauses a queue: claim_task returns nothing for it and no dispatch is written; its tasks stay queued.';

CREATE FUNCTION wfe.resume_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(resume_queue.queue, false);
END;
COMMENT ON FUNCTION wfe.resume_queue(text) IS
'Resumes a paused queue: a broker queue dispatches what waited, a poll queue notifies its pollers.';
REVOKE ALL ON FUNCTION wfe._set_queue_paused(text, boolean), wfe.pause_queue(text), wfe.resume_queue(text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    wfe.pause_queue(text),
    wfe.resume_queue(text)
    TO wfe_admin, wfe_operator;
GRANT SELECT ON wfe.queues TO wfe_admin;

-- fences are capabilities: ack_cancel finds the cancelled attempt's fence in
-- stage.cancelled (cancelled_fence; for a 0.1.0 cancellation, fence - 1)
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
    -- who may call back: the callbacks' rule (src/grants.c)
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
COMMENT ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) IS
'Records a worker''s acknowledgement of a cooperative cancellation request.';

-- ---------------------------------------------------------------------
-- 0.2.0: the trust boundary (docs/operations.md "Security model").
-- ---------------------------------------------------------------------

-- Who calls (SET ROLE included), and the admission limits at the door.
CREATE FUNCTION wfe._caller()
RETURNS regrole AS 'MODULE_PATHNAME', 'wfe_caller' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._caller() IS
'The role acting in this session, SET ROLE included (inside SECURITY DEFINER functions current_user is the owner).';
CREATE FUNCTION wfe._admit(value jsonb, what text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_admit' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._admit(jsonb, text) IS
'Raises 54000 if value (named what in the message) is larger than wfe.max_payload_bytes or deeper than wfe.max_json_depth.';
CREATE FUNCTION wfe._admit_name(value text, what text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_admit_name_sql' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._admit_name(text, text) IS
'Raises 54000 if value is longer than wfe.max_name_bytes, 22023 if it holds a control character.';

-- Handlers run as their registrant: 0.1.0 recorded who registered a
-- contract by name (created_by); the role of that name, where it still
-- exists, is whom the handler runs as from now on.  A handler whose
-- registrant is gone, or whose function another role owns, fails its
-- attempts with the reason until it is registered again.
ALTER TABLE wfe.contracts ADD COLUMN run_as regrole;
ALTER TABLE wfe.contracts ADD CONSTRAINT contracts_run_as CHECK (handler IS NOT NULL OR run_as IS NULL);
COMMENT ON COLUMN wfe.contracts.run_as IS 'In-database action: the role its handler runs as -- the role that registered it (SET ROLE included)';
ALTER TABLE wfe.contracts DISABLE TRIGGER contracts_immutable;
UPDATE wfe.contracts AS c SET run_as = r.oid::pg_catalog.regrole
  FROM pg_catalog.pg_roles AS r
 WHERE c.handler IS NOT NULL AND r.rolname OPERATOR(pg_catalog.=) c.created_by;
ALTER TABLE wfe.contracts ENABLE TRIGGER contracts_immutable;
CREATE FUNCTION wfe._check_handler(handler regprocedure, run_as regrole)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_check_handler' LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION wfe._check_handler(regprocedure, regrole) IS
'Raises 42501 unless handler may run as run_as: owned by it or a superuser, not in a temporary schema, executable by it.';
CREATE FUNCTION wfe._invoke_handler(handler regprocedure, run_as regrole, input jsonb)
RETURNS jsonb AS 'MODULE_PATHNAME', 'wfe_invoke_handler' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._invoke_handler(regprocedure, regrole, jsonb) IS
'Calls handler(input) as run_as, under SECURITY_RESTRICTED_OPERATION, after checking it still may.';
CREATE OR REPLACE FUNCTION wfe._register_contract(p_ref text, p_kind text, p_queue text,
                                       p_handler regprocedure,
                                       p_input_schema jsonb, p_output_schema jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    version_text text;
    fn           record;
    old          wfe.contracts;
    differs      text[];
    inserted     bigint;
BEGIN
    IF p_ref IS NULL THEN
        RAISE EXCEPTION 'contract reference must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_ref !~ '^[a-z][a-z0-9_.-]*@[1-9][0-9]*$' THEN
        RAISE EXCEPTION 'invalid contract reference "%"', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A contract reference is name@N: a name matching [a-z][a-z0-9_.-]* and a version number from 1, e.g. cache.lookup@1.';
    END IF;
    version_text := split_part(p_ref, '@', 2);
    IF length(version_text) > 10 OR version_text::numeric > 2147483647 THEN
        RAISE EXCEPTION 'version of contract reference "%" is out of range', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Contract versions are integers from 1 to 2147483647.';
    END IF;

    IF p_kind = 'worker' THEN
        IF p_queue IS NULL THEN
            RAISE EXCEPTION 'worker contract "%" needs a queue', p_ref
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
    ELSIF (p_handler IS NULL) = (p_queue IS NULL) THEN
        RAISE EXCEPTION 'action contract "%" needs exactly one of handler and queue', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An action either runs in the database (handler => a function (input jsonb) RETURNS jsonb) or is dispatched to workers (queue => a queue name).';
    END IF;

    IF p_queue IS NOT NULL AND p_queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid queue name "%"', p_queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name matches [a-z][a-z0-9_.-]* and has at most 63 characters.';
    END IF;

    IF p_handler IS NOT NULL THEN
        SELECT p.prokind, p.pronargs, p.proargtypes, p.prorettype, p.proretset
          INTO fn
          FROM pg_catalog.pg_proc AS p
         WHERE p.oid = p_handler;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'action handler with OID % does not exist', p_handler::oid
                USING ERRCODE = 'undefined_function';
        END IF;
        IF fn.prokind <> 'f' OR fn.pronargs <> 1
           OR fn.proargtypes[0] <> 'pg_catalog.jsonb'::regtype
           OR fn.prorettype <> 'pg_catalog.jsonb'::regtype OR fn.proretset
        THEN
            RAISE EXCEPTION 'action handler % must be a function (input jsonb) RETURNS jsonb', p_handler
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Declare it as CREATE FUNCTION ... (input jsonb) RETURNS jsonb; wfe runs it with the bound input and stores its result.';
        END IF;
        -- it will run as the caller: refuse what the caller could not run itself
        PERFORM wfe._check_handler(p_handler, wfe._caller());
    END IF;

    -- NULL schemas mean "no constraint", like the default '{}'.
    p_input_schema := coalesce(p_input_schema, '{}');
    p_output_schema := coalesce(p_output_schema, '{}');
    PERFORM wfe._check_json_schema(p_input_schema, 'input_schema');
    PERFORM wfe._check_json_schema(p_output_schema, 'output_schema');

    INSERT INTO wfe.contracts AS c
           (ref, kind, name, version, queue, handler, input_schema, output_schema,
            created_at, created_by, run_as)
    VALUES (p_ref, p_kind, split_part(p_ref, '@', 1), version_text::int, p_queue,
            p_handler, p_input_schema, p_output_schema, now(), session_user,
            CASE WHEN p_handler IS NOT NULL THEN wfe._caller() END)
    ON CONFLICT (ref) DO NOTHING;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 THEN
        RETURN;
    END IF;

    -- The ref exists (perhaps registered concurrently, now committed):
    -- identical content is a no-op, anything else is refused.
    SELECT * INTO STRICT old FROM wfe.contracts AS c WHERE c.ref = p_ref;
    differs := array_remove(ARRAY[
        CASE WHEN old.kind <> p_kind THEN 'kind' END,
        CASE WHEN old.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN old.handler IS DISTINCT FROM p_handler THEN 'handler' END,
        CASE WHEN old.input_schema <> p_input_schema THEN 'input_schema' END,
        CASE WHEN old.output_schema <> p_output_schema THEN 'output_schema' END], NULL);
    IF cardinality(differs) > 0 THEN
        RAISE EXCEPTION 'contract "%" is already registered with different content', p_ref
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('A registered contract version is immutable; this registration differs in %s.',
                                  array_to_string(differs, ', ')),
                  HINT = format('Register the changed contract as a new version, e.g. %s@%s.',
                                old.name, old.version::bigint + 1);
    END IF;
END
$$;

COMMENT ON FUNCTION wfe._register_contract(text, text, text, regprocedure, jsonb, jsonb) IS
'Validates and stores a contract; identical re-registration is a no-op, different content raises 23505.';

-- Queue grants.  0.1.0 let every wfe_worker serve every queue; so that
-- upgraded workers keep working, every queue known so far is granted to
-- wfe_worker.  Revoke those grants (wfe.revoke_queue) to narrow them.
CREATE TABLE wfe.queue_grants (
    queue      text NOT NULL
               CONSTRAINT queue_grants_queue_format CHECK (queue ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    role       regrole NOT NULL,
    granted_by name NOT NULL DEFAULT session_user,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, role)
);
COMMENT ON TABLE wfe.queue_grants IS
'Which roles may claim from, accept on and report for each queue (wfe.grant_queue, wfe.revoke_queue); superusers and wfe_admin always may.';
CREATE FUNCTION wfe._queue_grants_changed()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_queue_grants_changed' LANGUAGE C;
COMMENT ON FUNCTION wfe._queue_grants_changed() IS
'Trigger: every backend drops its cached queue grants when this transaction commits.';
CREATE TRIGGER queue_grants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wfe.queue_grants
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._queue_grants_changed();
CREATE FUNCTION wfe._may_call_back(queue text, tenant text, handler boolean, run_id bigint, stage text, what text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_may_call_back_sql' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._may_call_back(text, text, boolean, bigint, text, text) IS
'Whether the session''s role may call back about a stage: true if it serves the queue; false (answer unknown) if it neither serves it nor acts for the tenant; else 42501.';
CREATE FUNCTION wfe._check_queue_grant(p_role regrole, p_queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_queue IS NULL THEN
        RAISE EXCEPTION 'role and queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_role = 0 THEN
        RAISE EXCEPTION 'a queue cannot be granted to PUBLIC'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Grant it to a role, e.g. wfe_worker for every worker, or one login role per worker pool.';
    END IF;
    IF p_queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid queue name "%"', left(p_queue, 80)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name matches [a-z][a-z0-9_.-]* and has at most 63 characters.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_queue_grant(regrole, text) IS
'Raises 22004 or 22023 unless role is a real role and queue a valid queue name.';
CREATE FUNCTION wfe.grant_queue(role regrole, queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_queue_grant(grant_queue.role, grant_queue.queue);
    INSERT INTO wfe.queue_grants (queue, role) VALUES (grant_queue.queue, grant_queue.role)
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.grant_queue(regrole, text) IS
'Lets role (and every role with its privileges) claim from, accept on and report for queue. Idempotent.';
CREATE FUNCTION wfe.revoke_queue(role regrole, queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_queue_grant(revoke_queue.role, revoke_queue.queue);
    DELETE FROM wfe.queue_grants AS g WHERE g.queue = revoke_queue.queue AND g.role = revoke_queue.role;
END
$$;
COMMENT ON FUNCTION wfe.revoke_queue(regrole, text) IS
'Takes back a grant_queue; attempts the role holds can no longer be reported by it. Idempotent.';
SELECT pg_catalog.pg_extension_config_dump('wfe.queue_grants', '');
INSERT INTO wfe.queue_grants (queue, role, granted_by)
SELECT DISTINCT q.queue, 'wfe_worker'::pg_catalog.regrole, 'wfe upgrade to 0.2.0'
  FROM (SELECT c.queue FROM wfe.contracts AS c WHERE c.queue IS NOT NULL
        UNION SELECT x.queue FROM wfe.queues AS x) AS q;

-- Each item of a worker round in a subtransaction of its own.
CREATE FUNCTION wfe._engine_error(run_id bigint, stage text, error jsonb)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_engine_error' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._engine_error(bigint, text, jsonb) IS
'An item of a worker round (a firing, an expiry, an action) raised for this run: records run.engine_error and fails the run.';
-- (0.2.0 gave it p_timer_id: an item that deadlocked is tried again)
CREATE FUNCTION wfe._item_failed(p_run_id bigint, p_stage text, p_what text,
                                 p_sqlstate text, p_message text, p_timer_id bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_error   jsonb := jsonb_build_object(
                  'code', 'engine.error', 'what', p_what, 'sqlstate', p_sqlstate,
                  'message', left(regexp_replace(p_message, '[[:cntrl:]]+', ' ', 'g'), 1000));
    v_state   text;
    v_message text;
    v_other   text;
BEGIN
    IF p_sqlstate LIKE '40%' THEN
        RAISE WARNING 'wfe: % of run % raised % (%): it is tried again in a second', p_what, p_run_id,
            p_sqlstate, v_error ->> 'message';
        UPDATE wfe.timers AS t SET due_at = now() + interval '1 second', fired_at = NULL
         WHERE t.timer_id = p_timer_id;
        UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
        UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
           AND st.handler IS NOT NULL;
        RETURN;
    END IF;
    RAISE WARNING 'wfe: % of run % raised % (%): the run is failed', p_what, p_run_id, p_sqlstate,
        v_error ->> 'message';
    BEGIN
        PERFORM wfe._engine_error(p_run_id, p_stage, v_error);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: failing run % raised % too: it is put off for a minute', p_run_id, v_state;
        BEGIN
            UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
            UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
               AND st.handler IS NOT NULL;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: run % cannot be put off (%)', p_run_id, v_other;
        END;
        BEGIN
            INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
            SELECT r.run_id, r.tenant, p_stage, NULL, 'run.engine_error',
                   jsonb_build_object('error', v_error, 'failing_run', jsonb_build_object(
                       'sqlstate', v_state,
                       'message', left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000)))
              FROM wfe.runs AS r WHERE r.run_id = p_run_id;
        EXCEPTION WHEN OTHERS THEN
            -- nothing of this run can be written: the log line is all there is
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: the error of run % cannot be recorded (%)', p_run_id, v_other;
        END;
    END;
END
$$;
COMMENT ON FUNCTION wfe._item_failed(bigint, text, text, text, text, bigint) IS
'An item of a worker round (a timer: p_timer_id) raised: put it off a second for a deadlock or serialization failure, else fail its run (run.engine_error), or record the error and put the item off; logs the run id.';
CREATE OR REPLACE FUNCTION wfe._worker_round(p_max int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t         wfe.timers;
    c         record;
    done      int := 0;
    v_state   text;
    v_message text;
BEGIN
    -- First, while this transaction holds no lock yet (so it may wait for
    -- the admission locks in their order): the held tasks that an
    -- admission's missed try kept back (69_admission.sql).
    BEGIN
        PERFORM wfe._recheck_admission();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking held tasks raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
    -- Lock the batch first, then fire it in run order: each firing takes
    -- its run's lock and keeps it, so two firers (this worker, a manual
    -- wfe.tick()) firing in due order could each wait for a run the other
    -- holds -- a deadlock (test/isolation/specs/tick-lock-order.spec).
    FOR t IN SELECT d.* FROM (SELECT * FROM wfe.timers AS x
                               WHERE x.fired_at IS NULL AND x.due_at <= now()
                               ORDER BY x.due_at LIMIT p_max
                                 FOR UPDATE SKIP LOCKED) AS d
              ORDER BY d.run_id, d.due_at, d.timer_id
    LOOP
        -- each item in a subtransaction of its own: one that raises rolls
        -- back alone, and the round goes on (delivery.md)
        BEGIN
            PERFORM wfe._fire_timer(t);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            UPDATE wfe.timers AS x SET fired_at = now() WHERE x.timer_id = t.timer_id;
            PERFORM wfe._item_failed(t.run_id, t.stage, t.kind || ' timer', v_state, v_message, t.timer_id);
        END;
        done := done + 1;
    END LOOP;
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at <= now()
              ORDER BY st.deadline_at LIMIT p_max
    LOOP
        BEGIN
            IF wfe._expire(c.run_id, c.stage) THEN
                done := done + 1;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            PERFORM wfe._item_failed(c.run_id, c.stage, 'deadline', v_state, v_message);
            done := done + 1;
        END;
    END LOOP;
    RETURN done;
END
$$;
COMMENT ON FUNCTION wfe._worker_round(int) IS
'Releases what missed admission tries held back, fires up to p_max due timers and times out up to p_max expired attempts; returns how many timers and attempts.';
CREATE OR REPLACE FUNCTION wfe._run_next_handler(p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c         record;
    v_state   text;
    v_message text;
BEGIN
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.state = 'queued' AND st.handler IS NOT NULL AND st.ready_at <= now()
              ORDER BY st.ready_at LIMIT 20
    LOOP
        BEGIN
            IF wfe._run_handler(c.run_id, c.stage, p_by) THEN
                RETURN true;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            -- the handler's own errors fail its attempt inside _run_handler;
            -- this is anything else (binding what it released, a bug)
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            PERFORM wfe._item_failed(c.run_id, c.stage, 'action', v_state, v_message);
            RETURN true;
        END;
    END LOOP;
    RETURN false;
END
$$;
COMMENT ON FUNCTION wfe._run_next_handler(text) IS
'Runs one queued in-database action (its own transaction when called by the worker); false when there was none.';

-- Retention also removes callbacks about runs that do not exist.
CREATE INDEX events_unknown ON wfe.events (at) WHERE type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed');
CREATE OR REPLACE FUNCTION wfe._retention(p_retention_s int, p_batch int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz := now() - make_interval(secs => p_retention_s);
    v_runs   bigint[];
    n        int := 0;
BEGIN
    SELECT array_agg(x.run_id) INTO v_runs
      FROM (SELECT r.run_id FROM wfe.runs AS r
             WHERE r.finished_at < v_cutoff
             ORDER BY r.finished_at LIMIT p_batch
               FOR UPDATE SKIP LOCKED) AS x;
    IF v_runs IS NOT NULL THEN
        DELETE FROM wfe.events AS e WHERE e.run_id = ANY (v_runs);
        DELETE FROM wfe.outbox AS o WHERE o.run_id = ANY (v_runs) AND o.state = 'published';
        DELETE FROM wfe.runs AS r WHERE r.run_id = ANY (v_runs);     -- cascades to stages, outputs, timers
        n := cardinality(v_runs);
    END IF;
    DELETE FROM wfe.outbox AS o
     WHERE o.id IN (SELECT o2.id FROM wfe.outbox AS o2
                     WHERE o2.state = 'published' AND o2.published_at < v_cutoff
                     LIMIT p_batch);
    -- expired result cache entries (a read treats them as a miss already)
    DELETE FROM wfe.cache_entries AS c
     WHERE c.key IN (SELECT c2.key FROM wfe.cache_entries AS c2
                      WHERE c2.expires_at < now() LIMIT p_batch);
    -- callbacks about runs that never existed (or are gone)
    DELETE FROM wfe.events AS e
     WHERE e.event_id IN (SELECT e2.event_id FROM wfe.events AS e2
                           WHERE e2.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
                             AND e2.at < v_cutoff
                             AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e2.run_id)
                           LIMIT p_batch);
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their history), old published outbox rows and expired result cache entries.';
CREATE OR REPLACE FUNCTION wfe.fetch_payload(ref jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    p wfe.payloads;
BEGIN
    IF ref ->> 'key' IS NULL OR ref ->> 'sha256' IS NULL
       OR ref ->> 'key' IS DISTINCT FROM 'sha256:' || (ref ->> 'sha256') THEN
        RAISE EXCEPTION 'payload reference is malformed or its hash does not match its key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('key %s, sha256 %s', ref ->> 'key', ref ->> 'sha256');
    END IF;
    -- the key (a SHA-256) is only learnt from an envelope; and only a role
    -- that serves some queue may ask
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = wfe._caller())
       AND NOT pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE')
       AND NOT EXISTS (SELECT 1 FROM wfe.queue_grants AS g
                        WHERE pg_catalog.pg_has_role(wfe._caller(), g.role, 'USAGE')) THEN
        RAISE EXCEPTION 'role "%" serves no queue and may not fetch payloads', wfe._caller()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator grants a queue with wfe.grant_queue(role, queue).';
    END IF;
    SELECT * INTO p FROM wfe.payloads AS x WHERE x.key = ref ->> 'key';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payload % does not exist', ref ->> 'key' USING ERRCODE = 'undefined_object';
    END IF;
    -- verify the content against its name: a tampered row is refused
    IF 'sha256:' || encode(sha256(convert_to(p.body::text, 'UTF8')), 'hex') <> p.key THEN
        RAISE EXCEPTION 'payload % failed its SHA-256 check', p.key USING ERRCODE = 'data_corrupted';
    END IF;
    RETURN p.body;
END
$$;
COMMENT ON FUNCTION wfe.fetch_payload(jsonb) IS
'The input a large-track envelope refers to, after checking its SHA-256 against the reference.';

REVOKE ALL ON FUNCTION
    wfe._caller(), wfe._admit(jsonb, text), wfe._admit_name(text, text),
    wfe._check_handler(regprocedure, regrole), wfe._invoke_handler(regprocedure, regrole, jsonb),
    wfe._queue_grants_changed(), wfe._check_queue_grant(regrole, text),
    wfe._may_call_back(text, text, boolean, bigint, text, text),
    wfe.grant_queue(regrole, text), wfe.revoke_queue(regrole, text),
    wfe._engine_error(bigint, text, jsonb), wfe._item_failed(bigint, text, text, text, text, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    wfe.grant_queue(regrole, text),
    wfe.revoke_queue(regrole, text)
    TO wfe_admin;
GRANT SELECT ON wfe.queue_grants TO wfe_admin, wfe_operator, wfe_reader;

-- ---------------------------------------------------------------------
-- 0.2.0: tenants (docs/operations.md "Tenants").
-- ---------------------------------------------------------------------
CREATE TABLE wfe.tenant_members (
    role       regrole NOT NULL,
    tenant     text NOT NULL
               CONSTRAINT tenant_members_tenant_format CHECK (tenant ~ '^[A-Za-z0-9_.-]{1,63}$'),
    granted_by name NOT NULL DEFAULT session_user,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, tenant)
);
COMMENT ON TABLE wfe.tenant_members IS
'Which roles act for which tenants (wfe.add_tenant_member); superusers and wfe_admin act for all.';

CREATE FUNCTION wfe.my_tenants()
RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
           WHEN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r
                           WHERE r.oid OPERATOR(pg_catalog.=) wfe._caller()), false)
                OR pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE') THEN NULL
           ELSE (SELECT coalesce(pg_catalog.array_agg(DISTINCT m.tenant ORDER BY m.tenant), '{}')
                   FROM wfe.tenant_members AS m
                  WHERE pg_catalog.pg_has_role(wfe._caller(), m.role, 'USAGE'))
           END;
END;
COMMENT ON FUNCTION wfe.my_tenants() IS
'The tenants the role acting in this session acts for (mapped directly or through roles whose privileges it has); NULL: every tenant (a superuser or wfe_admin).';
CREATE FUNCTION wfe._tenant_ok(p_tenant text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(p_tenant OPERATOR(pg_catalog.=) ANY (wfe.my_tenants()), true);
END;
COMMENT ON FUNCTION wfe._tenant_ok(text) IS
'Whether the role acting in this session acts for tenant p_tenant (mapped to it, or a superuser or wfe_admin).';
CREATE FUNCTION wfe._check_tenant_member(p_role regrole, p_tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_tenant IS NULL THEN
        RAISE EXCEPTION 'role and tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_role = 0 THEN
        RAISE EXCEPTION 'a tenant cannot be mapped to PUBLIC' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_tenant !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'tenant "%" is not valid', left(p_tenant, 80)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_tenant_member(regrole, text) IS
'Raises 22004 or 22023 unless role is a real role and tenant a valid tenant name.';
CREATE FUNCTION wfe.add_tenant_member(role regrole, tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_tenant_member(add_tenant_member.role, add_tenant_member.tenant);
    INSERT INTO wfe.tenant_members (role, tenant) VALUES (add_tenant_member.role, add_tenant_member.tenant)
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.add_tenant_member(regrole, text) IS
'Lets role (and every role with its privileges) act for tenant: submit, read, cancel its runs. Idempotent.';
CREATE FUNCTION wfe.remove_tenant_member(role regrole, tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_tenant_member(remove_tenant_member.role, remove_tenant_member.tenant);
    DELETE FROM wfe.tenant_members AS m
     WHERE m.role = remove_tenant_member.role AND m.tenant = remove_tenant_member.tenant;
END
$$;
COMMENT ON FUNCTION wfe.remove_tenant_member(regrole, text) IS
'Takes back add_tenant_member. Idempotent.';
CREATE OR REPLACE FUNCTION wfe._run(p_run_id bigint)
RETURNS wfe.runs
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r wfe.runs;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id;
    -- another tenant's run is answered as one that does not exist
    IF NOT FOUND OR NOT wfe._tenant_ok(r.tenant) THEN
        RAISE EXCEPTION 'run % does not exist', p_run_id USING ERRCODE = 'undefined_object';
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION wfe._run(bigint) IS 'The run row, or SQLSTATE 42704 when there is none or it is of a tenant the caller does not act for.';
SELECT pg_catalog.pg_extension_config_dump('wfe.tenant_members', '');

-- 0.1.0 let every role of wfe act for every tenant; so that an upgraded
-- database goes on as it did, the roles that act for tenants are mapped
-- to every tenant it has runs of, and to the default one.  Narrow the map
-- (wfe.remove_tenant_member) to isolate tenants.
INSERT INTO wfe.tenant_members (role, tenant, granted_by)
SELECT g.role::pg_catalog.regrole, t.tenant, 'wfe upgrade to 0.2.0'
  FROM (VALUES ('wfe_submitter'), ('wfe_operator'), ('wfe_reader')) AS g(role),
       (SELECT DISTINCT r.tenant FROM wfe.runs AS r UNION SELECT 'default') AS t(tenant)
ON CONFLICT DO NOTHING;

-- Row-level security on every table that carries a tenant (docs:
-- operations.md "Tenants").  The roles that may SELECT these tables see
-- the rows of the tenants they act for (wfe.tenant_members; superusers
-- and wfe_admin see all).  Nobody but wfe's functions writes them, so
-- there are no write policies.  FORCE makes the policies bind a table's
-- owner too; wfe's own SECURITY DEFINER functions belong to a superuser,
-- which row-level security never binds, and check tenants themselves.
--
-- wfe.my_tenants() is NULL for a role that acts for every tenant; as a
-- sub-select it runs once per query, not once per row.
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs', 'run_stages', 'outputs', 'events', 'outbox', 'timers',
                             'dead_letters', 'payloads']
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE wfe.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format('ALTER TABLE wfe.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_read ON wfe.%I FOR SELECT'
            ' USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true))', t);
    END LOOP;
END
$rls$;

REVOKE ALL ON FUNCTION
    wfe.my_tenants(), wfe._tenant_ok(text), wfe._check_tenant_member(regrole, text),
    wfe.add_tenant_member(regrole, text), wfe.remove_tenant_member(regrole, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    wfe.add_tenant_member(regrole, text),
    wfe.remove_tenant_member(regrole, text)
    TO wfe_admin;
GRANT EXECUTE ON FUNCTION wfe.my_tenants()
    TO wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_worker, wfe_operator, wfe_reader;
GRANT SELECT ON wfe.tenant_members TO wfe_admin;

-- A heartbeat renews a claim's lease_ms (runtime.md, "heartbeat"): the claim
-- records the lease it granted.  0.1.0's running attempts have none (NULL),
-- which is what their claims meant.
ALTER TABLE wfe.run_stages ADD COLUMN lease_ms int;
COMMENT ON COLUMN wfe.run_stages.lease_ms IS
'The lease_ms the running attempt was claimed with (NULL: none); each heartbeat renews it, within the execution deadline';
-- the result cache's columns (64_cache.sql; the rest of it is further down)
ALTER TABLE wfe.run_stages ADD COLUMN cache_key text;
ALTER TABLE wfe.run_stages ADD COLUMN cache text CONSTRAINT run_stages_cache
    CHECK (cache IN ('hit', 'miss', 'waiting', 'coalesced'));
COMMENT ON COLUMN wfe.run_stages.cache_key IS
'A stage with cache: the result cache key of its bound input (dsl.md "Result cache"); NULL otherwise';
COMMENT ON COLUMN wfe.run_stages.cache IS
'What the result cache did at release: hit, miss, waiting (on the attempt in flight under its key), coalesced (completed from that attempt''s result)';
CREATE INDEX run_stages_cache_key ON wfe.run_stages (cache_key) WHERE cache_key IS NOT NULL;


-- 0.2.0: one JSON Schema validator (src/core/jsonschema*.c, draft 2020-12
-- and draft-07) serves registration too: the PL/pgSQL subset check and its
-- pointer helper go, the C check comes.
DROP FUNCTION wfe._check_json_schema(jsonb, text, text);
DROP FUNCTION wfe._json_pointer(text, text);
CREATE FUNCTION wfe._check_json_schema(schema jsonb, label text)
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_check_schema_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._check_json_schema(jsonb, text) IS
'Raises 22023 with the JSON pointer of what makes a schema unusable (unknown keyword, remote reference, backtracking pattern, malformed keyword value); returns nothing for a schema wfe accepts. Internal.';
REVOKE ALL ON FUNCTION wfe._check_json_schema(jsonb, text) FROM PUBLIC;
COMMENT ON FUNCTION wfe._validate(jsonb, jsonb) IS
'JSON Schema (draft 2020-12, or draft-07 by "$schema") check: NULL when value satisfies schema, else the first violation, e.g. "$.modelId: expected string, got integer (schema #/properties/modelId/type)". Internal.';
-- "format" is asserted when wfe.schema_format_assertion is on: the two
-- helpers that validate read it, so they are STABLE, not IMMUTABLE.
ALTER FUNCTION wfe._validate(jsonb, jsonb) STABLE;
ALTER FUNCTION wfe._bind_input(jsonb, jsonb, jsonb) STABLE;

-- ---------------------------------------------------------------------
-- Operating wfe from psql: admission limits, dashboards (issue 11).
-- ---------------------------------------------------------------------

-- src/sql/60_runtime_tables.sql: the indexes of live work, dead letters'
-- resolution (0.1.0's dead letters stay open).
CREATE INDEX runs_unfinished_tenant ON wfe.runs (tenant) WHERE finished_at IS NULL;
CREATE INDEX run_stages_live ON wfe.run_stages (queue, state)
    WHERE state IN ('queued', 'dispatched', 'running');
ALTER TABLE wfe.dead_letters ADD COLUMN resolved_at timestamptz;
ALTER TABLE wfe.dead_letters ADD COLUMN resolved_by text;
ALTER TABLE wfe.dead_letters ADD COLUMN resolution text;
COMMENT ON COLUMN wfe.dead_letters.resolution IS 'How an operator resolved it (redriven, skipped, failed, cancelled, replayed); NULL while open';

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
'Per-tenant limits: runs in flight (refused at submit, 53400) and tasks in flight (held queued at the claim and the dispatch).  NULL: unlimited.';
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
    -- A raised or lifted task limit makes room now: the tenant's held broker
    -- tasks that fit are dispatched, and the pollers of the queues where it
    -- has queued tasks are woken.  A lowered one holds what comes next; the
    -- tasks in flight finish.
    PERFORM wfe._notify_ready(q) FROM wfe._release_held(NULL, configure_tenant.tenant) AS q;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears); NULL is unlimited.';

-- psql dashboards (docs: operations.md "Dashboards"; docs/dashboards.psql
-- opens them all).
--
-- Views any wfe_reader can \watch.  They are security_invoker: they read
-- the tables with the reader's own rights (and, with tenants, its row-level
-- security).  Each reads live work through the partial indexes of
-- unfinished runs and live stages, and history only for the last hour
-- (runs finished in the last hour, by runs_finished_at), so they cost the
-- same at 1M finished runs as at 1,000 (docs/benchmarks.md).  Rows fit a
-- 100-column terminal: durations are short text (wfe.human_ms), shares are
-- block-character bars (wfe.bar).

-- A share in [0, 1] as a bar of width cells, eighths included, and its percentage.
CREATE FUNCTION wfe.bar(share double precision, width int DEFAULT 10)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN share IS NOT NULL AND width >= 1 THEN
    (SELECT rpad(repeat('█', e / 8)
                 || CASE WHEN e % 8 > 0 THEN substr('▏▎▍▌▋▊▉', e % 8, 1) ELSE '' END, width, '░')
            || lpad(round(least(greatest(share, 0), 1) * 100)::text, 4) || '%'
       FROM (SELECT floor(least(greatest(share, 0), 1) * width * 8)::int AS e) AS c)
END;
COMMENT ON FUNCTION wfe.bar(double precision, int) IS
'A share in [0, 1] drawn as width block characters (eighths of a cell) followed by its percentage, for the dashboards.';

-- Milliseconds as short text: 850ms, 12.3s, 4m05s, 2h10m, 3d04h.
CREATE FUNCTION wfe.human_ms(ms double precision)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN ms < 0 THEN '-' ELSE '' END
    || (SELECT CASE
                 WHEN a < 1000 THEN round(a)::text || 'ms'
                 WHEN a < 60000 THEN to_char(a / 1000, 'FM990.0') || 's'
                 WHEN a < 3600000 THEN floor(a / 60000)::text || 'm'
                                       || to_char(floor(a / 1000)::bigint % 60, 'FM00') || 's'
                 WHEN a < 86400000 THEN floor(a / 3600000)::text || 'h'
                                        || to_char(floor(a / 60000)::bigint % 60, 'FM00') || 'm'
                 ELSE floor(a / 86400000)::text || 'd' || to_char(floor(a / 3600000)::bigint % 24, 'FM00') || 'h'
               END
          FROM (SELECT abs(ms) AS a) AS x);
COMMENT ON FUNCTION wfe.human_ms(double precision) IS
'Milliseconds as short text for the dashboards: 850ms, 12.3s, 4m05s, 2h10m, 3d04h.';

-- Runs by workflow, version and state: in flight now, finished in the last hour.
CREATE VIEW wfe.dashboard_runs WITH (security_invoker = true) AS
WITH runs AS (
    -- in flight: their age so far; finished in the last hour: their duration
    SELECT r.workflow, r.version, r.state, r.finished_at IS NOT NULL AS finished,
           coalesce(r.finished_at, now()) - r.submitted_at AS took
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour'
), states AS (
    SELECT runs.workflow, runs.version, runs.state, bool_or(runs.finished) AS finished,
           count(*) AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY runs.took) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY runs.took) AS p95
      FROM runs
     GROUP BY runs.workflow, runs.version, runs.state
)
SELECT s.workflow, s.version, s.state, s.runs,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS p95,
       -- finished states: their share of the runs that finished in the last hour
       CASE WHEN s.finished THEN
            wfe.bar(s.runs::double precision
                    / sum(s.runs) FILTER (WHERE s.finished) OVER (PARTITION BY s.workflow, s.version), 10)
       END AS share_1h
  FROM states AS s
 ORDER BY s.workflow, s.version,
          array_position(ARRAY['running', 'finalising', 'completed', 'failed', 'cancelled'], s.state);
COMMENT ON VIEW wfe.dashboard_runs IS
'Runs per workflow, version and state: running and finalising runs now (p50/p95 of their age), runs that finished in the last hour (p50/p95 duration, share of the hour''s finished runs).';

-- Queues (and, for broker queues, tracks): what waits, what runs, how fast it starts.
CREATE VIEW wfe.dashboard_queues WITH (security_invoker = true) AS
WITH settings AS (
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY 1, 2
), started AS (
    -- attempts that started in the last hour, in runs live or finished in it
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p95,
           sum(st.attempt - 1)::double precision / nullif(sum(st.attempt), 0) AS retry_rate
      FROM wfe.runs AS r
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
       AND st.started_at >= now() - interval '1 hour' AND st.queue IS NOT NULL
     GROUP BY 1, 2
), dead AS (
    SELECT st.queue, count(*) AS dead_letters
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY st.queue
), names AS (
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT s.queue, s.track FROM started AS s
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
    UNION SELECT d.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM dead AS d LEFT JOIN wfe.queues AS q ON q.queue = d.queue
)
SELECT n.queue, n.track,
       coalesce(l.depth, 0) AS depth,
       wfe.human_ms(extract(epoch FROM now() - l.oldest_ready) * 1000) AS oldest,
       coalesce(l.in_flight, 0) AS in_flight,
       q.max_in_flight AS max,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS wait_p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS wait_p95,
       wfe.bar(s.retry_rate, 4) AS retries,
       -- a queue's dead letters are counted on its first track only
       CASE WHEN n.track IN ('poll', 'small') THEN coalesce(d.dead_letters, 0) ELSE 0 END AS dlq,
       CASE WHEN q.paused THEN 'paused'
            WHEN sum(l.in_flight) OVER (PARTITION BY n.queue) >= q.max_in_flight THEN 'full'
            ELSE '' END AS state
  FROM names AS n
  LEFT JOIN wfe.queues AS q ON q.queue = n.queue
  LEFT JOIN live AS l ON l.queue = n.queue AND l.track = n.track
  LEFT JOIN started AS s ON s.queue = n.queue AND s.track = n.track
  LEFT JOIN dead AS d ON d.queue = n.queue
 ORDER BY n.queue, n.track;
COMMENT ON VIEW wfe.dashboard_queues IS
'Per queue and track (poll, or the broker''s small and large): depth, oldest ready age, in flight and limit, dequeue wait p50/p95 and retry rate over the last hour, open dead letters, paused or full.';

-- The outbox and its publisher: one row.
CREATE VIEW wfe.dashboard_outbox WITH (security_invoker = true) AS
SELECT (SELECT count(*) FROM wfe.outbox AS o WHERE o.state = 'pending') AS pending,
       (SELECT count(*) FROM wfe.outbox AS o WHERE o.state = 'claimed') AS claimed,
       wfe.human_ms(extract(epoch FROM now() - (SELECT min(o.created_at) FROM wfe.outbox AS o
                                                 WHERE o.state = 'pending')) * 1000) AS oldest,
       (SELECT round(count(*) / 60.0, 1) FROM wfe.outbox AS o
         WHERE o.state = 'published' AND o.published_at >= now() - interval '1 minute') AS per_s,
       (SELECT count(*) FROM wfe.outbox AS o
         WHERE o.state = 'pending' AND o.last_error LIKE 'unroutable:%') AS unroutable,
       l.connected,
       l.holder,
       wfe.human_ms(extract(epoch FROM now() - l.heartbeat_at) * 1000) AS lease_age,
       left(coalesce(l.last_error,
                     (SELECT o.last_error FROM wfe.outbox AS o
                       WHERE o.state = 'pending' AND o.last_error IS NOT NULL
                       ORDER BY o.available_at DESC LIMIT 1)), 40) AS last_error
  FROM wfe.publisher_lease AS l;
COMMENT ON VIEW wfe.dashboard_outbox IS
'The outbox and its publisher: pending and claimed rows, oldest pending age, messages published per second over the last minute, unroutable rows, broker connected, lease holder and age of its last renewal, last error.';

-- Stages per workflow over the last hour: how long, how often they fail.
CREATE VIEW wfe.dashboard_stages WITH (security_invoker = true) AS
SELECT r.workflow, st.stage,
       count(*) AS finished,
       wfe.human_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p50,
       wfe.human_ms(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p95,
       wfe.human_ms(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p99,
       wfe.bar(avg((st.state = 'failed')::int), 6) AS failed,
       wfe.bar(avg((st.state = 'timed_out')::int), 6) AS timed_out,
       round(avg(st.attempt), 2) AS attempts
  FROM wfe.runs AS r
  JOIN wfe.run_stages AS st ON st.run_id = r.run_id
 WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
   AND st.finished_at >= now() - interval '1 hour' AND st.started_at IS NOT NULL
   AND st.state IN ('completed', 'failed', 'timed_out')
 GROUP BY r.workflow, st.stage
 ORDER BY r.workflow, min(st.ordinal);
COMMENT ON VIEW wfe.dashboard_stages IS
'Per workflow and stage, over attempts that ended in the last hour: count, p50/p95/p99 duration of the last attempt, failed and timed-out shares, attempts per stage.';

-- Tenants: in flight against their limits.
CREATE VIEW wfe.dashboard_tenants WITH (security_invoker = true) AS
WITH runs AS (
    SELECT r.tenant, count(*) AS runs FROM wfe.runs AS r WHERE r.finished_at IS NULL GROUP BY r.tenant
), tasks AS (
    SELECT st.tenant,
           count(*) FILTER (WHERE st.state = 'queued') AS queued,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY st.tenant
), names AS (
    SELECT runs.tenant FROM runs UNION SELECT tasks.tenant FROM tasks
    UNION SELECT t.tenant FROM wfe.tenant_limits AS t
)
SELECT n.tenant,
       coalesce(r.runs, 0) AS runs,
       t.max_runs_in_flight AS max_runs,
       wfe.bar(coalesce(r.runs, 0)::double precision / t.max_runs_in_flight, 8) AS runs_used,
       coalesce(k.queued, 0) AS tasks_queued,
       coalesce(k.in_flight, 0) AS tasks,
       t.max_tasks_in_flight AS max_tasks,
       wfe.bar(coalesce(k.in_flight, 0)::double precision / t.max_tasks_in_flight, 8) AS tasks_used
  FROM names AS n
  LEFT JOIN runs AS r ON r.tenant = n.tenant
  LEFT JOIN tasks AS k ON k.tenant = n.tenant
  LEFT JOIN wfe.tenant_limits AS t ON t.tenant = n.tenant
 ORDER BY n.tenant;
COMMENT ON VIEW wfe.dashboard_tenants IS
'Per tenant: runs in flight and tasks queued and in flight, against the tenant''s limits (wfe.configure_tenant).';

-- Idempotent submits: how often a key named a run that already existed.
CREATE VIEW wfe.idempotency WITH (security_invoker = true) AS
SELECT r.tenant, r.workflow,
       count(*) AS keyed_runs,
       sum(h.hits) AS hits,
       wfe.bar(sum(h.hits)::double precision / nullif(count(*) + sum(h.hits), 0), 10) AS hit_ratio
  FROM wfe.runs AS r
 CROSS JOIN LATERAL (SELECT count(*) AS hits FROM wfe.events AS e
                      WHERE e.run_id = r.run_id AND e.type = 'run.deduplicated') AS h
 WHERE r.idempotency_key IS NOT NULL
   AND (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
 GROUP BY r.tenant, r.workflow
 ORDER BY r.tenant, r.workflow;
COMMENT ON VIEW wfe.idempotency IS
'Per tenant and workflow, over keyed runs in flight or finished in the last hour: runs, submits answered with an existing run (hits), hit ratio = hits / all keyed submits.';

-- Work that does not move, and why.
CREATE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, dispatches unpublished for a minute, open dead letters.';

-- The dashboards (70_dashboards.sql): security_invoker views over the tables
-- above, the publisher's health and the tenant limits, and their two helpers.
GRANT SELECT ON wfe.dashboard_runs, wfe.dashboard_queues, wfe.dashboard_outbox, wfe.dashboard_stages,
                wfe.dashboard_tenants, wfe.idempotency, wfe.dashboard_stuck,
                wfe.publisher_lease, wfe.tenant_limits
    TO wfe_reader, wfe_operator;
REVOKE ALL ON FUNCTION wfe.bar(double precision, int), wfe.human_ms(double precision),
                       wfe.configure_tenant(text, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.bar(double precision, int), wfe.human_ms(double precision)
    TO wfe_reader, wfe_operator;

GRANT EXECUTE ON FUNCTION wfe.configure_tenant(text, int, int) TO wfe_admin;

CREATE OR REPLACE FUNCTION wfe.run_mermaid(run_id bigint)
RETURNS text
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_mermaid.run_id);
    v_plan  jsonb;
    v_chart text;
    v_class text;
    v_bold  text;
BEGIN
    SELECT d.plan INTO v_plan FROM wfe.definitions AS d WHERE d.definition_id = r.definition_id;
    v_chart := wfe._plan_mermaid(v_plan);
    WITH nodes AS (
        -- the chart's node ids: s<i> for the i-th stage or task, f<k> for finalisers
        SELECT 's' || (p.i - 1) AS id, p.s ->> 'name' AS stage
          FROM jsonb_array_elements(v_plan -> 'stages') WITH ORDINALITY AS p(s, i)
        UNION ALL
        SELECT 'f' || (p.k - 1), p.f ->> 'name'
          FROM jsonb_array_elements(coalesce(v_plan -> 'finalisers', '[]')) WITH ORDINALITY AS p(f, k)
    ), states AS (
        SELECT n.id,
               CASE st.state
                    WHEN 'completed' THEN 'done'
                    WHEN 'failed' THEN 'failed' WHEN 'timed_out' THEN 'failed'
                    WHEN 'skipped' THEN 'skipped' WHEN 'cancelled' THEN 'cancelled'
                    WHEN 'waiting' THEN 'waiting'
                    ELSE 'running' END AS cls,          -- queued, dispatched, running, retry_scheduled
               st.state
          FROM nodes AS n
          JOIN wfe.run_stages AS st ON st.run_id = r.run_id AND st.stage = n.stage
        UNION ALL
        SELECT v.id, v.cls, v.state FROM (VALUES
            ('end_completed', CASE WHEN r.state = 'completed' THEN 'done' ELSE 'waiting' END, r.state),
            ('end_failed', CASE WHEN r.state = 'failed' THEN 'failed' ELSE 'waiting' END, r.state),
            ('intent_completed', CASE WHEN r.intent = 'completed' THEN 'done' ELSE 'waiting' END, r.intent),
            ('intent_failed', CASE WHEN r.intent = 'failed' THEN 'failed' ELSE 'waiting' END, r.intent)
        ) AS v(id, cls, state)
         WHERE strpos(v_chart, v.id) > 0
    ), links AS (
        -- every edge line, numbered from 0 as Mermaid numbers them
        SELECT l.n - 1 AS n, l.dotted,
               regexp_replace(l.parts[1], '\(.*$', '') AS src, l.parts[2] AS dst
          FROM (SELECT row_number() OVER (ORDER BY t.ord) AS n, t.line ~ ' -\. ' AS dotted,
                       regexp_match(t.line, '^\s*(\S+) .*?(\S+)\s*$') AS parts
                  FROM regexp_split_to_table(v_chart, '\n') WITH ORDINALITY AS t(line, ord)
                 WHERE t.line ~ '(-->|\.->)') AS l
    ), taken AS (
        SELECT k.n
          FROM links AS k
          LEFT JOIN states AS a ON a.id = k.src
          LEFT JOIN states AS b ON b.id = k.dst
         WHERE CASE
                 WHEN k.src = 'start' THEN b.cls NOT IN ('waiting', 'skipped')
                 WHEN k.src LIKE 'intent\_%' THEN a.cls <> 'waiting' AND b.cls NOT IN ('waiting', 'skipped')
                 -- the last finaliser to the outcome the run ended with
                 WHEN k.dst LIKE 'end\_%' AND k.src LIKE 'f%' THEN a.cls NOT IN ('waiting', 'running')
                                                                   AND b.cls <> 'waiting'
                 -- a stage's success (solid) or failure (dotted) route
                 WHEN NOT (CASE WHEN k.dotted THEN a.cls = 'failed' ELSE a.cls = 'done' END) THEN false
                 WHEN k.dst LIKE 'end\_%' OR k.dst LIKE 'intent\_%' THEN b.cls <> 'waiting'
                 ELSE b.cls NOT IN ('waiting', 'skipped')
               END
    )
    SELECT (SELECT string_agg(format('  class %s %s', s.id, s.cls), E'\n' ORDER BY s.id) FROM states AS s),
           (SELECT string_agg(t.n::text, ',' ORDER BY t.n) FROM taken AS t)
      INTO v_class, v_bold;
    RETURN rtrim(v_chart, E'\n')
        || format(E'\n  %%%% run %s: %s\n', r.run_id, r.state)
        || E'  classDef done fill:#d8f3dc,stroke:#2d6a4f,color:#1b4332\n'
        || E'  classDef failed fill:#ffd6d6,stroke:#b00020,color:#7f0000\n'
        || E'  classDef running fill:#fff3bf,stroke:#e67700,color:#5c3c00\n'
        || E'  classDef skipped fill:#f1f3f5,stroke:#adb5bd,color:#868e96,stroke-dasharray: 4 3\n'
        || E'  classDef cancelled fill:#e9ecef,stroke:#495057,color:#495057,stroke-dasharray: 4 3\n'
        || E'  classDef waiting fill:#ffffff,stroke:#ced4da,color:#adb5bd\n'
        || coalesce(v_class || E'\n', '')
        || coalesce(E'  linkStyle ' || v_bold || E' stroke-width:4px\n', '');
END
$$;
COMMENT ON FUNCTION wfe.run_mermaid(bigint) IS
'The plan''s Mermaid flowchart with each stage classed by its state in this run (done, failed, running, skipped, cancelled, waiting) and the edges the run took drawn bold.';
REVOKE ALL ON FUNCTION wfe.run_mermaid(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_mermaid(bigint) TO wfe_submitter, wfe_reader, wfe_operator;

CREATE OR REPLACE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF configure_queue.queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'queue name "%" is not valid', configure_queue.queue
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Queue names match ^[a-z][a-z0-9_.-]{0,62}$.';
    END IF;
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT q.delivery, q.paused INTO v_was, v_was_paused
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused)
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now();
    -- Tasks waiting in the old mode follow the queue into the new one: to
    -- broker (or resumed as broker), queued attempts get their dispatch
    -- message; to poll, dispatched attempts become claimable (a broker worker
    -- that still accepts one is answered duplicate once a poll worker has it).
    -- A paused queue keeps everything as it is until it is resumed.
    IF configure_queue.paused THEN
        NULL;                       -- paused: what waits stays queued
    ELSIF configure_queue.delivery = 'broker'
          AND (coalesce(v_was, 'poll') = 'poll' OR coalesce(v_was_paused, false)) THEN
        -- Every queued attempt without a dispatch message still to publish
        -- is re-dispatched through the engine: a new fence, a new message.
        -- (One whose earlier message was published -- broker, then poll,
        -- then broker again -- would otherwise wait for a message that is
        -- gone.)  No stage row is locked here: the engine locks the run,
        -- then the stage, and one that moved on meanwhile is passed over.
        FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
                  WHERE st.queue = configure_queue.queue AND st.state = 'queued' AND st.handler IS NULL
                    AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                     WHERE o.run_id = st.run_id AND o.stage = st.stage
                                       AND o.attempt = st.attempt AND o.fence = st.fence
                                       AND o.kind = 'dispatch' AND o.state <> 'published')
                  ORDER BY st.run_id, st.stage
        LOOP
            BEGIN
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, session_user,
                                     format('queue %s switched to broker delivery', configure_queue.queue));
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                NULL;
            END;
        END LOOP;
    ELSIF configure_queue.delivery = 'poll' AND (v_was = 'broker' OR coalesce(v_was_paused, false)) THEN
        UPDATE wfe.run_stages AS st SET state = 'queued'
         WHERE st.queue = configure_queue.queue AND st.state = 'dispatched';
        PERFORM wfe._notify_ready(configure_queue.queue);     -- resumed or switched: wake the pollers
    ELSIF configure_queue.delivery = 'broker' THEN
        -- the same mode, maybe a raised or lifted max_in_flight: what fits now goes
        PERFORM wfe._release_held(configure_queue.queue, NULL);
    ELSE
        PERFORM wfe._notify_ready(configure_queue.queue);     -- the same for pollers
    END IF;
    PERFORM wfe._wake(now());      -- the publisher declares a new broker queue's topology
END
$$;
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit and pause.';

CREATE OR REPLACE FUNCTION wfe.report(run_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs := wfe._run(report.run_id);
BEGIN
    RETURN jsonb_build_object(
        'run_id', r.run_id,
        'workflow', r.workflow,
        'version', r.version,
        'definition_digest', r.definition_digest,
        'tenant', r.tenant,
        'execution_context', r.execution_context,
        'state', r.state,
        'intent', r.intent,
        'reason', r.reason,
        'submitted_at', r.submitted_at,
        'finished_at', r.finished_at,
        'duration_ms', round(extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at) * 1000),
        'stages', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                              'stage', s.stage,
                              'kind', s.kind,
                              'status', s.state,
                              'attempts', s.attempt,
                              'duration_ms', round(extract(epoch FROM s.finished_at - s.started_at) * 1000),
                              'skip_reason', s.skip_reason,
                              'error', s.error,
                              'result', s.result)
                          ORDER BY s.ordinal), '[]')
                     FROM wfe.run_stages AS s WHERE s.run_id = r.run_id),
        'outputs', (SELECT coalesce(jsonb_object_agg(o.task || '.' || o.key, o.value), '{}')
                      FROM wfe.outputs AS o WHERE o.run_id = r.run_id),
        'late_callbacks', (SELECT count(*) FROM wfe.events AS e
                            WHERE e.run_id = r.run_id AND e.type = 'callback.late'),
        -- the operator's hand: replays both ways, reopenings (wfe.replay, wfe.redrive)
        'replay_of', r.replay_of,
        'replays', (SELECT coalesce(jsonb_agg(x.run_id ORDER BY x.run_id), '[]')
                      FROM wfe.runs AS x WHERE x.replay_of = r.run_id),
        'redriven', (SELECT coalesce(jsonb_agg(jsonb_build_object('at', e.at, 'stage', e.detail ->> 'stage',
                                                                  'by', e.detail ->> 'by',
                                                                  'reason', e.detail ->> 'reason')
                                               ORDER BY e.event_id), '[]')
                       FROM wfe.events AS e WHERE e.run_id = r.run_id AND e.type = 'run.redriven'));
END
$$;
COMMENT ON FUNCTION wfe.report(bigint) IS
'Structured execution report of a run: state, intent, timing, and one entry per stage, task and finaliser.';

-- Recovery (src/sql/71_recovery.sql); configure_queue re-dispatches through
-- the engine, the report names replays and reopenings (above).
CREATE INDEX runs_replay_of ON wfe.runs (replay_of) WHERE replay_of IS NOT NULL;
-- Operator recovery (docs: operations.md "Recovery"): redrive, skip, fail,
-- re-dispatch, replay, and the bulk redrive of dead letters.
--
-- Each action on a stage goes through the engine (wfe._operate, src/engine.c,
-- over the step core's wfe_step_operate): the run is locked, the core
-- decides whether the action may act now (55000 says why not) and what it
-- moves, and the same fences as every callback hold (a late report of a
-- redriven or failed-by-hand attempt is answered stale).  Each records an
-- event with who (session_user) and why; each closes the stage's open dead
-- letters with its name.

CREATE FUNCTION wfe._operate(run_id bigint, stage text, operation text, value text, by text, why text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_operate' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._operate(bigint, text, text, text, text, text) IS
'An operator''s redrive, skip, fail or redispatch of one stage, through the step core under the run''s lock; 55000 when the core refuses.';

-- The stage's open dead letters are resolved by an operator's action.
CREATE FUNCTION wfe._resolve_dead_letters(p_run_id bigint, p_stage text, p_resolution text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.dead_letters AS d
       SET resolved_at = now(), resolved_by = session_user, resolution = p_resolution
     WHERE d.run_id = p_run_id AND (p_stage IS NULL OR d.stage = p_stage) AND d.resolved_at IS NULL;
END;
COMMENT ON FUNCTION wfe._resolve_dead_letters(bigint, text, text) IS
'Closes the open dead letters of a stage (or, stage NULL, of a run) with how an operator resolved them.';

-- Arguments every action needs.
CREATE FUNCTION wfe._require_stage(p_run_id bigint, p_stage text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_run_id IS NULL OR p_stage IS NULL THEN
        RAISE EXCEPTION 'run_id and stage must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._require_stage(bigint, text) IS 'Raises 22004 when the run or the stage is NULL.';

CREATE OR REPLACE FUNCTION wfe.redrive(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_code text;
BEGIN
    PERFORM wfe._require_stage(redrive.run_id, redrive.stage);
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

CREATE FUNCTION wfe.skip_stage(run_id bigint, stage text, result jsonb DEFAULT '{}', reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._require_stage(skip_stage.run_id, skip_stage.stage);
    PERFORM wfe._operate(skip_stage.run_id, skip_stage.stage, 'skip',
                         coalesce(skip_stage.result, '{}')::text, session_user, skip_stage.reason);
    PERFORM wfe._resolve_dead_letters(skip_stage.run_id, skip_stage.stage, 'skipped');
END
$$;
COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';

CREATE FUNCTION wfe.fail_stage(run_id bigint, stage text, reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._require_stage(fail_stage.run_id, fail_stage.stage);
    IF fail_stage.reason IS NULL THEN
        RAISE EXCEPTION 'reason must not be null' USING ERRCODE = 'null_value_not_allowed',
              HINT = 'Say why: the worker sees it in the error, and the event log keeps it.';
    END IF;
    PERFORM wfe._operate(fail_stage.run_id, fail_stage.stage, 'fail', fail_stage.reason, session_user,
                         fail_stage.reason);
    PERFORM wfe._resolve_dead_letters(fail_stage.run_id, fail_stage.stage, 'failed');
END
$$;
COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';

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
    PERFORM wfe._require_stage(redispatch.run_id, redispatch.stage);
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
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = replay.run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % does not exist', replay.run_id USING ERRCODE = 'undefined_object';
    END IF;
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

CREATE FUNCTION wfe.redrive_dead_letters(queue text, since timestamptz DEFAULT '-infinity', reason text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c record;
    n int := 0;
BEGIN
    IF redrive_dead_letters.queue IS NULL OR redrive_dead_letters.since IS NULL THEN
        RAISE EXCEPTION 'queue and since must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- in run order, so two bulk redrives cannot deadlock; one subtransaction
    -- each, so a stage that moved on meanwhile is passed over, not fatal
    FOR c IN SELECT DISTINCT d.run_id, d.stage
               FROM wfe.dead_letters AS d
               JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
              WHERE d.resolved_at IS NULL AND d.at >= redrive_dead_letters.since
                AND st.queue = redrive_dead_letters.queue
              ORDER BY d.run_id, d.stage
    LOOP
        BEGIN
            PERFORM wfe.redrive(c.run_id, c.stage, redrive_dead_letters.reason);
            n := n + 1;
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) IS
'Redrives every stage with an open dead letter on queue since a time; returns how many (stages that can no longer be redriven are passed over).';
REVOKE ALL ON FUNCTION wfe._operate(bigint, text, text, text, text, text),
                       wfe._resolve_dead_letters(bigint, text, text), wfe._require_stage(bigint, text),
                       wfe.redrive(bigint, text, text), wfe.skip_stage(bigint, text, jsonb, text),
                       wfe.fail_stage(bigint, text, text), wfe.redispatch(bigint, text, text),
                       wfe.replay(bigint, text), wfe.redrive_dead_letters(text, timestamptz, text)
    FROM PUBLIC;
-- Recovery (71_recovery.sql): the operator's actions.
GRANT EXECUTE ON FUNCTION
    wfe.redrive(bigint, text, text),
    wfe.skip_stage(bigint, text, jsonb, text),
    wfe.fail_stage(bigint, text, text),
    wfe.redispatch(bigint, text, text),
    wfe.replay(bigint, text),
    wfe.redrive_dead_letters(text, timestamptz, text)
    TO wfe_operator;

-- Dead dispatches: what RabbitMQ dead-lettered into wfe.dlq, read back by
-- the background worker's publisher (src/publisher.c, wfe.consume_dlq), so
-- that no run waits forever on a message that died in the broker
-- (docs: delivery.md "Pre-acceptance retries and wfe.dlq").

-- Record one dead dispatch and fail its attempt through the engine's gate
-- (wfe.fail_task, retryable: the stage's retry policy or failure route).
-- Returns what became of it: the gate's outcome word, 'duplicate' for a
-- message already recorded (redelivered after a crash before its ack), or
-- 'foreign' / 'unknown' for a message that names no wfe attempt / no run.
CREATE FUNCTION wfe._broker_dead_letter(p_message_id text, p_routing_key text, p_headers jsonb, p_body text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_env     jsonb;
    v_run     bigint;
    v_stage   text;
    v_attempt int;
    v_fence   bigint;
    v_tenant  text;
    v_deaths  int;
    v_error   jsonb;
    v_outcome text;
    v_dead    bigint;
BEGIN
    -- the attempt's identity: its x-wfe-* headers, else its envelope
    BEGIN
        v_env := p_body::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        v_env := NULL;
    END;
    BEGIN
        v_run := coalesce(p_headers ->> 'x-wfe-run-id', v_env ->> 'run_id')::bigint;
        v_stage := coalesce(p_headers ->> 'x-wfe-stage', v_env ->> 'stage');
        v_attempt := coalesce(p_headers ->> 'x-wfe-attempt', v_env ->> 'attempt')::int;
        v_fence := coalesce(p_headers ->> 'x-wfe-fence', v_env ->> 'fence')::bigint;
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        v_run := NULL;
    END;
    IF v_run IS NULL OR v_stage IS NULL OR v_attempt IS NULL OR v_fence IS NULL THEN
        RAISE WARNING 'wfe: a message in wfe.dlq names no wfe attempt (message_id %, routing key %): dropped',
              coalesce(p_message_id, '(none)'), p_routing_key;
        RETURN 'foreign';
    END IF;
    SELECT r.tenant INTO v_tenant FROM wfe.runs AS r WHERE r.run_id = v_run;
    IF NOT FOUND THEN
        RETURN 'unknown';           -- its run is gone (retention): nothing waits for it
    END IF;
    IF EXISTS (SELECT 1 FROM wfe.dead_letters AS d
                WHERE d.run_id = v_run AND d.stage = v_stage AND d.attempt = v_attempt
                  AND d.reason = 'broker.redeliveries' AND d.error ->> 'fence' = v_fence::text) THEN
        RETURN 'duplicate';
    END IF;
    SELECT coalesce(sum((x ->> 'count')::int), 0) INTO v_deaths
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_headers -> 'x-death') = 'array'
                                     THEN p_headers -> 'x-death' ELSE '[]' END) AS x
     WHERE x ->> 'reason' = 'rejected';
    v_error := jsonb_build_object(
        'code', 'broker.redeliveries',
        'message', format('RabbitMQ dead-lettered the dispatch of attempt %s after %s rejected deliveries',
                          v_attempt, v_deaths),
        'fence', v_fence, 'message_id', p_message_id, 'x_death', p_headers -> 'x-death');
    PERFORM wfe._event(v_run, v_tenant, v_stage, v_attempt, 'stage.dead_lettered',
                       jsonb_build_object('message_id', p_message_id, 'fence', v_fence,
                                          'rejected', v_deaths, 'routing_key', p_routing_key));
    -- the gate decides: the current attempt fails (retried or failed per its
    -- policy); one superseded meanwhile is stale, one of an ended run late.
    -- Only a running attempt is reported, and nobody accepted this one: wfe
    -- takes it first, as the holder of its envelope (a duplicate if a worker
    -- had accepted it before rejecting it)
    PERFORM wfe.accept_task(v_run, v_stage, v_attempt, v_fence, 'wfe.dlq');
    v_outcome := wfe.fail_task(v_run, v_stage, v_attempt, v_fence, v_error, true);
    -- retries exhausted: the engine wrote its dead letter just now; it is this one
    UPDATE wfe.dead_letters AS d SET reason = 'broker.redeliveries', error = v_error
     WHERE d.run_id = v_run AND d.stage = v_stage AND d.attempt = v_attempt
       AND d.reason = 'retries exhausted' AND d.at = now()
    RETURNING d.dead_letter_id INTO v_dead;
    IF v_dead IS NULL THEN
        -- retried, or superseded: recorded, and closed at once
        INSERT INTO wfe.dead_letters (tenant, run_id, stage, attempt, reason, error,
                                      resolved_at, resolved_by, resolution)
        VALUES (v_tenant, v_run, v_stage, v_attempt, 'broker.redeliveries', v_error, now(), 'wfe',
                CASE WHEN v_outcome = 'accepted' THEN 'retried' ELSE 'superseded' END);
    END IF;
    RETURN v_outcome;
END
$$;
COMMENT ON FUNCTION wfe._broker_dead_letter(text, text, jsonb, text) IS
'A dispatch RabbitMQ dead-lettered (wfe.dlq): recorded in wfe.dead_letters (reason broker.redeliveries, the x-death history) and its attempt failed through the gate, per the stage''s retry policy.';
REVOKE ALL ON FUNCTION wfe._broker_dead_letter(text, text, jsonb, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION wfe.run_timeline(run_id bigint)
RETURNS TABLE (stage text, attempt int, outcome text, started_at timestamptz, finished_at timestamptz,
               duration_ms numeric, waterfall text)
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_timeline.run_id);
    v_span  double precision;
BEGIN
    v_span := greatest(extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at), 0.001);
    RETURN QUERY
    WITH a AS (
        -- the outcome: the attempt's last event that says how it went; a
        -- timeout wins over the retry it led to (the attempt timed out), and
        -- an operator's bookkeeping (redriven, reset, ...) is not an outcome
        -- and what the result cache did before any attempt (or instead of
        -- one) is attempt 0: waiting on another attempt, a hit, an entry refused
        SELECT e.stage, coalesce(e.attempt, 0) AS attempt, min(e.at) AS t_start, max(e.at) AS t_end,
               min(e.event_id) AS first_event,
               (array_agg(e.type ORDER BY (e.type = 'stage.timed_out') DESC,
                                          (e.type IN ('stage.redriven', 'stage.reset', 'stage.skipped_by_operator',
                                                      'stage.failed_by_operator', 'stage.dead_lettered',
                                                      'stage.cancel_acknowledged')),
                                          e.event_id DESC))[1] AS last_type
          FROM wfe.events AS e
         WHERE e.run_id = r.run_id AND e.stage IS NOT NULL
           AND (e.attempt IS NOT NULL OR e.type LIKE 'stage.cache\_%')
           AND e.type NOT LIKE 'callback.%'
         GROUP BY e.stage, coalesce(e.attempt, 0)
    )
    SELECT a.stage, a.attempt, replace(a.last_type, 'stage.', ''), a.t_start, a.t_end,
           round((extract(epoch FROM a.t_end - a.t_start) * 1000)::numeric, 1),
           -- a 40-column bar across the run's life: where the attempt sat and how long
           '|' || rpad(repeat(' ', least(39, floor(extract(epoch FROM a.t_start - r.submitted_at) / v_span * 40)::int))
                       || repeat('█', greatest(1, round(extract(epoch FROM a.t_end - a.t_start) / v_span * 40)::int)),
                       40) || '|'
      FROM a
     ORDER BY a.first_event;
END
$$;
COMMENT ON FUNCTION wfe.run_timeline(bigint) IS
'One row per stage attempt with its outcome, times and a text waterfall over the run''s life.';

-- Tasks in flight: max_in_flight of a queue, max_tasks_in_flight of a
-- tenant.  A task is in flight when it is dispatched or running, or queued
-- with a dispatch message of its current fence still to publish; stages of
-- in-database actions (handler) are not tasks.  A task over a limit stays
-- queued: a poll queue's claim_task takes no more than the room (claim.c),
-- a broker release writes no dispatch message (held), and when a task ends
-- the engine dispatches the held ones that now fit (wfe._release_held).
--
-- Each limit has a transaction advisory lock (key: the limit's name and the
-- queue or tenant), taken before the count, which is a statement of its own
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
        IF pg_try_advisory_xact_lock(hashtext('wfe.max_tasks_in_flight'), hashtext(p_tenant)) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(NULL, p_tenant);
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_tasks_in_flight'), hashtext(p_tenant));
    PERFORM set_config('wfe_admission.tenant', p_tenant, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_tenant(text) IS
'Takes a tenant''s max_tasks_in_flight lock, waiting only in lock order (tenants by name before any queue); out of order it only tries, and a miss is rechecked later.';

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
        IF pg_try_advisory_xact_lock(hashtext('wfe.max_in_flight'), hashtext(p_queue)) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(p_queue, NULL);
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_in_flight'), hashtext(p_queue));
    PERFORM set_config('wfe_admission.queue', p_queue, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_queue(text) IS
'Takes a broker queue''s max_in_flight lock, waiting only in lock order (queues by name, after the tenants); out of order it only tries, and a miss is rechecked later.  From then on tenant locks are only tried.';

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
       AND (st.state IN ('dispatched', 'running')
            OR (st.state = 'queued'
                AND EXISTS (SELECT 1 FROM wfe.outbox AS o
                             WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                               AND o.fence = st.fence AND o.kind = 'dispatch' AND o.state <> 'published')));
END;
COMMENT ON FUNCTION wfe._tenant_in_flight(text) IS
'A tenant''s tasks in flight, poll and broker: dispatched, running, or queued with an unpublished dispatch of their current fence.';

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
REVOKE ALL ON FUNCTION wfe._recheck_later(text, text), wfe._recheck_admission(), wfe._lock_tenant(text),
    wfe._lock_queue(text), wfe._broker_in_flight(text), wfe._tenant_in_flight(text),
    wfe._broker_admit(text, text), wfe._release_held(text, text) FROM PUBLIC;

-- Signed callbacks (src/sql/69_signed_callbacks.sql, 91_runtime_grants.sql).
CREATE TABLE wfe.callback_keys (
    key_id      text NOT NULL
                CHECK (key_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    secret      bytea NOT NULL
                CHECK (octet_length(secret) BETWEEN 16 AND 1024),
    valid_from  timestamptz NOT NULL DEFAULT now(),
    valid_until timestamptz
                CHECK (valid_until IS NULL OR valid_until > valid_from),
    PRIMARY KEY (key_id, valid_from)
);
COMMENT ON TABLE wfe.callback_keys IS
'HMAC-SHA256 secrets of the gateways that sign callbacks: a secret counts from valid_from until valid_until (NULL: no end). Several rows of one key_id: a rotation.';

-- The callback_ids of accepted signed callbacks, kept for the tolerance
-- window; wfe.callback itself removes the ones that left it.
CREATE TABLE wfe.callback_ids (
    callback_id text PRIMARY KEY,
    signed_at   timestamptz NOT NULL,
    key_id      text NOT NULL
);
CREATE INDEX callback_ids_signed_at ON wfe.callback_ids (signed_at);
COMMENT ON TABLE wfe.callback_ids IS
'callback_ids of accepted signed callbacks within wfe.callback_tolerance_s of their timestamp: a second body with one answers replayed.';

CREATE FUNCTION wfe.callback(body text, signature text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_callback'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.callback(text, text) IS
'A worker''s report signed by its gateway: the gate''s outcome word when authentic; unauthenticated, expired or replayed otherwise (each recorded as an event).';

-- The keys are configuration: a dump carries them (and so their secrets).
SELECT pg_catalog.pg_extension_config_dump('wfe.callback_keys', '');
REVOKE ALL ON FUNCTION wfe.callback(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.callback(text, text) TO wfe_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON wfe.callback_keys TO wfe_admin;

-- the tenants' limits (69_admission.sql) are tenant data too: the same policy
ALTER TABLE wfe.tenant_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.tenant_limits FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.tenant_limits FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));

-- The stage result cache (64_cache.sql; dsl.md "Result cache").  Stages
-- released before the update have no cache key: they run and report as
-- they did, and only stages released after it use the cache.
ALTER TABLE wfe.timers DROP CONSTRAINT timers_kind;
ALTER TABLE wfe.timers ADD CONSTRAINT timers_kind
    CHECK (kind IN ('retry', 'not_before', 'run_deadline', 'cache_ready'));
COMMENT ON TABLE wfe.timers IS 'Durable timers: retry delays, delayed starts (not_before), run deadlines, a cached stage''s wake-up when the attempt it waited on ended (cache_ready)';

CREATE TABLE wfe.cache_entries (
    key           text PRIMARY KEY
                  CONSTRAINT cache_entries_key CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    tenant        text NOT NULL,
    contract      text NOT NULL,
    result        jsonb NOT NULL,
    result_digest text NOT NULL,
    run_id        bigint NOT NULL,
    stage         text NOT NULL,
    attempt       int NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
COMMENT ON TABLE wfe.cache_entries IS
'The stage result cache: accepted results of stages with cache:, by key (sha256 of bound input, contract and tenant), with expiry, digest and origin.';
COMMENT ON COLUMN wfe.cache_entries.key IS
'sha256: and the hex SHA-256 of the key material (docs/dsl.md "Result cache")';
COMMENT ON COLUMN wfe.cache_entries.result_digest IS
'sha256: of the result''s canonical JSON, as stored; a read that finds otherwise records stage.cache_corrupt';
COMMENT ON COLUMN wfe.cache_entries.run_id IS 'Origin: the run whose attempt produced the result';
COMMENT ON COLUMN wfe.cache_entries.expires_at IS 'Absolute expiry (stored at now() + ttl_ms); expired entries are misses, and retention removes them';
CREATE INDEX cache_entries_expiry ON wfe.cache_entries (expires_at);
CREATE INDEX cache_entries_contract ON wfe.cache_entries (tenant, contract);
-- run-time state like the runs they came from: pg_dump keeps them (68_dump.sql)
SELECT pg_catalog.pg_extension_config_dump('wfe.cache_entries', '');

-- Remove entries by key, by contract or by tenant (at least one); the
-- caller's tenants bound what it may remove.
CREATE FUNCTION wfe.cache_invalidate(key text DEFAULT NULL, contract text DEFAULT NULL,
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

ALTER TABLE wfe.cache_entries ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.cache_entries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.cache_entries FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
REVOKE ALL ON FUNCTION wfe.cache_invalidate(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.cache_invalidate(text, text, text) TO wfe_operator;

-- The result cache per tenant and contract: its entries, and what releases
-- of cached stages found in the last hour (dsl.md "Result cache").
CREATE VIEW wfe.dashboard_cache WITH (security_invoker = true) AS
WITH entries AS (
    SELECT e.tenant, e.contract,
           count(*) FILTER (WHERE e.expires_at > now()) AS live,
           count(*) FILTER (WHERE e.expires_at <= now()) AS expired,
           sum(pg_column_size(e.result)) AS bytes
      FROM wfe.cache_entries AS e
     GROUP BY e.tenant, e.contract
), releases AS (
    SELECT st.tenant, st.worker AS contract,
           count(*) FILTER (WHERE st.cache = 'hit') AS hits,
           count(*) FILTER (WHERE st.cache = 'coalesced') AS coalesced,
           count(*) FILTER (WHERE st.cache = 'miss') AS misses,
           count(*) FILTER (WHERE st.cache = 'waiting' AND st.state = 'waiting') AS waiting
      FROM wfe.run_stages AS st
     WHERE st.cache_key IS NOT NULL AND st.ready_at > now() - interval '1 hour'
     GROUP BY st.tenant, st.worker
), both_ AS (
    SELECT coalesce(e.tenant, r.tenant) AS tenant, coalesce(e.contract, r.contract) AS contract,
           coalesce(e.live, 0) AS entries, coalesce(e.expired, 0) AS expired, coalesce(e.bytes, 0) AS bytes,
           coalesce(r.hits, 0) AS hits, coalesce(r.coalesced, 0) AS coalesced,
           coalesce(r.misses, 0) AS misses, coalesce(r.waiting, 0) AS waiting
      FROM entries AS e
      FULL JOIN releases AS r ON r.tenant = e.tenant AND r.contract = e.contract
)
SELECT b.tenant, b.contract, b.entries, b.expired, pg_size_pretty(b.bytes) AS size,
       b.hits, b.coalesced, b.misses, b.waiting,
       round((b.hits + b.coalesced)::numeric / nullif(b.hits + b.coalesced + b.misses, 0), 3) AS hit_ratio,
       wfe.bar((b.hits + b.coalesced)::double precision / nullif(b.hits + b.coalesced + b.misses, 0), 8) AS hit_bar
  FROM both_ AS b
 ORDER BY b.tenant, b.contract;
COMMENT ON VIEW wfe.dashboard_cache IS
'The result cache per tenant and contract: live and expired entries and their size; releases of the last hour that hit, were coalesced onto an attempt in flight, missed, or wait.';
GRANT SELECT ON wfe.dashboard_cache, wfe.cache_entries TO wfe_reader, wfe_operator;

