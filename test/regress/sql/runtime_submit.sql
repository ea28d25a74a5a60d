--
-- wfe.submit (runtime.md "Runs"): which definition a name selects, the
-- pinned identity of a run, idempotency keys, options and their errors,
-- the caller's transaction, delayed starts, run deadlines, and binding
-- failures that fail a stage -- not the submit.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-sb.step@1', 'rt-sb-work',
  '{"type":"object","required":["name","size"],"properties":{"name":{"type":"string"},"size":{"type":"integer"}}}');
SELECT wfe.register_worker('rt-sb.notify@1', 'rt-sb-notify');
-- step binds the context; when it fails, notify runs and the run fails.
\set body '\nentry: step\nstages:\n  - name: step\n    type: worker\n    queue: rt-sb-work\n    worker: rt-sb.step@1\n    input: { name: "${context.name}", size: "${context.size}" }\n    on_success: completed\n    on_failure: notify\n  - name: notify\n    type: worker\n    queue: rt-sb-notify\n    worker: rt-sb.notify@1\n    input: { about: "${run.workflow}@${run.version} for ${run.tenant}" }\n    on_success: failed\n    on_failure: failed\n'
SELECT wfe.create_definition(E'name: submit-test\nversion: "1.0.0"' || :'body') AS digest_100 \gset
SELECT wfe.create_definition(E'name: submit-test\nversion: "1.1.0"' || :'body') LIKE 'sha256:%' AS created;
SELECT wfe.create_definition(E'name: submit-test\nversion: "1.2.0"' || :'body') LIKE 'sha256:%' AS created;
SELECT wfe.approve('submit-test', '1.0.0');
SELECT wfe.approve('submit-test', '1.1.0');
SELECT wfe.activate('submit-test', '1.0.0');
-- a workflow with an approved but no active version
SELECT wfe.create_definition(E'name: submit-none\nversion: "1.0.0"' || :'body') LIKE 'sha256:%' AS created;
SELECT wfe.approve('submit-none', '1.0.0');

CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, state text, attempt int, skip_reason text, error text, input jsonb)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.skip_reason, s.error ->> 'code', s.input
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.run(p_run bigint)
RETURNS TABLE (workflow text, version text, tenant text, state text, intent text, reason text)
LANGUAGE sql AS $$
SELECT r.workflow, r.version, r.tenant, r.state, r.intent, r.reason FROM wfe.runs AS r WHERE r.run_id = p_run
$$;
-- Report a stage's current attempt; one nobody claimed yet is accepted
-- first, as its worker would (only a running attempt can be reported).
-- accept_task starts only a broker queue's tasks: the queue is one for the
-- handshake (re-dispatching the attempt: a new fence), then poll again.
CREATE FUNCTION pg_temp.finish(p_run bigint, p_stage text, p_how text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s wfe.run_stages;
BEGIN
    SELECT * INTO s FROM wfe.run_stages AS x WHERE x.run_id = p_run AND x.stage = p_stage;
    IF s.state IN ('queued', 'dispatched') THEN
        PERFORM wfe.configure_queue(s.queue, 'broker');
        SELECT * INTO s FROM wfe.run_stages AS x WHERE x.run_id = p_run AND x.stage = p_stage;
        PERFORM wfe.accept_task(p_run, p_stage, s.attempt, s.fence, 'w-sb');
        PERFORM wfe.configure_queue(s.queue, 'poll');
    END IF;
    RETURN CASE p_how
             WHEN 'complete' THEN wfe.complete_task(p_run, p_stage, s.attempt, s.fence, '{}')
             ELSE wfe.fail_task(p_run, p_stage, s.attempt, s.fence, '{"code": "test"}', false) END;
END
$$;
\set ok_ctx '{"name": "n", "size": 3}'

--
-- Which definition: the active version, or an approved name@version
--
SELECT run_id AS a, accepted FROM wfe.submit('submit-test', :'ok_ctx') \gset
SELECT :'accepted' AS accepted;
SELECT * FROM pg_temp.run(:a);
-- the run is pinned: digest, DSL, compiler and engine versions, contracts
SELECT r.definition_digest = :'digest_100' AS digest_pinned, r.dsl_version, r.compiler_version,
       r.engine_version = (SELECT extversion FROM pg_extension WHERE extname = 'wfe') AS engine_pinned,
       r.form, r.contracts
  FROM wfe.runs AS r WHERE r.run_id = :a;
SELECT task.stage, task.worker, task.input, task.definition_digest = :'digest_100' AS digest_pinned, task.tenant
  FROM wfe.claim_task('rt-sb-work', 'w-sb') AS task;
SELECT pg_temp.finish(:a, 'step', 'complete');
SELECT run_id AS b FROM wfe.submit('submit-test@1.1.0', :'ok_ctx') \gset
SELECT * FROM pg_temp.run(:b);
SELECT pg_temp.finish(:b, 'step', 'complete');
-- a draft cannot start runs (55000); unknown versions and workflows are 42704
SELECT * FROM wfe.submit('submit-test@1.2.0', :'ok_ctx');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test@9.9.9', :'ok_ctx');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-none', :'ok_ctx');
\echo :LAST_ERROR_SQLSTATE
SELECT accepted AS approved_one_runs FROM wfe.submit('submit-none@1.0.0', :'ok_ctx');
SELECT * FROM wfe.submit('no-such-workflow', :'ok_ctx');
\echo :LAST_ERROR_SQLSTATE
-- leave nothing of submit-none queued
SELECT pg_temp.finish(run_id, 'step', 'complete') FROM wfe.runs WHERE workflow = 'submit-none';

--
-- Bad arguments and options: 22004 for a null workflow, 22023 for the rest
--
SELECT * FROM wfe.submit(NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', '[1]');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '"fast"');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"tenant": "t", "speed": 1, "colour": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"tenant": "no spaces"}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"tenant": ""}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"priority": 1.5}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"priority": "high"}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"priority": 2000000}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"run_deadline_ms": 0}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"run_deadline_ms": "1 hour"}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"run_deadline_ms": 1000.5}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"not_before": "soon"}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', options => '{"execution_context": 7}');
\echo :LAST_ERROR_SQLSTATE
-- none of them left a run behind
SELECT count(*) AS runs FROM wfe.runs WHERE workflow = 'submit-test';

--
-- Idempotency keys: unique per (tenant, workflow name)
--
SELECT run_id AS k1, accepted FROM wfe.submit('submit-test', :'ok_ctx', 'key-1') \gset
SELECT :'accepted' AS accepted;
-- same key, same context (jsonb-equal): the same run, not accepted
SELECT run_id = :k1 AS same_run, accepted FROM wfe.submit('submit-test', '{"size": 3, "name": "n"}', 'key-1');
-- also through name@version: the key belongs to the workflow name
SELECT run_id = :k1 AS same_run, accepted FROM wfe.submit('submit-test@1.1.0', :'ok_ctx', 'key-1');
-- same key, another context: an error, not a new run (terse: the detail names the run)
\set VERBOSITY terse
SELECT * FROM wfe.submit('submit-test', '{"name": "other", "size": 3}', 'key-1');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- another tenant has its own keys
SELECT run_id AS k1t, accepted FROM wfe.submit('submit-test', '{"name": "other", "size": 3}', 'key-1',
                                                '{"tenant": "tenant-b"}') \gset
SELECT :k1t <> :k1 AS new_run, :'accepted' AS accepted;
SELECT * FROM pg_temp.run(:k1t);
SELECT task.stage, task.tenant, task.input FROM wfe.claim_task('rt-sb-work', 'w-sb', 5) AS task ORDER BY task.tenant;
SELECT run_id = :k1t AS same_run, accepted FROM wfe.submit('submit-test', '{"name": "other", "size": 3}', 'key-1',
                                                             '{"tenant": "tenant-b"}');
SELECT pg_temp.finish(:k1t, 'step', 'complete');
-- once the run failed, the key starts a new run
SELECT pg_temp.finish(:k1, 'step', 'fail');
SELECT pg_temp.finish(:k1, 'notify', 'complete');
SELECT state FROM wfe.runs WHERE run_id = :k1;
SELECT run_id AS k2, accepted FROM wfe.submit('submit-test', :'ok_ctx', 'key-1') \gset
SELECT :k2 <> :k1 AS new_run, :'accepted' AS accepted;
-- and once it was cancelled, again (with another context this time)
SELECT wfe.cancel_run(:k2, 'test');
SELECT run_id AS k3, accepted FROM wfe.submit('submit-test', '{"name": "third", "size": 3}', 'key-1') \gset
SELECT :k3 <> :k2 AS new_run, :'accepted' AS accepted;
-- a completed run keeps its key
SELECT pg_temp.finish(:k3, 'step', 'complete');
SELECT run_id = :k3 AS same_run, accepted FROM wfe.submit('submit-test', '{"name": "third", "size": 3}', 'key-1');
\set VERBOSITY terse
SELECT * FROM wfe.submit('submit-test', :'ok_ctx', 'key-1');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT idempotency_key, state, count(*) FROM wfe.runs
 WHERE workflow = 'submit-test' AND idempotency_key = 'key-1' GROUP BY 1, 2 ORDER BY 2;

--
-- Submit works in the caller's transaction: rolled back, it leaves nothing
--
BEGIN;
SELECT run_id AS rb, accepted FROM wfe.submit('submit-test', :'ok_ctx', 'key-rb') \gset
SELECT state, (SELECT count(*) FROM wfe.run_stages WHERE run_id = :rb) AS stages FROM wfe.runs WHERE run_id = :rb;
ROLLBACK;
SELECT (SELECT count(*) FROM wfe.runs WHERE run_id = :rb) AS runs,
       (SELECT count(*) FROM wfe.run_stages WHERE run_id = :rb) AS stages,
       (SELECT count(*) FROM wfe.events WHERE run_id = :rb) AS events,
       (SELECT count(*) FROM wfe.timers WHERE run_id = :rb) AS timers,
       (SELECT count(*) FROM wfe.outbox WHERE run_id = :rb) AS outbox,
       (SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'key-rb') AS keyed;
SELECT count(*) AS claimable FROM wfe.claim_task('rt-sb-work', 'w-sb');
-- the key is still free
SELECT run_id <> :rb AS new_run, accepted FROM wfe.submit('submit-test', :'ok_ctx', 'key-rb');
SELECT task.stage, wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence, '{}')
  FROM wfe.claim_task('rt-sb-work', 'w-sb') AS task;

--
-- Priority: claimers take the higher priority first
--
SELECT run_id AS low FROM wfe.submit('submit-test', '{"name": "low", "size": 1}') \gset
SELECT run_id AS high FROM wfe.submit('submit-test', '{"name": "high", "size": 1}', NULL, '{"priority": 10}') \gset
SELECT task.run_id = :high AS high_first, task.input ->> 'name' AS name
  FROM wfe.claim_task('rt-sb-work', 'w-sb') AS task;
SELECT task.run_id = :low AS then_low, task.input ->> 'name' AS name
  FROM wfe.claim_task('rt-sb-work', 'w-sb') AS task;
SELECT pg_temp.finish(:low, 'step', 'complete'), pg_temp.finish(:high, 'step', 'complete');

--
-- not_before delays the start until a tick finds it due
--
SELECT run_id AS nb, accepted FROM wfe.submit('submit-test', :'ok_ctx', NULL,
                                              jsonb_build_object('not_before', now() + interval '1 hour')) \gset
SELECT :'accepted' AS accepted;
SELECT * FROM pg_temp.run(:nb);
SELECT stage, state FROM pg_temp.stages(:nb);
SELECT kind, fired_at IS NULL AS pending FROM wfe.timers WHERE run_id = :nb;
SELECT type FROM wfe.events WHERE run_id = :nb ORDER BY event_id;
SELECT count(*) AS claimable FROM wfe.claim_task('rt-sb-work', 'w-sb');
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT stage, state FROM pg_temp.stages(:nb);
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE run_id = :nb AND kind = 'not_before';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT stage, state FROM pg_temp.stages(:nb);
SELECT type FROM wfe.events WHERE run_id = :nb ORDER BY event_id;
SELECT pg_temp.finish(:nb, 'step', 'complete');
-- a not_before in the past starts at once
SELECT run_id AS nb2 FROM wfe.submit('submit-test', :'ok_ctx', NULL,
                                     jsonb_build_object('not_before', now() - interval '1 minute')) \gset
SELECT stage, state FROM pg_temp.stages(:nb2);
SELECT count(*) AS timers FROM wfe.timers WHERE run_id = :nb2;
SELECT pg_temp.finish(:nb2, 'step', 'complete');

--
-- run_deadline_ms: the run fails when a tick finds the deadline passed
--
SELECT run_id AS dl FROM wfe.submit('submit-test', :'ok_ctx', NULL, '{"run_deadline_ms": 60000}') \gset
SELECT kind, fired_at IS NULL AS pending,
       due_at = (SELECT deadline_at FROM wfe.runs WHERE run_id = :dl) AS at_run_deadline,
       due_at - (SELECT submitted_at FROM wfe.runs WHERE run_id = :dl) = interval '60 s' AS one_minute_after
  FROM wfe.timers WHERE run_id = :dl;
SELECT task.stage, task.attempt, task.fence FROM wfe.claim_task('rt-sb-work', 'w-sb') AS task \gset dl_
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE run_id = :dl AND kind = 'run_deadline';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT * FROM pg_temp.run(:dl);
SELECT stage, state, attempt, skip_reason, error FROM pg_temp.stages(:dl);
SELECT type FROM wfe.events WHERE run_id = :dl AND type LIKE 'run.%' ORDER BY event_id;
-- the attempt that was running is fenced: its result is late
SELECT wfe.complete_task(:dl, :'dl_stage', :dl_attempt, :dl_fence, '{}');

--
-- Binding failures fail the stage at release, without retry, and follow
-- its on_failure (notify); the submit itself succeeds.
--
SELECT run_id AS bm, accepted FROM wfe.submit('submit-test', '{"size": 3}') \gset
SELECT :'accepted' AS accepted;
SELECT stage, state, attempt, error FROM pg_temp.stages(:bm);
SELECT error FROM wfe.run_stages WHERE run_id = :bm AND stage = 'step';
SELECT run_id AS bn FROM wfe.submit('submit-test', '{"name": null, "size": 3}') \gset
SELECT error FROM wfe.run_stages WHERE run_id = :bn AND stage = 'step';
SELECT run_id AS bt FROM wfe.submit('submit-test', '{"name": "n", "size": "large"}') \gset
SELECT error FROM wfe.run_stages WHERE run_id = :bt AND stage = 'step';
-- no retry timers, no dead letters; the failure route released notify
SELECT r.run_id IN (:bm, :bn, :bt) AS binding_run, s.state AS step, s.attempt,
       (SELECT count(*) FROM wfe.timers AS t WHERE t.run_id = r.run_id) AS timers,
       (SELECT count(*) FROM wfe.dead_letters AS d WHERE d.run_id = r.run_id) AS dead_letters,
       n.state AS notify, n.input AS notify_input
  FROM wfe.runs AS r
  JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = 'step'
  JOIN wfe.run_stages AS n ON n.run_id = r.run_id AND n.stage = 'notify'
 WHERE r.run_id IN (:bm, :bn, :bt) ORDER BY r.run_id;
SELECT type, detail ->> 'code' AS code FROM wfe.events WHERE run_id = :bm AND stage = 'step' ORDER BY event_id;
SELECT task.stage, wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence, '{}')
  FROM wfe.claim_task('rt-sb-notify', 'w-sb', 10) AS task;
SELECT * FROM pg_temp.run(:bt);
SELECT wfe.report(:bm) -> 'stages' -> 0 -> 'error' AS report_error;

-- context_schema is checked at submit by the one validator: a context that
-- breaks it is refused with 22023 naming the path and the keyword, and
-- nothing is created (no run, no stage, no event, no outbox row).
SELECT wfe.create_definition($yaml$
name: submit-typed
version: "1.0.0"
context_schema:
  type: object
  required: [name, size]
  additionalProperties: false
  properties:
    name: { type: string, pattern: "^[a-z]+$" }
    size: { type: integer, minimum: 1, maximum: 10 }
    ratio: { type: number, multipleOf: 0.1 }
entry: step
stages:
  - name: step
    type: worker
    queue: rt-sb-work
    worker: rt-sb.step@1
    input: { name: "${context.name}", size: "${context.size}" }
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('submit-typed', '1.0.0');
SELECT wfe.activate('submit-typed', '1.0.0');
SELECT (SELECT count(*) FROM wfe.runs) AS runs, (SELECT count(*) FROM wfe.run_stages) AS stages,
       (SELECT count(*) FROM wfe.events) AS events, (SELECT count(*) FROM wfe.outbox) AS outbox \gset before_
SELECT * FROM wfe.submit('submit-typed', '{"name": "ok", "size": 11}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-typed', '{"name": "Not-ok", "size": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-typed', '{"name": "ok"}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-typed', '{"name": "ok", "size": 2, "extra": true}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM wfe.submit('submit-typed', '{"name": "ok", "size": 2, "ratio": 0.35}');
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM wfe.runs) = :before_runs AS no_run,
       (SELECT count(*) FROM wfe.run_stages) = :before_stages AS no_stage,
       (SELECT count(*) FROM wfe.events) = :before_events AS no_event,
       (SELECT count(*) FROM wfe.outbox) = :before_outbox AS no_outbox;
-- a conforming context starts a run (2.0 is an integer; 0.3 a multiple of 0.1)
SELECT accepted FROM wfe.submit('submit-typed', '{"name": "ok", "size": 2.0, "ratio": 0.3}');
SELECT task.stage, wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence, '{}')
  FROM wfe.claim_task('rt-sb-work', 'w-sb', 10) AS task;

-- Nothing of this file is left to claim.
SELECT count(*) AS left_over FROM wfe.run_stages WHERE queue LIKE 'rt-sb-%' AND state = 'queued';
