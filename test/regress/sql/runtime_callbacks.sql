--
-- Worker callbacks: complete_task, fail_task, accept_task and heartbeat, and
-- every outcome word they answer (runtime.md "Workers"): accepted,
-- duplicate, conflict, stale, late, invalid_result, unknown.  Every rejected
-- callback leaves an event row and changes nothing else: each call below is
-- made through pg_temp.call, which snapshots the run (run row, stage rows,
-- timers, outbox, outputs, dead letters) before and after and lists the
-- events the call appended.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Contracts and a two-stage workflow with a finaliser (own names and queues).
SELECT wfe.register_worker('rt-cb.step@1', 'rt-cb-work',
  output_schema => '{"type":"object","properties":{"n":{"type":"integer"}}}');
SELECT wfe.register_action('rt-cb.audit@1', queue => 'rt-cb-audit');
SELECT wfe.create_definition($yaml$
name: cb-test
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: rt-cb-work
    worker: rt-cb.step@1
    on_success: second
    on_failure: failed
  - name: second
    type: worker
    queue: rt-cb-work
    worker: rt-cb.step@1
    on_success: completed
    on_failure: failed
finalisers: [rt-cb.audit@1]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('cb-test', '1.0.0');
SELECT wfe.activate('cb-test', '1.0.0');

-- Everything that a callback could change, for one run.
CREATE FUNCTION pg_temp.snap(p_run bigint)
RETURNS jsonb LANGUAGE sql AS $$
SELECT jsonb_build_object(
  'run', (SELECT to_jsonb(r) FROM wfe.runs AS r WHERE r.run_id = p_run),
  'stages', (SELECT jsonb_agg(to_jsonb(s) ORDER BY s.stage) FROM wfe.run_stages AS s WHERE s.run_id = p_run),
  'timers', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.timer_id) FROM wfe.timers AS t WHERE t.run_id = p_run),
  'outbox', (SELECT jsonb_agg(to_jsonb(o) ORDER BY o.id) FROM wfe.outbox AS o WHERE o.run_id = p_run),
  'outputs', (SELECT jsonb_agg(to_jsonb(o) ORDER BY o.task, o.key) FROM wfe.outputs AS o WHERE o.run_id = p_run),
  'dead_letters', (SELECT jsonb_agg(to_jsonb(d) ORDER BY d.dead_letter_id) FROM wfe.dead_letters AS d WHERE d.run_id = p_run))
$$;

-- Make one callback; answer its outcome, whether the run is unchanged, and
-- the events it appended (type, and the callback a rejection names).
CREATE FUNCTION pg_temp.call(p_kind text, p_run bigint, p_stage text, p_attempt int, p_fence bigint,
                             p_payload jsonb DEFAULT '{}')
RETURNS TABLE (outcome text, unchanged boolean, events text)
LANGUAGE plpgsql AS $$
DECLARE
    v_before jsonb := pg_temp.snap(p_run);
    v_mark   bigint := (SELECT coalesce(max(e.event_id), 0) FROM wfe.events AS e);
BEGIN
    outcome := CASE p_kind
        WHEN 'complete' THEN wfe.complete_task(p_run, p_stage, p_attempt, p_fence, p_payload)
        WHEN 'fail' THEN wfe.fail_task(p_run, p_stage, p_attempt, p_fence, p_payload)
        WHEN 'fail_final' THEN wfe.fail_task(p_run, p_stage, p_attempt, p_fence, p_payload, retryable => false)
        WHEN 'accept' THEN wfe.accept_task(p_run, p_stage, p_attempt, p_fence, 'w-test')
        WHEN 'heartbeat' THEN wfe.heartbeat(p_run, p_stage, p_attempt, p_fence)
    END;
    unchanged := pg_temp.snap(p_run) = v_before;
    SELECT string_agg(e.type || coalesce('(' || (e.detail ->> 'callback') || ')', ''), ', ' ORDER BY e.event_id)
      INTO events FROM wfe.events AS e WHERE e.event_id > v_mark;
    RETURN NEXT;
END
$$;

-- The stages of a run.  A fence is the generation in its high 32 bits and
-- random bits below (runtime.md "Who may report"): the generation is shown.
CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, state text, attempt int, fence_gen bigint, outcome text, skip_reason text,
               error text, result jsonb)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.fence >> 32, s.outcome, s.skip_reason, s.error ->> 'code', s.result
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;

-- Makes the retry timers of a run due and ticks.
CREATE FUNCTION pg_temp.retry_now(p_run bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE wfe.timers AS t SET due_at = now() - interval '1 s'
     WHERE t.run_id = p_run AND t.kind = 'retry' AND t.fired_at IS NULL;
    RETURN wfe.tick() IS NOT NULL;   -- how many it handled depends on other tests
END
$$;

SELECT run_id AS run, accepted FROM wfe.submit('cb-test', '{}') \gset
SELECT :'accepted' AS accepted;
SELECT * FROM pg_temp.stages(:run);
-- the fence of first's attempt 1, as the task (or envelope) would carry it
SELECT fence AS f1 FROM wfe.run_stages WHERE run_id = :run AND stage = 'first' \gset

--
-- unknown: no such run, or no such stage; answered, not raised, and recorded
--
SELECT * FROM pg_temp.call('complete', -4242, 'first', 1, 1);
SELECT * FROM pg_temp.call('fail', -4242, 'first', 1, 1);
SELECT * FROM pg_temp.call('accept', -4242, 'first', 1, 1);
SELECT * FROM pg_temp.call('heartbeat', -4242, 'first', 1, 1);
SELECT * FROM pg_temp.call('complete', :run, 'no-such-stage', 1, 1);
SELECT * FROM pg_temp.call('heartbeat', :run, 'finaliser.2', 1, 1);
SELECT run_id, tenant, stage, attempt, type, detail ->> 'callback' AS callback
  FROM wfe.events WHERE run_id = -4242 ORDER BY event_id;

-- Bad arguments raise (22004), whatever the callback.
SELECT wfe.complete_task(NULL, 'first', 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.fail_task(:run, NULL, 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.accept_task(:run, 'first', NULL, 1, 'w');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.heartbeat(:run, 'first', 1, NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- stale: attempts never issued.  'second' is not released (attempt 0,
-- fence 0).
--
SELECT * FROM pg_temp.call('complete', :run, 'second', 1, 1);
SELECT * FROM pg_temp.call('complete', :run, 'second', 0, 0);
SELECT * FROM pg_temp.call('accept', :run, 'second', 0, 0);

--
-- stale: an attempt nobody claimed or accepted cannot be reported, even
-- with its real attempt and fence (runtime.md "Who may report")
--
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 1}');
SELECT * FROM pg_temp.call('fail', :run, 'first', 1, :f1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('fail_final', :run, 'first', 1, :f1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('heartbeat', :run, 'first', 1, :f1);
SELECT * FROM pg_temp.stages(:run);

--
-- accept_task / heartbeat on the current attempt
--
SELECT task.stage, task.attempt, task.fence >> 32 AS fence_gen, task.fence = :f1 AS task_fence,
       task.worker, task.input
  FROM wfe.claim_task('rt-cb-work', 'w-1') AS task;
-- claimed: a redelivered acceptance is a duplicate; a heartbeat is accepted
SELECT * FROM pg_temp.call('accept', :run, 'first', 1, :f1);
SELECT * FROM pg_temp.call('heartbeat', :run, 'first', 1, :f1);
SELECT claimed_by, heartbeat_at IS NOT NULL AS beating FROM wfe.run_stages WHERE run_id = :run AND stage = 'first';

--
-- stale: the claimed attempt, but another attempt or fence: the next
-- attempt, a neighbouring fence, the bare generation (what 0.1.0's fence
-- would have been), a fence from nowhere
--
SELECT * FROM pg_temp.call('complete', :run, 'first', 2, :f1);
SELECT * FROM pg_temp.call('fail', :run, 'first', 1, :f1 + 1);
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1 >> 32, '{"n": 1}');
SELECT * FROM pg_temp.call('accept', :run, 'first', 0, :f1);
SELECT * FROM pg_temp.call('heartbeat', :run, 'first', 1, 0);

--
-- accepted, then duplicate and conflict for a completed attempt
--
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 1}');
SELECT * FROM pg_temp.stages(:run);
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 1}');
-- jsonb equality: key order and white space do not matter
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{ "n" : 1 }');
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 2}');
SELECT * FROM pg_temp.call('fail', :run, 'first', 1, :f1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('accept', :run, 'first', 1, :f1);
-- the successor was released once: one stage.released event for 'second'
SELECT count(*) AS releases FROM wfe.events WHERE run_id = :run AND stage = 'second' AND type = 'stage.released';

--
-- A retryable failure of the claimed attempt (running -> retry_scheduled),
-- then duplicate and conflict for a failed attempt
--
SELECT task.stage, task.attempt, task.fence AS s1 FROM wfe.claim_task('rt-cb-work', 'w-1') AS task \gset
SELECT :'stage' AS claimed;
SELECT * FROM pg_temp.call('fail', :run, 'second', 1, :s1, '{"code": "boom"}');
SELECT * FROM pg_temp.stages(:run);
SELECT kind, stage, attempt, fence >> 32 AS fence_gen, fence = :s1 AS attempt_fence, fired_at IS NULL AS pending
  FROM wfe.timers WHERE run_id = :run ORDER BY timer_id;
SELECT * FROM pg_temp.call('fail', :run, 'second', 1, :s1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('fail', :run, 'second', 1, :s1, '{"code": "other"}');
SELECT * FROM pg_temp.call('complete', :run, 'second', 1, :s1, '{"n": 1}');
SELECT * FROM pg_temp.call('accept', :run, 'second', 1, :s1);

-- The retry: attempt 2 with a new fence.  Every callback of attempt 1 is stale.
SELECT pg_temp.retry_now(:run) AS ticked;
SELECT * FROM pg_temp.stages(:run);
SELECT * FROM pg_temp.call('complete', :run, 'second', 1, :s1, '{"n": 1}');
SELECT * FROM pg_temp.call('fail', :run, 'second', 1, :s1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('accept', :run, 'second', 1, :s1);
SELECT * FROM pg_temp.call('heartbeat', :run, 'second', 1, :s1);
-- the new attempt's identity
SELECT attempt AS a2, fence AS f2 FROM wfe.run_stages WHERE run_id = :run AND stage = 'second' \gset

-- accept_task starts what a broker dispatched: it cannot start a task of a
-- poll queue (55000), whose tasks claim_task alone hands out
SELECT * FROM pg_temp.call('accept', :run, 'second', :a2, :f2);
SELECT state, claimed_by FROM wfe.run_stages WHERE run_id = :run AND stage = 'second';
-- on a broker queue (re-dispatched: a new fence), accept_task moves a queued
-- attempt to running (the push handshake)
SELECT wfe.configure_queue('rt-cb-work', 'broker');
SELECT attempt AS a2, fence AS f2 FROM wfe.run_stages WHERE run_id = :run AND stage = 'second' \gset
SELECT * FROM pg_temp.call('accept', :run, 'second', :a2, :f2);
SELECT state, claimed_by FROM wfe.run_stages WHERE run_id = :run AND stage = 'second';
SELECT * FROM pg_temp.call('accept', :run, 'second', :a2, :f2);
SELECT wfe.configure_queue('rt-cb-work', 'poll');
-- nothing left to claim: the attempt is running already
SELECT count(*) AS claimable FROM wfe.claim_task('rt-cb-work', 'w-2');

--
-- invalid_result: the output schema says n is an integer.  The attempt fails
-- with result.schema and is retried.
--
SELECT * FROM pg_temp.call('complete', :run, 'second', :a2, :f2, '{"n": "three"}');
SELECT * FROM pg_temp.stages(:run);
SELECT error FROM wfe.run_stages WHERE run_id = :run AND stage = 'second';
SELECT type, detail FROM wfe.events WHERE run_id = :run AND type = 'stage.invalid_result';
SELECT pg_temp.retry_now(:run) AS ticked;
SELECT attempt AS a3, fence AS f3 FROM wfe.run_stages WHERE run_id = :run AND stage = 'second' \gset
SELECT :a3 AS attempt, :f3 > :f2 AS new_fence;

--
-- The last attempt is claimed and completes: the run's intent is completed
-- and the finaliser runs.
--
SELECT task.stage, task.attempt, task.fence = :f3 AS task_fence FROM wfe.claim_task('rt-cb-work', 'w-1') AS task;
SELECT * FROM pg_temp.call('complete', :run, 'second', :a3, :f3, '{"n": 3}');
SELECT state, intent FROM wfe.runs WHERE run_id = :run;
SELECT * FROM pg_temp.stages(:run);

--
-- After the run's intent: a report of the attempt that was taken is still
-- answered duplicate (same result) or conflict (another one), so a worker
-- always learns its result was taken; every other ordinary callback is late,
-- even one that would otherwise be stale.
--
SELECT * FROM pg_temp.call('complete', :run, 'second', :a3, :f3, '{"n": 3}');
SELECT * FROM pg_temp.call('complete', :run, 'second', :a3, :f3, '{"n": 4}');
SELECT * FROM pg_temp.call('fail', :run, 'second', :a3, :f3);
SELECT * FROM pg_temp.call('accept', :run, 'second', :a3, :f3);
SELECT * FROM pg_temp.call('heartbeat', :run, 'second', :a3, :f3);
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 1}');
SELECT * FROM pg_temp.call('complete', :run, 'second', 1, :s1, '{"n": 1}');
-- but unknown comes first
SELECT * FROM pg_temp.call('complete', :run, 'no-such-stage', 1, 1);

--
-- Finaliser callbacks are exempt from late: they complete the run.
--
SELECT fence AS z1 FROM wfe.run_stages WHERE run_id = :run AND stage = 'finaliser.1' \gset
-- not claimed yet: the finaliser's report is stale too
SELECT * FROM pg_temp.call('complete', :run, 'finaliser.1', 1, :z1, '{"audited": true}');
SELECT task.stage, task.attempt, task.fence >> 32 AS fence_gen, task.fence = :z1 AS task_fence, task.worker,
       task.input - 'run_id' AS input
  FROM wfe.claim_task('rt-cb-audit', 'w-audit') AS task;
SELECT * FROM pg_temp.call('heartbeat', :run, 'finaliser.1', 1, :z1 + 1);
SELECT * FROM pg_temp.call('heartbeat', :run, 'finaliser.1', 1, :z1);
SELECT * FROM pg_temp.call('complete', :run, 'finaliser.1', 1, :z1, '{"audited": true}');
SELECT state, intent, finished_at IS NOT NULL AS finished FROM wfe.runs WHERE run_id = :run;
-- after the run finished: a finaliser's redelivery is a duplicate, a
-- different report a conflict, an old fence stale
SELECT * FROM pg_temp.call('complete', :run, 'finaliser.1', 1, :z1, '{"audited": true}');
SELECT * FROM pg_temp.call('fail', :run, 'finaliser.1', 1, :z1);
SELECT * FROM pg_temp.call('complete', :run, 'finaliser.1', 1, 0, '{"audited": true}');
SELECT * FROM pg_temp.call('complete', :run, 'first', 1, :f1, '{"n": 1}');

--
-- The event log holds every rejected callback of the run, by outcome.
--
SELECT type, count(*) FROM wfe.events
 WHERE run_id = :run AND type LIKE 'callback.%' GROUP BY type ORDER BY type;
SELECT wfe.report(:run) -> 'late_callbacks' AS late_callbacks;

--
-- A non-retryable failure (fail_task retryable => false) fails the stage at
-- once and follows on_failure; the run fails after its finaliser.
--
SELECT run_id AS run2 FROM wfe.submit('cb-test', '{"n": 2}') \gset
SELECT task.fence AS g1 FROM wfe.claim_task('rt-cb-work', 'w-1') AS task \gset
SELECT * FROM pg_temp.call('fail_final', :run2, 'first', 1, :g1, '{"code": "fatal"}');
SELECT * FROM pg_temp.stages(:run2);
SELECT count(*) AS timers, (SELECT count(*) FROM wfe.dead_letters WHERE run_id = :run2) AS dead_letters
  FROM wfe.timers WHERE run_id = :run2;
SELECT * FROM pg_temp.call('fail_final', :run2, 'first', 1, :g1, '{"code": "fatal"}');
SELECT task.stage, wfe.fail_task(task.run_id, task.stage, task.attempt, task.fence, '{"code": "audit down"}', false)
  FROM wfe.claim_task('rt-cb-audit', 'w-audit') AS task;
SELECT state, intent, reason FROM wfe.runs WHERE run_id = :run2;

--
-- Broker delivery: the dispatch envelope carries the attempt's real fence.
-- Published (dispatched) but not yet accepted, the attempt cannot be
-- reported, even with that fence: stale, nothing changes.  Accepted, it can.
--
SELECT wfe.configure_queue('rt-cb-work', 'broker');
SELECT run_id AS run3 FROM wfe.submit('cb-test', '{"n": 3}') \gset
SELECT body ->> 'attempt' AS attempt, (body ->> 'fence')::bigint AS d1 FROM wfe.outbox
 WHERE run_id = :run3 AND kind = 'dispatch' AND stage = 'first' \gset
SELECT :attempt AS attempt, :d1 >> 32 AS fence_gen,
       :d1 = (SELECT fence FROM wfe.run_stages WHERE run_id = :run3 AND stage = 'first') AS stage_fence;
-- what a broker publisher does once the broker confirmed the message
UPDATE wfe.run_stages SET state = 'dispatched' WHERE run_id = :run3 AND stage = 'first';
SELECT * FROM pg_temp.call('complete', :run3, 'first', 1, :d1, '{"n": 3}');
SELECT * FROM pg_temp.call('fail', :run3, 'first', 1, :d1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('fail_final', :run3, 'first', 1, :d1, '{"code": "boom"}');
SELECT * FROM pg_temp.call('heartbeat', :run3, 'first', 1, :d1);
SELECT * FROM pg_temp.stages(:run3);
SELECT * FROM pg_temp.call('accept', :run3, 'first', 1, :d1 + 1);
SELECT * FROM pg_temp.call('accept', :run3, 'first', 1, :d1);
SELECT * FROM pg_temp.call('complete', :run3, 'first', 1, :d1, '{"n": 3}');
SELECT * FROM pg_temp.stages(:run3);
SELECT wfe.cancel_run(:run3, 'test done');
SELECT wfe.configure_queue('rt-cb-work', 'poll');
