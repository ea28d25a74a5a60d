--
-- Retention of the events that belong to no kept run (70_background_worker.sql):
-- schedules' skipped ticks and failures, callbacks about runs that do not
-- exist.  wfe.events has no key to name rows by, so each batch is "the
-- oldest ones, up to the batch's last one's time": this checks that a
-- batch takes no more than p_batch of them, oldest first, and never a young
-- one or a callback about a run that exists.  A database of its own: the
-- other tests' events do not count.
--
SET client_min_messages = warning;
DROP DATABASE IF EXISTS wfe_retention_events;
\set regress_db :DBNAME
CREATE DATABASE wfe_retention_events;
\c wfe_retention_events
CREATE EXTENSION wfe;
RESET client_min_messages;

SELECT wfe.register_worker('ret.step@1', 'ret');
SELECT wfe.create_definition($yaml$
name: ret-flow
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: ret
    worker: ret.step@1
    on_success: completed
    on_failure: failed
$yaml$) IS NOT NULL AS defined;
SELECT wfe.approve('ret-flow', '1.0.0') IS NOT NULL AS approved;
SELECT wfe.activate('ret-flow', '1.0.0') IS NOT NULL AS activated;
SELECT s.run_id AS live_run FROM wfe.submit('ret-flow', '{}') AS s \gset

-- old ones (ten minutes, a second apart: the day's partition stays) and young ones
INSERT INTO wfe.events (run_id, tenant, type, at, detail)
SELECT NULL, 'default', t, now() - interval '10 minutes' - i * interval '1 second', jsonb_build_object('schedule', 's', 'i', i)
  FROM generate_series(1, 5) AS i, (VALUES ('schedule.skipped'), ('schedule.failed')) AS x(t);
INSERT INTO wfe.events (run_id, tenant, type, at, detail)
SELECT 424242, '', 'callback.unknown', now() - interval '10 minutes' - i * interval '1 second', jsonb_build_object('i', i)
  FROM generate_series(1, 5) AS i;
-- a callback about a run that exists stays with its run
INSERT INTO wfe.events (run_id, tenant, type, at)
VALUES (:live_run, 'default', 'callback.unknown', now() - interval '20 minutes');
INSERT INTO wfe.events (run_id, tenant, type, at)
VALUES (NULL, 'default', 'schedule.skipped', now()), (424242, '', 'callback.unknown', now());

-- what is left, by kind: old (before the cutoff of a 300 s retention) and young
CREATE TEMP VIEW left_over AS
SELECT e.type, e.run_id IS NOT DISTINCT FROM :live_run AS of_live_run,
       count(*) FILTER (WHERE e.at < now() - interval '300 seconds') AS old,
       count(*) FILTER (WHERE e.at >= now() - interval '300 seconds') AS young
  FROM wfe.events AS e
 WHERE e.type IN ('schedule.skipped', 'schedule.failed', 'callback.unknown')
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT type, of_live_run, old, young FROM left_over;

-- a batch of 2: the two oldest schedule events (a pair of one time), the two oldest callbacks
SELECT wfe._retention(300, 2) AS runs_removed;
SELECT type, of_live_run, old, young FROM left_over;
-- oldest first: the old ones left, by their place (5 the oldest)
SELECT type, array_agg((detail ->> 'i')::int ORDER BY (detail ->> 'i')::int) AS left
  FROM wfe.events WHERE type IN ('schedule.skipped', 'schedule.failed', 'callback.unknown')
   AND run_id IS DISTINCT FROM :live_run AND detail ? 'i'
 GROUP BY 1 ORDER BY 1;

-- events of one time (one transaction's) all go in the batch that reaches them:
-- three older than the rest, and a batch of 2 takes the three (and two callbacks)
INSERT INTO wfe.events (run_id, tenant, type, at)
SELECT NULL, 'default', 'schedule.failed', now() - interval '30 minutes' FROM generate_series(1, 3);
SELECT wfe._retention(300, 2) AS runs_removed;
SELECT type, of_live_run, old, young FROM left_over;

-- a large batch: every old one, none of the young or of the live run
SELECT wfe._retention(300, 100) AS runs_removed;
SELECT type, of_live_run, old, young FROM left_over;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE wfe_retention_events;
