-- The run state machine's internals (docs: runtime.md).
--
-- Every function here runs inside a transition that already holds the run
-- row's lock (FOR NO KEY UPDATE), so the functions below never race each
-- other within one run: a join's arrivals, a run's intent and its finalisers
-- are decided by exactly one transaction at a time.  Stage rows are locked
-- after the run row, never before.

-- Append one event.
CREATE FUNCTION wfe._event(p_run_id bigint, p_tenant text, p_stage text, p_attempt int,
                           p_type text, p_detail jsonb DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
    VALUES (p_run_id, p_tenant, p_stage, p_attempt, p_type, p_detail);
END;
COMMENT ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb) IS
'Appends one row to the event log.';

-- The deterministic identity of a message about one attempt.
CREATE FUNCTION wfe._message_id(p_run_id bigint, p_stage text, p_attempt int, p_fence bigint,
                                p_kind text)
RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN md5(p_run_id::text || ':' || p_stage || ':' || p_attempt::text || ':'
           || p_fence::text || ':' || p_kind)::uuid;
COMMENT ON FUNCTION wfe._message_id(bigint, text, int, bigint, text) IS
'Deterministic message id of (run, stage, attempt, fence, kind): a republished message keeps its id, so consumers deduplicate.';

-- The plan entry of one stage of a run's pinned definition.
CREATE FUNCTION wfe._spec(p_definition_id bigint, p_stage text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT ps.spec FROM wfe.plan_stages AS ps
     WHERE ps.definition_id = p_definition_id AND ps.stage = p_stage;
END;
COMMENT ON FUNCTION wfe._spec(bigint, text) IS 'Plan entry (stage spec) of a stage of a stored definition.';

-- The document expressions and interpolations read: context, stage results,
-- declared outputs, run identity.  Parts are built only when asked for.
CREATE FUNCTION wfe._root(p_run wfe.runs, p_stages boolean, p_outputs jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_stages  jsonb := '{}';
    v_outputs jsonb := '{}';
BEGIN
    IF p_stages THEN
        SELECT coalesce(jsonb_object_agg(s.stage, jsonb_build_object('result', s.result)), '{}')
          INTO v_stages
          FROM wfe.run_stages AS s
         WHERE s.run_id = p_run.run_id AND s.state = 'completed'
           AND s.kind IN ('action', 'worker');
    END IF;
    -- a task sees only the outputs it declared in requires_outputs
    IF p_outputs IS NOT NULL AND jsonb_array_length(p_outputs) > 0 THEN
        SELECT coalesce(jsonb_object_agg(t.task, t.kv), '{}') INTO v_outputs
          FROM (SELECT o.task, jsonb_object_agg(o.key, o.value) AS kv
                  FROM wfe.outputs AS o
                  JOIN jsonb_array_elements(p_outputs) AS r(req)
                    ON o.task = r.req ->> 'producer_task_id' AND o.key = r.req ->> 'key'
                 WHERE o.run_id = p_run.run_id
                 GROUP BY o.task) AS t;
    END IF;
    RETURN jsonb_build_object(
        'context', p_run.context,
        'stages', v_stages,
        'outputs', v_outputs,
        'run', jsonb_build_object('id', p_run.run_id, 'tenant', p_run.tenant,
                                  'workflow', p_run.workflow, 'version', p_run.version));
END
$$;
COMMENT ON FUNCTION wfe._root(wfe.runs, boolean, jsonb) IS
'The JSON document decisions and input bindings read: {"context","stages","outputs","run"}.';

-- Delay before the next attempt: the policy's exponential backoff with jitter.
CREATE FUNCTION wfe._backoff(p_retry jsonb, p_attempt int)
RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_base double precision;
    v_ms   double precision;
BEGIN
    v_base := least((p_retry ->> 'max_ms')::double precision,
                    (p_retry ->> 'initial_ms')::double precision
                    * power((p_retry ->> 'multiplier')::double precision, p_attempt - 1));
    v_ms := CASE p_retry ->> 'jitter'
                WHEN 'full' THEN random() * v_base
                WHEN 'equal' THEN v_base / 2 + random() * v_base / 2
                ELSE v_base
            END;
    RETURN make_interval(secs => v_ms / 1000.0);
END
$$;
COMMENT ON FUNCTION wfe._backoff(jsonb, int) IS
'Retry delay after attempt n: min(max_ms, initial_ms * multiplier^(n-1)) with full, equal or no jitter.';

-- Should a release wake poll workers of this queue?
CREATE FUNCTION wfe._notify_ready(p_queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NOTIFY dedups identical payloads within a transaction, so a batch of
    -- releases to one queue costs one notification at commit.
    IF p_queue IS NOT NULL AND coalesce(current_setting('wfe.notify', true), 'on') <> 'off' THEN
        PERFORM pg_notify('wfe_task_ready', p_queue);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._notify_ready(text) IS
'NOTIFY wfe_task_ready with the queue name (once per transaction and queue), unless wfe.notify is off.';

-- Queue a dispatch message in the outbox for a broker-mode queue.  An input
-- over wfe.track_threshold_bytes goes on the large track: stored once by its
-- SHA-256 in wfe.payloads, the envelope carrying only a reference.
CREATE FUNCTION wfe._dispatch(p_run wfe.runs, p_stage wfe.run_stages)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id    uuid := wfe._message_id(p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch');
    v_text  text := coalesce(p_stage.input, '{}')::text;
    v_bytes int := octet_length(v_text);
    v_track text := 'small';
    v_hash  text;
    v_ref   jsonb;
BEGIN
    IF v_bytes > coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) THEN
        v_track := 'large';
        v_hash := encode(sha256(convert_to(v_text, 'UTF8')), 'hex');
        v_ref := jsonb_build_object('bucket', 'wfe.payloads', 'key', 'sha256:' || v_hash,
                                    'sha256', v_hash, 'bytes', v_bytes);
        INSERT INTO wfe.payloads (key, tenant, bytes, body)
        VALUES ('sha256:' || v_hash, p_run.tenant, v_bytes, coalesce(p_stage.input, '{}'))
        ON CONFLICT (key) DO NOTHING;
    END IF;
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,
                            message_id, headers, body)
    VALUES (p_run.tenant, p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch',
            'wfe.commands', 'run.' || p_stage.queue || '.' || v_track, v_id,
            jsonb_build_object(
                'x-wfe-run-id', p_run.run_id::text, 'x-wfe-stage', p_stage.stage,
                'x-wfe-attempt', p_stage.attempt::text, 'x-wfe-fence', p_stage.fence::text,
                'x-wfe-digest', p_run.definition_digest, 'x-wfe-contract', p_stage.worker,
                'x-wfe-tenant', p_run.tenant, 'x-wfe-track', v_track,
                -- ISO 8601 in UTC, whatever the releasing session's DateStyle and TimeZone
                'x-wfe-deadline', coalesce(to_char(p_stage.deadline_at AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '')),
            jsonb_build_object(
                'message_id', v_id, 'correlation_id', p_run.run_id::text,
                'workflow_name', p_run.workflow, 'workflow_version', p_run.version,
                'definition_digest', p_run.definition_digest, 'run_id', p_run.run_id,
                'stage', p_stage.stage, 'attempt', p_stage.attempt, 'fence', p_stage.fence,
                'worker', p_stage.worker, 'track', v_track,
                -- what a pushed worker needs to keep the attempt alive
                'heartbeat_ms', p_stage.heartbeat_ms, 'execution_deadline_ms', p_stage.exec_ms,
                'headers', jsonb_build_object('content_type', 'application/json',
                                              'source', 'wfe', 'tenant', p_run.tenant),
                'idempotency_key', p_run.run_id || ':' || p_stage.stage || ':' || p_stage.attempt,
                'deadline_at', p_stage.deadline_at,
                'payload_inline', CASE WHEN v_track = 'small' THEN coalesce(p_stage.input, '{}') END,
                'payload_ref', v_ref,
                'created_at', now()));
    PERFORM wfe._wake(now());               -- the publisher has a message
END
$$;
COMMENT ON FUNCTION wfe._dispatch(wfe.runs, wfe.run_stages) IS
'Writes the dispatch message of a released attempt to the outbox (broker-mode queues), by reference on the large track.';

-- Make a released attempt claimable: queued, with its bound input.
CREATE FUNCTION wfe._enqueue(p_run wfe.runs, p_stage text, p_input jsonb, p_new_attempt boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s wfe.run_stages;
    v_delivery text;
    v_paused   boolean;
BEGIN
    UPDATE wfe.run_stages AS st
       SET state = 'queued',
           attempt = CASE WHEN p_new_attempt THEN st.attempt + 1 ELSE st.attempt END,
           fence = st.fence + 1,
           input = coalesce(p_input, st.input),
           outcome = NULL,
           error = NULL,
           ready_at = now(),
           claimed_by = NULL,
           started_at = NULL,
           heartbeat_at = NULL,
           deadline_at = CASE WHEN st.queue_ms IS NOT NULL
                              THEN now() + make_interval(secs => st.queue_ms / 1000.0) END
     WHERE st.run_id = p_run.run_id AND st.stage = p_stage
    RETURNING st.* INTO s;

    -- (the hot path writes its events directly rather than through wfe._event)
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
    VALUES (p_run.run_id, p_run.tenant, p_stage, s.attempt,
            CASE WHEN s.attempt = 1 THEN 'stage.released' ELSE 'stage.retried' END,
            jsonb_build_object('queue', s.queue, 'fence', s.fence));
    IF s.deadline_at IS NOT NULL THEN
        PERFORM wfe._wake(s.deadline_at);   -- the queue deadline is a timer too
    END IF;
    IF s.handler IS NOT NULL THEN
        PERFORM wfe._wake(now());           -- an in-database action to run
    ELSIF s.queue IS NOT NULL THEN
        SELECT q.delivery, q.paused INTO v_delivery, v_paused FROM wfe.queues AS q WHERE q.queue = s.queue;
        IF v_delivery = 'broker' THEN
            -- a paused queue keeps its tasks queued: dispatched on resume
            IF NOT v_paused THEN
                PERFORM wfe._dispatch(p_run, s);
            END IF;
        ELSIF NOT coalesce(v_paused, false) THEN
            PERFORM wfe._notify_ready(s.queue);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._enqueue(wfe.runs, text, jsonb, boolean) IS
'Moves a stage to queued with a new fence (and, for a retry, a new attempt); dispatches or notifies.';

-- Release a stage a route leads to: a join records the arrival; decisions
-- and forks resolve here and now; executing stages get their input bound and
-- are queued.
CREATE FUNCTION wfe._activate(p_run wfe.runs, p_stage text, p_branch text,
                              p_outcome text DEFAULT 'completed')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s        wfe.run_stages;
    v_spec   jsonb;
    v_eval   jsonb;
    v_next   text;
    v_input  jsonb;
    v_bound  jsonb;
    v_schema jsonb;
    v_branch text;
BEGIN
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = p_run.run_id AND st.stage = p_stage FOR UPDATE;
    IF NOT FOUND OR s.state <> 'waiting' THEN
        RETURN;                 -- skipped, cancelled, resolved or released already
    END IF;
    IF s.kind = 'join' THEN
        PERFORM wfe._arrive(p_run, s, p_branch, p_outcome);
        RETURN;
    END IF;
    v_spec := wfe._spec(p_run.definition_id, p_stage);
    IF s.branch IS DISTINCT FROM p_branch THEN
        UPDATE wfe.run_stages AS st SET branch = p_branch
         WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
        s.branch := p_branch;
    END IF;

    IF s.kind = 'decision' THEN
        -- evaluated in the transaction that releases it, over durable results
        v_eval := wfe._eval_decision(v_spec -> 'branches', wfe._root(p_run, true, NULL));
        IF (v_eval ->> 'ok')::boolean THEN
            v_next := v_eval ->> 'next';
            UPDATE wfe.run_stages AS st
               SET state = 'completed', attempt = 1, fence = 1, outcome = 'completed',
                   result = jsonb_build_object('branch', (v_eval ->> 'branch')::int + 1, 'next', v_next),
                   started_at = now(), finished_at = now()
             WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
            PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, 1, 'stage.decided',
                               jsonb_build_object('branch', (v_eval ->> 'branch')::int + 1, 'next', v_next));
            PERFORM wfe._skip_unreachable(p_run, p_stage, v_next);
        ELSE
            v_next := v_spec ->> 'on_evaluation_error';
            UPDATE wfe.run_stages AS st
               SET state = 'failed', attempt = 1, fence = 1, outcome = 'failed',
                   error = jsonb_build_object('code', 'expr.eval', 'message', v_eval ->> 'error',
                                              'branch', (v_eval ->> 'branch')::int + 1),
                   started_at = now(), finished_at = now()
             WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
            PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, 1, 'stage.evaluation_error',
                               jsonb_build_object('error', v_eval ->> 'error', 'next', v_next));
            PERFORM wfe._skip_unreachable(p_run, p_stage, v_next);
        END IF;
        PERFORM wfe._route(p_run, p_stage, v_next, p_branch,
                           CASE WHEN (v_eval ->> 'ok')::boolean THEN 'completed' ELSE 'failed' END);
        RETURN;
    END IF;

    IF s.kind = 'fork' THEN
        UPDATE wfe.run_stages AS st
           SET state = 'completed', attempt = 1, fence = 1, outcome = 'completed',
               result = jsonb_build_object('branches', v_spec -> 'branches'),
               started_at = now(), finished_at = now()
         WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
        PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, 1, 'stage.forked',
                           jsonb_build_object('branches', v_spec -> 'branches'));
        -- each branch runs under its own name, which its join records
        FOR v_branch IN SELECT jsonb_array_elements_text(v_spec -> 'branches') LOOP
            PERFORM wfe._activate(p_run, v_branch, v_branch);
        END LOOP;
        RETURN;
    END IF;

    -- action, worker, finaliser: bind the input now, at release
    IF s.kind = 'finaliser' THEN
        SELECT jsonb_build_object(
                   'run_id', p_run.run_id, 'workflow', p_run.workflow, 'version', p_run.version,
                   'tenant', p_run.tenant, 'intent', r.intent,
                   'stages', (SELECT coalesce(jsonb_object_agg(x.stage, x.state ORDER BY x.ordinal), '{}')
                                FROM wfe.run_stages AS x
                               WHERE x.run_id = p_run.run_id AND x.kind <> 'finaliser'))
          INTO v_input
          FROM wfe.runs AS r WHERE r.run_id = p_run.run_id;
    ELSE
        v_input := coalesce(v_spec -> 'input', '{}');
        SELECT c.input_schema INTO v_schema FROM wfe.contracts AS c WHERE c.ref = s.worker;
        IF strpos(v_input::text, '${') > 0 OR coalesce(v_schema, '{}') <> '{}' THEN
            v_bound := wfe._bind_input(
                v_input,
                CASE WHEN strpos(v_input::text, '${') > 0
                     THEN wfe._root(p_run, strpos(v_input::text, 'stages') > 0,
                                    v_spec -> 'requires_outputs')
                     ELSE '{}' END,
                nullif(v_schema, '{}'));
            IF NOT (v_bound ->> 'ok')::boolean THEN
                -- binding failures fail the attempt without retry
                UPDATE wfe.run_stages AS st
                   SET state = 'failed', attempt = 1, fence = st.fence + 1, outcome = 'failed',
                       error = jsonb_build_object('code', v_bound ->> 'code', 'message', v_bound ->> 'error'),
                       finished_at = now()
                 WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
                PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, 1, 'stage.binding_failed',
                                   jsonb_build_object('code', v_bound ->> 'code', 'error', v_bound ->> 'error'));
                PERFORM wfe._stage_done(p_run, s, 'failed');
                RETURN;
            END IF;
            v_input := v_bound -> 'input';
        END IF;
    END IF;
    PERFORM wfe._enqueue(p_run, p_stage, v_input, true);
END
$$;
COMMENT ON FUNCTION wfe._activate(wfe.runs, text, text, text) IS
'Releases a waiting stage: records a join arrival, evaluates a decision, opens a fork, or binds the input of an executing stage and queues it.';

-- Follow a route out of a stage: to a terminal intent, a join, or a stage.
CREATE FUNCTION wfe._route(p_run wfe.runs, p_from text, p_target text, p_branch text, p_outcome text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_target IS NULL THEN
        RETURN;
    END IF;
    IF p_target IN ('completed', 'failed') THEN
        PERFORM wfe._set_intent(p_run.run_id, p_target,
                                format('stage %s routed to %s', p_from, p_target));
        RETURN;
    END IF;
    PERFORM wfe._activate(p_run, p_target, p_branch, p_outcome);
END
$$;
COMMENT ON FUNCTION wfe._route(wfe.runs, text, text, text, text) IS
'Follows a route: a terminal sets the run intent, a join records an arrival, a stage is released.';

-- A fork branch reaches its join.  The join persists each branch's terminal
-- state and releases its successor exactly once, in the transaction that
-- completes the required set (the run lock serialises racing branches).
CREATE FUNCTION wfe._arrive(p_run wfe.runs, j wfe.run_stages, p_branch text, p_outcome text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_join     text := j.stage;
    v_spec     jsonb;
    v_arrivals jsonb;
    v_ok       boolean;
    v_next     text;
    v_outer    text;
BEGIN
    -- j is the join's row, locked and still waiting (see wfe._activate)
    v_spec := wfe._spec(p_run.definition_id, p_join);
    v_arrivals := coalesce(j.result -> 'arrivals', '{}')
                  || jsonb_build_object(coalesce(p_branch, '?'), p_outcome);
    PERFORM wfe._event(p_run.run_id, p_run.tenant, p_join, NULL, 'stage.join_arrival',
                       jsonb_build_object('branch', p_branch, 'outcome', p_outcome));

    IF EXISTS (SELECT 1 FROM jsonb_array_elements_text(v_spec -> 'required') AS r(b)
                WHERE NOT v_arrivals ? r.b) THEN
        UPDATE wfe.run_stages AS st SET result = jsonb_build_object('arrivals', v_arrivals)
         WHERE st.run_id = p_run.run_id AND st.stage = p_join;
        RETURN;
    END IF;

    v_ok := NOT EXISTS (SELECT 1 FROM jsonb_each_text(v_arrivals) AS a(b, outcome)
                         WHERE NOT (v_spec -> 'acceptable_terminal_states') ? a.outcome);
    v_next := CASE WHEN v_ok THEN v_spec ->> 'on_success' ELSE v_spec ->> 'on_failure' END;
    -- after the join, the run continues on the branch its fork was on
    SELECT st.branch INTO v_outer
      FROM wfe.plan_stages AS ps
      JOIN wfe.run_stages AS st ON st.run_id = p_run.run_id AND st.stage = ps.stage
     WHERE ps.definition_id = p_run.definition_id AND ps.type = 'fork'
       AND (ps.spec -> 'branches') @> (v_spec -> 'required')
     LIMIT 1;
    UPDATE wfe.run_stages AS st
       SET state = CASE WHEN v_ok THEN 'completed' ELSE 'failed' END,
           outcome = CASE WHEN v_ok THEN 'completed' ELSE 'failed' END,
           attempt = 1, fence = 1, branch = v_outer,
           result = jsonb_build_object('arrivals', v_arrivals),
           error = CASE WHEN v_ok THEN NULL
                        ELSE jsonb_build_object('code', 'join.unsatisfied', 'arrivals', v_arrivals) END,
           started_at = coalesce(st.started_at, now()), finished_at = now()
     WHERE st.run_id = p_run.run_id AND st.stage = p_join;
    PERFORM wfe._event(p_run.run_id, p_run.tenant, p_join, 1,
                       CASE WHEN v_ok THEN 'stage.joined' ELSE 'stage.join_failed' END,
                       jsonb_build_object('arrivals', v_arrivals, 'next', v_next));
    PERFORM wfe._route(p_run, p_join, v_next, v_outer, CASE WHEN v_ok THEN 'completed' ELSE 'failed' END);
END
$$;
COMMENT ON FUNCTION wfe._arrive(wfe.runs, wfe.run_stages, text, text) IS
'Records a fork branch arriving at its join; the last required arrival resolves the join and routes on.';

-- After a decision: every waiting stage that no live path can reach any
-- more is skipped (branch_not_taken).  Live paths start at the chosen next
-- stage and at every stage still in flight.
CREATE FUNCTION wfe._skip_unreachable(p_run wfe.runs, p_decision text, p_next text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH RECURSIVE live(stage) AS (
        SELECT p_next
        UNION
        SELECT st.stage FROM wfe.run_stages AS st
         WHERE st.run_id = p_run.run_id
           AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled')
        UNION
        SELECT e.to_stage
          FROM live JOIN wfe.plan_edges AS e
            ON e.definition_id = p_run.definition_id AND e.from_stage = live.stage
         WHERE NOT e.to_terminal
    ), skipped AS (
        UPDATE wfe.run_stages AS st
           SET state = 'skipped', skip_reason = 'branch_not_taken', finished_at = now()
         WHERE st.run_id = p_run.run_id AND st.state = 'waiting' AND st.kind <> 'finaliser'
           AND st.stage <> p_decision
           AND st.stage NOT IN (SELECT live.stage FROM live WHERE live.stage IS NOT NULL)
        RETURNING st.stage
    )
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
    SELECT p_run.run_id, p_run.tenant, skipped.stage, NULL, 'stage.skipped',
           jsonb_build_object('reason', 'branch_not_taken', 'decision', p_decision)
      FROM skipped;
END
$$;
COMMENT ON FUNCTION wfe._skip_unreachable(wfe.runs, text, text) IS
'Skips (branch_not_taken) the waiting stages no live path can reach after a decision.';

-- Set the run's terminal intent (once): fence what is in flight, skip what
-- never started, then run the finalisers.
CREATE FUNCTION wfe._set_intent(p_run_id bigint, p_intent text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r wfe.runs;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id;
    IF r.intent IS NOT NULL THEN
        RETURN;
    END IF;
    UPDATE wfe.runs AS x SET intent = p_intent, reason = p_reason WHERE x.run_id = p_run_id;
    -- the run's pending timers can only do nothing now: retire them (but a
    -- task the run does not wait for goes on after a completed intent)
    UPDATE wfe.timers AS t SET fired_at = now()
     WHERE t.run_id = p_run_id AND t.fired_at IS NULL
       AND NOT (p_intent = 'completed'
                AND t.stage IN (SELECT st.stage FROM wfe.run_stages AS st
                                 WHERE st.run_id = p_run_id AND NOT st.awaits));
    PERFORM wfe._event(p_run_id, r.tenant, NULL, NULL, 'run.intent',
                       jsonb_build_object('intent', p_intent, 'reason', p_reason));

    -- Cooperative cancellation: attempts in flight are fenced (their later
    -- callbacks answer late) and asked to stop; nothing pretends they did.
    -- Tasks the run does not wait for (awaits: false) go on after a
    -- completed intent, but an abort or a cancel stops them too.
    WITH inflight AS (
        SELECT st.stage, st.state AS was, st.queue
          FROM wfe.run_stages AS st
         WHERE st.run_id = p_run_id AND st.kind <> 'finaliser'
           AND (st.awaits OR p_intent <> 'completed')
           AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled')
         ORDER BY st.stage
           FOR UPDATE
    ), fenced AS (
        UPDATE wfe.run_stages AS st
           SET state = 'cancelled', fence = st.fence + 1, finished_at = now(),
               error = jsonb_build_object('code', 'run.' || p_intent, 'message', p_reason)
          FROM inflight
         WHERE st.run_id = p_run_id AND st.stage = inflight.stage
        RETURNING st.stage, st.attempt, st.fence, inflight.was, inflight.queue
    ), events AS (
        INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
        SELECT p_run_id, r.tenant, f.stage, f.attempt, 'stage.cancelled',
               jsonb_build_object('was', f.was, 'fence', f.fence,
                                  'cancel_requested', f.was IN ('dispatched', 'running'))
          FROM fenced AS f
    )
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,
                            message_id, body)
    SELECT r.tenant, p_run_id, f.stage, f.attempt, f.fence, 'cancel', 'wfe.commands',
           'cancel.' || f.queue, wfe._message_id(p_run_id, f.stage, f.attempt, f.fence, 'cancel'),
           jsonb_build_object('run_id', p_run_id, 'stage', f.stage, 'attempt', f.attempt,
                              'fence', f.fence - 1, 'reason', p_reason)
      FROM fenced AS f
      JOIN wfe.queues AS q ON q.queue = f.queue AND q.delivery = 'broker'
     WHERE f.was IN ('dispatched', 'running');
    IF FOUND THEN
        PERFORM wfe._wake(now());           -- cancellation requests to publish
    END IF;

    WITH skipped AS (
        UPDATE wfe.run_stages AS st
           SET state = 'skipped', finished_at = now(),
               skip_reason = CASE WHEN p_intent = 'completed' THEN 'branch_not_taken' ELSE 'run_aborted' END
         WHERE st.run_id = p_run_id AND st.state = 'waiting' AND st.kind <> 'finaliser'
        RETURNING st.stage, st.skip_reason
    )
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
    SELECT p_run_id, r.tenant, s.stage, NULL, 'stage.skipped', jsonb_build_object('reason', s.skip_reason)
      FROM skipped AS s;

    PERFORM wfe._next_finaliser(p_run_id);
END
$$;
COMMENT ON FUNCTION wfe._set_intent(bigint, text, text) IS
'Sets a run''s terminal intent once: fences attempts in flight, skips unstarted stages, starts the finalisers.';

-- Release the next finaliser in declared order, or finish the run.
CREATE FUNCTION wfe._next_finaliser(p_run_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r       wfe.runs;
    v_stage text;
BEGIN
    SELECT st.stage INTO v_stage FROM wfe.run_stages AS st
     WHERE st.run_id = p_run_id AND st.kind = 'finaliser' AND st.state = 'waiting'
     ORDER BY st.ordinal LIMIT 1;
    IF v_stage IS NULL THEN
        PERFORM wfe._finish(p_run_id);
        RETURN;
    END IF;
    UPDATE wfe.runs AS x SET state = 'finalising' WHERE x.run_id = p_run_id AND x.state = 'running';
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id;
    PERFORM wfe._activate(r, v_stage, NULL);
END
$$;
COMMENT ON FUNCTION wfe._next_finaliser(bigint) IS
'Runs finalisers once, sequentially in declared order; after the last one the run finishes.';

-- Expose the run's final state: completed only if the intent was completed
-- and every finaliser succeeded.
CREATE FUNCTION wfe._finish(p_run_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r       wfe.runs;
    v_final text;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id;
    IF r.finished_at IS NOT NULL THEN
        RETURN;
    END IF;
    v_final := CASE
        WHEN r.intent = 'cancelled' THEN 'cancelled'
        WHEN r.intent = 'completed'
             AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                              WHERE st.run_id = p_run_id AND st.kind = 'finaliser'
                                AND st.state <> 'completed') THEN 'completed'
        ELSE 'failed' END;
    UPDATE wfe.runs AS x
       SET state = v_final, finished_at = now(),
           reason = CASE WHEN v_final = 'failed' AND r.intent = 'completed'
                         THEN 'a finaliser failed' ELSE x.reason END
     WHERE x.run_id = p_run_id;
    PERFORM wfe._event(p_run_id, r.tenant, NULL, NULL, 'run.' || v_final,
                       jsonb_build_object('intent', r.intent));
    PERFORM pg_notify('wfe_run_done', p_run_id::text);
END
$$;
COMMENT ON FUNCTION wfe._finish(bigint) IS
'Finishes a run: completed only when its intent was completed and every finaliser succeeded; notifies wfe_run_done.';

-- A stage reached its final state for this run: move the run along.
CREATE FUNCTION wfe._stage_done(p_run wfe.runs, s wfe.run_stages, p_outcome text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_stage text := s.stage;
    v_spec  jsonb;
BEGIN
    -- s is the finished stage's row as its caller last saw it (kind, branch)
    IF s.kind = 'finaliser' THEN
        PERFORM wfe._next_finaliser(p_run.run_id);
        RETURN;
    END IF;
    IF p_run.form = 'tasks' THEN
        PERFORM wfe._task_done(p_run, p_stage);
        RETURN;
    END IF;
    v_spec := wfe._spec(p_run.definition_id, p_stage);
    PERFORM wfe._route(p_run, p_stage,
                       CASE WHEN p_outcome = 'completed' THEN v_spec ->> 'on_success'
                            ELSE v_spec ->> 'on_failure' END,
                       s.branch, p_outcome);
END
$$;
COMMENT ON FUNCTION wfe._stage_done(wfe.runs, wfe.run_stages, text) IS
'Moves a run on after a stage finished: the stage''s route, the task graph, or the next finaliser.';

-- Tasks form: a task finished (or was skipped); decide its dependents and
-- whether the run is done.
CREATE FUNCTION wfe._task_done(p_run wfe.runs, p_task text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s      wfe.run_stages;
    v_spec jsonb;
    d      record;
BEGIN
    IF p_run.intent IS NOT NULL THEN
        RETURN;                 -- a detached task finishing after the run's intent
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run.run_id AND st.stage = p_task;
    v_spec := wfe._spec(p_run.definition_id, p_task);
    IF s.state IN ('failed', 'timed_out') AND s.awaits AND (v_spec ->> 'critical')::boolean THEN
        -- a critical failure halts the run: nothing unstarted is dispatched
        PERFORM wfe._set_intent(p_run.run_id, 'failed', format('critical task %s failed', p_task));
        RETURN;
    END IF;
    FOR d IN SELECT ps.stage FROM wfe.plan_stages AS ps
              WHERE ps.definition_id = p_run.definition_id AND ps.type <> 'finaliser'
                AND ps.spec -> 'depends_on' ? p_task
              ORDER BY ps.ordinal
    LOOP
        PERFORM wfe._task_consider(p_run, d.stage);
    END LOOP;
    PERFORM wfe._tasks_maybe_complete(p_run.run_id);
END
$$;
COMMENT ON FUNCTION wfe._task_done(wfe.runs, text) IS
'Tasks form: after a task ends, a critical failure aborts the run; otherwise its dependents are considered.';

-- Tasks form: release a waiting task whose dependencies are all done, or skip it.
CREATE FUNCTION wfe._task_consider(p_run wfe.runs, p_task text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s        wfe.run_stages;
    v_spec   jsonb;
    v_open   int;
    v_bad    int;
    v_reason text;
BEGIN
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = p_run.run_id AND st.stage = p_task FOR UPDATE;
    IF s.state <> 'waiting' THEN
        RETURN;
    END IF;
    v_spec := wfe._spec(p_run.definition_id, p_task);

    -- pruned before anything is resolved for it: nothing is dispatched
    IF jsonb_typeof(v_spec -> 'contexts') = 'array'
       AND NOT (v_spec -> 'contexts') ? coalesce(p_run.execution_context, '') THEN
        v_reason := 'context_gated';
    ELSE
        SELECT count(*) FILTER (WHERE d.state IN ('waiting', 'queued', 'dispatched', 'running', 'retry_scheduled')),
               count(*) FILTER (WHERE NOT (d.state = 'completed'
                                           OR (d.state = 'skipped'
                                               AND v_spec ->> 'dependency_policy' = 'allow_skipped')))
          INTO v_open, v_bad
          FROM wfe.run_stages AS d
         WHERE d.run_id = p_run.run_id
           AND d.stage IN (SELECT jsonb_array_elements_text(v_spec -> 'depends_on'));
        IF v_open > 0 THEN
            RETURN;             -- not all dependencies are done yet
        END IF;
        IF v_bad > 0 THEN
            v_reason := 'dependency_failed';
        ELSIF EXISTS (SELECT 1 FROM jsonb_array_elements(v_spec -> 'requires_outputs') AS r(req)
                       WHERE NOT EXISTS (SELECT 1 FROM wfe.outputs AS o
                                          WHERE o.run_id = p_run.run_id
                                            AND o.task = r.req ->> 'producer_task_id'
                                            AND o.key = r.req ->> 'key')) THEN
            v_reason := 'missing_input';
        END IF;
    END IF;

    IF v_reason IS NULL THEN
        PERFORM wfe._activate(p_run, p_task, NULL);
        RETURN;
    END IF;
    UPDATE wfe.run_stages AS st
       SET state = 'skipped', skip_reason = v_reason, finished_at = now()
     WHERE st.run_id = p_run.run_id AND st.stage = p_task;
    PERFORM wfe._event(p_run.run_id, p_run.tenant, p_task, NULL, 'stage.skipped',
                       jsonb_build_object('reason', v_reason));
    PERFORM wfe._task_done(p_run, p_task);
END
$$;
COMMENT ON FUNCTION wfe._task_consider(wfe.runs, text) IS
'Tasks form: releases a task whose dependencies are done, or skips it (context_gated, dependency_failed, missing_input).';

-- Tasks form: when no awaited task is left to run, the run's intent is completed.
CREATE FUNCTION wfe._tasks_maybe_complete(p_run_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (SELECT x.intent FROM wfe.runs AS x WHERE x.run_id = p_run_id) IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                        WHERE st.run_id = p_run_id AND st.kind <> 'finaliser' AND st.awaits
                          AND st.state IN ('waiting', 'queued', 'dispatched', 'running', 'retry_scheduled'))
    THEN
        PERFORM wfe._set_intent(p_run_id, 'completed', 'every awaited task finished');
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._tasks_maybe_complete(bigint) IS
'Tasks form: sets the completed intent once no awaited task is waiting or in flight.';

-- An attempt failed (callback, timeout, invalid result or handler error):
-- retry it later per the stage's policy, or fail the stage and route on.
CREATE FUNCTION wfe._attempt_failed(p_run wfe.runs, p_stage text, p_error jsonb,
                                    p_retryable boolean, p_final_state text DEFAULT 'failed')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s       wfe.run_stages;
    v_retry jsonb;
    v_delay interval;
BEGIN
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
    v_retry := wfe._spec(p_run.definition_id, p_stage) -> 'retry';

    IF p_retryable AND s.attempt < (v_retry ->> 'max_attempts')::int THEN
        v_delay := wfe._backoff(v_retry, s.attempt);
        UPDATE wfe.run_stages AS st
           SET state = 'retry_scheduled', outcome = 'failed', error = p_error, deadline_at = NULL
         WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
        INSERT INTO wfe.timers (tenant, run_id, stage, attempt, fence, kind, due_at)
        VALUES (p_run.tenant, p_run.run_id, p_stage, s.attempt, s.fence, 'retry', now() + v_delay);
        PERFORM wfe._wake(now() + v_delay);
        PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, s.attempt, 'stage.retry_scheduled',
                           jsonb_build_object('delay_ms', round(extract(epoch FROM v_delay) * 1000),
                                              'error', p_error -> 'code'));
        RETURN;
    END IF;

    UPDATE wfe.run_stages AS st
       SET state = p_final_state, outcome = 'failed', error = p_error, finished_at = now(),
           deadline_at = NULL
     WHERE st.run_id = p_run.run_id AND st.stage = p_stage;
    IF p_final_state = 'failed' THEN     -- a timeout was recorded when it fired
        PERFORM wfe._event(p_run.run_id, p_run.tenant, p_stage, s.attempt, 'stage.failed',
                           jsonb_build_object('error', p_error -> 'code', 'retryable', p_retryable));
    END IF;
    IF p_retryable THEN
        INSERT INTO wfe.dead_letters (tenant, run_id, stage, attempt, reason, error)
        VALUES (p_run.tenant, p_run.run_id, p_stage, s.attempt, 'retries exhausted', p_error);
    END IF;
    -- a join records the branch's real terminal state (failed or timed_out)
    PERFORM wfe._stage_done(p_run, s, p_final_state);
END
$$;
COMMENT ON FUNCTION wfe._attempt_failed(wfe.runs, text, jsonb, boolean, text) IS
'Handles a failed attempt: a retry timer with backoff and jitter while attempts remain, else the stage fails and its failure route is followed.';

-- An attempt completed with a valid result.
CREATE FUNCTION wfe._attempt_completed(p_run wfe.runs, p_stage text, p_result jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s wfe.run_stages;
BEGIN
    UPDATE wfe.run_stages AS st
       SET state = 'completed', outcome = 'completed', result = p_result, error = NULL,
           finished_at = now(), deadline_at = NULL
     WHERE st.run_id = p_run.run_id AND st.stage = p_stage
    RETURNING st.* INTO s;
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type)
    VALUES (p_run.run_id, p_run.tenant, p_stage, s.attempt, 'stage.completed');
    IF p_run.form = 'tasks' AND s.kind <> 'finaliser' THEN
        -- outputs are write-once per (run, task, key)
        INSERT INTO wfe.outputs (run_id, task, key, tenant, value)
        SELECT p_run.run_id, p_stage, pr ->> 'key', p_run.tenant, p_result -> (pr ->> 'key')
          FROM jsonb_array_elements(wfe._spec(p_run.definition_id, p_stage) -> 'produces') AS x(pr)
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM wfe._stage_done(p_run, s, 'completed');
END
$$;
COMMENT ON FUNCTION wfe._attempt_completed(wfe.runs, text, jsonb) IS
'Records a completed attempt (and a task''s declared outputs) and moves the run on.';

-- Why a result is not acceptable: output schema, then declared produces.
CREATE FUNCTION wfe._result_problem(p_run wfe.runs, p_stage wfe.run_stages, p_result jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schema jsonb;
    v_msg    text;
    pr       jsonb;
    v_type   text;
BEGIN
    SELECT c.output_schema INTO v_schema FROM wfe.contracts AS c WHERE c.ref = p_stage.worker;
    IF coalesce(v_schema, '{}') <> '{}' THEN
        v_msg := wfe._validate(v_schema, p_result);
        IF v_msg IS NOT NULL THEN
            RETURN v_msg;
        END IF;
    END IF;
    IF p_run.form = 'tasks' AND p_stage.kind <> 'finaliser' THEN
        FOR pr IN SELECT jsonb_array_elements(wfe._spec(p_run.definition_id, p_stage.stage) -> 'produces')
        LOOP
            IF jsonb_typeof(p_result) <> 'object' OR NOT p_result ? (pr ->> 'key') THEN
                RETURN format('result lacks declared output "%s"', pr ->> 'key');
            END IF;
            v_type := jsonb_typeof(p_result -> (pr ->> 'key'));
            IF NOT (CASE pr ->> 'type'
                        WHEN 'integer' THEN v_type = 'number'
                                            AND (p_result ->> (pr ->> 'key'))::numeric % 1 = 0
                        WHEN 'number' THEN v_type = 'number'
                        WHEN 'string' THEN v_type = 'string'
                        WHEN 'boolean' THEN v_type = 'boolean'
                        WHEN 'array' THEN v_type = 'array'
                        ELSE v_type = 'object'      -- object, and names ending in Object
                    END) THEN
                RETURN format('output "%s" is %s, declared %s', pr ->> 'key', v_type, pr ->> 'type');
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION wfe._result_problem(wfe.runs, wfe.run_stages, jsonb) IS
'NULL when a result satisfies the contract''s output schema and the task''s declared produces, else why not.';
