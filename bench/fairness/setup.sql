-- bench/fairness: a one-stage workflow on queue fq, fair or not (run.sh sets it).
SELECT wfe.register_worker('bench.fair@1', 'fq');
SELECT wfe.create_definition($y$name: bench-fair
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: fq, worker: bench.fair@1, on_success: completed, on_failure: failed }
$y$);
SELECT wfe.approve('bench-fair', '1.0.0'); SELECT wfe.activate('bench-fair', '1.0.0');
-- when each of small's tasks became claimable (run.sh: the trickle's clock right after its submit committed)
CREATE TABLE IF NOT EXISTS bench_fair_claimable (run_id bigint PRIMARY KEY, at timestamptz NOT NULL);
