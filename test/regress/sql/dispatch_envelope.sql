-- Dispatch envelopes (issue 24 item 1): built by the core
-- (src/core/engine/envelope.c), written by src/pg/dispatch.c.  Each is
-- compared, as jsonb, with what 0.2.0's PL/pgSQL wfe._dispatch wrote (its
-- body, copied below, computing instead of inserting), for the engine's
-- own dispatches and for wfe._dispatch(runs, run_stages) over varied rows:
-- small and large tracks, NULL and unicode inputs, deadlines set and not,
-- under odd DateStyle and TimeZone (0.2.0's body wrote its two times in
-- the session's TimeZone: the reference is taken under UTC, which the C
-- envelope always writes).  In a database of its own: the runs it starts
-- would shift the run ids the tests after it print.
SET client_min_messages = warning;
DROP DATABASE IF EXISTS wfe_envelope;
\set regress_db :DBNAME
CREATE DATABASE wfe_envelope;
\c wfe_envelope
CREATE EXTENSION wfe;
RESET client_min_messages;
\set VERBOSITY terse

-- 0.2.0's wfe._dispatch (sql/wfe--0.2.0.sql), returning its message; p_now is its now()
CREATE FUNCTION pg_temp.dispatch_020(p_run wfe.runs, p_stage wfe.run_stages, p_now timestamptz,
                                     OUT exchange text, OUT routing_key text, OUT message_id uuid,
                                     OUT headers jsonb, OUT body jsonb, OUT payload_key text)
LANGUAGE plpgsql AS $$
DECLARE
    v_id    uuid := wfe._message_id(p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch');
    v_text  text := coalesce(p_stage.input, '{}')::text;
    v_bytes int := octet_length(v_text);
    v_track text := 'small';
    v_hash  text;
    v_ref   jsonb;
    v_tp    text := wfe._attempt_traceparent(p_run.trace_id, p_run.span_id, p_run.trace_flags,
                                             p_stage.stage, p_stage.attempt);
BEGIN
    IF v_bytes > wfe._setting('wfe.track_threshold_bytes')::int THEN
        v_track := 'large';
        v_hash := encode(sha256(convert_to(v_text, 'UTF8')), 'hex');
        v_ref := jsonb_build_object('bucket', 'wfe.payloads', 'key', 'sha256:' || v_hash,
                                    'sha256', v_hash, 'bytes', v_bytes,
                                    'run_id', p_run.run_id, 'stage', p_stage.stage,
                                    'attempt', p_stage.attempt, 'fence', p_stage.fence);
        payload_key := 'sha256:' || v_hash;
    END IF;
    exchange := wfe._exchange('dispatch');
    routing_key := wfe._routing_key('dispatch', p_stage.queue, v_track);
    message_id := v_id;
    headers := jsonb_build_object(
                'x-wfe-run-id', p_run.run_id::text, 'x-wfe-stage', p_stage.stage,
                'x-wfe-attempt', p_stage.attempt::text, 'x-wfe-fence', p_stage.fence::text,
                'x-wfe-digest', p_run.definition_digest, 'x-wfe-contract', p_stage.worker,
                'x-wfe-tenant', p_run.tenant, 'x-wfe-track', v_track, 'traceparent', v_tp,
                'x-wfe-deadline', coalesce(to_char(p_stage.deadline_at AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), ''));
    body := jsonb_build_object(
                'message_id', v_id, 'correlation_id', p_run.run_id::text,
                'workflow_name', p_run.workflow, 'workflow_version', p_run.version,
                'definition_digest', p_run.definition_digest, 'run_id', p_run.run_id,
                'stage', p_stage.stage, 'attempt', p_stage.attempt, 'fence', p_stage.fence,
                'worker', p_stage.worker, 'track', v_track,
                'heartbeat_ms', p_stage.heartbeat_ms, 'execution_deadline_ms', p_stage.exec_ms,
                'headers', jsonb_build_object('content_type', 'application/json',
                                              'source', 'wfe', 'tenant', p_run.tenant),
                'idempotency_key', p_run.run_id || ':' || p_stage.stage || ':' || p_stage.attempt,
                'deadline_at', p_stage.deadline_at,
                'payload_inline', CASE WHEN v_track = 'small' THEN coalesce(p_stage.input, '{}') END,
                'payload_ref', v_ref,
                'traceparent', v_tp,
                'created_at', p_now);
END
$$;

-- An outbox dispatch row against 0.2.0's message for its attempt as it is
-- now (reference under TimeZone UTC); the differences, or 'same'.
CREATE FUNCTION pg_temp.differences(p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    o   wfe.outbox;
    r   wfe.runs;
    s   wfe.run_stages;
    ref record;
    tz  text := current_setting('TimeZone');
    diffs text[] := '{}';
BEGIN
    SELECT * INTO o FROM wfe.outbox WHERE id = p_id;
    SELECT * INTO r FROM wfe.runs WHERE run_id = o.run_id;
    SELECT * INTO s FROM wfe.run_stages WHERE run_id = o.run_id AND stage = o.stage;
    PERFORM set_config('TimeZone', 'UTC', true);
    ref := pg_temp.dispatch_020(r, s, o.created_at);
    PERFORM set_config('TimeZone', tz, true);
    IF o.exchange IS DISTINCT FROM ref.exchange THEN diffs := diffs || 'exchange'::text; END IF;
    IF o.routing_key IS DISTINCT FROM ref.routing_key THEN diffs := diffs || 'routing_key'::text; END IF;
    IF o.message_id IS DISTINCT FROM ref.message_id THEN diffs := diffs || 'message_id'::text; END IF;
    IF o.headers IS DISTINCT FROM ref.headers THEN
        diffs := diffs || format('headers: %s vs %s', o.headers, ref.headers);
    END IF;
    IF o.body IS DISTINCT FROM ref.body THEN
        diffs := diffs || format('body: %s vs %s', o.body, ref.body);
    END IF;
    IF ref.payload_key IS NOT NULL AND NOT EXISTS
           (SELECT 1 FROM wfe.payloads AS p
             WHERE p.run_id = o.run_id AND p.stage = o.stage AND p.key = ref.payload_key
               AND p.body = coalesce(s.input, '{}') AND p.tenant = r.tenant
               AND p.bytes = octet_length(coalesce(s.input, '{}')::text)) THEN
        diffs := diffs || 'no payload row'::text;
    END IF;
    IF o.tenant <> r.tenant OR o.attempt <> s.attempt OR o.fence <> s.fence OR o.kind <> 'dispatch' THEN
        diffs := diffs || 'row columns'::text;
    END IF;
    RETURN CASE WHEN cardinality(diffs) = 0 THEN 'same' ELSE array_to_string(diffs, '; ') END;
END
$$;

-- wfe._dispatch over the attempt's rows, altered: input, deadline,
-- heartbeat and execution times; the new outbox row's id.
CREATE FUNCTION pg_temp.dispatch_as(p_run bigint, p_stage text, p_input jsonb, p_deadline timestamptz,
                                    p_heartbeat int, p_exec int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    r wfe.runs;
    s wfe.run_stages;
    before bigint := (SELECT coalesce(max(id), 0) FROM wfe.outbox);
BEGIN
    SELECT * INTO r FROM wfe.runs WHERE run_id = p_run;
    SELECT * INTO s FROM wfe.run_stages WHERE run_id = p_run AND stage = p_stage;
    s.input := p_input;
    s.deadline_at := p_deadline;
    s.heartbeat_ms := p_heartbeat;
    s.exec_ms := p_exec;
    PERFORM wfe._dispatch(r, s);
    -- what the engine would read: the row as dispatched
    UPDATE wfe.run_stages AS x
       SET input = p_input, deadline_at = p_deadline, heartbeat_ms = p_heartbeat, exec_ms = p_exec
     WHERE x.run_id = p_run AND x.stage = p_stage;
    RETURN (SELECT max(id) FROM wfe.outbox WHERE id > before);
END
$$;

SELECT wfe.register_worker('env.step@1', 'env-jobs');
SELECT wfe.create_definition($y$
name: env-flow
version: "1.0.0"
entry: a
defaults: { queue_deadline_ms: 60000, heartbeat_ms: 5000 }
stages:
  - { name: a, type: worker, queue: env-jobs, worker: env.step@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
$y$) IS NOT NULL AS created;
SELECT wfe.approve('env-flow', '1.0.0');
SELECT wfe.activate('env-flow', '1.0.0');
SELECT wfe.configure_queue('env-jobs', 'broker');

-- the engine's dispatches (the released attempts): small, unicode, large
SET DateStyle = 'SQL, DMY';
SET TimeZone = 'Asia/Kathmandu';
SELECT run_id AS small_run FROM wfe.submit('env-flow', '{"v": "plain"}') \gset
SELECT run_id AS uni_run FROM wfe.submit('env-flow', jsonb_build_object('v', E'caf\u00e9 \u20ac \U0001F600 "q" \\ \n end')) \gset
SET wfe.track_threshold_bytes = 1024;
SELECT run_id AS large_run FROM wfe.submit('env-flow', jsonb_build_object('v', repeat('é', 900))) \gset
SELECT o.run_id = :small_run AS small, o.routing_key, pg_temp.differences(o.id)
  FROM wfe.outbox AS o WHERE o.run_id IN (:small_run, :uni_run, :large_run) ORDER BY o.id;
RESET wfe.track_threshold_bytes;
-- the times are UTC whatever the session's settings
SELECT headers ->> 'x-wfe-deadline' ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$' AS header_zulu,
       body ->> 'deadline_at' ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$' AS deadline_utc,
       body ->> 'created_at' ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$' AS created_utc,
       (body ->> 'deadline_at')::timestamptz = (SELECT deadline_at FROM wfe.run_stages WHERE run_id = :small_run) AS deadline_same_instant,
       (body ->> 'created_at')::timestamptz = created_at AS created_same_instant
  FROM wfe.outbox WHERE run_id = :small_run;

-- wfe._dispatch over altered rows
BEGIN;
SELECT pg_temp.differences(pg_temp.dispatch_as(:small_run, 'a', NULL, NULL, NULL, NULL)) AS null_input_no_deadline;
SELECT pg_temp.differences(pg_temp.dispatch_as(:small_run, 'a', '[1, 2.50, {"k": null}]', '2026-02-28 23:59:59.000001+00', 0, 30000)) AS array_input;
SELECT pg_temp.differences(pg_temp.dispatch_as(:small_run, 'a', '"tab\tquote\"back\\slash \u0001 \u001f"'::jsonb, '1999-12-31 23:00:00-05', 1, 2)) AS escapes;
SET LOCAL TimeZone = 'America/St_Johns';
SET LOCAL DateStyle = 'German';
SELECT pg_temp.differences(pg_temp.dispatch_as(:uni_run, 'a', '{"ключ": "値", "e": "\ud83d\ude00"}', '2030-06-15 12:00:00.5+02', NULL, 100)) AS unicode_odd_zone;
SET LOCAL wfe.track_threshold_bytes = 1024;
SELECT pg_temp.differences(pg_temp.dispatch_as(:uni_run, 'a', jsonb_build_object('ключ', repeat('ж', 600)), now(), 10, NULL)) AS large_unicode;
SELECT octet_length(jsonb_build_object('v', repeat('x', 1015))::text) AS bytes,
       pg_temp.differences(pg_temp.dispatch_as(:small_run, 'a', jsonb_build_object('v', repeat('x', 1015)), NULL, NULL, NULL)) AS at_threshold;
SELECT routing_key FROM wfe.outbox ORDER BY id DESC LIMIT 1;
SELECT pg_temp.differences(pg_temp.dispatch_as(:small_run, 'a', jsonb_build_object('v', repeat('x', 1016)), NULL, NULL, NULL)) AS over_threshold;
SELECT routing_key FROM wfe.outbox ORDER BY id DESC LIMIT 1;
COMMIT;
RESET DateStyle;
RESET TimeZone;

-- the large track's payload is stored once per stage and digest
SELECT count(*) AS payload_rows FROM wfe.payloads WHERE run_id = :large_run;
SELECT wfe.redispatch(:large_run, 'a', 'test');
SELECT count(*) AS payload_rows, count(DISTINCT key) AS keys FROM wfe.payloads WHERE run_id = :large_run;
SELECT count(*) AS dispatches, count(DISTINCT message_id) AS ids FROM wfe.outbox WHERE run_id = :large_run;

-- wfe._dispatch is C now, and internal
SELECT l.lanname, p.proconfig FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
 WHERE p.oid = 'wfe._dispatch(wfe.runs, wfe.run_stages)'::regprocedure;
SELECT has_function_privilege('wfe_worker', 'wfe._dispatch(wfe.runs, wfe.run_stages)', 'EXECUTE') AS worker_may;
\c :regress_db
SET client_min_messages = warning;
DROP DATABASE wfe_envelope;
