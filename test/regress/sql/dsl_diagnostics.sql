-- Every diagnostic code of the compiler, each triggered by a small definition,
-- with the line, column and path it points at.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;

-- One row per diagnostic: code, position, path, message.
CREATE FUNCTION pg_temp.diags(src text, contracts jsonb DEFAULT NULL)
RETURNS TABLE (code text, pos text, path text, message text)
LANGUAGE sql AS $$
  SELECT d->>'code', (d->>'line') || ':' || (d->>'column'), d->>'path', d->>'message'
    FROM jsonb_array_elements(wfe._compile(src, contracts)->'diagnostics') AS d
$$;

-- A registry for the contracts layer.
CREATE TEMP TABLE registry AS SELECT '[
  {"ref": "w.run@1", "kind": "worker", "queue": "q", "handler": false,
   "input_schema": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
   "output_schema": {}},
  {"ref": "a.run@1", "kind": "action", "queue": "q", "handler": false,
   "input_schema": {}, "output_schema": {}}
]'::jsonb AS contracts;

-- A valid baseline: no diagnostics, ok.
SELECT r->'ok' AS ok, r->'diagnostics' AS diagnostics
  FROM wfe._compile($$
name: t
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    input: { id: "${context.id}" }
    on_success: completed
    on_failure: failed
$$, (SELECT contracts FROM registry)) AS r;

-- yaml.syntax
SELECT * FROM pg_temp.diags($$
name: [t
$$);

-- yaml.alias_forbidden: anchors and aliases alike
SELECT * FROM pg_temp.diags($$
name: &n t
version: *n
$$);

-- yaml.depth: nesting over 64 levels
SELECT * FROM pg_temp.diags('name: ' || repeat('[', 100) || repeat(']', 100));

-- yaml.too_large: over wfe.max_definition_bytes
SET wfe.max_definition_bytes = 1024;
SELECT * FROM pg_temp.diags('name: t' || E'\n# ' || repeat('x', 2000));
RESET wfe.max_definition_bytes;

-- yaml.scalar_too_large: one scalar over 64 KiB
SELECT * FROM pg_temp.diags('name: t' || E'\ndescription: ' || repeat('x', 70000));

-- yaml.multiple_documents
SELECT * FROM pg_temp.diags($$
name: t
---
name: u
$$);

-- yaml.duplicate_key
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
name: u
$$);

-- schema.required: no version; a worker stage without its queue
SELECT * FROM pg_temp.diags($$
name: t
entry: a
stages:
  - name: a
    type: worker
    worker: w.run@1
    on_success: completed
    on_failure: failed
$$);

-- schema.unknown_key: an action's queue is its contract's, not the stage's
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - name: a
    type: action
    action: a.run@1
    queue: q
    on_success: completed
    on_failure: failed
$$);

-- schema.type: retry is a mapping; a version that YAML reads as a number;
-- an unknown tag
SELECT * FROM pg_temp.diags($$
name: t
version: 1.0
description: !!binary aGVsbG8=
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    retry: 3
    on_success: completed
    on_failure: failed
$$);

-- schema.value: a bad jitter, a bad name, an unsupported terminal policy
SELECT * FROM pg_temp.diags($$
name: T!
version: "1.0.0"
entry: a
terminal_policy:
  late_callbacks: accept
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    retry: { jitter: sometimes }
    on_success: completed
    on_failure: failed
$$);

-- schema.form: both stages and tasks
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
stages: []
tasks: []
$$);

-- limits.stages: more stages than wfe.max_stages
SET wfe.max_stages = 2;
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: b, on_failure: failed }
  - { name: b, type: worker, queue: q, worker: w.run@1, on_success: c, on_failure: failed }
  - { name: c, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);
RESET wfe.max_stages;

-- limits.fanout: a fork wider than wfe.max_fanout
SET wfe.max_fanout = 2;
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: f
stages:
  - { name: f, type: fork, branches: [a, b, c] }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: j, on_failure: failed }
  - { name: b, type: worker, queue: q, worker: w.run@1, on_success: j, on_failure: failed }
  - { name: c, type: worker, queue: q, worker: w.run@1, on_success: j, on_failure: failed }
  - { name: j, type: join, required: [a, b, c], on_success: completed, on_failure: failed }
$$);
RESET wfe.max_fanout;

-- limits.retries and limits.deadline
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    retry: { max_attempts: 1000 }
    execution_deadline_ms: 99999999999
    on_success: completed
    on_failure: failed
$$);

-- graph.duplicate_name
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.unresolved_ref: in a success route and in a failure route
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: nowhere, on_failure: cleanup }
$$);

-- graph.entry_missing
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: start
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.unreachable
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
  - { name: orphan, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.cycle: through a failure route, not only success routes
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: b, on_failure: failed }
  - { name: b, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: a }
$$);

-- graph.no_fallback
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: "context.n > 1", next: a }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.fallback_not_last
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: "true", next: a }
      - { when: "context.n > 1", next: b }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
  - { name: b, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.fork_malformed: one branch, and no join for it
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: f
stages:
  - { name: f, type: fork, branches: [a] }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.join_mismatch: the join forgets a branch that reaches it
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: f
stages:
  - { name: f, type: fork, branches: [a, b] }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: j, on_failure: failed }
  - { name: b, type: worker, queue: q, worker: w.run@1, on_success: j, on_failure: failed }
  - { name: j, type: join, required: [a], on_success: completed, on_failure: failed }
$$);

-- graph.terminal_undeclared
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
terminals: [completed]
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- graph.output_not_in_lineage: a sibling is not an ancestor; a key never produced
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
tasks:
  - id: root
    worker: w.run@1
    queue: q
  - id: left
    worker: w.run@1
    queue: q
    depends_on: [root]
    produces: [{ key: token, type: string }]
  - id: right
    worker: w.run@1
    queue: q
    depends_on: [root]
    requires_outputs:
      - { producer_task_id: left, key: token }
      - { producer_task_id: root, key: nothing }
$$);

-- graph.ref_not_in_lineage: a decision reads a stage that runs after it
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: 'stages["a"].result.ok == true', next: a }
      - { when: "true", next: completed }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- contract.unknown, contract.disallowed, contract.queue_mismatch,
-- contract.input_type (a number where a string is wanted; a required key missing)
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
finalisers: [w.run@1]
stages:
  - { name: a, type: worker, queue: q, worker: nobody.home@1, on_success: b, on_failure: failed }
  - { name: b, type: action, action: w.run@1, on_success: c, on_failure: failed }
  - { name: c, type: worker, queue: other, worker: w.run@1, input: { id: "x" }, on_success: d, on_failure: failed }
  - { name: d, type: worker, queue: q, worker: w.run@1, input: { id: 42 }, on_success: e, on_failure: failed }
  - { name: e, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$, (SELECT contracts FROM registry));

-- contract.input_type through the context schema: context.n is an integer
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
context_schema:
  type: object
  properties: { n: { type: integer } }
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.n}" }, on_success: completed, on_failure: failed }
$$, (SELECT contracts FROM registry));

-- expr.syntax: in a when clause, and in an interpolation
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: "context.n ===", next: a }
      - { when: "true", next: a }
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { v: "${context.n + 1}", w: "${context.x" }, on_success: completed, on_failure: failed }
$$);

-- expr.too_large: over wfe.max_expression_bytes
SELECT * FROM pg_temp.diags(format($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: "%s", next: a }
      - { when: "true", next: a }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$, 'context.n == 1' || repeat(' || context.n == 1', 300)));

-- expr.unknown_root: not a root at all; outputs in the stages form
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: "secrets.key == 1", next: a }
      - { when: "true", next: a }
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { v: "${outputs.x.y}" }, on_success: completed, on_failure: failed }
$$);

-- expr.type: arithmetic on a string literal
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: d
stages:
  - name: d
    type: decision
    on_evaluation_error: failed
    branches:
      - { when: '"abc" - 1 > 0', next: a }
      - { when: "true", next: a }
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- All diagnostics are reported, not just the first: four independent mistakes.
SELECT * FROM pg_temp.diags($$
name: t
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, on_success: b, on_failure: failed, colour: blue }
  - { name: b, type: worker, queue: q, worker: w.run@1, retry: { jitter: maybe }, on_success: nowhere, on_failure: failed }
  - { name: c, type: worker, queue: q, worker: w.run@1, on_success: completed, on_failure: failed }
$$);

-- Not YAML at all: binary junk is a syntax error, not a crash.
SELECT * FROM pg_temp.diags(convert_from('\x48656c6c6f0a0b0c3a5b7b'::bytea, 'SQL_ASCII'));

-- An empty document, and a document that is not a mapping.
SELECT * FROM pg_temp.diags('');
SELECT * FROM pg_temp.diags('- just\n- a list');
