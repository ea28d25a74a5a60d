-- wfe: steps of a long linear workflow, batch 10, two transactions.
-- 1. claim up to 10 tasks (commit); the client keeps them, as a worker would
SELECT count(*) AS n,
       coalesce(array_agg(t.run_id ORDER BY t.run_id), '{}') AS runs,
       coalesce(array_agg(t.stage ORDER BY t.run_id), '{}') AS stages,
       coalesce(array_agg(t.attempt ORDER BY t.run_id), '{}') AS attempts,
       coalesce(array_agg(t.fence ORDER BY t.run_id), '{}') AS fences
  FROM wfe.claim_task('bench', 'w' || :client_id::text, 10) AS t
\gset
-- 2. complete them all (commit)
\if :n > 0
SELECT count(wfe.complete_task(c.run_id, c.stage, c.attempt, c.fence))
  FROM unnest(:runs::bigint[], :stages::text[], :attempts::int[], :fences::bigint[])
       AS c(run_id, stage, attempt, fence);
\endif
