-- Starting and stopping runs: wfe.submit and wfe.cancel_run (docs: runtime.md).

-- The run an idempotency key names, if it may be returned again.
CREATE FUNCTION wfe._idempotent_run(p_tenant text, p_workflow text, p_key text, p_context jsonb)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_run_id  bigint;
    v_context jsonb;
BEGIN
    SELECT x.run_id, x.context INTO v_run_id, v_context
      FROM wfe.runs AS x
     WHERE x.tenant = p_tenant AND x.workflow = p_workflow AND x.idempotency_key = p_key
       AND wfe._run_keeps_key(x.state);
    IF v_run_id IS NOT NULL AND v_context <> p_context THEN
        RAISE EXCEPTION 'idempotency key "%" of workflow "%" was already used with a different context',
                p_key, p_workflow
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Run %s was submitted with this key.', v_run_id),
                  HINT = 'Use a new key for a different request, or resubmit the same context.';
    END IF;
    RETURN v_run_id;
END
$$;
COMMENT ON FUNCTION wfe._idempotent_run(text, text, text, jsonb) IS
'The live or successful run of (tenant, workflow, key), or NULL; raises 22023 when the key was used with another context.';
REVOKE ALL ON FUNCTION wfe._idempotent_run(text, text, text, jsonb) FROM PUBLIC;

-- The definition a submit names: 'name' (active) or 'name@version' (approved).
CREATE FUNCTION wfe._submittable(p_workflow text)
RETURNS wfe.definitions
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d   wfe.definitions;
    v_at int := length(p_workflow) - strpos(reverse(p_workflow), '@') + 1;
BEGIN
    IF strpos(p_workflow, '@') > 0 THEN
        SELECT * INTO d FROM wfe.definitions AS x
         WHERE x.workflow = left(p_workflow, v_at - 1) AND x.version = substr(p_workflow, v_at + 1);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'workflow definition "%" does not exist', p_workflow
                USING ERRCODE = 'undefined_object';
        END IF;
        IF d.state = 'draft' THEN
            RAISE EXCEPTION 'workflow definition "%" is a draft and cannot start runs', p_workflow
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Approve it with wfe.approve() first.';
        END IF;
        RETURN d;
    END IF;
    SELECT * INTO d FROM wfe.definitions AS x WHERE x.workflow = p_workflow AND x.state = 'active';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow "%" has no active version', p_workflow
            USING ERRCODE = 'undefined_object',
                  HINT = 'Activate a version with wfe.activate(), or submit ''name@version'' of an approved one.';
    END IF;
    RETURN d;
END
$$;
COMMENT ON FUNCTION wfe._submittable(text) IS
'Resolves a submit''s workflow argument: the active version of a name, or an approved name@version.';
REVOKE ALL ON FUNCTION wfe._submittable(text) FROM PUBLIC;

-- The contract versions a run of a plan pins: {ref: {"kind", "queue", "handler"}}.
-- PL/pgSQL, like every function a submit calls (00_schema.sql's rules).
CREATE FUNCTION wfe._run_contracts(p_plan jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_object_agg(c.ref, jsonb_build_object('kind', c.kind, 'queue', c.queue,
                                                                       'handler', c.handler::text)), '{}')
              FROM wfe.contracts AS c
             WHERE c.ref IN (SELECT jsonb_array_elements_text(p_plan -> 'contracts')));
END
$$;
COMMENT ON FUNCTION wfe._run_contracts(jsonb) IS
'The contract versions a new run of the plan pins (wfe.runs.contracts).';
REVOKE ALL ON FUNCTION wfe._run_contracts(jsonb) FROM PUBLIC;

-- A new run's stage rows, one per stage, task and finaliser of its plan
-- (a submitted run's and a child run's alike).  PL/pgSQL: see
-- wfe._run_contracts.
CREATE FUNCTION wfe._insert_run_stages(p_run wfe.runs)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority,
                                awaits, exec_ms, queue_ms, heartbeat_ms, rate_limit)
    SELECT p_run.run_id, ps.stage, p_run.tenant, ps.ordinal, ps.type,
           CASE WHEN ps.type = 'worker' THEN ps.spec ->> 'queue' ELSE c.queue END,
           coalesce(ps.spec ->> 'worker', ps.spec ->> 'action', ps.spec ->> 'signal',
                    ps.spec -> 'item' ->> 'worker', ps.spec -> 'item' ->> 'action'), c.handler, p_run.priority,
           coalesce((ps.spec ->> 'awaits')::boolean, true),
           -- a map's are its item's (its elements' rows copy them: src/pg/map.c)
           (coalesce(ps.spec -> 'item', ps.spec) ->> 'execution_deadline_ms')::int,
           (coalesce(ps.spec -> 'item', ps.spec) ->> 'queue_deadline_ms')::int,
           (coalesce(ps.spec -> 'item', ps.spec) ->> 'heartbeat_ms')::int,
           coalesce(ps.spec -> 'item', ps.spec) -> 'rate_limit' ->> 'name'
      FROM wfe.plan_stages AS ps
      LEFT JOIN wfe.contracts AS c ON c.ref = coalesce(ps.spec ->> 'worker', ps.spec ->> 'action')
     WHERE ps.definition_id = p_run.definition_id;
END
$$;
COMMENT ON FUNCTION wfe._insert_run_stages(wfe.runs) IS
'Inserts a new run''s stage rows (waiting), one per stage, task and finaliser of its plan.';
REVOKE ALL ON FUNCTION wfe._insert_run_stages(wfe.runs) FROM PUBLIC;

CREATE FUNCTION wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL,
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
    v_trace    text[];
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
     WHERE k NOT IN ('tenant', 'execution_context', 'run_deadline_ms', 'priority', 'not_before', 'traceparent');
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown submit option: %', v_bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Options are tenant, execution_context, run_deadline_ms, priority, not_before and traceparent.';
    END IF;
    v_tenant := coalesce(v_opts ->> 'tenant', 'default');
    PERFORM wfe._check_tenant_name(v_tenant);
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
    IF v_opts ? 'traceparent' THEN
        v_trace := wfe._traceparent(v_opts -> 'traceparent');
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
                               jsonb_build_object('by', wfe._identity()));
            RETURN QUERY SELECT v_existing, false;
            RETURN;
        END IF;
    END IF;

    -- Admission: the tenant's runs in flight (wfe.configure_tenant)
    PERFORM wfe._admit_run(v_tenant, 'Submit');

    INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version,
                               compiler_version, engine_version, contracts, context, execution_context,
                               idempotency_key, priority, not_before, deadline_at, form,
                               trace_id, trace_parent, trace_flags)
    VALUES (v_tenant, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe'),
            wfe._run_contracts(d.plan),
            v_context, coalesce(v_opts ->> 'execution_context', d.plan ->> 'context'),
            submit.idempotency_key, v_priority, v_start,
            now() + make_interval(secs => v_deadline / 1000.0), d.plan ->> 'form',
            coalesce(v_trace[1], wfe._random_hex(32)), v_trace[2], coalesce(v_trace[3], '01'))
    ON CONFLICT (tenant, workflow, idempotency_key)
       WHERE idempotency_key IS NOT NULL AND wfe._run_keeps_key(state)
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
                           jsonb_build_object('by', wfe._identity()));
        RETURN QUERY SELECT v_existing, false;
        RETURN;
    END IF;

    PERFORM wfe._insert_run_stages(r);

    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.submitted',
                       jsonb_build_object('workflow', r.workflow, 'version', r.version,
                                          'digest', r.definition_digest, 'idempotency_key', r.idempotency_key)
                       || wfe._submit_via());
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
REVOKE ALL ON FUNCTION wfe.submit(text, jsonb, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.submit(text, jsonb, text, jsonb) TO wfe_submitter;

CREATE FUNCTION wfe.cancel_run(run_id bigint, reason text DEFAULT NULL)
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
                           jsonb_build_object('callback', 'cancel_run', 'by', wfe._identity()));
        RETURN 'late';
    END IF;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.cancel_requested',
                       jsonb_build_object('by', wfe._identity(), 'reason', cancel_run.reason));
    PERFORM wfe._cancel(r.run_id, coalesce(cancel_run.reason, 'cancelled by ' || wfe._identity()));
    -- nothing is left to do about its dead letters
    UPDATE wfe.dead_letters AS d SET resolved_at = now(), resolved_by = wfe._identity(), resolution = 'cancelled'
     WHERE d.run_id = r.run_id AND d.resolved_at IS NULL;
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.cancel_run(bigint, text) IS
'Cancels a run: in-flight attempts are fenced and asked to stop, unstarted stages skipped, finalisers run; answers accepted, late or unknown.';
REVOKE ALL ON FUNCTION wfe.cancel_run(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.cancel_run(bigint, text) TO wfe_submitter, wfe_operator;
