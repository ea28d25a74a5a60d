--
-- Waits, signals and sleeps (runtime.md "Signals", "Sleep and not_before";
-- dsl.md "New in 0.3.0"): signal contracts and grants, the compile-time
-- checks of wait and sleep stages, every outcome word of wfe.signal in the
-- spec's order, buffered signals taken oldest first, a wait's timeout and
-- its route, a sleep completing when due, cancellation ending a wait, and
-- wfe.find_run.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Signal contracts live in the registry beside workers and actions.
SELECT wfe.register_signal('rt-sig.approval@1',
  '{"type":"object","required":["approved"],"properties":{"approved":{"type":"boolean"},"by":{"type":"string"}},"additionalProperties":false}');
SELECT wfe.register_signal('rt-sig.approval@1',
  '{"type":"object","required":["approved"],"properties":{"approved":{"type":"boolean"},"by":{"type":"string"}},"additionalProperties":false}');
SELECT wfe.register_signal('rt-sig.approval@1', '{}');       -- 23505: immutable
SELECT wfe.register_signal('rt-sig.approval', '{}');         -- 22023: not name@N
SELECT wfe.register_signal('rt-sig.bad@1', '{"type": 7}');   -- 22023: not a schema
SELECT wfe.register_signal('rt-sig.paid@1');
SELECT ref, kind, queue, handler, output_schema FROM wfe.contracts WHERE ref LIKE 'rt-sig.%' ORDER BY ref;
SELECT wfe.register_worker('rt-sig.step@1', 'rt-sig-work');
SELECT wfe.grant_signal('rt-sig.step@1', 'rt-sig.step@1');  -- 42704: not a signal
SELECT wfe.grant_signal('public', 'rt-sig.approval@1');     -- 22023
SELECT wfe.grant_signal('no_such_role_rt_sig', 'rt-sig.approval@1');  -- 42704

-- Compile-time checks of wait and sleep stages.
CREATE FUNCTION pg_temp.diags(p_src text)
RETURNS TABLE (code text, path text, message text)
LANGUAGE sql AS $$
  SELECT d ->> 'code', d ->> 'path', d ->> 'message'
    FROM jsonb_array_elements(wfe.compile(p_src) -> 'diagnostics') AS d
$$;
SELECT * FROM pg_temp.diags($yaml$
name: sig-bad
version: "1.0.0"
entry: w
stages:
  - name: w
    type: wait
    signal: rt-sig.nosuch@1
    timeout_ms: 99999999999
    on_success: s
    on_failure: failed
    on_timeout: nowhere
  - name: s
    type: sleep
    duration_ms: 10
    until: "2030-01-01T00:00:00Z"
    on_success: t
  - name: t
    type: sleep
    on_success: u
  - name: u
    type: wait
    signal: rt-sig.step@1
    on_success: completed
    on_failure: failed
$yaml$);
-- a decision reading the wait's result is checked against the signal's payload schema
SELECT * FROM pg_temp.diags($yaml$
name: sig-typed
version: "1.0.0"
entry: w
stages:
  - name: w
    type: wait
    signal: rt-sig.approval@1
    on_success: d
    on_failure: failed
  - name: d
    type: decision
    branches:
      - when: 'stages["w"].result.aproved == true && stages.w.result.by == "ann"'
        next: completed
      - when: "true"
        next: failed
    on_evaluation_error: failed
$yaml$);
-- a timeout route that loops back is a cycle like any other
SELECT * FROM pg_temp.diags($yaml$
name: sig-cycle
version: "1.0.0"
entry: w
stages:
  - name: w
    type: wait
    signal: rt-sig.approval@1
    timeout_ms: 1000
    on_success: completed
    on_failure: failed
    on_timeout: w
$yaml$);

-- The workflow: wait for an approval (with a timeout to its own route),
-- decide on it, then sleep a little; and a second wait on the same signal.
SELECT wfe.create_definition($yaml$
name: sig-flow
version: "1.0.0"
entry: approve
stages:
  - name: approve
    type: wait
    signal: rt-sig.approval@1
    timeout_ms: 3600000
    on_success: check
    on_failure: failed
    on_timeout: rejected
  - name: check
    type: decision
    branches:
      - when: 'stages["approve"].result.approved'
        next: pause
      - when: "true"
        next: rejected
    on_evaluation_error: failed
  - name: pause
    type: sleep
    duration_ms: 1
    on_success: again
  - name: again
    type: wait
    signal: rt-sig.approval@1
    on_success: completed
    on_failure: failed
  - name: rejected
    type: sleep
    until: "${context.until}"
    on_success: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('sig-flow', '1.0.0');
SELECT wfe.activate('sig-flow', '1.0.0');
SELECT wfe.plan_mermaid('sig-flow');

-- A call's SQLSTATE and message (run ids masked), or its answer.
CREATE FUNCTION pg_temp.try(p_sql text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE v text;
BEGIN
  EXECUTE p_sql INTO v;
  RETURN v;
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 'run [0-9]+', 'run N');
END $$;
CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, kind text, state text, attempt int, result jsonb)
LANGUAGE sql AS $$
  SELECT s.stage, s.kind, s.state, s.attempt, s.result FROM wfe.run_stages AS s
   WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.events(p_run bigint)
RETURNS TABLE (stage text, type text, detail jsonb)
LANGUAGE sql AS $$
  SELECT e.stage, e.type, e.detail - 'by' FROM wfe.events AS e
   WHERE e.run_id = p_run AND (e.type LIKE 'signal.%' OR e.type IN ('stage.waiting', 'stage.sleeping', 'stage.timed_out'))
   ORDER BY e.event_id
$$;
-- run_timeline's rows without the clock: a parked wait or sleep is open
-- (finished_at NULL, its duration running to now); a finished attempt's
-- duration is its span; a sleep lasts at least its duration
CREATE FUNCTION pg_temp.timeline(p_run bigint)
RETURNS TABLE (stage text, attempt int, outcome text, open boolean, duration_ok boolean)
LANGUAGE sql AS $$
  SELECT t.stage, t.attempt, t.outcome, t.finished_at IS NULL,
         CASE WHEN t.finished_at IS NULL
              THEN t.duration_ms >= round((extract(epoch FROM statement_timestamp() - t.started_at) * 1000)::numeric, 1) - 0.1
              ELSE t.duration_ms = round((extract(epoch FROM t.finished_at - t.started_at) * 1000)::numeric, 1)
                   AND (t.stage <> 'pause' OR t.duration_ms >= 1) END
    FROM wfe.run_timeline(p_run) AS t
$$;

-- Released, the wait is running with no worker: no claim returns it.
SELECT run_id AS r1 FROM wfe.submit('sig-flow', '{"until": "2000-01-01T00:00:00Z"}', 'order-1') \gset
SELECT * FROM pg_temp.stages(:r1);
SELECT count(*) AS wait_timers FROM wfe.timers WHERE run_id = :r1 AND kind = 'wait_timeout' AND fired_at IS NULL;

-- Refusals: nothing is kept.
SELECT pg_temp.try(format('SELECT wfe.signal(%s, %L, %L)', :r1, 'rt-sig.paid@1', '{}'));  -- the plan never waits on it
SELECT pg_temp.try(format('SELECT wfe.signal(%s, %L, %L)', :r1, 'rt-sig.approval@1', '{"approved": "yes"}'));
SELECT pg_temp.try(format('SELECT wfe.signal(%s, %L, %L)', :r1, 'rt-sig.approval@1', '{"approved": true, "extra": 1}'));
SELECT pg_temp.try(format('SELECT wfe.signal(%s, %L, %L)', :r1, 'rt-sig.nosuch@1', '{}'));
SELECT pg_temp.try(format('SELECT wfe.signal(%s, NULL, %L)', :r1, '{}'));
SET wfe.max_payload_bytes = 1024;
SELECT pg_temp.try(format('SELECT wfe.signal(%s, %L, %L)', :r1, 'rt-sig.approval@1',
                          jsonb_build_object('approved', true, 'by', repeat('x', 2000))));  -- 54000
RESET wfe.max_payload_bytes;
SELECT wfe.signal(-1, 'rt-sig.approval@1', '{"approved": true}');     -- unknown
SELECT count(*) AS kept FROM wfe.signals WHERE run_id = :r1;

-- accepted: the wait completes with the payload and the run moves on
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true, "by": "ann"}', 'k1');
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true, "by": "ann"}', 'k1');   -- duplicate
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": false, "by": "ann"}', 'k1');  -- conflict
SELECT * FROM pg_temp.stages(:r1);
-- the pause sleeps: a timer, fired by wfe.tick() when due
SELECT kind, attempt FROM wfe.timers WHERE run_id = :r1 AND stage = 'pause';
-- buffered: the second wait is not released yet
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true, "by": "bob"}', 'k2');
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true, "by": "cid"}', 'k3');
SELECT pg_sleep(0.01);
SELECT wfe.tick() >= 1 AS fired;
-- the sleep completed with slept_until; the released wait took the oldest buffered signal
SELECT stage, state, result ? 'slept_until' AS slept, CASE WHEN kind = 'wait' THEN result END AS payload
  FROM wfe.run_stages WHERE run_id = :r1 ORDER BY ordinal;
SELECT signal, payload ->> 'by' AS by, idempotency_key, stage FROM wfe.signals WHERE run_id = :r1 ORDER BY signal_id;
SELECT state FROM wfe.runs WHERE run_id = :r1;
-- late: the run has ended; a duplicate is still answered as one
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true}', 'k9');
SELECT wfe.signal(:r1, 'rt-sig.approval@1', '{"approved": true, "by": "ann"}', 'k1');
SELECT * FROM pg_temp.events(:r1);
-- the timeline: the waits from release to the signal (accepted, or the
-- buffered one taken at release), the sleep from release to its timer
SELECT * FROM pg_temp.timeline(:r1);

-- A timeout: the wait is timed_out and takes on_timeout (a sleep until a past time: at once).
SELECT run_id AS r2 FROM wfe.submit('sig-flow', '{"until": "2000-01-01T00:00:00Z"}', 'order-2') \gset
UPDATE wfe.timers SET due_at = now() - interval '1 second' WHERE run_id = :r2 AND kind = 'wait_timeout';
SELECT wfe.tick() >= 1 AS fired;
SELECT * FROM pg_temp.stages(:r2);
SELECT state FROM wfe.runs WHERE run_id = :r2;
SELECT wfe.signal(:r2, 'rt-sig.approval@1', '{"approved": true}');   -- late
SELECT * FROM pg_temp.events(:r2);
SELECT * FROM pg_temp.timeline(:r2);

-- A sleep whose until does not bind to a timestamp: binding.type, the run fails.
SELECT run_id AS r3 FROM wfe.submit('sig-flow', '{"until": "tomorrow"}', 'order-3') \gset
UPDATE wfe.timers SET due_at = now() - interval '1 second' WHERE run_id = :r3 AND kind = 'wait_timeout';
SELECT wfe.tick() >= 1 AS fired;
SELECT stage, state, error ->> 'code' AS code FROM wfe.run_stages WHERE run_id = :r3 AND stage = 'rejected';

-- Cancellation ends a wait; its timer can only do nothing; a signal after it is late.
SELECT run_id AS r4 FROM wfe.submit('sig-flow', '{}', 'order-4') \gset
SELECT pg_sleep(0.01);
SELECT * FROM pg_temp.timeline(:r4);   -- parked: open, its duration running
SELECT duration_ms >= 10 AS running_to_now FROM wfe.run_timeline(:r4) WHERE stage = 'approve';
SELECT wfe.cancel_run(:r4, 'no longer needed');
SELECT * FROM pg_temp.timeline(:r4);   -- closed by the cancel
SELECT stage, state FROM wfe.run_stages WHERE run_id = :r4 AND stage = 'approve';
SELECT count(*) AS live_timers FROM wfe.timers WHERE run_id = :r4 AND fired_at IS NULL AND kind = 'wait_timeout';
SELECT wfe.signal(:r4, 'rt-sig.approval@1', '{"approved": true}');
-- a worker cannot report a wait
SELECT wfe.complete_task(:r4, 'approve', 1, (SELECT fence FROM wfe.run_stages WHERE run_id = :r4 AND stage = 'approve'), '{"approved": true}');

-- find_run: the business key a caller knows
SELECT wfe.find_run('sig-flow', 'order-1') = :r1 AS found;
SELECT wfe.find_run('sig-flow', 'order-1', 'other-tenant') IS NULL AS other_tenant;
SELECT wfe.find_run('sig-flow', 'no-such-key') IS NULL AS none;

-- the waits dashboard: runs waiting, buffered signals, timeouts of the last hour
SELECT workflow, stage, signal, waiting, buffered, timed_out_1h FROM wfe.dashboard_waits WHERE workflow = 'sig-flow';
SELECT run_id AS r5 FROM wfe.submit('sig-flow', '{}', 'order-5') \gset
SELECT workflow, stage, signal, waiting, oldest_wait IS NOT NULL AS aged, buffered, timed_out_1h
  FROM wfe.dashboard_waits WHERE workflow = 'sig-flow';

-- the tasks form: wait: and sleep: as a task's executor
SELECT * FROM pg_temp.diags($yaml$
name: sig-tasks-bad
version: "1.0.0"
tasks:
  - id: w
    wait: {signal: rt-sig.approval@1, timeout_ms: 0}
    worker: rt-sig.step@1
    queue: rt-sig-work
  - id: s
    sleep: {duration_ms: 5, until: "2030-01-01T00:00:00Z"}
$yaml$);
SELECT wfe.create_definition($yaml$
name: sig-tasks
version: "1.0.0"
tasks:
  - id: approve
    wait: {signal: rt-sig.approval@1, timeout_ms: 60000}
  - id: nap
    sleep: {duration_ms: 1}
    depends_on: [approve]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('sig-tasks', '1.0.0');
SELECT wfe.activate('sig-tasks', '1.0.0');
SELECT run_id AS t1 FROM wfe.submit('sig-tasks', '{}') \gset
SELECT wfe.signal(:t1, 'rt-sig.approval@1', '{"approved": true}');
SELECT pg_sleep(0.01);
SELECT wfe.tick() >= 1 AS fired;
SELECT stage, kind, state, attempt, CASE WHEN kind = 'wait' THEN result ELSE to_jsonb(result ? 'slept_until') END AS result
  FROM wfe.run_stages WHERE run_id = :t1 ORDER BY ordinal;
SELECT state FROM wfe.runs WHERE run_id = :t1;

-- operators: skip a timed-out wait with a result its signal's schema accepts; redrive one
SELECT run_id AS o1 FROM wfe.submit('sig-flow', '{"until": "nope"}', 'op-1') \gset
UPDATE wfe.timers SET due_at = now() - interval '1 second' WHERE run_id = :o1 AND kind = 'wait_timeout';
SELECT wfe.tick() >= 1 AS fired;
SELECT pg_temp.try(format('SELECT wfe.skip_stage(%s, %L, %L)', :o1, 'approve', '{"approved": 3}'));
SELECT wfe.skip_stage(:o1, 'approve', '{"approved": true}', 'approved by phone');
SELECT stage, state FROM wfe.run_stages WHERE run_id = :o1 ORDER BY ordinal;
SELECT run_id AS o2 FROM wfe.submit('sig-flow', '{"until": "nope"}', 'op-2') \gset
UPDATE wfe.timers SET due_at = now() - interval '1 second' WHERE run_id = :o2 AND kind = 'wait_timeout';
SELECT wfe.tick() >= 1 AS fired;
SELECT wfe.redrive(:o2, 'approve', 'ask again');
SELECT stage, state, attempt FROM wfe.run_stages WHERE run_id = :o2 AND stage = 'approve';
SELECT count(*) AS new_timeout FROM wfe.timers WHERE run_id = :o2 AND kind = 'wait_timeout' AND fired_at IS NULL AND attempt = 2;
SELECT wfe.signal(:o2, 'rt-sig.approval@1', '{"approved": true}');
SELECT stage, state FROM wfe.run_stages WHERE run_id = :o2 ORDER BY ordinal;
