-- Child runs (runtime.md "Child runs"; dsl.md "Stages form: new types"):
-- what the engine (src/pg/child.c) calls when a workflow stage's attempt
-- starts a child run, and when a parent's attempt ends while its child is
-- still under way.  The step core decides both; these only write.

-- A child run for attempt p_attempt of the parent's workflow stage p_stage,
-- started in the caller's transaction under the parent's lock.  Unlike
-- wfe.submit it checks nothing a caller could get wrong: the step core
-- resolved the definition (p_workflow at p_version, not a draft), bound the
-- context against its context_schema and checked the depth.  The child
-- runs in the parent's tenant, with its priority and in its trace (the
-- child's run span is a child of the parent's attempt span); it counts as the parent's
-- work, not against the tenant's max_runs_in_flight again.
CREATE FUNCTION wfe._start_child(p_parent bigint, p_stage text, p_attempt int, p_workflow text,
                                 p_version text, p_context jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p     wfe.runs;
    d     wfe.definitions;
    r     wfe.runs;
    v_due timestamptz;
BEGIN
    SELECT * INTO STRICT p FROM wfe.runs AS x WHERE x.run_id = p_parent;
    SELECT * INTO STRICT d FROM wfe.definitions AS x WHERE x.workflow = p_workflow AND x.version = p_version;
    INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version,
                               compiler_version, engine_version, contracts, context, execution_context,
                               priority, deadline_at, form, trace_id, trace_parent, trace_flags,
                               parent_run_id, parent_stage, parent_attempt)
    VALUES (p.tenant, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe'),
            wfe._run_contracts(d.plan), p_context, d.plan ->> 'context', p.priority,
            now() + make_interval(secs => (d.plan ->> 'run_deadline_ms')::bigint / 1000.0),
            d.plan ->> 'form', p.trace_id, wfe._attempt_span_id(p.span_id, p_stage, p_attempt), p.trace_flags,
            p_parent, p_stage, p_attempt)
    RETURNING x.* INTO r;
    PERFORM wfe._insert_run_stages(r);
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.submitted',
                       jsonb_build_object('workflow', r.workflow, 'version', r.version,
                                          'digest', r.definition_digest, 'idempotency_key', NULL,
                                          'parent_run_id', p_parent, 'parent_stage', p_stage,
                                          'parent_attempt', p_attempt));
    IF r.deadline_at IS NOT NULL THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'run_deadline', r.deadline_at);
        PERFORM wfe._wake(r.deadline_at);
    END IF;
    -- the parent's attempt has the stage's execution deadline, as a worker's does
    UPDATE wfe.run_stages AS st
       SET deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)
     WHERE st.run_id = p_parent AND st.stage = p_stage AND st.exec_ms IS NOT NULL
    RETURNING st.deadline_at INTO v_due;
    IF FOUND THEN
        PERFORM wfe._wake(v_due);
    END IF;
    PERFORM wfe._start_run(r.run_id);
    RETURN r.run_id;
END
$$;
COMMENT ON FUNCTION wfe._start_child(bigint, text, int, text, text, jsonb) IS
'Starts the child run of a parent''s workflow stage attempt (the engine calls it under the parent''s lock); returns its run_id.';
REVOKE ALL ON FUNCTION wfe._start_child(bigint, text, int, text, text, jsonb) FROM PUBLIC;

-- The parent's attempt of p_stage ended otherwise than by its child's end
-- (cancelled with the run, timed out, failed by an operator): its live
-- child is cancelled too, and so on down.  Lock order: the parent (held by
-- the caller), then its children -- never the other way round, which is
-- why a child's end reaches its parent through a child_ended timer.
CREATE FUNCTION wfe._cancel_children(p_parent bigint, p_stage text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c bigint;
BEGIN
    FOR c IN SELECT x.run_id FROM wfe.runs AS x
              WHERE x.parent_run_id = p_parent AND x.parent_stage = p_stage AND x.intent IS NULL
              ORDER BY x.run_id
    LOOP
        PERFORM wfe._cancel(c, coalesce(p_reason, 'parent attempt ended'));
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe._cancel_children(bigint, text, text) IS
'Cancels the live child runs of a parent''s workflow stage whose attempt ended otherwise (the engine calls it under the parent''s lock).';
REVOKE ALL ON FUNCTION wfe._cancel_children(bigint, text, text) FROM PUBLIC;
