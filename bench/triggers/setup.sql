-- The triggers benchmark's schema (bench/triggers/triggers.sh): runs that
-- start themselves, from a schedule or a RabbitMQ run command.  In the
-- bench database, which has wfe; as a superuser.
\set ON_ERROR_STOP on

-- Two one-stage workflows nobody works (their runs stay running):
-- bench-sch for the schedules, bench-ing for the run commands.
SELECT wfe.register_worker('bench.trig@1', 'bench-trig');
SELECT wfe.create_definition(format($y$
name: %s
version: "1.0.0"
entry: step
stages:
  - name: step
    type: worker
    queue: bench-trig
    worker: bench.trig@1
    on_success: completed
    on_failure: failed
$y$, w)), wfe.approve(w, '1.0.0'), wfe.activate(w, '1.0.0')
  FROM (VALUES ('bench-sch'), ('bench-ing')) AS v (w);

-- The ingress's role: a submitter of tenant default only.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bench_ingress') THEN
        CREATE ROLE bench_ingress IN ROLE wfe_submitter;
    END IF;
END $$;
SELECT wfe.add_tenant_member('bench_ingress', 'default');

-- Fire latency, one tick at a time: n schedules (on a yearly cron, so that
-- none has a tick of its own during the probe), the tick of the i-th
-- planned for T + i × spacing (T a second ahead), the worker woken once
-- for T (it then sleeps until the next tick, as in service); waits until
-- every tick fired (at most 60 s past the last).
CREATE OR REPLACE PROCEDURE bench_tick_probe(n int, spacing_ms int)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
BEGIN
    PERFORM wfe.create_schedule('bench-tick-' || i, 'bench-sch', '0 0 1 1 *', '{}', '{"overlap": "allow"}')
       FROM generate_series(1, n) AS i
      WHERE NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name = 'bench-tick-' || i);
    COMMIT;
    -- the instants are planned once the schedules exist (making them takes a while)
    t0 := date_trunc('second', clock_timestamp()) + interval '1 second';
    UPDATE wfe.schedule_defs AS s
       SET next_tick = t0 + make_interval(secs => (substr(s.name, 12)::int - 1) * spacing_ms / 1000.0),
           next_fire_at = t0 + make_interval(secs => (substr(s.name, 12)::int - 1) * spacing_ms / 1000.0)
     WHERE s.name LIKE 'bench-tick-%';
    UPDATE wfe.schedule_defs AS s SET end_at = s.next_tick WHERE s.name LIKE 'bench-tick-%';
    PERFORM wfe._wake(t0);
    COMMIT;
    FOR i IN 1 .. (n * spacing_ms / 100 + 600) LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name LIKE 'bench-tick-%' AND next_tick IS NOT NULL);
        PERFORM pg_sleep(0.1);
        COMMIT;
    END LOOP;
END
$$;

-- n schedules due at the same instant T, two seconds ahead (bench/schedules.sql's probe).
CREATE OR REPLACE PROCEDURE bench_same_minute(n int)
LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM wfe.create_schedule('bench-min-' || i, 'bench-sch', '0 0 1 1 *', '{}', '{"overlap": "allow"}')
       FROM generate_series(1, n) AS i
      WHERE NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name = 'bench-min-' || i);
    COMMIT;
    -- the instant is planned once the schedules exist (making 1,000 takes a while)
    t := date_trunc('second', clock_timestamp()) + interval '2 seconds';
    UPDATE wfe.schedule_defs SET next_tick = t, next_fire_at = t, end_at = t WHERE name LIKE 'bench-min-%';
    PERFORM wfe._wake(t);
    COMMIT;
    FOR i IN 1 .. 1200 LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM wfe.schedule_defs WHERE name LIKE 'bench-min-%' AND next_tick IS NOT NULL);
        PERFORM pg_sleep(0.1);
        COMMIT;
    END LOOP;
END
$$;

-- The ingress's comparison: n wfe.submit calls of bench-ing by one
-- session, each in a transaction of its own (as the ingress submits each
-- command), timed into bench_trig_direct.
CREATE TABLE IF NOT EXISTS bench_trig_direct (n int, started timestamptz, ended timestamptz);
CREATE OR REPLACE PROCEDURE bench_direct_submits(n int)
LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM wfe.submit('bench-ing', jsonb_build_object('n', i), 'direct-' || i);
        COMMIT;
    END LOOP;
    INSERT INTO bench_trig_direct VALUES (n, t, clock_timestamp());
END
$$;
