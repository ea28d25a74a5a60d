-- The result cache benchmark's schema (bench/cache/cache.sh), in the bench
-- database, which has wfe.  psql variable: stages -- the length of the
-- linear workflows of the steps/s figure.
\set ON_ERROR_STOP on

-- One worker contract; its workflows (each stage's input names the stage,
-- so every stage of a run has a key of its own):
--   bench-cache1 / bench-plain1: one stage, cached for an hour / not cached;
--   bench-cache-line / bench-plain-line: :stages stages in a line, the same.
SELECT wfe.register_worker('bench.cache@1', 'bench-cache');

CREATE FUNCTION bench_cache_yaml(p_name text, p_stages int, p_cached boolean) RETURNS text
LANGUAGE sql IMMUTABLE
AS $f$
SELECT format(E'name: %s\nversion: "1.0.0"\nentry: s1\nstages:\n', p_name)
       || string_agg(format(E'  - name: s%s\n    type: worker\n    queue: bench-cache\n    worker: bench.cache@1\n'
                            || E'    input: { x: "${context.x}", s: %s }\n%s'
                            || E'    on_success: %s\n    on_failure: failed\n',
                            i, i, CASE WHEN p_cached THEN E'    cache: { ttl_ms: 3600000 }\n' ELSE '' END,
                            CASE WHEN i = p_stages THEN 'completed' ELSE 's' || (i + 1) END), '' ORDER BY i)
  FROM generate_series(1, p_stages) AS i
$f$;

SELECT wfe.create_definition(bench_cache_yaml(w.name, w.stages, w.cached)),
       wfe.approve(w.name, '1.0.0'), wfe.activate(w.name, '1.0.0')
  FROM (VALUES ('bench-cache1', 1, true), ('bench-plain1', 1, false),
               ('bench-cache-line', :stages, true), ('bench-plain-line', :stages, false)) AS w (name, stages, cached);

-- Samples (ms) by figure.  Unlogged: samples never wait for a flush.
CREATE UNLOGGED TABLE bench_cache_lat (figure text NOT NULL, ms float8 NOT NULL);
-- fresh inputs: values no earlier run used
CREATE SEQUENCE bench_cache_fresh START 1000000;

-- Work every task of the queue until none is left: claim one, complete it
-- (a transaction each, as a worker would).  Returns how many.
CREATE PROCEDURE bench_cache_work(INOUT p_done bigint DEFAULT 0)
LANGUAGE plpgsql
AS $$
DECLARE
    t record;
BEGIN
    p_done := 0;
    LOOP
        SELECT * INTO t FROM wfe.claim_task('bench-cache', 'bench', 1);
        EXIT WHEN t.run_id IS NULL;
        COMMIT;
        PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, jsonb_build_object('vec', t.input));
        COMMIT;
        p_done := p_done + 1;
    END LOOP;
END
$$;

-- A cached stage's release -> completed: p_n submits of bench-cache1 with
-- the warm input x = 0, one at a time.  Records the submit statement (the
-- server's time per hit: key, lookup, digest and schema check, completion)
-- and submit -> COMMIT returned (the run completed and durable).  For
-- comparison the same submit of bench-plain1 (no cache: the stage is
-- queued) and of bench-cache1 with a fresh input each time (a miss: key,
-- lookup, leader query, then queued).
CREATE PROCEDURE bench_cache_hits(p_n int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_run  bigint;
    t0     timestamptz;
    t1     timestamptz;
    v_bad  bigint;
BEGIN
    FOR i IN 1 .. p_n LOOP
        t0 := clock_timestamp();
        SELECT (wfe.submit('bench-cache1', jsonb_build_object('x', 0))).run_id INTO v_run;
        t1 := clock_timestamp();
        COMMIT;
        INSERT INTO bench_cache_lat VALUES
            ('hit:submit', extract(epoch FROM t1 - t0) * 1000),
            ('hit:committed', extract(epoch FROM clock_timestamp() - t0) * 1000);
        SELECT count(*) INTO v_bad FROM wfe.runs WHERE run_id = v_run AND state <> 'completed';
        IF v_bad > 0 THEN
            RAISE EXCEPTION 'bench: run % of a warm key did not complete at its submit', v_run;
        END IF;
        COMMIT;
        t0 := clock_timestamp();
        PERFORM wfe.submit('bench-plain1', jsonb_build_object('x', 0));
        t1 := clock_timestamp();
        COMMIT;
        INSERT INTO bench_cache_lat VALUES ('plain:submit', extract(epoch FROM t1 - t0) * 1000);
        COMMIT;
        t0 := clock_timestamp();
        PERFORM wfe.submit('bench-cache1', jsonb_build_object('x', nextval('bench_cache_fresh')));
        t1 := clock_timestamp();
        COMMIT;
        INSERT INTO bench_cache_lat VALUES ('miss:submit', extract(epoch FROM t1 - t0) * 1000);
        COMMIT;
    END LOOP;
END
$$;

-- One client of the steps/s figure, for p_seconds: submit a run of p_flow
-- (x: one of p_warm warm inputs, or, p_fresh_pct percent of the time, a
-- fresh one), commit, then work the queue until it is empty.
CREATE PROCEDURE bench_cache_drive(p_flow text, p_warm int, p_fresh_pct int, p_seconds float8)
LANGUAGE plpgsql
AS $$
DECLARE
    v_end  timestamptz := clock_timestamp() + make_interval(secs => p_seconds);
    v_x    bigint;
    v_done bigint;
BEGIN
    WHILE clock_timestamp() < v_end LOOP
        v_x := CASE WHEN random() * 100 < p_fresh_pct THEN nextval('bench_cache_fresh')
                    ELSE 1 + floor(random() * p_warm) END;
        PERFORM wfe.submit(p_flow, jsonb_build_object('x', v_x));
        COMMIT;
        CALL bench_cache_work(v_done);
    END LOOP;
END
$$;
