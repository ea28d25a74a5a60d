--
-- Seed 000's model-ingest workflow, run to the end along each route
-- (runtime.md "Semantics that the seeds insist on"): a cache hit publishes
-- directly, a miss renders, forks, joins and publishes; a branch failure
-- sets the failed intent and fences the sibling; a failing finaliser turns
-- a completed intent into a failed run; a decision that cannot be
-- evaluated follows on_evaluation_error.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- The example's contracts under this file's own names and queues.  The
-- cache's output schema leaves "hit" optional, so that a result without it
-- can show a decision evaluation error.
SELECT wfe.register_action('rt-mi.cache.lookup@1', queue => 'rt-mi-actions',
  input_schema => '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}',
  output_schema => '{"type":"object","properties":{"hit":{"type":"boolean"}}}');
SELECT wfe.register_action('rt-mi.catalogue.publish@2', queue => 'rt-mi-actions',
  input_schema => '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_action('rt-mi.audit.run-terminal@1', queue => 'rt-mi-audit');
SELECT wfe.register_worker('rt-mi.thumbnail.render@3', 'rt-mi-rendering',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_worker('rt-mi.semantic.analyse@4', 'rt-mi-analysis',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_worker('rt-mi.metadata.extract@2', 'rt-mi-metadata',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');

-- examples/model-ingest.yaml, renamed, with those contracts.
SELECT wfe.create_definition($yaml$
name: ingest-test
version: "2.3.0"
entry: cache-lookup
stages:
  - name: cache-lookup
    type: action
    action: rt-mi.cache.lookup@1
    input: { modelId: "${context.modelId}" }
    on_success: cache-route
    on_failure: failed
  - name: cache-route
    type: decision
    on_evaluation_error: failed
    branches:
      - when: 'stages["cache-lookup"].result.hit == true'
        next: publish
      - when: "true" # required fallback
        next: render-thumbnail
  - name: render-thumbnail
    type: worker
    queue: rt-mi-rendering
    worker: rt-mi.thumbnail.render@3
    input: { modelId: "${context.modelId}" }
    execution_deadline_ms: 300000
    on_success: derive-fork
    on_failure: failed
  - name: derive-fork
    type: fork
    branches: [semantic-analysis, technical-metadata]
  - name: semantic-analysis
    type: worker
    queue: rt-mi-analysis
    worker: rt-mi.semantic.analyse@4
    input: { modelId: "${context.modelId}" }
    on_success: derive-join
    on_failure: failed
  - name: technical-metadata
    type: worker
    queue: rt-mi-metadata
    worker: rt-mi.metadata.extract@2
    input: { modelId: "${context.modelId}" }
    on_success: derive-join
    on_failure: failed
  - name: derive-join
    type: join
    required: [semantic-analysis, technical-metadata]
    acceptable_terminal_states: [completed]
    on_success: publish
    on_failure: failed
  - name: publish
    type: action
    action: rt-mi.catalogue.publish@2
    input: { modelId: "${context.modelId}" }
    on_success: completed
    on_failure: failed
terminal_policy:
  fork_branch_failure: request-cancellation-and-fence
  late_callbacks: reject-and-record
  finalisers: declared-order
  finaliser_failure_terminal: failed
finalisers: [rt-mi.audit.run-terminal@1]
terminals: [completed, failed]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('ingest-test', '2.3.0');
SELECT wfe.activate('ingest-test', '2.3.0');

-- Claim one task of a queue and complete it with a result (the input is
-- shown without run_id, which depends on what ran before).
CREATE FUNCTION pg_temp.work(p_queue text, p_result jsonb DEFAULT '{}')
RETURNS TABLE (stage text, attempt int, input jsonb, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task(p_queue, 'w-mi') LOOP
        stage := t.stage;
        attempt := t.attempt;
        input := t.input - 'run_id';
        outcome := wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result);
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, kind text, state text, attempt int, skip_reason text, error text)
LANGUAGE sql AS $$
SELECT s.stage, s.kind, s.state, s.attempt, s.skip_reason, s.error ->> 'code'
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.run(p_run bigint)
RETURNS TABLE (state text, intent text, reason text, finished boolean)
LANGUAGE sql AS $$
SELECT r.state, r.intent, r.reason, r.finished_at IS NOT NULL FROM wfe.runs AS r WHERE r.run_id = p_run
$$;
-- The run's history: event types in order (with the stage they concern).
-- Skips are one statement's rows, in no particular order: they are shown
-- as one line, stages sorted.
CREATE FUNCTION pg_temp.history(p_run bigint)
RETURNS TABLE (stage text, attempt int, type text)
LANGUAGE sql AS $$
SELECT h.stage, h.attempt, h.type
  FROM (SELECT min(e.event_id) AS id,
               CASE WHEN e.type = 'stage.skipped' THEN string_agg(e.stage, ' ' ORDER BY e.stage) ELSE min(e.stage) END,
               min(e.attempt), e.type
          FROM wfe.events AS e WHERE e.run_id = p_run
         GROUP BY e.type, CASE WHEN e.type = 'stage.skipped' THEN -1 ELSE e.event_id END) AS h(id, stage, attempt, type)
 ORDER BY h.id
$$;
-- How many tasks are ready in each of this file's queues.
CREATE FUNCTION pg_temp.ready()
RETURNS TABLE (queue text, ready bigint)
LANGUAGE sql AS $$
SELECT q.queue, (SELECT count(*) FROM wfe.run_stages AS s WHERE s.queue = q.queue AND s.state = 'queued')
  FROM unnest(ARRAY['rt-mi-actions', 'rt-mi-rendering', 'rt-mi-analysis', 'rt-mi-metadata', 'rt-mi-audit']) AS q(queue)
$$;

--
-- Route 1: cache hit.  The decision goes straight to publish; render, fork,
-- both branches and the join are skipped (branch_not_taken); publish is not.
--
SELECT run_id AS hit FROM wfe.submit('ingest-test', '{"modelId": "m-1"}') \gset
SELECT * FROM pg_temp.work('rt-mi-actions', '{"hit": true}');
SELECT * FROM pg_temp.stages(:hit);
SELECT result FROM wfe.run_stages WHERE run_id = :hit AND stage = 'cache-route';
SELECT * FROM pg_temp.ready();
SELECT * FROM pg_temp.work('rt-mi-actions', '{"published": true}');
SELECT * FROM pg_temp.run(:hit);
-- the finaliser's input: run identity, intent and every stage's state
SELECT task.stage, task.worker, task.input - 'run_id' AS input, (task.input ->> 'run_id')::bigint = :hit AS own_run,
       task.fence
  FROM wfe.claim_task('rt-mi-audit', 'w-audit') AS task \gset fin_
SELECT :'fin_stage' AS stage, :'fin_worker' AS worker, :'fin_own_run' AS own_run;
SELECT jsonb_pretty(:'fin_input'::jsonb);
SELECT wfe.complete_task(:hit, 'finaliser.1', 1, :fin_fence, '{}');
SELECT * FROM pg_temp.run(:hit);
SELECT * FROM pg_temp.history(:hit);

--
-- Route 2: cache miss.  Render, fork, both branches, join, publish.
--
SELECT run_id AS miss FROM wfe.submit('ingest-test', '{"modelId": "m-2"}') \gset
SELECT * FROM pg_temp.work('rt-mi-actions', '{"hit": false}');
SELECT * FROM pg_temp.stages(:miss);
SELECT * FROM pg_temp.work('rt-mi-rendering', '{"thumbnail": "s3://t/m-2.png"}');
-- the fork records the branches it released
SELECT state, result FROM wfe.run_stages WHERE run_id = :miss AND stage = 'derive-fork';
SELECT * FROM pg_temp.ready();
-- one branch arrives: the join persists it and keeps waiting
SELECT * FROM pg_temp.work('rt-mi-analysis', '{"tags": ["chair"]}');
SELECT stage, state, result FROM wfe.run_stages WHERE run_id = :miss AND stage IN ('derive-join', 'publish') ORDER BY ordinal;
-- the other arrives: the join is satisfied and releases publish, once
SELECT * FROM pg_temp.work('rt-mi-metadata', '{"vertices": 1024}');
SELECT stage, state, result FROM wfe.run_stages WHERE run_id = :miss AND stage IN ('derive-join', 'publish') ORDER BY ordinal;
SELECT count(*) AS publish_released FROM wfe.events WHERE run_id = :miss AND stage = 'publish' AND type = 'stage.released';
SELECT * FROM pg_temp.work('rt-mi-actions', '{"published": true}');
SELECT * FROM pg_temp.work('rt-mi-audit');
SELECT * FROM pg_temp.stages(:miss);
SELECT * FROM pg_temp.run(:miss);

--
-- Route 3: a fork branch fails.  The metadata queue delivers through the
-- broker here, so the sibling's cancellation request is a control message.
--
INSERT INTO wfe.queues (queue, delivery) VALUES ('rt-mi-metadata', 'broker');
SELECT run_id AS bf FROM wfe.submit('ingest-test', '{"modelId": "m-3"}') \gset
SELECT * FROM pg_temp.work('rt-mi-actions', '{"hit": false}');
SELECT * FROM pg_temp.work('rt-mi-rendering', '{}');
-- technical-metadata was dispatched through the outbox; its worker accepts it
-- (the envelope carries the attempt's fence: generation shown)
SELECT kind, stage, attempt, fence >> 32 AS fence_gen, (body ->> 'fence')::bigint = fence AS envelope_fence,
       routing_key, body ->> 'worker' AS worker, body -> 'payload_inline' AS payload
  FROM wfe.outbox WHERE run_id = :bf ORDER BY id;
SELECT fence AS tm_fence FROM wfe.outbox WHERE run_id = :bf AND kind = 'dispatch' AND stage = 'technical-metadata' \gset
SELECT wfe.accept_task(:bf, 'technical-metadata', 1, :tm_fence, 'w-broker');
-- semantic-analysis fails for good: the failed intent is set at once
SELECT task.stage, wfe.fail_task(task.run_id, task.stage, task.attempt, task.fence,
                                 '{"code": "model.corrupt"}', retryable => false)
  FROM wfe.claim_task('rt-mi-analysis', 'w-mi') AS task;
SELECT * FROM pg_temp.run(:bf);
SELECT * FROM pg_temp.stages(:bf);
-- the sibling is fenced and asked to stop (recorded, and a cancel message)
-- (a new fence, the next generation; the event -- in its fence column, never
-- its detail -- and the cancel message name the fence of the attempt asked
-- to stop)
SELECT stage, attempt, fence >> 32 AS fence_gen, fence > :tm_fence AS new_fence
  FROM wfe.run_stages WHERE run_id = :bf AND stage = 'technical-metadata';
SELECT e.stage, e.attempt, e.detail, e.fence = :tm_fence AS cancelled_fence
  FROM wfe.events AS e
 WHERE e.run_id = :bf AND e.type = 'stage.cancelled';
SELECT o.kind, o.stage, o.attempt, o.fence >> 32 AS fence_gen, o.fence = s.fence AS new_fence, o.routing_key,
       o.body - 'reason' - 'run_id' - 'fence' AS body, (o.body ->> 'fence')::bigint = :tm_fence AS body_fence
  FROM wfe.outbox AS o JOIN wfe.run_stages AS s USING (run_id, stage)
 WHERE o.run_id = :bf AND o.kind = 'cancel';
-- its later callbacks are late, and change nothing
SELECT wfe.heartbeat(:bf, 'technical-metadata', 1, :tm_fence);
SELECT wfe.complete_task(:bf, 'technical-metadata', 1, :tm_fence, '{"vertices": 7}');
SELECT state, result FROM wfe.run_stages WHERE run_id = :bf AND stage = 'technical-metadata';
-- nothing else is released; the finaliser still runs, told the intent
SELECT * FROM pg_temp.ready();
SELECT task.stage, task.input -> 'intent' AS intent, task.input -> 'stages' AS stages, task.fence
  FROM wfe.claim_task('rt-mi-audit', 'w-audit') AS task \gset fin_
SELECT :'fin_stage' AS stage, :'fin_intent' AS intent;
SELECT jsonb_pretty(:'fin_stages'::jsonb);
SELECT wfe.complete_task(:bf, 'finaliser.1', 1, :fin_fence, '{}');
SELECT * FROM pg_temp.run(:bf);
SELECT wfe.report(:bf) -> 'late_callbacks' AS late_callbacks;
SELECT * FROM pg_temp.history(:bf);
DELETE FROM wfe.queues WHERE queue = 'rt-mi-metadata';

--
-- A finaliser failure turns a completed intent into a failed run.  The
-- finaliser runs with the default retry policy: a retryable failure is retried.
--
SELECT run_id AS ff FROM wfe.submit('ingest-test', '{"modelId": "m-4"}') \gset
SELECT * FROM pg_temp.work('rt-mi-actions', '{"hit": true}');
SELECT * FROM pg_temp.work('rt-mi-actions', '{}');
SELECT * FROM pg_temp.run(:ff);
SELECT wfe.fail_task(task.run_id, task.stage, task.attempt, task.fence, '{"code": "audit.unavailable"}')
  FROM wfe.claim_task('rt-mi-audit', 'w-audit') AS task;
SELECT stage, state, attempt FROM wfe.run_stages WHERE run_id = :ff AND stage = 'finaliser.1';
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE run_id = :ff AND kind = 'retry';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT stage, state, attempt, fence >> 32 AS fence_gen FROM wfe.run_stages WHERE run_id = :ff AND stage = 'finaliser.1';
SELECT task.stage, task.attempt, wfe.fail_task(task.run_id, task.stage, task.attempt, task.fence,
                                               '{"code": "audit.rejected"}', retryable => false)
  FROM wfe.claim_task('rt-mi-audit', 'w-audit') AS task;
SELECT * FROM pg_temp.run(:ff);
SELECT * FROM pg_temp.stages(:ff);
SELECT s ->> 'stage' AS stage, s ->> 'status' AS status, s -> 'attempts' AS attempts, s -> 'error' AS error
  FROM jsonb_array_elements(wfe.report(:ff) -> 'stages') AS s WHERE s ->> 'stage' = 'finaliser.1';

--
-- A decision that cannot be evaluated (the result has no "hit") follows
-- on_evaluation_error: here the failed intent.
--
SELECT run_id AS ee FROM wfe.submit('ingest-test', '{"modelId": "m-5"}') \gset
SELECT * FROM pg_temp.work('rt-mi-actions', '{}');
SELECT * FROM pg_temp.stages(:ee);
SELECT error ->> 'code' AS code, error ->> 'message' AS message
  FROM wfe.run_stages WHERE run_id = :ee AND stage = 'cache-route';
SELECT detail ->> 'next' AS next FROM wfe.events WHERE run_id = :ee AND type = 'stage.evaluation_error';
SELECT * FROM pg_temp.work('rt-mi-audit');
SELECT * FROM pg_temp.run(:ee);

-- Nothing of this file is left to claim.
SELECT * FROM pg_temp.ready();
