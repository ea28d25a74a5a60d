-- The waits benchmark's schema (bench/waits/waits.sh), in the bench
-- database, which has wfe.  psql variable: sleep_ms -- the sleep stage's
-- duration.
\set ON_ERROR_STOP on

-- One signal, one worker contract; the workflows:
--   bench-wait: a wait on bench.approve@1 (a day's timeout, so a timer per
--     parked run, as in service), then a worker stage on queue bench-waits;
--   bench-sleep: one sleep stage of :sleep_ms.
SELECT wfe.register_signal('bench.approve@1', '{"type": "object"}');
SELECT wfe.register_worker('bench.waits@1', 'bench-waits');
SELECT wfe.create_definition($y$
name: bench-wait
version: "1.0.0"
entry: approve
stages:
  - name: approve
    type: wait
    signal: bench.approve@1
    timeout_ms: 86400000
    on_success: publish
    on_failure: failed
    on_timeout: failed
  - name: publish
    type: worker
    queue: bench-waits
    worker: bench.waits@1
    on_success: completed
    on_failure: failed
$y$), wfe.approve('bench-wait', '1.0.0'), wfe.activate('bench-wait', '1.0.0');
SELECT wfe.create_definition(format($y$
name: bench-sleep
version: "1.0.0"
entry: nap
stages:
  - name: nap
    type: sleep
    duration_ms: %s
    on_success: completed
$y$, :sleep_ms)), wfe.approve('bench-sleep', '1.0.0'), wfe.activate('bench-sleep', '1.0.0');

-- Samples (ms) by figure.  Unlogged: samples never wait for a flush.
CREATE UNLOGGED TABLE bench_waits_lat (figure text NOT NULL, ms float8 NOT NULL);

-- Signal every run of bench-wait whose wait is released, one at a time, a
-- transaction each: the signal statement (accepted: the wait completed and
-- the worker stage queued, in the server) and signal -> COMMIT returned.
-- Dies unless every signal was accepted and released the successor.
CREATE PROCEDURE bench_signal_probe(p_limit int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_run    bigint;
    v_out    text;
    t0       timestamptz;
    t1       timestamptz;
    v_done   int := 0;
BEGIN
    FOR v_run IN SELECT s.run_id FROM wfe.run_stages AS s
                  WHERE s.stage = 'approve' AND s.state = 'running'
                  ORDER BY s.run_id LIMIT p_limit
    LOOP
        t0 := clock_timestamp();
        v_out := wfe.signal(v_run, 'bench.approve@1', '{}');
        t1 := clock_timestamp();
        IF v_out <> 'accepted' OR NOT EXISTS (SELECT 1 FROM wfe.run_stages AS s
                                               WHERE s.run_id = v_run AND s.stage = 'publish' AND s.state = 'queued') THEN
            RAISE EXCEPTION 'run %: the signal was %, the successor not queued', v_run, v_out;
        END IF;
        INSERT INTO bench_waits_lat VALUES ('signal:server', extract(epoch FROM t1 - t0) * 1000);
        COMMIT;
        INSERT INTO bench_waits_lat VALUES ('signal:committed', extract(epoch FROM clock_timestamp() - t0) * 1000);
        COMMIT;
        v_done := v_done + 1;
    END LOOP;
    IF v_done < p_limit THEN
        RAISE EXCEPTION 'only % runs were waiting, not %', v_done, p_limit;
    END IF;
END
$$;

-- Submit p_n runs of bench-sleep one at a time, p_spacing_ms apart (so
-- their timers fall due one by one, as in service), a transaction each.
CREATE PROCEDURE bench_sleep_submit(p_n int, p_spacing_ms int)
LANGUAGE plpgsql
AS $$
BEGIN
    FOR i IN 1 .. p_n LOOP
        PERFORM wfe.submit('bench-sleep', jsonb_build_object('x', i));
        COMMIT;
        PERFORM pg_sleep(p_spacing_ms / 1000.0);
    END LOOP;
END
$$;
