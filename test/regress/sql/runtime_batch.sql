--
-- Batch reports: wfe.complete_tasks (runtime.md "Batch reports").  Each
-- report goes through the same gate as wfe.complete_task and gets its own
-- outcome; bad arguments raise with their SQLSTATEs and change nothing.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-batch.step@1', 'rt-batch-work',
  output_schema => '{"type":"object","properties":{"n":{"type":"integer"}}}');
SELECT wfe.create_definition($yaml$
name: batch-test
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: rt-batch-work
    worker: rt-batch.step@1
    on_success: second
    on_failure: failed
  - name: second
    type: worker
    queue: rt-batch-work
    worker: rt-batch.step@1
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('batch-test', '1.0.0');
SELECT wfe.activate('batch-test', '1.0.0');

SELECT count(*) AS submitted FROM generate_series(1, 4) AS g, wfe.submit('batch-test', jsonb_build_object('g', g));
CREATE TEMP TABLE claimed AS SELECT * FROM wfe.claim_task('rt-batch-work', 'w-batch', 4);
SELECT count(*) AS claimed FROM claimed;
-- a claimed task carries its attempt's deterministic message id
SELECT bool_and(message_id = wfe._message_id(run_id, stage, attempt, fence, 'dispatch')) AS ids_match FROM claimed;

-- Four reports in reverse order: answered in run order, one outcome each:
-- two accepted, one invalid_result (n is not an integer), one stale fence.
SELECT row_number() OVER () - 0 AS k, b.stage, b.outcome
  FROM wfe.complete_tasks((
    SELECT jsonb_agg(jsonb_build_object(
             'run_id', c.run_id, 'stage', c.stage, 'attempt', c.attempt,
             'fence', CASE WHEN rn = 4 THEN c.fence + 7 ELSE c.fence END,
             'result', CASE WHEN rn = 3 THEN '{"n": "x"}'::jsonb ELSE '{"n": 1}'::jsonb END)
           ORDER BY c.run_id DESC)
      FROM (SELECT c.*, row_number() OVER (ORDER BY c.run_id) AS rn FROM claimed AS c) AS c)) AS b;
SELECT s.state, count(*) FROM wfe.run_stages AS s JOIN claimed AS c USING (run_id, stage)
 GROUP BY s.state ORDER BY s.state;
SELECT count(*) AS released FROM wfe.run_stages AS s JOIN claimed AS c USING (run_id)
 WHERE s.stage = 'second' AND s.state = 'queued';

-- The same accepted reports again: duplicate, even though nothing changed.
SELECT b.outcome, count(*)
  FROM wfe.complete_tasks((
    SELECT jsonb_agg(jsonb_build_object('run_id', c.run_id, 'stage', c.stage, 'attempt', c.attempt,
                                        'fence', c.fence, 'result', '{"n": 1}'::jsonb))
      FROM (SELECT c.* FROM claimed AS c ORDER BY c.run_id LIMIT 2) AS c)) AS b
 GROUP BY b.outcome;

-- An unknown run answers unknown; an empty array, nothing.
SELECT * FROM wfe.complete_tasks('[{"run_id": 999999999, "stage": "first", "attempt": 1, "fence": 1}]');
SELECT count(*) FROM wfe.complete_tasks('[]');

-- Bad arguments: 22004, 22023 (naming the element), 54000; nothing changes.
CREATE TEMP TABLE before AS SELECT count(*) AS events FROM wfe.events;
SELECT * FROM wfe.complete_tasks(NULL);
SELECT * FROM wfe.complete_tasks('{"run_id": 1}');
SELECT * FROM wfe.complete_tasks('[{"run_id": 1, "stage": "first", "attempt": 1}]');
SELECT * FROM wfe.complete_tasks('[{"run_id": "1", "stage": "first", "attempt": 1, "fence": 1}]');
SELECT * FROM wfe.complete_tasks((SELECT jsonb_agg(jsonb_build_object('run_id', 1, 'stage', 'x', 'attempt', 1, 'fence', 1))
                                    FROM generate_series(1, 1001)));
SELECT (SELECT count(*) FROM wfe.events) = events AS nothing_recorded FROM before;
