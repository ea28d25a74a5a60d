--
-- Operator recovery (operations.md "Recovery"): wfe.redrive, skip_stage,
-- fail_stage, redispatch, replay, redrive_dead_letters; each through the
-- engine (a late report of the old attempt is stale), each an event with who
-- and why, each refused with 55000 and the reason when it may not act; the
-- broker -> poll -> broker switch re-dispatches with a new fence; only
-- wfe_operator may act.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rc.work@1', 'rc-work', output_schema => '{"type":"object","required":["size"]}');
SELECT wfe.register_worker('rc.next@1', 'rc-next');
SELECT wfe.create_definition($yaml$
name: recovery-test
version: "1.0.0"
entry: work
defaults:
  retry: { max_attempts: 1 }
stages:
  - name: work
    type: worker
    queue: rc-work
    worker: rc.work@1
    on_success: next
    on_failure: failed
  - name: next
    type: worker
    queue: rc-next
    worker: rc.next@1
    input: { size: "${stages.work.result.size}" }
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('recovery-test', '1.0.0');
SELECT wfe.activate('recovery-test', '1.0.0');

CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, state text, attempt int, fence_gen bigint, error text)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.fence >> 32, s.error ->> 'code'
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.events(p_run bigint, p_from bigint DEFAULT 0)
RETURNS TABLE (type text, stage text, attempt int, detail jsonb)
LANGUAGE sql AS $$
-- fences are random below their generation: show the generation of the
-- fence an event is about (its fence column; never in its detail)
SELECT e.type, e.stage, e.attempt,
       (e.detail - 'deadline_at')
       || CASE WHEN e.fence IS NOT NULL THEN jsonb_build_object('fence_gen', e.fence >> 32) ELSE '{}' END
  FROM wfe.events AS e WHERE e.run_id = p_run AND e.event_id > p_from ORDER BY e.event_id
$$;
-- claim one task of a queue and fail it (not retryable), or complete it
CREATE FUNCTION pg_temp.work(p_queue text, p_how text, p_result jsonb DEFAULT '{"size": 1}')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    SELECT * INTO t FROM wfe.claim_task(p_queue, 'w-rc');
    IF t.run_id IS NULL THEN
        RETURN 'nothing';
    END IF;
    IF p_how = 'fail' THEN
        RETURN wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "disk.full"}', true);
    END IF;
    RETURN wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result);
END
$$;
CREATE ROLE rc_operator IN ROLE wfe_operator;
CREATE ROLE rc_reader IN ROLE wfe_reader;
CREATE ROLE rc_other IN ROLE wfe_operator;
-- an operator acts for the tenants it is mapped to (operations.md "Tenants")
SELECT wfe.add_tenant_member('rc_operator', 'default');
SELECT wfe.add_tenant_member('rc_other', 'rc-other');

--
-- redrive: a run that ended failed is reopened and goes on from the stage
--
SELECT run_id AS r FROM wfe.submit('recovery-test', '{}') \gset
SELECT pg_temp.work('rc-work', 'fail');
SELECT state, intent FROM wfe.runs WHERE run_id = :r;
SELECT max(event_id) AS mark FROM wfe.events WHERE run_id = :r \gset
-- nothing to redrive on a stage that never ran; a reader may not act
SELECT wfe.redrive(:r, 'next');
SELECT wfe.redrive(:r, 'nope');
SELECT wfe.redrive(0, 'work');
SET ROLE rc_reader;
SELECT wfe.redrive(:r, 'work');
RESET ROLE;
-- an operator of another tenant is told what it is told of no run at all
-- (42704; test/tap/022_operator_tenants.pl compares the messages too)
SET ROLE rc_other;
\set VERBOSITY sqlstate
SELECT wfe.redrive(:r, 'work');
SELECT wfe.redrive(0, 'work');
\set VERBOSITY default
RESET ROLE;
SELECT * FROM pg_temp.stages(:r);
SET ROLE rc_operator;
SELECT wfe.redrive(:r, 'work', 'disk cleaned');
RESET ROLE;
SELECT state, intent, reason, finished_at IS NULL AS open FROM wfe.runs WHERE run_id = :r;
SELECT * FROM pg_temp.stages(:r);
SELECT * FROM pg_temp.events(:r, :mark);
SELECT resolution, resolved_by FROM wfe.dead_letters WHERE run_id = :r;
-- the first attempt reports late: stale; the new one completes, the run too
SELECT wfe.complete_task(:r, 'work', 1, (SELECT e.fence FROM wfe.events AS e
                                         WHERE e.run_id = :r AND e.stage = 'work' AND e.type = 'stage.released'),
                         '{"size": 9}');
SELECT pg_temp.work('rc-work', 'complete', '{"size": 5}');
SELECT input FROM wfe.run_stages WHERE run_id = :r AND stage = 'next';
SELECT pg_temp.work('rc-next', 'complete');
SELECT state FROM wfe.runs WHERE run_id = :r;
SELECT jsonb_path_query(wfe.report(:r), '$.redriven[*]') - 'at' AS redriven;
-- a completed run is not reopened
SELECT wfe.redrive(:r, 'work');

--
-- skip_stage: completed by hand with a result the contract accepts
--
SELECT run_id AS s FROM wfe.submit('recovery-test', '{}') \gset
SELECT pg_temp.work('rc-work', 'fail');
SELECT wfe.skip_stage(:s, 'work', '{"bytes": 1}', 'computed by hand');
SELECT * FROM pg_temp.stages(:s);
SELECT wfe.skip_stage(:s, 'work', '{"size": 7}', 'computed by hand');
SELECT * FROM pg_temp.stages(:s);
SELECT type, detail ->> 'by' AS by, detail ->> 'reason' AS reason
  FROM wfe.events WHERE run_id = :s AND type = 'stage.skipped_by_operator';
SELECT input FROM wfe.run_stages WHERE run_id = :s AND stage = 'next';

--
-- fail_stage: the attempt under way is fenced and failed; its late report is stale
--
SELECT wfe.fail_stage(:s, 'work', 'wrong');
SELECT wfe.fail_stage(:s, 'next', NULL);
SELECT stage AS s_stage, attempt AS s_attempt, fence AS s_fence FROM wfe.claim_task('rc-next', 'w-rc') \gset
SELECT :'s_stage' AS stage, :s_attempt AS attempt, :s_fence::bigint >> 32 AS fence_gen;
SELECT wfe.fail_stage(:s, 'next', 'the GPU host is gone');
SELECT * FROM pg_temp.stages(:s);
SELECT wfe.complete_task(:s, 'next', 1, :s_fence, '{}');
SELECT state, intent FROM wfe.runs WHERE run_id = :s;

--
-- replay: a new run of the same pinned definition and context, linked both ways
--
SELECT wfe.replay(:r) AS p \gset
SELECT x.definition_digest = o.definition_digest AS same_digest, x.context = o.context AS same_context,
       x.replay_of = o.run_id AS linked, x.idempotency_key IS NULL AS no_key
  FROM wfe.runs AS x, wfe.runs AS o WHERE x.run_id = :p AND o.run_id = :r;
SELECT wfe.report(:p) -> 'replay_of' = to_jsonb(:r) AS report_names_the_old,
       wfe.report(:r) -> 'replays' = jsonb_build_array(:p) AS report_names_the_new;
SELECT type, (detail ->> 'replay')::bigint = :p AS names_the_replay
  FROM wfe.events WHERE run_id = :r AND type = 'run.replayed';
SELECT wfe.replay(:p);
SELECT wfe.replay(12345678);

--
-- redispatch: a poll queue has nothing to re-dispatch; a broker attempt gets a new fence
--
SELECT wfe.redispatch(:p, 'work');
SELECT wfe.configure_queue('rc-work', 'broker');
SELECT stage, attempt, fence >> 32 AS fence_gen, state FROM wfe.outbox WHERE run_id = :p AND kind = 'dispatch' ORDER BY id;
SELECT wfe.redispatch(:p, 'work', 'the message was lost');
SELECT stage, attempt, fence >> 32 AS fence_gen, state FROM wfe.outbox WHERE run_id = :p AND kind = 'dispatch' ORDER BY id;
SELECT wfe.accept_task(:p, 'work', 1, (SELECT fence FROM wfe.outbox WHERE run_id = :p AND kind = 'dispatch' ORDER BY id LIMIT 1), 'w-old');
SELECT wfe.accept_task(:p, 'work', 1, (SELECT fence FROM wfe.outbox WHERE run_id = :p AND kind = 'dispatch' ORDER BY id DESC LIMIT 1), 'w-new');
SELECT wfe.redispatch(:p, 'work');

--
-- broker -> poll -> broker: an attempt whose message was published is
-- dispatched again with a new fence (0.1.0 left it queued for good)
--
SELECT run_id AS q FROM wfe.submit('recovery-test', '{}') \gset
SELECT count(*) AS relayed FROM wfe.outbox_claim(100, 'relay-rc') AS o
 WHERE wfe.outbox_ack(ARRAY[o.id], 'relay-rc') = 1 AND o.run_id = :q;
SELECT * FROM pg_temp.stages(:q);
SELECT wfe.configure_queue('rc-work', 'poll');
SELECT * FROM pg_temp.stages(:q);
SELECT wfe.configure_queue('rc-work', 'broker');
SELECT * FROM pg_temp.stages(:q);
SELECT attempt, fence >> 32 AS fence_gen, state FROM wfe.outbox WHERE run_id = :q AND kind = 'dispatch' ORDER BY id;
SELECT fence AS q_fence FROM wfe.run_stages WHERE run_id = :q AND stage = 'work' \gset
SELECT wfe.accept_task(:q, 'work', 1, :q_fence, 'w-rc');
SELECT wfe.complete_task(:q, 'work', 1, :q_fence, '{"size": 2}');
SELECT pg_temp.work('rc-next', 'complete');
SELECT state FROM wfe.runs WHERE run_id = :q;
SELECT wfe.configure_queue('rc-work', 'poll');

--
-- a binding failure is not redriven (its input would fail again); it is
-- skipped by hand
--
SELECT wfe.create_definition($yaml$
name: recovery-bind
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: rc-work
    worker: rc.work@1
    input: { v: "${context.v}" }
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('recovery-bind', '1.0.0');
SELECT wfe.activate('recovery-bind', '1.0.0');
SELECT run_id AS b FROM wfe.submit('recovery-bind', '{}') \gset
SELECT * FROM pg_temp.stages(:b);
SELECT wfe.redrive(:b, 'work');
SELECT wfe.skip_stage(:b, 'work', '{"size": 1}', 'bound by hand');
SELECT state FROM wfe.runs WHERE run_id = :b;

--
-- redrive_dead_letters: every open dead letter of a queue since a time
--
SELECT wfe.register_worker('rc.flaky@1', 'rc-flaky');
SELECT wfe.create_definition($yaml$
name: recovery-flaky
version: "1.0.0"
entry: flaky
defaults:
  retry: { max_attempts: 1 }
stages:
  - name: flaky
    type: worker
    queue: rc-flaky
    worker: rc.flaky@1
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('recovery-flaky', '1.0.0');
SELECT wfe.activate('recovery-flaky', '1.0.0');
SELECT count(*) AS submitted FROM generate_series(1, 3) AS i, LATERAL wfe.submit('recovery-flaky', jsonb_build_object('i', i));
SELECT t.stage, wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "flaky"}', true)
  FROM wfe.claim_task('rc-flaky', 'w-rc', 3) AS t;
SELECT count(*) AS open_dead_letters FROM wfe.dead_letters AS d JOIN wfe.runs AS x USING (run_id)
 WHERE x.workflow = 'recovery-flaky' AND d.resolved_at IS NULL;
SELECT wfe.redrive_dead_letters('rc-flaky', now() - interval '1 hour', 'flaky dependency is back');
SELECT wfe.redrive_dead_letters('rc-flaky');
SELECT count(*) AS completed FROM wfe.claim_task('rc-flaky', 'w-rc', 3) AS t
 WHERE wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}') = 'accepted';
SELECT state, count(*) FROM wfe.runs WHERE workflow = 'recovery-flaky' GROUP BY state;

--
-- the admission limits hold for every operator argument: nothing is written
--
SELECT run_id AS l FROM wfe.submit('recovery-test', '{}') \gset
SELECT pg_temp.work('rc-work', 'fail');
SELECT count(*) AS events_before FROM wfe.events WHERE run_id = :l \gset
SELECT wfe.redrive(:l, 'work', E'disk\ncleaned');
SELECT wfe.redrive(:l, 'work', repeat('x', 300));
SELECT wfe.fail_stage(:l, 'work', E'\x1b[31mred');
SELECT wfe.redispatch(:l, repeat('w', 300));
SELECT wfe.replay(:l, E'again\r');
SELECT wfe.redrive_dead_letters(E'rc-work\n');
SET wfe.max_payload_bytes = 1024;
SELECT wfe.skip_stage(:l, 'work', jsonb_build_object('size', 1, 'pad', repeat('p', 2000)));
RESET wfe.max_payload_bytes;
SELECT wfe.cache_invalidate(key => repeat('k', 300));
SELECT count(*) - :events_before AS new_events, (SELECT state FROM wfe.runs WHERE run_id = :l) AS run_state
  FROM wfe.events WHERE run_id = :l;

--
-- reopening a failed run counts against its tenant's max_runs_in_flight,
-- as a submit does: refused with 53400 when the tenant has no room
--
SELECT run_id AS m1 FROM wfe.submit('recovery-test', '{}', NULL, '{"tenant": "rc-limited"}') \gset
SELECT pg_temp.work('rc-work', 'fail');
SELECT run_id AS m2 FROM wfe.submit('recovery-test', '{}', NULL, '{"tenant": "rc-limited"}') \gset
SELECT wfe.configure_tenant('rc-limited', max_runs_in_flight => 1);
SELECT x.run_id = :m1 AS first, x.state FROM wfe.runs AS x WHERE x.tenant = 'rc-limited' ORDER BY x.run_id;
SELECT wfe.redrive(:m1, 'work');
SELECT wfe.skip_stage(:m1, 'work', '{"size": 1}');
SELECT wfe.redrive_dead_letters('rc-work');
SELECT state, finished_at IS NOT NULL AS ended FROM wfe.runs WHERE run_id = :m1;
SELECT wfe.cancel_run(:m2);
SELECT wfe.redrive(:m1, 'work', 'room again');
SELECT state FROM wfe.runs WHERE run_id = :m1;
SELECT wfe.configure_tenant('rc-limited');

-- Errors a superuser can reach below the public functions are specific
-- SQLSTATEs with a hint, never XX000: an unknown operation of wfe._operate
-- (22023), and a stored plan the run engine cannot read, e.g. one changed
-- by hand or stored by a wfe whose plans this one does not read (55000; no
-- run is left behind).
--
SELECT run_id AS op FROM wfe.submit('recovery-test', '{}') \gset
SELECT wfe._operate(:op, 'work', 'reboot', NULL, session_user, 'no such thing');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.create_definition($yaml$
name: recovery-unreadable
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: rc-work
    worker: rc.work@1
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('recovery-unreadable', '1.0.0');
SELECT wfe.activate('recovery-unreadable', '1.0.0');
ALTER TABLE wfe.definitions DISABLE TRIGGER definitions_guard;
UPDATE wfe.definitions SET plan = '{"form": "stages"}' WHERE workflow = 'recovery-unreadable';
ALTER TABLE wfe.definitions ENABLE TRIGGER definitions_guard;
-- (the definition's id depends on the tests before: it is masked)
DO $$
DECLARE
    v_state text; v_msg text; v_detail text; v_hint text;
BEGIN
    PERFORM wfe.submit('recovery-unreadable', '{}');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                            v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
    RAISE NOTICE E'%: %\nDETAIL: %\nHINT: %', v_state, regexp_replace(v_msg, '[0-9]+', 'N'),
                 regexp_replace(v_detail, '[0-9]+', 'N'), v_hint;
END
$$;
SELECT count(*) AS runs_left FROM wfe.runs WHERE workflow = 'recovery-unreadable';
