-- The tables of "Where the time goes" (bench/run.sh), from bench_profile and
-- bench_waits.  psql variables: secs, the length of each profiling run.
\set ON_ERROR_STOP on
\pset format unaligned
\pset tuples_only on

\echo 'Per step (per run for submit), 4 clients, profiling on; time in the server''s statements, planning included, commit excluded:'
\echo
\echo '| run | steps/s | statement ms/step | of which planning | buffers/step | WAL records/step | WAL bytes/step |'
\echo '|---|---:|---:|---:|---:|---:|---:|'
SELECT format('| %s | %s | %s | %s | %s | %s | %s |', label, round(steps / :secs::numeric),
              round((ms / steps)::numeric, 3), round((plan_ms / steps)::numeric, 3),
              round(blocks::numeric / steps), round(wal_records::numeric / steps, 1),
              round(wal_bytes / steps))
  FROM (SELECT label, max(steps) AS steps,
               -- a top-level statement's figures include its nested ones'
               sum(total_ms + plan_ms) FILTER (WHERE toplevel) AS ms,
               sum(plan_ms) AS plan_ms,
               sum(blocks) FILTER (WHERE toplevel) AS blocks,
               sum(wal_records) FILTER (WHERE toplevel) AS wal_records,
               sum(wal_bytes) FILTER (WHERE toplevel) AS wal_bytes
          FROM bench_profile GROUP BY label) AS t
 WHERE steps > 0
 ORDER BY label;

\echo
\echo 'What the pgbench sessions were doing, sampled every 10 ms (CPU: running; idle: waiting for pgbench):'
\echo
\echo '| run | state or wait event | share of samples |'
\echo '|---|---|---:|'
SELECT format('| %s | %s | %s %% |', label, wait, round(100.0 * n / total, 1))
  FROM (SELECT label, wait, count(*) AS n, sum(count(*)) OVER (PARTITION BY label) AS total,
               row_number() OVER (PARTITION BY label ORDER BY count(*) DESC) AS k
          FROM bench_waits GROUP BY label, wait) AS t
 WHERE k <= 7
 ORDER BY label, n DESC;

