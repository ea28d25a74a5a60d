-- Reading a run: the structured execution report and the timeline (docs: runtime.md).

-- The run, or 42704 naming it.
CREATE FUNCTION wfe._run(p_run_id bigint)
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

CREATE FUNCTION wfe.report(run_id bigint)
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
                            WHERE e.run_id = r.run_id AND e.type = 'callback.late'));
END
$$;
COMMENT ON FUNCTION wfe.report(bigint) IS
'Structured execution report of a run: state, intent, timing, and one entry per stage, task and finaliser.';

CREATE FUNCTION wfe.run_timeline(run_id bigint)
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
        SELECT e.stage, e.attempt, min(e.at) AS t_start, max(e.at) AS t_end, min(e.event_id) AS first_event,
               (array_agg(e.type ORDER BY e.event_id DESC))[1] AS last_type
          FROM wfe.events AS e
         WHERE e.run_id = r.run_id AND e.stage IS NOT NULL AND e.attempt IS NOT NULL
           AND e.type NOT LIKE 'callback.%'
         GROUP BY e.stage, e.attempt
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
