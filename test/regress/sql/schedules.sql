--
-- Schedules (delivery.md "Schedules"): bad input and its SQLSTATEs, the
-- wall clock's DST days through backfill, one run per tick, the report.
-- The crons here are yearly (New Year's midnight) so that the background
-- worker, should it run, fires nothing while the file runs; ticks are
-- made by backfill over fixed past ranges.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('sch.step@1', 'sch-work');
SELECT wfe.create_definition(E'name: sch-flow\nversion: "1.0.0"\nentry: step\nstages:\n  - name: step\n    type: worker\n    queue: sch-work\n    worker: sch.step@1\n    input: {}\n    on_success: completed\n    on_failure: failed\n') LIKE 'sha256:%' AS created;
SELECT wfe.approve('sch-flow', '1.0.0');
SELECT wfe.activate('sch-flow', '1.0.0');

-- Bad cron expressions: 22023 naming the field.
\set VERBOSITY verbose
SELECT wfe.create_schedule('s', 'sch-flow', '61 * * * *');
\set VERBOSITY default
SELECT wfe.create_schedule('s', 'sch-flow', '* 24 * * *');
SELECT wfe.create_schedule('s', 'sch-flow', '* * 0 * *');
SELECT wfe.create_schedule('s', 'sch-flow', '* * * 13 *');
SELECT wfe.create_schedule('s', 'sch-flow', '* * * * funday');
SELECT wfe.create_schedule('s', 'sch-flow', '*/0 * * * *');
SELECT wfe.create_schedule('s', 'sch-flow', '5-1 * * * *');
SELECT wfe.create_schedule('s', 'sch-flow', '* * * *');
SELECT wfe.create_schedule('s', 'sch-flow', '@often');
SELECT wfe.create_schedule('s', 'sch-flow', '0 0 30 2 *');
-- an unknown time zone, workflow, option; bad option values
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"time_zone": "Mars/Olympus"}');
SELECT wfe.create_schedule('s', 'no-such-flow', '@daily');
SELECT wfe.create_schedule('s', 'sch-flow@9.9.9', '@daily');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"overlap": "skip", "colour": "red"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"overlap": "queue"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"catch_up": "some"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"jitter_ms": -1}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"jitter_ms": 1.5}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"priority": "high"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"start_at": "soon"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"start_at": "2027-01-02", "end_at": "2027-01-01"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"tenant": "no tenant"}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '{"time_zone": 3}');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '[]');
SELECT wfe.create_schedule('s', 'sch-flow', '@daily', '{}', '[]');
SELECT wfe.create_schedule('bad name', 'sch-flow', '@daily');
SELECT wfe.create_schedule(NULL, 'sch-flow', '@daily');
-- nothing was created by any of them
SELECT count(*) AS schedules FROM wfe.schedule_defs;

-- A schedule; a second of the same name is 42710.
SELECT wfe.create_schedule('berlin', 'sch-flow', '30 2 1 1 *', '{"k": 1}',
                           '{"time_zone": "Europe/Berlin", "overlap": "allow", "catch_up": "all"}');
SELECT wfe.create_schedule('berlin', 'sch-flow', '@daily');
SELECT name, workflow, cron, time_zone, tenant, owner, paused, next_fire_at, last_fire_at, last_run_id,
       last_run_state, overlap, catch_up FROM wfe.schedules;

-- Unknown schedules are 42704 for every function.
SELECT wfe.alter_schedule('nope', '@daily');
SELECT wfe.pause_schedule('nope');
SELECT wfe.resume_schedule('nope');
SELECT wfe.drop_schedule('nope');
SELECT wfe.trigger_schedule('nope');
SELECT wfe.backfill_schedule('nope', '2026-01-01', '2026-01-02');
-- alter checks like create, and changes nothing when refused
SELECT wfe.alter_schedule('berlin', '30 2 * * mon-fry');
SELECT wfe.alter_schedule('berlin', options => '{"catch_up": "sometimes"}');
SELECT cron, catch_up FROM wfe.schedules WHERE name = 'berlin';
-- backfill's range
SELECT wfe.backfill_schedule('berlin', '2026-02-01', '2026-01-01');
SELECT wfe.backfill_schedule('berlin', '2026-01-01', '2999-01-01');
SELECT wfe.backfill_schedule('berlin', NULL, '2026-01-01');

-- DST days in Europe/Berlin, through backfill.  02:30 on 29 March 2026
-- does not exist: it fires at 03:00 CEST (01:00 UTC).  02:30 on 25
-- October happens twice: it fires once, at the first (00:30 UTC).
SELECT wfe.alter_schedule('berlin', '30 2 * * *');
SELECT wfe.backfill_schedule('berlin', '2026-03-28', '2026-03-31');
SELECT wfe.backfill_schedule('berlin', '2026-10-24', '2026-10-27');
SELECT s.scheduled_for, s.scheduled_for AT TIME ZONE 'Europe/Berlin' AS berlin, r.idempotency_key, r.context
  FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id) ORDER BY s.scheduled_for;
-- every 30 minutes through both nights: no tick in the gap, the repeated hour once
SELECT wfe.alter_schedule('berlin', '*/30 * * * *', '{"k": 2}');
SELECT wfe.backfill_schedule('berlin', '2026-03-29 00:00Z', '2026-03-29 02:00Z');
SELECT wfe.backfill_schedule('berlin', '2026-10-24 23:30Z', '2026-10-25 02:30Z');
-- (03:00 CEST on 29 March and 02:30 CEST on 25 October ran with k 1
-- above: the same ticks, so the same runs)
SELECT s.scheduled_for, s.scheduled_for AT TIME ZONE 'Europe/Berlin' AS berlin, r.context
  FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id)
 WHERE s.scheduled_for BETWEEN '2026-03-29 00:00Z' AND '2026-03-29 02:00Z'
    OR s.scheduled_for BETWEEN '2026-10-24 23:30Z' AND '2026-10-25 02:30Z'
 ORDER BY s.scheduled_for;
-- a backfill over ticks already run starts nothing again (one run per tick)
SELECT wfe.backfill_schedule('berlin', '2026-03-29 00:00Z', '2026-03-29 02:00Z');
SELECT count(*) AS runs FROM wfe.runs WHERE context = '{"k": 2}';
-- more than 1000 ticks is refused
SELECT wfe.backfill_schedule('berlin', '2025-01-01', '2026-01-01');

-- The report names the schedule and the tick.
SELECT r.report ->> 'schedule' AS schedule, r.report ->> 'scheduled_for' AS scheduled_for
  FROM (SELECT wfe.report(min(run_id)) AS report FROM wfe.schedule_runs) AS r;

-- trigger: one run now, outside the cron, as the owner
SELECT wfe.trigger_schedule('berlin') > 0 AS triggered;
SELECT r.idempotency_key ~ '^schedule:berlin:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$' AS key_ok
  FROM wfe.runs AS r WHERE r.run_id = (SELECT last_run_id FROM wfe.schedule_defs WHERE name = 'berlin');

-- pause, resume, drop
SELECT wfe.pause_schedule('berlin');
SELECT paused, paused_reason FROM wfe.schedules WHERE name = 'berlin';
SELECT wfe.resume_schedule('berlin');
SELECT paused, next_fire_at > now() AS planned FROM wfe.schedules WHERE name = 'berlin';
SELECT wfe.drop_schedule('berlin');
SELECT count(*) AS schedules FROM wfe.schedules;
-- the runs it started stay, and keep their schedule
SELECT count(*) > 0 AS kept FROM wfe.schedule_runs WHERE schedule = 'berlin';

-- start_at and end_at bound the ticks
SELECT wfe.create_schedule('bounded', 'sch-flow', '0 0 1 1 *', '{}',
                           '{"start_at": "2030-06-01", "end_at": "2032-06-01"}');
SELECT next_fire_at FROM wfe.schedules WHERE name = 'bounded';
SELECT wfe.alter_schedule('bounded', options => '{"end_at": "2030-12-01"}');
SELECT next_fire_at, (SELECT state FROM wfe.dashboard_schedules WHERE name = 'bounded') FROM wfe.schedules WHERE name = 'bounded';
SELECT wfe.drop_schedule('bounded');

-- clean up the runs for the files that follow
SELECT count(wfe.cancel_run(run_id)) > 0 AS cancelled FROM wfe.runs WHERE workflow = 'sch-flow' AND state = 'running';
