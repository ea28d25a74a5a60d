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
BEGIN
    IF submit.workflow IS NULL THEN
        RAISE EXCEPTION 'workflow must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(v_context) <> 'object' THEN
        RAISE EXCEPTION 'context must be a JSON object, not %', jsonb_typeof(v_context)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(v_opts) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, not %', jsonb_typeof(v_opts)
            USING ERRCODE = 'invalid_parameter_value';
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
            RETURN QUERY SELECT v_existing, false;
            RETURN;
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
