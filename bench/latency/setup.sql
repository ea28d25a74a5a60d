-- The latency benchmarks' schema (bench/latency/latency.sh), in the bench
-- database, which has wfe.  psql variables: timer, action, broker -- the
-- files of the three workflow definitions.
--
-- The probes are procedures: they COMMIT inside their loop, so a sample's
-- "committed" time is clock_timestamp() taken right after the COMMIT
-- returned, in the server, with no client round trip in between.  Every wait
-- in them is bounded (a few seconds, then an error).  NB: inside a
-- procedure the next transaction starts at the COMMIT, so now() is the
-- COMMIT's time, not the next statement's: the probes commit after each
-- sleep, so that the transactions they measure start when they do.
\set ON_ERROR_STOP on

-- What the probes record.  Unlogged: recording a sample never waits for a
-- WAL flush, so it does not slow the next commit down.
CREATE UNLOGGED TABLE bench_lat (figure text NOT NULL, ms float8 NOT NULL);
CREATE UNLOGGED TABLE bench_lat_timer (label text NOT NULL, run_id bigint NOT NULL, failed_at timestamptz NOT NULL);
CREATE UNLOGGED TABLE bench_lat_wake (
    i            int,
    ok           boolean,           -- exactly this commit's wakeup was seen
    committed_at timestamptz,       -- clock after the submit's COMMIT returned
    requested    timestamptz,       -- worker_status().last_wake_requested (the commit callback's clock)
    woke         timestamptz,       -- worker_status().last_woke (the worker's clock after WaitLatch)
    wakeups      bigint,            -- wakeups sent during the sample
    handler_at   timestamptz,       -- clock inside the handler, in the worker's transaction
    seen_at      timestamptz        -- clock when the driver first saw the stage completed
);
CREATE UNLOGGED TABLE bench_lat_confirm (run_id bigint NOT NULL, committed_at timestamptz NOT NULL);

-- The in-database action: returns the time it ran.
CREATE FUNCTION bench_act(input jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE
AS $$ SELECT jsonb_build_object('at', clock_timestamp()) $$;

-- bench_wait(what, condition_sql, seconds[, every_s]): evaluate the
-- condition every millisecond (or every every_s seconds) until it is true;
-- an error after the given seconds.  Statistics views are read afresh each
-- time (pg_stat_activity is otherwise cached for the transaction).
CREATE PROCEDURE bench_wait(p_what text, p_sql text, p_seconds float8, p_every_s float8 DEFAULT 0.001)
LANGUAGE plpgsql
AS $$
DECLARE
    v_deadline timestamptz := clock_timestamp() + make_interval(secs => p_seconds);
    v_ok       boolean;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        EXECUTE p_sql INTO v_ok;
        EXIT WHEN v_ok;
        IF clock_timestamp() > v_deadline THEN
            RAISE EXCEPTION 'bench: % did not happen within % s', p_what, p_seconds;
        END IF;
        PERFORM pg_sleep(p_every_s);
    END LOOP;
END
$$;

-- Timers: claim and fail p_n tasks of bench-timer, one every p_spacing_ms on
-- a fixed schedule, each in the transactions a worker would use (claim,
-- commit; fail, commit).  Each failure makes a retry timer due 200 ms later.
CREATE PROCEDURE bench_timer_probe(p_label text, p_n int, p_spacing_ms int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_start  timestamptz := clock_timestamp();
    v_target timestamptz;
    t        wfe.task;
BEGIN
    FOR i IN 1 .. p_n LOOP
        v_target := v_start + make_interval(secs => i * p_spacing_ms / 1000.0);
        IF clock_timestamp() < v_target THEN
            PERFORM pg_sleep(extract(epoch FROM v_target - clock_timestamp()));
        END IF;
        COMMIT;     -- now() of the next transaction: after the sleep
        SELECT * INTO t FROM wfe.claim_task('bench-timer', 'latency-probe', 1);
        IF t.run_id IS NULL THEN
            RAISE EXCEPTION 'bench: no bench-timer task left to fail (%)', i;
        END IF;
        COMMIT;
        PERFORM wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence,
                              '{"code": "bench.retry", "message": "latency probe"}');
        COMMIT;
        INSERT INTO bench_lat_timer VALUES (p_label, t.run_id, clock_timestamp());
    END LOOP;
    COMMIT;
END
$$;

-- Timers again, the worst case for the worker's planning: p_n timers, each
-- made alone (claim, fail) and then, p_before_ms before it is due, a
-- commit that wakes the worker (wfe._wake()), so that its round begins just
-- before the timer is due and plans just after.
CREATE PROCEDURE bench_timer_trap(p_label text, p_n int, p_before_ms float8)
LANGUAGE plpgsql
AS $$
DECLARE
    t     wfe.task;
    v_due timestamptz;
BEGIN
    FOR i IN 1 .. p_n LOOP
        PERFORM pg_sleep(0.15);
        COMMIT;
        SELECT * INTO t FROM wfe.claim_task('bench-timer', 'latency-probe', 1);
        IF t.run_id IS NULL THEN
            RAISE EXCEPTION 'bench: no bench-timer task left to fail (%)', i;
        END IF;
        COMMIT;
        PERFORM wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence,
                              '{"code": "bench.retry", "message": "latency probe"}');
        COMMIT;
        INSERT INTO bench_lat_timer VALUES (p_label, t.run_id, clock_timestamp());
        SELECT x.due_at INTO v_due FROM wfe.timers AS x WHERE x.run_id = t.run_id AND x.fired_at IS NULL;
        PERFORM pg_sleep(greatest(0, extract(epoch FROM v_due - clock_timestamp()) - p_before_ms / 1000.0));
        PERFORM wfe._wake();
        COMMIT;
    END LOOP;
END
$$;

-- Wakeups: p_n submits of the one-action workflow, one at a time, each when
-- the background worker sleeps.  Records the worker's view of the wakeup
-- (the commit callback's clock and the worker's clock after WaitLatch), the
-- handler's clock and when the driver saw the stage completed (polled every
-- millisecond).
CREATE PROCEDURE bench_wake_probe(p_n int)
LANGUAGE plpgsql
AS $$
DECLARE
    s0       record;
    s1       record;
    v_run    bigint;
    v_before timestamptz;
    v_commit timestamptz;
    v_seen   timestamptz;
BEGIN
    FOR i IN 1 .. p_n LOOP
        -- the worker is idle: asleep in WaitLatch, with nothing due
        PERFORM pg_sleep(0.005 + random() * 0.020);
        COMMIT;
        CALL bench_wait('the worker going to sleep',
                        'SELECT s.sleeping_until IS NOT NULL AND a.wait_event = ''Extension''
                           FROM wfe.worker_status() AS s JOIN pg_stat_activity AS a ON a.pid = s.pid', 10);
        SELECT * INTO s0 FROM wfe.worker_status();
        COMMIT;
        v_before := clock_timestamp();
        SELECT (wfe.submit('bench-action', jsonb_build_object('x', i))).run_id INTO v_run;
        COMMIT;
        v_commit := clock_timestamp();
        CALL bench_wait('the action completing',
                        format('SELECT EXISTS (SELECT 1 FROM wfe.run_stages WHERE run_id = %s AND state = %L)',
                               v_run, 'completed'), 10);
        v_seen := clock_timestamp();
        SELECT * INTO s1 FROM wfe.worker_status();
        INSERT INTO bench_lat_wake
        SELECT i,
               s1.wakeups = s0.wakeups + 1 AND s1.last_wake_requested BETWEEN v_before AND v_commit
                   AND s1.last_woke >= s1.last_wake_requested,
               v_commit, s1.last_wake_requested, s1.last_woke, s1.wakeups - s0.wakeups,
               (st.result ->> 'at')::timestamptz, v_seen
          FROM wfe.run_stages AS st WHERE st.run_id = v_run;
        COMMIT;
    END LOOP;
END
$$;

-- Commit -> broker-confirmed: p_n submits of the broker workflow, arrivals
-- at random (exponential gaps of mean p_gap_ms, at most five times it).
CREATE PROCEDURE bench_confirm_probe(p_n int, p_gap_ms int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_run bigint;
BEGIN
    FOR i IN 1 .. p_n LOOP
        PERFORM pg_sleep(least(5.0, -ln(1.0 - random())) * p_gap_ms / 1000.0);
        COMMIT;     -- now() of the submit's transaction (created_at): after the sleep
        SELECT (wfe.submit('bench-broker', jsonb_build_object('x', i))).run_id INTO v_run;
        COMMIT;
        INSERT INTO bench_lat_confirm VALUES (v_run, clock_timestamp());
        COMMIT;
    END LOOP;
END
$$;

-- Three contracts, three workflows.
SELECT wfe.register_worker('bench.timer@1', 'bench-timer');
SELECT wfe.register_action('bench.act@1', 'bench_act(jsonb)'::regprocedure);
SELECT wfe.register_worker('bench.broker@1', 'bench-broker');
SELECT wfe.configure_queue('bench-broker', 'broker');

\set src `cat :'timer'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-timer', '1.0.0');
SELECT wfe.activate('bench-timer', '1.0.0');

\set src `cat :'action'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-action', '1.0.0');
SELECT wfe.activate('bench-action', '1.0.0');

\set src `cat :'broker'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-broker', '1.0.0');
SELECT wfe.activate('bench-broker', '1.0.0');

-- bench_time_ms(sql): how long one statement takes, in milliseconds.
CREATE FUNCTION bench_time_ms(p_sql text) RETURNS float8
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_start timestamptz := clock_timestamp();
BEGIN
    EXECUTE p_sql;
    RETURN extract(epoch FROM clock_timestamp() - v_start) * 1000;
END
$$;
