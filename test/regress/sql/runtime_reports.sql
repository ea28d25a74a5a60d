--
-- Reading and steering runs (runtime.md "Runs", "Workers"): wfe.report and
-- wfe.run_timeline, wfe.cancel_run's answers, claim_task's argument errors,
-- the clocks (queue, execution and heartbeat deadlines) fired by wfe.tick,
-- and in-database actions (a contract with a handler) run by wfe.tick.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-rp.work@1', 'rt-rp-work', output_schema => '{"type":"object"}');
SELECT wfe.register_worker('rt-rp.beat@1', 'rt-rp-beat');
SELECT wfe.register_action('rt-rp.audit@1', queue => 'rt-rp-audit');
SELECT wfe.create_definition($yaml$
name: report-test
version: "1.0.0"
entry: first
defaults:
  retry: { max_attempts: 2, initial_ms: 1000, multiplier: 2.0, max_ms: 1000, jitter: none }
stages:
  - name: first
    type: worker
    queue: rt-rp-work
    worker: rt-rp.work@1
    queue_deadline_ms: 600000
    execution_deadline_ms: 60000
    on_success: beat
    on_failure: failed
  - name: beat
    type: worker
    queue: rt-rp-beat
    worker: rt-rp.beat@1
    heartbeat_ms: 10000
    on_success: completed
    on_failure: failed
finalisers: [rt-rp.audit@1]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('report-test', '1.0.0');
SELECT wfe.activate('report-test', '1.0.0');

CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, state text, attempt int, fence_gen bigint, error text)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.fence >> 32, s.error ->> 'code'
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.work(p_queue text, p_result jsonb DEFAULT '{}')
RETURNS TABLE (stage text, attempt int, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task(p_queue, 'w-rp') LOOP
        stage := t.stage; attempt := t.attempt;
        outcome := wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result);
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE FUNCTION pg_temp.retry_now(p_run bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE wfe.timers SET due_at = now() - interval '1 s'
     WHERE run_id = p_run AND kind = 'retry' AND fired_at IS NULL;
    RETURN wfe.tick() IS NOT NULL;   -- how many it handled depends on other tests
END
$$;

--
-- wfe.report: a flat object with the required keys, one entry per stage
-- (finalisers included)
--
SELECT run_id AS r FROM wfe.submit('report-test', '{"modelId": "m-1"}', NULL, '{"tenant": "acme"}') \gset
SELECT * FROM pg_temp.work('rt-rp-work', '{"size": 1}');
SELECT * FROM pg_temp.work('rt-rp-beat');
SELECT * FROM pg_temp.work('rt-rp-audit');
SELECT key, jsonb_typeof(value) AS type
  FROM jsonb_each(wfe.report(:r)) ORDER BY key;
SELECT k AS required_key, wfe.report(:r) ? k AS present
  FROM unnest(ARRAY['run_id', 'workflow', 'version', 'tenant', 'state', 'intent', 'submitted_at',
                    'finished_at', 'duration_ms', 'stages']) AS k;
SELECT (rep ->> 'run_id')::bigint = :r AS own_run, rep ->> 'workflow' AS workflow, rep ->> 'version' AS version,
       rep ->> 'tenant' AS tenant, rep ->> 'state' AS state, rep ->> 'intent' AS intent,
       (rep ->> 'duration_ms')::numeric >= 0 AS duration_ok,
       (rep ->> 'finished_at')::timestamptz >= (rep ->> 'submitted_at')::timestamptz AS finished_after_submit,
       rep -> 'late_callbacks' AS late_callbacks
  FROM wfe.report(:r) AS rep;
SELECT s ->> 'stage' AS stage, s ->> 'kind' AS kind, s ->> 'status' AS status, s -> 'attempts' AS attempts,
       jsonb_typeof(s -> 'duration_ms') AS duration, s -> 'skip_reason' AS skip_reason,
       s -> 'error' AS error, s -> 'result' AS result,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s) AS k) AS keys
  FROM jsonb_array_elements(wfe.report(:r) -> 'stages') AS s;
-- wfe.run_timeline: one row per stage attempt, in order, with a waterfall bar
SELECT stage, attempt, outcome, finished_at >= started_at AS ordered, duration_ms >= 0 AS duration_ok,
       length(waterfall) AS bar_width
  FROM wfe.run_timeline(:r);
-- unknown runs are 42704; a NULL run_id gives NULL
SELECT wfe.report(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.run_timeline(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.report(NULL) IS NULL AS null_report;

--
-- wfe.cancel_run: accepted, then late; unknown for no such run
--
SELECT run_id AS c FROM wfe.submit('report-test', '{}') \gset
SELECT task.stage FROM wfe.claim_task('rt-rp-work', 'w-rp') AS task;
SELECT wfe.cancel_run(:c, 'operator request');
SELECT state, intent, reason FROM wfe.runs WHERE run_id = :c;
SELECT * FROM pg_temp.stages(:c);
-- finalising: the finaliser still runs (told the intent); a second cancel is late
SELECT wfe.cancel_run(:c);
SELECT task.stage, task.input -> 'intent' AS intent, wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence)
  FROM wfe.claim_task('rt-rp-audit', 'w-rp') AS task;
SELECT state, intent FROM wfe.runs WHERE run_id = :c;
SELECT wfe.cancel_run(:c);
SELECT wfe.cancel_run(-1);
SELECT wfe.cancel_run(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT type, detail ->> 'reason' AS reason, detail ->> 'callback' AS callback
  FROM wfe.events WHERE run_id = :c AND type IN ('run.cancel_requested', 'callback.late', 'run.cancelled')
 ORDER BY event_id;
SELECT wfe.report(:c) ->> 'state' AS state, wfe.report(:c) -> 'late_callbacks' AS late_callbacks;

--
-- claim_task: bad arguments raise; an unknown queue is 42704; a known
-- queue with nothing ready answers no rows
--
SELECT * FROM wfe.claim_task(NULL, 'w');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-work', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-work', 'w', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-work', 'w', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-work', 'w', 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-work', 'w', 1, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.claim_task('rt-rp-no-such-queue', 'w');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS claimed FROM wfe.claim_task('rt-rp-work', 'w', 10);
-- lease_ms sets the execution deadline of the claim
SELECT run_id AS l FROM wfe.submit('report-test', '{}') \gset
SELECT task.stage, task.deadline_at - now() = interval '5 s' AS lease_deadline
  FROM wfe.claim_task('rt-rp-work', 'w-rp', lease_ms => 5000) AS task;
SELECT wfe.cancel_run(:l);
SELECT * FROM pg_temp.work('rt-rp-audit');

--
-- Timeouts, fired by wfe.tick: the expired attempt is fenced (timed_out)
-- and retried per policy; its worker's late callbacks are stale.
--
SELECT run_id AS t FROM wfe.submit('report-test', '{}') \gset
-- the execution clock: claimed, then the deadline passes
SELECT task.stage, task.attempt, task.fence,
       task.deadline_at - now() = interval '60 s' AS execution_deadline
  FROM wfe.claim_task('rt-rp-work', 'w-rp') AS task \gset t_
SELECT :'t_stage' AS stage, :t_attempt AS attempt, :t_fence >> 32 AS fence_gen, :'t_execution_deadline' AS execution_deadline;
UPDATE wfe.run_stages SET deadline_at = now() - interval '1 s' WHERE run_id = :t AND stage = 'first';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT * FROM pg_temp.stages(:t);
SELECT attempt, detail ->> 'clock' AS clock FROM wfe.events WHERE run_id = :t AND type = 'stage.timed_out';
SELECT kind, attempt, fence >> 32 AS fence_gen, fence > :t_fence AS new_fence, fired_at IS NULL AS pending
  FROM wfe.timers WHERE run_id = :t;
-- the worker finishes after all: stale, nothing changes
SELECT wfe.complete_task(:t, 'first', :t_attempt, :t_fence, '{}');
SELECT wfe.fail_task(:t, 'first', :t_attempt, :t_fence, '{}');
SELECT wfe.heartbeat(:t, 'first', :t_attempt, :t_fence);
SELECT * FROM pg_temp.stages(:t);
-- the queue clock: the retry (attempt 2) waits in the queue past its deadline
SELECT pg_temp.retry_now(:t) AS ticked;
SELECT state, attempt, deadline_at - ready_at = interval '10 min' AS queue_deadline
  FROM wfe.run_stages WHERE run_id = :t AND stage = 'first';
UPDATE wfe.run_stages SET deadline_at = now() - interval '1 s' WHERE run_id = :t AND stage = 'first';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT attempt, detail ->> 'clock' AS clock FROM wfe.events WHERE run_id = :t AND type = 'stage.timed_out' ORDER BY event_id;
-- retries exhausted (max_attempts 2): the stage stays timed_out, a dead
-- letter is written, and on_failure sets the failed intent
SELECT * FROM pg_temp.stages(:t);
SELECT state, intent FROM wfe.runs WHERE run_id = :t;
SELECT stage, attempt, reason, error ->> 'code' AS code FROM wfe.dead_letters WHERE run_id = :t;
-- from now on the first attempt's callbacks are late
SELECT wfe.complete_task(:t, 'first', :t_attempt, :t_fence, '{}');
SELECT * FROM pg_temp.work('rt-rp-audit');
SELECT state, intent FROM wfe.runs WHERE run_id = :t;
-- the timeline says both attempts timed out (the first was retried)
SELECT stage, attempt, outcome FROM wfe.run_timeline(:t) WHERE stage = 'first';

-- the heartbeat clock: a heartbeat pushes the deadline out; missing one times out
SELECT run_id AS h FROM wfe.submit('report-test', '{}') \gset
SELECT * FROM pg_temp.work('rt-rp-work');
SELECT task.attempt, task.fence, task.heartbeat_ms, task.deadline_at - now() = interval '10 s' AS first_deadline
  FROM wfe.claim_task('rt-rp-beat', 'w-rp') AS task \gset h_
SELECT :h_heartbeat_ms AS heartbeat_ms, :'h_first_deadline' AS first_deadline;
UPDATE wfe.run_stages SET heartbeat_at = now() - interval '5 s', deadline_at = now() + interval '5 s'
 WHERE run_id = :h AND stage = 'beat';
SELECT wfe.heartbeat(:h, 'beat', :h_attempt, :h_fence);
SELECT deadline_at - heartbeat_at = interval '10 s' AS next_deadline FROM wfe.run_stages WHERE run_id = :h AND stage = 'beat';
UPDATE wfe.run_stages SET heartbeat_at = now() - interval '11 s', deadline_at = now() - interval '1 s'
 WHERE run_id = :h AND stage = 'beat';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT * FROM pg_temp.stages(:h);
SELECT detail ->> 'clock' AS clock FROM wfe.events WHERE run_id = :h AND type = 'stage.timed_out';
SELECT wfe.heartbeat(:h, 'beat', :h_attempt, :h_fence);
SELECT wfe.cancel_run(:h);
SELECT * FROM pg_temp.work('rt-rp-audit');
SELECT state FROM wfe.runs WHERE run_id = :h;

--
-- In-database actions: handler functions (input jsonb) RETURNS jsonb that
-- wfe.tick runs, each in a subtransaction.
--
CREATE SCHEMA rt_rp;
CREATE TABLE rt_rp.switch (fail boolean NOT NULL);
INSERT INTO rt_rp.switch VALUES (false);
CREATE TABLE rt_rp.log (n int);
CREATE FUNCTION rt_rp.add_one(input jsonb) RETURNS jsonb LANGUAGE sql AS $$
SELECT jsonb_build_object('n', (input ->> 'n')::int + 1)
$$;
CREATE FUNCTION rt_rp.flaky(input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rt_rp.log VALUES ((input ->> 'n')::int);
    IF (SELECT fail FROM rt_rp.switch) THEN
        RAISE EXCEPTION 'flaky is down' USING ERRCODE = 'connection_failure';
    END IF;
    RETURN jsonb_build_object('n', (input ->> 'n')::int * 10);
END
$$;
CREATE FUNCTION rt_rp.audit(input jsonb) RETURNS jsonb LANGUAGE sql AS $$
SELECT jsonb_build_object('intent', input -> 'intent', 'stages', input -> 'stages')
$$;
SELECT wfe.register_action('rt-rp.add@1', handler => 'rt_rp.add_one(jsonb)',
  input_schema => '{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}',
  output_schema => '{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}');
SELECT wfe.register_action('rt-rp.flaky@1', handler => 'rt_rp.flaky(jsonb)');
SELECT wfe.register_action('rt-rp.db-audit@1', handler => 'rt_rp.audit(jsonb)');
SELECT wfe.create_definition($yaml$
name: handlers-test
version: "1.0.0"
entry: one
stages:
  - name: one
    type: action
    action: rt-rp.add@1
    input: { n: "${context.n}" }
    on_success: two
    on_failure: failed
  - name: two
    type: action
    action: rt-rp.add@1
    input: { n: "${stages.one.result.n}" }
    on_success: three
    on_failure: failed
  - name: three
    type: action
    action: rt-rp.flaky@1
    input: { n: "${stages.two.result.n}" }
    on_success: completed
    on_failure: failed
finalisers: [rt-rp.db-audit@1]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('handlers-test', '1.0.0');
SELECT wfe.activate('handlers-test', '1.0.0');

-- Tick until the run has finished (at most 10 ticks); its final state.
CREATE FUNCTION pg_temp.tick_until_done(p_run bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    FOR i IN 1 .. 10 LOOP
        SELECT r.state INTO v_state FROM wfe.runs AS r WHERE r.run_id = p_run AND r.finished_at IS NOT NULL;
        EXIT WHEN FOUND;
        PERFORM wfe.tick();
    END LOOP;
    RETURN coalesce(v_state, 'not finished');
END
$$;

SELECT run_id AS d FROM wfe.submit('handlers-test', '{"n": 1}') \gset
-- nothing for a worker to claim: the stage waits for the tick
SELECT stage, state, queue, handler FROM wfe.run_stages WHERE run_id = :d ORDER BY ordinal;
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT pg_temp.tick_until_done(:d);
SELECT stage, state, attempt, input - 'run_id' AS input, result FROM wfe.run_stages WHERE run_id = :d ORDER BY ordinal;
SELECT n FROM rt_rp.log;

-- A handler that raises fails the attempt (its own writes undone) and is
-- retried after the backoff.
TRUNCATE rt_rp.log;
UPDATE rt_rp.switch SET fail = true;
SELECT run_id AS e FROM wfe.submit('handlers-test', '{"n": 5}') \gset
SELECT pg_temp.tick_until_done(:e);
SELECT stage, state, attempt, error FROM wfe.run_stages WHERE run_id = :e AND stage = 'three';
SELECT count(*) AS logged FROM rt_rp.log;
SELECT kind, attempt, fired_at IS NULL AS pending FROM wfe.timers WHERE run_id = :e;
UPDATE rt_rp.switch SET fail = false;
SELECT pg_temp.retry_now(:e) AS ticked;
SELECT pg_temp.tick_until_done(:e);
SELECT stage, state, attempt, result FROM wfe.run_stages WHERE run_id = :e ORDER BY ordinal;
SELECT n FROM rt_rp.log;
-- a handler that keeps failing exhausts the default policy (3 attempts)
CREATE FUNCTION pg_temp.drive(p_run bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. 20 LOOP
        EXIT WHEN (SELECT r.finished_at IS NOT NULL FROM wfe.runs AS r WHERE r.run_id = p_run);
        UPDATE wfe.timers SET due_at = now() - interval '1 s'
         WHERE run_id = p_run AND kind = 'retry' AND fired_at IS NULL;
        PERFORM wfe.tick();
    END LOOP;
    RETURN (SELECT r.state FROM wfe.runs AS r WHERE r.run_id = p_run);
END
$$;
UPDATE rt_rp.switch SET fail = true;
SELECT run_id AS x FROM wfe.submit('handlers-test', '{"n": 7}') \gset
SELECT pg_temp.drive(:x);
SELECT stage, state, attempt, error ->> 'code' AS code FROM wfe.run_stages WHERE run_id = :x ORDER BY ordinal;
SELECT attempt, reason FROM wfe.dead_letters WHERE run_id = :x;
SELECT result -> 'intent' AS finaliser_saw FROM wfe.run_stages WHERE run_id = :x AND stage = 'finaliser.1';
