-- set_priority: a run's priority, changed while it runs (docs:
-- operations.md "Flow control").  Claims take the highest priority first
-- (run_stages_ready orders by priority), and so do the releases of held
-- tasks (wfe._release_held): changing the stage rows is all it takes for
-- the run's queued work, and for what it releases later, to follow.

CREATE FUNCTION wfe.set_priority(run_id bigint, priority int)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs;
BEGIN
    IF set_priority.run_id IS NULL OR set_priority.priority IS NULL THEN
        RAISE EXCEPTION 'run_id and priority must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF set_priority.priority NOT BETWEEN -1000000 AND 1000000 THEN
        RAISE EXCEPTION 'priority must be an integer between -1000000 and 1000000, not %', set_priority.priority
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Higher runs first; submit''s default is 0.';
    END IF;
    r := wfe._run(set_priority.run_id);
    -- the run row first, as every writer of a run (one lock order)
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = r.run_id FOR NO KEY UPDATE;
    IF r.finished_at IS NOT NULL THEN
        RAISE EXCEPTION 'cannot set the priority of run %: it is %', r.run_id, r.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a run that has not ended has work to reorder.';
    END IF;
    IF r.priority = set_priority.priority THEN
        RETURN;
    END IF;
    UPDATE wfe.runs AS x SET priority = set_priority.priority WHERE x.run_id = r.run_id;
    UPDATE wfe.run_stages AS st SET priority = set_priority.priority
     WHERE st.run_id = r.run_id AND st.priority <> set_priority.priority;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.priority_set',
                       jsonb_build_object('by', wfe._identity(), 'from', r.priority, 'to', set_priority.priority));
END
$$;
COMMENT ON FUNCTION wfe.set_priority(bigint, int) IS
'Changes a run''s priority (-1000000 .. 1000000, higher first): its queued work, and what it releases later, is claimed in the new order; event run.priority_set.';
REVOKE ALL ON FUNCTION wfe.set_priority(bigint, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.set_priority(bigint, int) TO wfe_operator;
