-- Seed 003's shape: one step of a 12-stage linear workflow, batch 1, two
-- transactions, as wfe-step.sql; when the step completes the run (its last
-- stage, s012), a new run is submitted in the same transaction, so the runs
-- in flight stay as many as were submitted.
-- 1. claim one task (commit)
SELECT count(*) AS n, coalesce(max(t.run_id), 0) AS run_id, coalesce(max(t.stage), '') AS stage,
       coalesce(max(t.attempt), 0) AS attempt, coalesce(max(t.fence), 0) AS fence,
       coalesce(bool_or(t.stage = 's012'), false)::int AS last
  FROM wfe.claim_task('bench-seed003', 'w' || :client_id::text, 1) AS t
\gset
-- 2. complete it (commit); a new run in place of a finished one
\if :n > 0
\if :last
SELECT wfe.complete_task(:run_id, :stage, :attempt, :fence),
       (SELECT s.run_id FROM wfe.submit('bench-seed003', jsonb_build_object('x', :client_id::int)) AS s);
\else
SELECT wfe.complete_task(:run_id, :stage, :attempt, :fence);
\endif
\endif
