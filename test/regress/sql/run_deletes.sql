--
-- A run's stage rows go with it (60_runtime_tables.sql, wfe.runs_deleted):
-- they have no foreign key to their run, so the trigger is what keeps any
-- from outliving it, whoever deletes the run -- retention, an owner's
-- DELETE, a TRUNCATE ... CASCADE -- and it takes no other run's rows.
-- A database of its own: TRUNCATE would take the other tests' runs.
--
SET client_min_messages = warning;
DROP DATABASE IF EXISTS wfe_run_deletes;
\set regress_db :DBNAME
CREATE DATABASE wfe_run_deletes;
\c wfe_run_deletes
CREATE EXTENSION wfe;
RESET client_min_messages;

SELECT wfe.register_worker('del.step@1', 'del');
SELECT wfe.create_definition($yaml$
name: del-flow
version: "1.0.0"
entry: one
stages:
  - name: one
    type: worker
    queue: del
    worker: del.step@1
    on_success: two
    on_failure: failed
  - name: two
    type: worker
    queue: del
    worker: del.step@1
    on_success: completed
    on_failure: failed
$yaml$) IS NOT NULL AS defined;
SELECT wfe.approve('del-flow', '1.0.0') IS NOT NULL AS approved;
SELECT wfe.activate('del-flow', '1.0.0') IS NOT NULL AS activated;
SELECT s.run_id AS a FROM wfe.submit('del-flow', '{}') AS s \gset
SELECT s.run_id AS b FROM wfe.submit('del-flow', '{}') AS s \gset
SELECT s.run_id AS c FROM wfe.submit('del-flow', '{}') AS s \gset
CREATE TEMP VIEW left_over AS
SELECT r.run_id = :a AS a, r.run_id = :b AS b, count(st.stage) AS stages
  FROM (SELECT run_id FROM wfe.run_stages UNION SELECT run_id FROM wfe.runs) AS r
  LEFT JOIN wfe.run_stages AS st ON st.run_id = r.run_id
 GROUP BY 1, 2, r.run_id ORDER BY r.run_id;
SELECT * FROM left_over;

-- retention: a finished run goes with its stage rows, the others stay
SELECT wfe.cancel_run(:a, 'retention test') IS NOT NULL AS cancelled;
UPDATE wfe.runs SET finished_at = now() - interval '1 hour' WHERE run_id = :a;
SELECT wfe._retention(60, 10) AS runs_removed;
SELECT * FROM left_over;

-- an owner's DELETE, of one run and then of none
DELETE FROM wfe.runs WHERE run_id = :b;
DELETE FROM wfe.runs WHERE run_id = :b;
SELECT * FROM left_over;

-- TRUNCATE ... CASCADE (the other tables' foreign keys ask for CASCADE)
SET client_min_messages = warning;
TRUNCATE wfe.runs CASCADE;
RESET client_min_messages;
SELECT count(*) AS runs, (SELECT count(*) FROM wfe.run_stages) AS stages FROM wfe.runs;

-- the trigger is no door: nobody calls it
SELECT has_function_privilege('wfe_operator', 'wfe._runs_deleted()', 'EXECUTE') AS operator_may_call,
       has_function_privilege('wfe_reader', 'wfe._runs_deleted()', 'EXECUTE') AS reader_may_call;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE wfe_run_deletes;
