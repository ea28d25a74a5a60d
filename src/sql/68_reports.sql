-- Reading a run: the structured execution report and the timeline (docs: runtime.md).

-- The run, or 42704 naming it.  The one place of the tenant rule for every
-- function that takes a run id -- the readers' and the operators'
-- (71_recovery.sql): another tenant's run is one that does not exist, with
-- the same SQLSTATE and message, read without a lock.
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
REVOKE ALL ON FUNCTION wfe._run(bigint) FROM PUBLIC;

-- A map's elements counted by state: its counter row's items (bound at
-- release) and released, and one count per stage state over its element rows
-- (the run_stages_elements index).  Every state is present, zero or not, so
-- a reader needs no default; the elements max_concurrency still holds back
-- are waiting (items - released of them).  NULL before the map's release.
CREATE FUNCTION wfe._map_element_counts(p_run_id bigint, p_stage text, p_ordinal int)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object(
               'items', m.total, 'released', m.released,
               'waiting', count(*) FILTER (WHERE st.state = 'waiting'),
               'queued', count(*) FILTER (WHERE st.state = 'queued'),
               'dispatched', count(*) FILTER (WHERE st.state = 'dispatched'),
               'running', count(*) FILTER (WHERE st.state = 'running'),
               'retry_scheduled', count(*) FILTER (WHERE st.state = 'retry_scheduled'),
               'completed', count(*) FILTER (WHERE st.state = 'completed'),
               'failed', count(*) FILTER (WHERE st.state = 'failed'),
               'timed_out', count(*) FILTER (WHERE st.state = 'timed_out'),
               'cancelled', count(*) FILTER (WHERE st.state = 'cancelled'),
               'skipped', count(*) FILTER (WHERE st.state = 'skipped'))
      FROM wfe.run_maps AS m
      LEFT JOIN wfe.run_stages AS st
             ON st.run_id = m.run_id AND st.ordinal = p_ordinal AND st.element IS NOT NULL
     WHERE m.run_id = p_run_id AND m.stage = p_stage
     GROUP BY m.total, m.released;
END;
COMMENT ON FUNCTION wfe._map_element_counts(bigint, text, int) IS
'A released map''s elements for wfe.report and wfe.run_mermaid: items, released, and a count per stage state; NULL before its release.';
REVOKE ALL ON FUNCTION wfe._map_element_counts(bigint, text, int) FROM PUBLIC;

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
        -- the run's result, bound at a completed intent (dsl.md "Run output")
        'output', wfe._redact(r.output),
        -- a run a schedule started (69_schedules.sql): which, and for which tick
        'schedule', (SELECT x.schedule FROM wfe.schedule_runs AS x WHERE x.run_id = r.run_id),
        'scheduled_for', (SELECT x.scheduled_for FROM wfe.schedule_runs AS x WHERE x.run_id = r.run_id),
        -- child runs both ways (runtime.md "Child runs"): a child's parent is of its tenant
        'parent', CASE WHEN r.parent_run_id IS NOT NULL THEN
                      jsonb_build_object('run_id', r.parent_run_id, 'stage', r.parent_stage,
                                         'attempt', r.parent_attempt,
                                         'state', (SELECT x.state FROM wfe.runs AS x WHERE x.run_id = r.parent_run_id))
                  END,
        'children', (SELECT coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'stage', x.parent_stage,
                                                                  'attempt', x.parent_attempt,
                                                                  'workflow', x.workflow, 'version', x.version,
                                                                  'state', x.state)
                                               ORDER BY x.run_id), '[]')
                       FROM wfe.runs AS x WHERE x.parent_run_id = r.run_id),
        'stages', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                              'stage', s.stage,
                              'kind', s.kind,
                              'status', s.state,
                              'attempts', s.attempt,
                              'duration_ms', round(extract(epoch FROM s.finished_at - s.started_at) * 1000),
                              'skip_reason', s.skip_reason,
                              'error', wfe._redact(s.error),
                              'result', wfe._redact(s.result))
                              -- a map's elements counted by state (runtime.md "Map elements")
                              || CASE WHEN s.kind = 'map' AND s.element IS NULL
                                      THEN jsonb_build_object('elements', wfe._map_element_counts(s.run_id, s.stage, s.ordinal))
                                      ELSE '{}' END
                          ORDER BY s.ordinal, s.element NULLS FIRST), '[]')
                     FROM wfe.run_stages AS s WHERE s.run_id = r.run_id),
        'outputs', (SELECT coalesce(jsonb_object_agg(o.task || '.' || o.key,
                                                wfe._redact(jsonb_build_object(o.key, o.value)) -> o.key), '{}')
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
REVOKE ALL ON FUNCTION wfe.report(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.report(bigint) TO wfe_submitter, wfe_operator, wfe_reader;

CREATE FUNCTION wfe.run_timeline(run_id bigint)
RETURNS TABLE (stage text, attempt int, outcome text, started_at timestamptz, finished_at timestamptz,
               duration_ms numeric, waterfall text, child_run_id bigint)
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_timeline.run_id);
    v_span  double precision;
BEGIN
    v_span := greatest(extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at), 0.001);
    -- a child run's first row is its parent: the parent's stage and attempt
    -- that started it, the outcome naming the parent run, the child's whole life
    IF r.parent_run_id IS NOT NULL THEN
        RETURN QUERY
        SELECT r.parent_stage, r.parent_attempt, 'child of run ' || r.parent_run_id, r.submitted_at, r.finished_at,
               round((extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at) * 1000)::numeric, 1),
               '|' || repeat('█', 40) || '|', NULL::bigint;
    END IF;
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
    ), b AS (
        -- a wait, a sleep or a workflow stage parked now (its stage running
        -- at this attempt) has not finished: its last event is its release,
        -- so it runs to now (finished_at NULL) rather than showing a zero duration
        SELECT a.*, (s.state = 'running' AND s.kind IN ('wait', 'sleep', 'workflow')) AS parked
          FROM a
          LEFT JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = a.stage AND s.attempt = a.attempt
    ), c AS (
        SELECT b.*, CASE WHEN b.parked THEN coalesce(r.finished_at, now()) ELSE b.t_end END AS t_until
          FROM b
    )
    SELECT c.stage, c.attempt, replace(c.last_type, 'stage.', ''), c.t_start,
           CASE WHEN c.parked THEN NULL ELSE c.t_end END,
           round((extract(epoch FROM c.t_until - c.t_start) * 1000)::numeric, 1),
           -- a 40-column bar across the run's life: where the attempt sat and how long
           '|' || rpad(repeat(' ', least(39, floor(extract(epoch FROM c.t_start - r.submitted_at) / v_span * 40)::int))
                       || repeat('█', greatest(1, round(extract(epoch FROM c.t_until - c.t_start) / v_span * 40)::int)),
                       40) || '|',
           -- the child run a workflow stage's attempt started
           (SELECT x.run_id FROM wfe.runs AS x
             WHERE x.parent_run_id = r.run_id AND x.parent_stage = c.stage AND x.parent_attempt = c.attempt
             ORDER BY x.run_id DESC LIMIT 1)
      FROM c
     ORDER BY c.first_event;
END
$$;
COMMENT ON FUNCTION wfe.run_timeline(bigint) IS
'One row per stage attempt with its outcome, times, a text waterfall over the run''s life, and the child run a workflow stage''s attempt started; a child run''s first row names its parent run, stage and attempt.';
REVOKE ALL ON FUNCTION wfe.run_timeline(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_timeline(bigint) TO wfe_submitter, wfe_operator, wfe_reader;

-- The plan's picture with this run on it: the Mermaid flowchart of
-- wfe._plan_mermaid, each node classed by its stage's state, and the edges
-- the run took drawn bold (linkStyle counts edges in the order they appear).
CREATE FUNCTION wfe.run_mermaid(run_id bigint)
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
    v_children text;
    v_node  text;
    v_extra text;
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
           (SELECT string_agg(t.n::text, ',' ORDER BY t.n) FROM taken AS t),
           -- each workflow stage's latest child run, by id
           (SELECT string_agg(format('  %%%% %s: child run %s (%s)', n.id, x.run_id, x.state), E'\n'
                              ORDER BY n.id)
              FROM nodes AS n
              CROSS JOIN LATERAL (SELECT c.run_id, c.state FROM wfe.runs AS c
                                   WHERE c.parent_run_id = r.run_id AND c.parent_stage = n.stage
                                   ORDER BY c.run_id DESC LIMIT 1) AS x)
      INTO v_class, v_bold, v_children;
    -- on the picture itself: a released map's node gains its elements'
    -- counts by state, a workflow stage's node its latest child run (the
    -- node's text is extended in place, so its shape and edges stay)
    FOR v_node, v_extra IN
        SELECT 's' || (p.i - 1),
               CASE WHEN st.kind = 'map' THEN
                        (SELECT format('<b>%s elements</b>', c.e ->> 'items')
                                || coalesce(': ' || string_agg(format('%s %s', c.e ->> k.state, k.state), ', '
                                                               ORDER BY k.o)
                                                    FILTER (WHERE (c.e ->> k.state)::int > 0), '')
                           FROM (SELECT wfe._map_element_counts(r.run_id, st.stage, st.ordinal) AS e) AS c,
                                unnest(ARRAY['completed', 'failed', 'timed_out', 'cancelled', 'skipped', 'running',
                                             'dispatched', 'retry_scheduled', 'queued', 'waiting'])
                                    WITH ORDINALITY AS k(state, o)
                          WHERE c.e IS NOT NULL
                          GROUP BY c.e)
                    ELSE (SELECT format('child run %s (%s)', c.run_id, c.state) FROM wfe.runs AS c
                           WHERE c.parent_run_id = r.run_id AND c.parent_stage = st.stage
                           ORDER BY c.run_id DESC LIMIT 1)
               END
          FROM jsonb_array_elements(v_plan -> 'stages') WITH ORDINALITY AS p(s, i)
          JOIN wfe.run_stages AS st ON st.run_id = r.run_id AND st.stage = p.s ->> 'name'
         WHERE st.kind IN ('map', 'workflow')
    LOOP
        CONTINUE WHEN v_extra IS NULL;
        -- a map is drawn s<i>[/"..."/], a workflow stage s<i>[["..."]] (core/lang/mermaid.c)
        v_chart := regexp_replace(v_chart, '^(  ' || v_node || '(\[/|\[\[)".*?)("/\]|"\]\])$',
                                  '\1<br/>' || v_extra || '\3', 'n');
    END LOOP;
    RETURN rtrim(v_chart, E'\n')
        || format(E'\n  %%%% run %s: %s\n', r.run_id, r.state)
        || E'  classDef done fill:#d8f3dc,stroke:#2d6a4f,color:#1b4332\n'
        || E'  classDef failed fill:#ffd6d6,stroke:#b00020,color:#7f0000\n'
        || E'  classDef running fill:#fff3bf,stroke:#e67700,color:#5c3c00\n'
        || E'  classDef skipped fill:#f1f3f5,stroke:#adb5bd,color:#868e96,stroke-dasharray: 4 3\n'
        || E'  classDef cancelled fill:#e9ecef,stroke:#495057,color:#495057,stroke-dasharray: 4 3\n'
        || E'  classDef waiting fill:#ffffff,stroke:#ced4da,color:#adb5bd\n'
        || coalesce(v_class || E'\n', '')
        || coalesce(v_children || E'\n', '')
        || coalesce(E'  linkStyle ' || v_bold || E' stroke-width:4px\n', '');
END
$$;
COMMENT ON FUNCTION wfe.run_mermaid(bigint) IS
'The plan''s Mermaid flowchart with each stage classed by its state in this run (done, failed, running, skipped, cancelled, waiting), the edges the run took drawn bold, a map''s element counts by state and each workflow stage''s latest child run on their nodes, and each workflow stage''s child run by id.';
REVOKE ALL ON FUNCTION wfe.run_mermaid(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_mermaid(bigint) TO wfe_submitter, wfe_reader, wfe_operator;
