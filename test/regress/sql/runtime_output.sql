--
-- Run output (dsl.md "Run output"): the top-level `output:` template is
-- checked at compile time, bound when the run reaches a completed intent
-- and shown as wfe.report(run_id)->'output'; a binding failure there fails
-- the run with the binding.* error recorded; without `output:` a stages-form
-- run's output is {} and a tasks-form run's is its outputs map.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-out.render@1', 'rt-out-q');
CREATE FUNCTION pg_temp.diags(p_src text)
RETURNS TABLE (code text, path text, message text)
LANGUAGE sql AS $$
  SELECT d ->> 'code', d ->> 'path', d ->> 'message'
    FROM jsonb_array_elements(wfe.compile(p_src) -> 'diagnostics') AS d
$$;

-- Compile-time: a mapping, whose references resolve to something with a result.
SELECT * FROM pg_temp.diags($yaml$
name: out-bad
version: "1.0.0"
entry: a
output: [1, 2]
stages:
  - {name: a, type: worker, worker: rt-out.render@1, queue: rt-out-q, on_success: completed, on_failure: failed}
$yaml$);
SELECT * FROM pg_temp.diags($yaml$
name: out-bad
version: "1.0.0"
entry: a
output:
  x: "${stages.nosuch.result}"
  y: "${stages.d.result}"
  z: "${nosuchroot.a}"
stages:
  - {name: a, type: worker, worker: rt-out.render@1, queue: rt-out-q, on_success: d, on_failure: failed}
  - name: d
    type: decision
    branches: [{when: "true", next: completed}]
    on_evaluation_error: failed
$yaml$);
SELECT * FROM pg_temp.diags($yaml$
name: out-bad-tasks
version: "1.0.0"
output: {x: "${outputs.a.nope}"}
tasks:
  - id: a
    worker: rt-out.render@1
    queue: rt-out-q
    produces: [{key: url, type: string}]
$yaml$);

SELECT wfe.create_definition($yaml$
name: out-flow
version: "1.0.0"
entry: render
output:
  url: "${stages.render.result.url}"
  model: "${context.model}"
  label: "model ${context.model} by run ${run.workflow}"
stages:
  - name: render
    type: worker
    worker: rt-out.render@1
    queue: rt-out-q
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('out-flow', '1.0.0');
SELECT wfe.activate('out-flow', '1.0.0');

CREATE FUNCTION pg_temp.finish(p_run bigint, p_result jsonb)
RETURNS text LANGUAGE sql AS $$
  SELECT wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result)
    FROM wfe.claim_task('rt-out-q', 'w1') AS t WHERE t.run_id = p_run
$$;

-- Bound at the completed intent.
SELECT run_id AS r1 FROM wfe.submit('out-flow', '{"model": "teapot"}') \gset
SELECT wfe.report(:r1) -> 'output' AS before_the_end;
SELECT pg_temp.finish(:r1, '{"url": "s3://b/teapot.glb"}');
SELECT wfe.report(:r1) -> 'state' AS state, wfe.report(:r1) -> 'output' AS output;

-- A binding failure fails the run, the binding.* error recorded.
SELECT run_id AS r2 FROM wfe.submit('out-flow', '{"model": "teapot"}') \gset
SELECT pg_temp.finish(:r2, '{"size": 3}');
SELECT state, intent, reason, output FROM wfe.runs WHERE run_id = :r2;
SELECT type, detail FROM wfe.events WHERE run_id = :r2 AND type IN ('run.output_failed', 'run.intent') ORDER BY event_id;

-- Defaults: {} for the stages form...
SELECT wfe.create_definition($yaml$
name: out-plain
version: "1.0.0"
entry: render
stages:
  - {name: render, type: worker, worker: rt-out.render@1, queue: rt-out-q, on_success: completed, on_failure: failed}
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('out-plain', '1.0.0');
SELECT wfe.activate('out-plain', '1.0.0');
SELECT run_id AS r3 FROM wfe.submit('out-plain', '{}') \gset
SELECT pg_temp.finish(:r3, '{"url": "x"}');
SELECT wfe.report(:r3) -> 'output' AS output;
-- ...and the outputs map for the tasks form; a failed run has none.
SELECT wfe.create_definition($yaml$
name: out-tasks
version: "1.0.0"
tasks:
  - id: render
    worker: rt-out.render@1
    queue: rt-out-q
    produces: [{key: url, type: string}]
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('out-tasks', '1.0.0');
SELECT wfe.activate('out-tasks', '1.0.0');
SELECT run_id AS r4 FROM wfe.submit('out-tasks', '{}') \gset
SELECT pg_temp.finish(:r4, '{"url": "s3://b/x.glb"}');
SELECT state, output FROM wfe.runs WHERE run_id = :r4;
SELECT run_id AS r5 FROM wfe.submit('out-tasks', '{}') \gset
SELECT t.stage, wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "boom", "message": "no"}', false)
  FROM wfe.claim_task('rt-out-q', 'w1') AS t WHERE t.run_id = :r5;
SELECT state, output FROM wfe.runs WHERE run_id = :r5;
