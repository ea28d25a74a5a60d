SELECT count(*) AS n, coalesce(max(t.run_id), 0) AS run_id, coalesce(max(t.stage), '') AS stage,
       coalesce(max(t.attempt), 0) AS attempt, coalesce(max(t.fence), 0) AS fence
  FROM wfe.claim_task('fq', 'w' || :client_id::text, 1) AS t
\gset
\if :n > 0
SELECT wfe.complete_task(:run_id, :stage, :attempt, :fence);
\endif
