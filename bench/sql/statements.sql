-- The statements of one profiling run (bench/run.sh) as a markdown table:
-- the top-level ones the client sent, then the nested ones by total time.
-- psql variables: label.  Nested times are inclusive: a statement that
-- calls a function includes the statements that function runs.
\set ON_ERROR_STOP on
\pset format unaligned
\pset tuples_only on

\echo '| exec ms/step | plan ms/step | plans/call | calls/step | buffers/call | WAL bytes/call | statement |'
\echo '|---:|---:|---:|---:|---:|---:|---|'
SELECT format('| %s | %s | %s | %s | %s | %s | `%s` |', round((total_ms / steps)::numeric, 3),
              round((plan_ms / steps)::numeric, 3), round(plans::numeric / nullif(calls, 0), 2),
              round(calls::numeric / steps, 2), round(blocks::numeric / nullif(calls, 0)),
              round(wal_bytes / nullif(calls, 0)),
              replace(left(query, 140) || CASE WHEN length(query) > 140 THEN ' …' ELSE '' END, '|', '\|'))
  FROM (SELECT *, row_number() OVER (PARTITION BY toplevel ORDER BY total_ms + plan_ms DESC) AS k
          FROM bench_profile WHERE label = :'label' AND steps > 0) AS t
 WHERE toplevel OR k <= 14
 ORDER BY toplevel DESC, total_ms + plan_ms DESC;
