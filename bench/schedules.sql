-- bench/schedules.sql: fire latency of schedules (docs/benchmarks.md
-- "Schedules").  Run with psql against a database with wfe and the
-- background worker (shared_preload_libraries = 'wfe'), as a superuser:
--
--   psql -X -v n=1000 -f bench/schedules.sql
--
-- Makes :n schedules (cron '* * * * *', overlap allow) of a one-stage
-- workflow nobody works, plans one tick of each for the same instant T,
-- two seconds ahead, wakes the worker for it, waits, and reports how long
-- after T the runs were submitted: p50, p99 and the last.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SELECT wfe.register_worker('bench.sch@1', 'bench-sch');
SELECT wfe.create_definition($y$
name: bench-sch
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: bench-sch
    worker: bench.sch@1
    on_success: completed
    on_failure: failed
$y$) IS NOT NULL AS created \gset
SELECT wfe.approve('bench-sch', '1.0.0') WHERE NOT EXISTS
       (SELECT FROM wfe.definitions WHERE workflow = 'bench-sch' AND state <> 'draft');
SELECT wfe.activate('bench-sch', '1.0.0') WHERE NOT EXISTS
       (SELECT FROM wfe.definitions WHERE workflow = 'bench-sch' AND state = 'active');
SELECT count(wfe.create_schedule('bench-' || i, 'bench-sch', '* * * * *', '{}', '{"overlap": "allow"}'))
  FROM generate_series(1, :n) AS i WHERE NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name = 'bench-' || i);
SELECT date_trunc('second', clock_timestamp()) + interval '2 seconds' AS t \gset
UPDATE wfe.schedule_defs SET next_tick = :'t', next_fire_at = :'t', end_at = :'t' WHERE name LIKE 'bench-%';
SELECT wfe._wake(:'t');
SELECT pg_sleep(2);
DO $$
BEGIN
    FOR i IN 1 .. 600 LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name LIKE 'bench-%' AND next_tick IS NOT NULL);
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT count(*) AS runs,
       round(1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY r.submitted_at - s.scheduled_for))::numeric, 1) AS p50_ms,
       round(1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY r.submitted_at - s.scheduled_for))::numeric, 1) AS p99_ms,
       round(1000 * extract(epoch FROM max(r.submitted_at - s.scheduled_for))::numeric, 1) AS last_ms
  FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id)
 WHERE s.schedule LIKE 'bench-%' AND s.scheduled_for = :'t';
