-- The scale benchmarks' schema (bench/scale/scale.sh), in the bench database.
-- Safe to run again: every object is created only if it is missing.
-- psql variables: scale, seed003 -- the files of the two workflow definitions.
\set ON_ERROR_STOP on

-- Claim latency samples, one per claim transaction of bench/pgbench/claim-step.sql:
--   txn_ms  from the claim statement's start to the start of the client's
--           next statement (server clock): the claim's execution, its
--           commit, the reply and one round trip back;
--   exec_ms the claim statement's execution alone (no commit);
--   tasks   what the claim returned (0: the queue was empty).
-- Unlogged: a sample never waits for a flush.
CREATE UNLOGGED TABLE IF NOT EXISTS bench_claim_lat (
    label   text NOT NULL,
    txn_ms  float8 NOT NULL,
    exec_ms float8 NOT NULL,
    tasks   int NOT NULL
);

-- Step latency samples: pgbench's log of the same runs (--log), a script
-- (claim and completion, both transactions) per row.
CREATE UNLOGGED TABLE IF NOT EXISTS bench_step_lat (
    label text NOT NULL,
    ms    float8 NOT NULL
);

-- Two contracts and two linear workflows: one stage (the claim latency
-- figures), twelve stages (seed 003's shape).
SELECT wfe.register_worker('bench.scale@1', 'bench-scale');
SELECT wfe.register_worker('bench.seed003@1', 'bench-seed003');

SELECT NOT EXISTS (SELECT 1 FROM wfe.definitions WHERE workflow = 'bench-scale' AND state = 'active') AS missing
\gset
\if :missing
\set src `cat :'scale'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-scale', '1.0.0');
SELECT wfe.activate('bench-scale', '1.0.0');
\endif

SELECT NOT EXISTS (SELECT 1 FROM wfe.definitions WHERE workflow = 'bench-seed003' AND state = 'active') AS missing
\gset
\if :missing
\set src `cat :'seed003'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-seed003', '1.0.0');
SELECT wfe.activate('bench-seed003', '1.0.0');
\endif

-- bench_clone_run(template, first, n, span): n copies of a finished run,
-- as the engine left it: every row that names the template run, in every
-- table of schema wfe with a run_id column (runs first, then the others in
-- name order: run_stages, events, and outbox, timers, outputs, dead_letters
-- or any table a later engine adds, if the template left rows there).  The
-- copies get run ids template + first .. template + first + n - 1 (the
-- caller keeps them above every run id in use, and moves the identity
-- sequence past them); every timestamptz column is moved back in time, so
-- that copy k of total finished `span` before the template, copy total
-- just before it (runs evenly spread, ids growing with time); other
-- identity columns (event_id, outbox and timer ids) are generated; uuid
-- columns (message ids) are new.  Triggers and foreign-key checks are off
-- for the copy (session_replication_role = replica): the rows copied are
-- those the triggers left on the template, and their references hold.
-- Returns the rows written.
CREATE OR REPLACE FUNCTION bench_clone_run(p_template bigint, p_first bigint, p_n bigint,
                                           p_total bigint, p_span interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_tab  regclass;
    v_cols text;
    v_vals text;
    v_rows bigint;
    v_sum  bigint := 0;
BEGIN
    SET LOCAL session_replication_role = replica;
    FOR v_tab IN
        SELECT c.oid::regclass
          FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
          JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attname = 'run_id' AND NOT a.attisdropped
         WHERE n.nspname = 'wfe' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
         ORDER BY c.oid <> 'wfe.runs'::regclass, c.relname
    LOOP
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum),
               string_agg(CASE WHEN a.attname = 'run_id' THEN 't.run_id + g.k'
                               WHEN a.atttypid = 'timestamptz'::regtype THEN format('t.%I - g.back', a.attname)
                               WHEN a.atttypid = 'uuid'::regtype THEN 'gen_random_uuid()'
                               ELSE format('t.%I', a.attname) END, ', ' ORDER BY a.attnum)
          INTO v_cols, v_vals
          FROM pg_attribute AS a
         WHERE a.attrelid = v_tab AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
           AND (a.attidentity = '' OR a.attname = 'run_id');
        EXECUTE format('INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE
                        SELECT %s
                          FROM (SELECT * FROM %s WHERE run_id = $1) AS t,
                               (SELECT k, $5 * (($4 - k + 1)::float8 / $4) AS back
                                  FROM generate_series($2, $2 + $3 - 1) AS k) AS g',
                       v_tab, v_cols, v_vals, v_tab)
            USING p_template, p_first, p_n, p_total, p_span;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        v_sum := v_sum + v_rows;
    END LOOP;
    RETURN v_sum;
END
$$;

-- bench_view_ms(view): one full read of a dashboard view (every column of
-- every row, so nothing is left unevaluated), in ms by the server's clock.
CREATE OR REPLACE FUNCTION bench_view_ms(p_view text)
RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    n  bigint;
BEGIN
    EXECUTE format('SELECT sum(length(x::text)) FROM wfe.%I AS x', p_view) INTO n;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END
$$;

-- bench_drop_ms(partition): DROP TABLE of a day partition of wfe.events,
-- in ms by the server's clock (the retention figure, when its loop was
-- capped before the pass would drop it).
CREATE OR REPLACE FUNCTION bench_drop_ms(p_partition text)
RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    EXECUTE format('DROP TABLE wfe.%I', p_partition);
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END
$$;
