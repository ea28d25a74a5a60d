--
-- Child workflows (runtime.md "Child runs"; dsl.md "Stages form: new
-- types"): the compiler sees the registered workflows (contract.unknown,
-- contract.input_type against the child's context_schema); a workflow
-- stage's attempt starts a child run in the parent's tenant with its
-- priority, linked both ways; the child's output is the stage's result;
-- a failed or cancelled child fails the attempt (child.failed,
-- child.cancelled) and a retry starts a new child; cancelling the parent
-- cancels its children; wfe.max_workflow_depth (limits.workflow_depth).
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-ch.pack@1', 'rt-ch-q');
CREATE FUNCTION pg_temp.diags(p_src text)
RETURNS TABLE (code text, path text, message text)
LANGUAGE sql AS $$
  SELECT d ->> 'code', d ->> 'path', d ->> 'message'
    FROM jsonb_array_elements(wfe.compile(p_src) -> 'diagnostics') AS d
$$;
-- claim the run's task on rt-ch-q and complete (or fail) it
CREATE FUNCTION pg_temp.work(p_run bigint, p_result jsonb, p_fail boolean DEFAULT false)
RETURNS text LANGUAGE sql AS $$
  SELECT CASE WHEN p_fail
              THEN wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "boom", "message": "no"}', false)
              ELSE wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result) END
    FROM wfe.claim_task('rt-ch-q', 'w1') AS t WHERE t.run_id = p_run
$$;
CREATE FUNCTION pg_temp.child_of(p_run bigint)
RETURNS bigint LANGUAGE sql AS $$
  SELECT max(run_id) FROM wfe.runs WHERE parent_run_id = p_run
$$;

-- The child: a reusable workflow with a context_schema and an output.
SELECT wfe.create_definition($yaml$
name: rt-ch-publish
version: "1.0.0"
context_schema:
  type: object
  required: [asset]
  properties: { asset: { type: string } }
entry: pack
output: { url: "${stages.pack.result.url}" }
stages:
  - name: pack
    type: worker
    worker: rt-ch.pack@1
    queue: rt-ch-q
    input: { asset: "${context.asset}" }
    retry: { max_attempts: 1 }
    on_success: completed
    on_failure: failed
$yaml$) IS NOT NULL AS created;

-- Compile time: a draft is no child; NAME needs an active version, NAME@VERSION an approved one.
SELECT * FROM pg_temp.diags($yaml$
name: rt-ch-bad
version: "1.0.0"
entry: a
stages:
  - {name: a, type: workflow, workflow: rt-ch-publish, on_success: b, on_failure: failed}
  - {name: b, type: workflow, workflow: rt-ch-publish@1.0.0, on_success: c, on_failure: failed}
  - {name: c, type: workflow, workflow: rt-ch-nosuch, on_success: completed, on_failure: failed}
$yaml$);
SELECT wfe.approve('rt-ch-publish', '1.0.0') IS NOT NULL AS approved;
SELECT * FROM pg_temp.diags($yaml$
name: rt-ch-bad
version: "1.0.0"
entry: a
stages:
  - {name: a, type: workflow, workflow: rt-ch-publish, input: {asset: "x"}, on_success: b, on_failure: failed}
  - {name: b, type: workflow, workflow: rt-ch-publish@1.0.0, input: {asset: "x"}, on_success: completed, on_failure: failed}
$yaml$);
SELECT wfe.activate('rt-ch-publish', '1.0.0') IS NOT NULL AS activated;
-- the child's input against its context_schema: a required key missing, a type that cannot be
SELECT * FROM pg_temp.diags($yaml$
name: rt-ch-bad
version: "1.0.0"
entry: a
stages:
  - {name: a, type: workflow, workflow: rt-ch-publish, input: {other: 1}, on_success: b, on_failure: failed}
  - {name: b, type: workflow, workflow: rt-ch-publish, input: {asset: 7}, on_success: completed, on_failure: failed}
$yaml$);
-- the registry the compiler sees: workflows beside contracts
SELECT e ->> 'ref' AS ref, e ->> 'kind' AS kind, e -> 'input_schema' -> 'required' AS required
  FROM jsonb_array_elements(wfe._contracts_json()) AS e WHERE e ->> 'ref' LIKE 'rt-ch%' ORDER BY 1, 2;

-- The parent: a workflow stage whose result the next stage and the output read.
SELECT wfe.create_definition($yaml$
name: rt-ch-parent
version: "1.0.0"
entry: publish
output: { url: "${stages.publish.result.url}" }
stages:
  - name: publish
    type: workflow
    workflow: rt-ch-publish
    input: { asset: "${context.asset}" }
    retry: { max_attempts: 2, initial_ms: 1, jitter: none }
    on_success: completed
    on_failure: failed
$yaml$) IS NOT NULL AS created;
SELECT wfe.approve('rt-ch-parent', '1.0.0') IS NOT NULL AS approved;
SELECT wfe.activate('rt-ch-parent', '1.0.0') IS NOT NULL AS activated;
SELECT stage, type, spec ->> 'workflow' AS workflow FROM wfe.plan_stages
 WHERE definition_id = (SELECT definition_id FROM wfe.definitions WHERE workflow = 'rt-ch-parent');

-- 1. The child's output is the parent's stage result.
SELECT run_id AS r1 FROM wfe.submit('rt-ch-parent', '{"asset": "a-1"}', NULL,
                                    '{"tenant": "default", "priority": 5}') \gset
SELECT stage, kind, state, attempt, queue FROM wfe.run_stages WHERE run_id = :r1 ORDER BY ordinal;
SELECT pg_temp.child_of(:r1) AS c1 \gset
SELECT workflow, version, tenant, priority, parent_run_id = :r1 AS linked, parent_stage, parent_attempt,
       context, trace_id = (SELECT trace_id FROM wfe.runs WHERE run_id = :r1) AS same_trace,
       trace_parent = (SELECT wfe._attempt_span_id(span_id, 'publish', 1) FROM wfe.runs WHERE run_id = :r1)
         AS span_child_of_attempt
  FROM wfe.runs WHERE run_id = :c1;
SELECT stage, state FROM wfe.run_stages WHERE run_id = :c1;
SELECT type, detail - 'version' AS detail FROM wfe.events WHERE run_id = :r1 AND stage = 'publish' ORDER BY event_id;
SELECT pg_temp.work(:c1, '{"url": "s3://a-1"}');
SELECT state, output FROM wfe.runs WHERE run_id = :c1;
-- the child's end reaches the parent through a child_ended timer, due at once
SELECT kind, stage, attempt, fired_at IS NULL AS pending FROM wfe.timers WHERE run_id = :r1 ORDER BY timer_id;
SELECT wfe.tick() >= 1 AS fired;
SELECT stage, state, result FROM wfe.run_stages WHERE run_id = :r1;
SELECT state, output FROM wfe.runs WHERE run_id = :r1;
SELECT type, detail ->> 'applied' AS applied, (detail ->> 'child_run_id')::bigint = :c1 AS child
  FROM wfe.events WHERE run_id = :r1 AND type = 'stage.child_ended';

-- 2. A failed child fails the attempt (child.failed); the retry starts a
--    new child; cancelling that child alone fails the attempt (child.cancelled).
SELECT run_id AS r2 FROM wfe.submit('rt-ch-parent', '{"asset": "a-2"}') \gset
SELECT pg_temp.child_of(:r2) AS c2 \gset
SELECT pg_temp.work(:c2, NULL, true);
SELECT state FROM wfe.runs WHERE run_id = :c2;
SELECT wfe.tick() >= 1 AS fired;
SELECT state, attempt, error ->> 'code' AS code, (error ->> 'child_run_id')::bigint = :c2 AS names_child
  FROM wfe.run_stages WHERE run_id = :r2;
SELECT pg_sleep(0.01);
SELECT wfe.tick() >= 1 AS fired;
SELECT pg_temp.child_of(:r2) AS c2b \gset
SELECT :c2b > :c2 AS new_child, parent_attempt FROM wfe.runs WHERE run_id = :c2b;
SELECT state, attempt FROM wfe.run_stages WHERE run_id = :r2;
SELECT wfe.cancel_run(:c2b, 'not this one');
SELECT wfe.tick() >= 1 AS fired;
SELECT state, attempt, error ->> 'code' AS code FROM wfe.run_stages WHERE run_id = :r2;
SELECT state, reason FROM wfe.runs WHERE run_id = :r2;
-- linked both ways: report's children and parent, the timeline's child per attempt, run_mermaid
SELECT jsonb_path_query_array(wfe.report(:r2) -> 'children', '$[*].attempt') AS attempts,
       jsonb_path_query_array(wfe.report(:r2) -> 'children', '$[*].state') AS states,
       jsonb_path_query_array(wfe.report(:r2) -> 'children', '$[*].workflow') AS workflows;
SELECT (wfe.report(:c2b) -> 'parent') - 'run_id' AS parent,
       (wfe.report(:c2b) -> 'parent' ->> 'run_id')::bigint = :r2 AS linked,
       wfe.report(:r2) -> 'parent' AS parent_of_parent;
SELECT stage, attempt, outcome, child_run_id = :c2 AS first_child, child_run_id = :c2b AS second_child
  FROM wfe.run_timeline(:r2) ORDER BY attempt;
-- the child's timeline starts with its parent's stage and attempt (and no span for that row)
SELECT stage, attempt, replace(outcome, :'r2', 'R2') AS outcome, t.finished_at IS NOT DISTINCT FROM r.finished_at AS whole_life,
       child_run_id
  FROM wfe.run_timeline(:c2b) AS t, wfe.runs AS r WHERE r.run_id = :c2b;
SELECT count(*) AS attempt_spans
  FROM jsonb_path_query(wfe.run_spans(:c2b), '$.resourceSpans[0].scopeSpans[0].spans[*] ? (@.name starts with "wfe.attempt")');
-- spans (wfe.run_spans): the parent's attempt span names its child; the child's run span is its child
SELECT sp ->> 'name' AS span, sp -> 'attributes' @> jsonb_build_array(jsonb_build_object('key', 'wfe.child_run_id',
         'value', jsonb_build_object('intValue', :c2b::text))) AS names_child
  FROM jsonb_path_query(wfe.run_spans(:r2), '$.resourceSpans[0].scopeSpans[0].spans[*]') AS sp;
SELECT (SELECT sp ->> 'parentSpanId' FROM jsonb_path_query(wfe.run_spans(:c2b), '$.resourceSpans[0].scopeSpans[0].spans[0]') AS sp)
     = wfe._attempt_span_id(r.span_id, 'publish', 2) AS child_span_under_attempt
  FROM wfe.runs AS r WHERE r.run_id = :r2;
SELECT regexp_replace(l, 'run \d+', 'run N') AS line
  FROM regexp_split_to_table(wfe.run_mermaid(:r2), E'\n') AS l WHERE l LIKE '%child run%';

-- 3. Cancelling the parent cancels its live child, in the same transaction.
SELECT run_id AS r3 FROM wfe.submit('rt-ch-parent', '{"asset": "a-3"}') \gset
SELECT pg_temp.child_of(:r3) AS c3 \gset
SELECT wfe.cancel_run(:r3, 'stop all');
SELECT run_id = :r3 AS parent, state, reason FROM wfe.runs WHERE run_id IN (:r3, :c3) ORDER BY run_id;
SELECT stage, state FROM wfe.run_stages WHERE run_id = :c3;
-- the cancelled child's end is late for its parent: recorded, never applied
SELECT wfe.tick() >= 0 AS ticked;
SELECT type, detail ->> 'applied' AS applied FROM wfe.events WHERE run_id = :r3 AND type = 'stage.child_ended';
SELECT stage, state FROM wfe.run_stages WHERE run_id = :r3;

-- 4. A context the child's context_schema refuses at run time: a binding failure.
SELECT run_id AS r4 FROM wfe.submit('rt-ch-parent', '{"asset": 42}') \gset
SELECT stage, state, error ->> 'code' AS code, error ->> 'message' AS message FROM wfe.run_stages WHERE run_id = :r4;
SELECT count(*) AS children FROM wfe.runs WHERE parent_run_id = :r4;

-- 5. Depth: a workflow that calls itself stops at wfe.max_workflow_depth.
SELECT wfe.create_definition($yaml$
name: rt-ch-rec
version: "1.0.0"
entry: a
stages:
  - {name: a, type: worker, worker: rt-ch.pack@1, queue: rt-ch-q, on_success: completed, on_failure: failed}
$yaml$) IS NOT NULL AS created;
SELECT wfe.approve('rt-ch-rec', '1.0.0') IS NOT NULL, wfe.activate('rt-ch-rec', '1.0.0') IS NOT NULL;
SELECT wfe.create_definition($yaml$
name: rt-ch-rec
version: "2.0.0"
entry: deeper
stages:
  - {name: deeper, type: workflow, workflow: rt-ch-rec, retry: {max_attempts: 1}, on_success: completed, on_failure: failed}
$yaml$) IS NOT NULL AS created;
SELECT wfe.approve('rt-ch-rec', '2.0.0') IS NOT NULL, wfe.activate('rt-ch-rec', '2.0.0') IS NOT NULL;
SET wfe.max_workflow_depth = 2;
SELECT run_id AS r5 FROM wfe.submit('rt-ch-rec') \gset
WITH RECURSIVE down (run_id, depth) AS (
  SELECT :r5::bigint, 0
  UNION ALL SELECT r.run_id, d.depth + 1 FROM wfe.runs r JOIN down d ON r.parent_run_id = d.run_id)
SELECT d.depth, st.state, st.error ->> 'code' AS code, st.error ->> 'message' AS message
  FROM down d JOIN wfe.run_stages st ON st.run_id = d.run_id ORDER BY d.depth;
-- the deepest child failed; its end fails each parent in turn, one timer each
SELECT wfe.tick() >= 1 AS fired;
SELECT wfe.tick() >= 1 AS fired;
SELECT state FROM wfe.runs WHERE run_id = :r5;
RESET wfe.max_workflow_depth;
SELECT name, setting, min_val, max_val FROM pg_settings WHERE name = 'wfe.max_workflow_depth';

-- 6. Transitions: a retry of a workflow stage is running again at once (a new child).
SELECT * FROM wfe.stage_transitions() WHERE meaning LIKE '%workflow%' OR meaning LIKE '%child%' ORDER BY 1, 2;
