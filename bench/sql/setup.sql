-- The benchmark's schema (bench/run.sh), in the bench database, which has wfe.
-- psql variables: steps, submit -- the files of the two workflow definitions.
\set ON_ERROR_STOP on

CREATE EXTENSION pg_stat_statements;

-- The machine's commit rate: one row per transaction, nothing else.
CREATE TABLE bench_inserts (
    id         bigserial PRIMARY KEY,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The floor: a bare SKIP LOCKED job queue, ready rows indexed.
CREATE TABLE bench_jobs (
    id         bigserial PRIMARY KEY,
    queue      text NOT NULL,
    state      text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bench_jobs_ready ON bench_jobs (queue, id) WHERE state = 'ready';

-- What the profiling runs record.  Unlogged: samples never wait for a flush.
CREATE UNLOGGED TABLE bench_waits (label text, wait text);
CREATE TABLE bench_profile (
    label       text,
    steps       bigint,
    toplevel    boolean,
    calls       bigint,
    total_ms    float8,
    plans       bigint,
    plan_ms     float8,
    blocks      bigint,
    wal_records bigint,
    wal_bytes   numeric,
    query       text
);

-- wfe: two worker contracts with empty schemas, two linear workflows.
SELECT wfe.register_worker('bench.step@1', 'bench');
SELECT wfe.register_worker('bench.submit@1', 'bench-submit');
-- the steps are claimed and reported as a worker would: a login role of
-- wfe_worker granted the queue (superusers skip the grant check)
CREATE ROLE bench_worker LOGIN IN ROLE wfe_worker;
SELECT wfe.grant_queue('bench_worker', 'bench');

\set src `cat :'steps'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-steps', '1.0.0');
SELECT wfe.activate('bench-steps', '1.0.0');

\set src `cat :'submit'`
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-submit', '1.0.0');
SELECT wfe.activate('bench-submit', '1.0.0');
