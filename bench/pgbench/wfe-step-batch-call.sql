-- wfe: steps of a long linear workflow, batch 10, two transactions, as
-- wfe-step-batch.sql, but the ten reports go in one call of
-- wfe.complete_tasks(reports jsonb): a JSON array of
-- {"run_id", "stage", "attempt", "fence", "result"} objects.
-- 1. claim up to 10 tasks (commit); the client keeps them, as a worker would
SELECT count(*) AS n,
       coalesce(array_agg(t.run_id ORDER BY t.run_id), '{}') AS runs,
       coalesce(array_agg(t.stage ORDER BY t.run_id), '{}') AS stages,
       coalesce(array_agg(t.attempt ORDER BY t.run_id), '{}') AS attempts,
       coalesce(array_agg(t.fence ORDER BY t.run_id), '{}') AS fences
  FROM wfe.claim_task('bench', 'w' || :client_id::text, 10) AS t
\gset
-- 2. complete them all, one call (commit)
\if :n > 0
SELECT count(*)
  FROM wfe.complete_tasks((SELECT jsonb_agg(jsonb_build_object('run_id', c.run_id, 'stage', c.stage,
                                                               'attempt', c.attempt, 'fence', c.fence,
                                                               'result', '{}'::jsonb) ORDER BY c.ord)
                             FROM unnest(:runs::bigint[], :stages::text[], :attempts::int[], :fences::bigint[])
                                  WITH ORDINALITY AS c(run_id, stage, attempt, fence, ord)));
\endif
