-- Sample what the pgbench sessions are doing every 10 ms for :secs seconds,
-- into bench_waits under :label.  Samples are kept in a variable and the
-- loop commits every round, so the sampler holds back no vacuum horizon.
\set ON_ERROR_STOP on
SELECT set_config('bench.secs', :'secs', false), set_config('bench.label', :'label', false);
DO $$
DECLARE
    v_end   timestamptz := clock_timestamp() + make_interval(secs => current_setting('bench.secs')::float8);
    v_waits text[] := '{}';
BEGIN
    PERFORM pg_sleep(0.3);      -- pgbench connects
    COMMIT;
    WHILE clock_timestamp() < v_end LOOP
        PERFORM pg_stat_clear_snapshot();
        v_waits := v_waits || ARRAY(
            SELECT CASE WHEN a.state <> 'active' THEN 'idle: the client''s turn'
                        WHEN a.wait_event IS NULL THEN 'CPU'
                        ELSE a.wait_event_type || ': ' || a.wait_event END
              FROM pg_stat_activity AS a
             WHERE a.application_name = 'pgbench' AND a.backend_type = 'client backend');
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
    INSERT INTO bench_waits (label, wait)
    SELECT current_setting('bench.label'), w FROM unnest(v_waits) AS w;
END
$$;
