-- Scale: one step of a one-stage workflow, the claim timed; two transactions.
-- pgbench variables: queue, workflow (what to claim, what to submit), label
-- (the figure the samples count for).
-- 1. claim one task (commit); statement_timestamp() is the claim's start,
--    clock_timestamp() in the aggregate's output its end (before the commit)
SELECT count(*) AS n, coalesce(max(t.run_id), 0) AS run_id, coalesce(max(t.stage), '') AS stage,
       coalesce(max(t.attempt), 0) AS attempt, coalesce(max(t.fence), 0) AS fence,
       extract(epoch FROM statement_timestamp()) * 1000 AS t0,
       extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000 AS exec_ms
  FROM wfe.claim_task(:queue, 'w' || :client_id::text, 1) AS t
\gset
-- 2. the claim's sample (its start to this statement's start: execution,
--    commit, reply, the client's turn), the completion, and a new run in its
--    place, so the queue keeps its depth (commit)
\if :n > 0
WITH sample AS (
    INSERT INTO bench_claim_lat (label, txn_ms, exec_ms, tasks)
    VALUES (:label, extract(epoch FROM statement_timestamp()) * 1000 - :t0, :exec_ms, :n)
)
SELECT wfe.complete_task(:run_id, :stage, :attempt, :fence),
       (SELECT s.run_id FROM wfe.submit(:workflow, jsonb_build_object('x', :client_id::int)) AS s);
\else
INSERT INTO bench_claim_lat (label, txn_ms, exec_ms, tasks)
VALUES (:label, extract(epoch FROM statement_timestamp()) * 1000 - :t0, :exec_ms, 0);
\endif
