-- Floor: one step of a bare SKIP LOCKED queue, two transactions.
-- 1. claim one ready job (commit)
WITH claimed AS (
    UPDATE bench_jobs AS j SET state = 'running'
     WHERE j.id = (SELECT r.id FROM bench_jobs AS r
                    WHERE r.queue = 'bench' AND r.state = 'ready'
                    ORDER BY r.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING j.id, j.payload
)
SELECT count(*) AS n, coalesce(max(id), 0) AS job_id FROM claimed
\gset
-- 2. mark it done and insert its successor (commit)
\if :n > 0
WITH done AS (
    UPDATE bench_jobs AS j SET state = 'done' WHERE j.id = :job_id RETURNING j.queue, j.payload
)
INSERT INTO bench_jobs (queue, state, payload) SELECT queue, 'ready', payload FROM done;
\endif
