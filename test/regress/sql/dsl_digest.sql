-- Digest stability: comments, key order, quoting, white space and YAML style
-- do not change a plan's digest; every change of meaning does.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;

CREATE TEMP TABLE variant (label text, same_meaning boolean, source text);

INSERT INTO variant VALUES
('base', true, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    input: { id: "${context.id}", n: 2 }
    on_success: completed
    on_failure: failed
$y$),
('comments and blank lines', true, $y$
# a comment at the top

name: d   # the name
version: "1.0.0"
entry: a
stages:
  # the only stage
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    input: { id: "${context.id}", n: 2 }
    on_success: completed
    on_failure: failed
$y$),
('key order', true, $y$
stages:
  - on_failure: failed
    on_success: completed
    input: { n: 2, id: "${context.id}" }
    worker: w.run@1
    queue: q
    type: worker
    name: a
entry: a
version: "1.0.0"
name: d
$y$),
('quoting', true, $y$
'name': "d"
"version": '1.0.0'
entry: 'a'
stages:
  - name: "a"
    type: 'worker'
    queue: "q"
    worker: 'w.run@1'
    input: { "id": '${context.id}', n: 2 }
    on_success: "completed"
    on_failure: failed
$y$),
('flow style and indentation', true, $y$
{name: d, version: "1.0.0", entry: a,
 stages: [ {name: a, type: worker, queue: q, worker: w.run@1,
            input: {id: "${context.id}", n: 2},
            on_success: completed, on_failure: failed} ]}
$y$),
('defaults written out', true, $y$
name: d
version: "1.0.0"
entry: a
terminals: [completed, failed]
terminal_policy: { late_callbacks: reject-and-record }
stages:
  - name: a
    type: worker
    queue: q
    worker: w.run@1
    input: { id: "${context.id}", n: 2.0 }
    retry: { max_attempts: 3, initial_ms: 1000, multiplier: 2, max_ms: 60000, jitter: full }
    execution_deadline_ms: 3600000
    on_success: completed
    on_failure: failed
$y$),
('other version', false, $y$
name: d
version: "1.0.1"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: 2 }, on_success: completed, on_failure: failed }
$y$),
('other input value', false, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: 3 }, on_success: completed, on_failure: failed }
$y$),
('number as string', false, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: "2" }, on_success: completed, on_failure: failed }
$y$),
('other retry', false, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: 2 }, retry: { max_attempts: 4 }, on_success: completed, on_failure: failed }
$y$),
('other contract version', false, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@2, input: { id: "${context.id}", n: 2 }, on_success: completed, on_failure: failed }
$y$),
('other route', false, $y$
name: d
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: 2 }, on_success: completed, on_failure: completed }
$y$),
('a description', false, $y$
name: d
version: "1.0.0"
description: the same graph, described
entry: a
stages:
  - { name: a, type: worker, queue: q, worker: w.run@1, input: { id: "${context.id}", n: 2 }, on_success: completed, on_failure: failed }
$y$);

-- every variant compiles
SELECT label, (wfe._compile(source, NULL))->'ok' AS ok FROM variant;

-- all same-meaning variants share one digest, equal to the base's
SELECT count(DISTINCT wfe._compile(source, NULL)->>'digest') AS digests
  FROM variant WHERE same_meaning;

-- each change of meaning gives a digest of its own
SELECT v.label,
       (wfe._compile(v.source, NULL)->>'digest') <> (wfe._compile(b.source, NULL)->>'digest') AS digest_differs
  FROM variant AS v, variant AS b
 WHERE NOT v.same_meaning AND b.label = 'base';
SELECT count(DISTINCT wfe._compile(source, NULL)->>'digest') AS distinct_digests, count(*) AS variants
  FROM variant WHERE NOT same_meaning;

-- a digest is sha256: and 64 lowercase hex digits
SELECT (wfe._compile(source, NULL)->>'digest') ~ '^sha256:[0-9a-f]{64}$' AS well_formed
  FROM variant WHERE label = 'base';
