--
-- Renewing a lease (runtime.md "heartbeat"): a heartbeat renews the
-- lease_ms a claim granted and the heartbeat window, from now, never past
-- the stage's execution deadline; a lease that expires times the attempt
-- out on the execution clock; a new attempt starts without a lease.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-ls.work@1', 'rt-ls-work');
SELECT wfe.register_worker('rt-ls.beat@1', 'rt-ls-beat');
SELECT wfe.create_definition($yaml$
name: lease-test
version: "1.0.0"
entry: first
defaults:
  retry: { max_attempts: 2, initial_ms: 1000, multiplier: 1.0, max_ms: 1000, jitter: none }
stages:
  - name: first
    type: worker
    queue: rt-ls-work
    worker: rt-ls.work@1
    execution_deadline_ms: 8000
    on_success: beat
    on_failure: failed
  - name: beat
    type: worker
    queue: rt-ls-beat
    worker: rt-ls.beat@1
    heartbeat_ms: 3000
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('lease-test', '1.0.0');
SELECT wfe.activate('lease-test', '1.0.0');

-- the stage's deadline, relative to the last heartbeat, and the recorded lease
CREATE FUNCTION pg_temp.lease(p_run bigint, p_stage text)
RETURNS TABLE (state text, lease_ms int, deadline_after_heartbeat interval)
LANGUAGE sql AS $$
SELECT s.state, s.lease_ms, date_trunc('milliseconds', s.deadline_at - s.heartbeat_at)
  FROM wfe.run_stages AS s WHERE s.run_id = p_run AND s.stage = p_stage
$$;
-- pretend the attempt was claimed p_ago ago (its deadline as the claim set it)
CREATE FUNCTION pg_temp.age(p_run bigint, p_stage text, p_ago interval)
RETURNS void LANGUAGE sql AS $$
UPDATE wfe.run_stages AS s
   SET started_at = s.started_at - p_ago, heartbeat_at = s.heartbeat_at - p_ago,
       deadline_at = s.deadline_at - p_ago
 WHERE s.run_id = p_run AND s.stage = p_stage
$$;

-- a 5 s lease on a stage without heartbeat_ms (execution deadline 8 s)
SELECT run_id AS r FROM wfe.submit('lease-test', '{}') \gset
SELECT t.attempt, t.fence, t.deadline_at - now() AS lease
  FROM wfe.claim_task('rt-ls-work', 'w-ls', lease_ms => 5000) AS t \gset r_
SELECT :'r_lease' AS claimed_lease;
SELECT * FROM pg_temp.lease(:r, 'first');
-- 2 s later a heartbeat renews it: 5 s from now
SELECT pg_temp.age(:r, 'first', interval '2 s');
SELECT wfe.heartbeat(:r, 'first', :r_attempt, :r_fence);
SELECT * FROM pg_temp.lease(:r, 'first');
-- 6 s after the claim the execution deadline (claim + 8 s) bounds it: 2 s left
SELECT pg_temp.age(:r, 'first', interval '4 s');
SELECT wfe.heartbeat(:r, 'first', :r_attempt, :r_fence);
SELECT date_trunc('milliseconds', deadline_at - started_at) AS execution_bound,
       deadline_at - heartbeat_at < interval '5 s' AS lease_cut
  FROM wfe.run_stages WHERE run_id = :r AND stage = 'first';
-- a lease that is not renewed expires on the execution clock, and the retry has no lease
SELECT pg_temp.age(:r, 'first', interval '3 s');
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT detail ->> 'clock' AS clock FROM wfe.events WHERE run_id = :r AND type = 'stage.timed_out';
SELECT wfe.heartbeat(:r, 'first', :r_attempt, :r_fence) AS heartbeat_after_timeout;
UPDATE wfe.timers SET due_at = now() WHERE run_id = :r AND fired_at IS NULL;
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT state, attempt, lease_ms FROM wfe.run_stages WHERE run_id = :r AND stage = 'first';
-- claimed without a lease, a heartbeat moves no deadline (the execution deadline stands)
SELECT t.attempt, t.fence FROM wfe.claim_task('rt-ls-work', 'w-ls') AS t \gset r_
SELECT pg_temp.age(:r, 'first', interval '3 s');
SELECT wfe.heartbeat(:r, 'first', :r_attempt, :r_fence);
SELECT state, lease_ms, date_trunc('milliseconds', deadline_at - started_at) AS execution_deadline
  FROM wfe.run_stages WHERE run_id = :r AND stage = 'first';
SELECT wfe.complete_task(:r, 'first', :r_attempt, :r_fence, '{}');

-- a lease longer than the execution deadline (20 s > 8 s) is cut to it, at the claim and at each heartbeat
SELECT run_id AS l FROM wfe.submit('lease-test', '{}') \gset
SELECT t.attempt, t.fence, t.deadline_at - now() <= interval '8 s' AS claim_cut
  FROM wfe.claim_task('rt-ls-work', 'w-ls', lease_ms => 20000) AS t \gset l_
SELECT :'l_claim_cut' AS claim_cut;
SELECT pg_temp.age(:l, 'first', interval '1 s');
SELECT wfe.heartbeat(:l, 'first', :l_attempt, :l_fence);
SELECT lease_ms, date_trunc('milliseconds', deadline_at - started_at) AS lease_end
  FROM wfe.run_stages WHERE run_id = :l AND stage = 'first';
SELECT wfe.complete_task(:l, 'first', :l_attempt, :l_fence, '{}');

-- with heartbeat_ms (3 s) too, a heartbeat renews the shorter of the two
SELECT t.attempt, t.fence, t.deadline_at - now() AS first_deadline
  FROM wfe.claim_task('rt-ls-beat', 'w-ls', lease_ms => 10000) AS t
 WHERE t.run_id = :r \gset b_
SELECT :'b_first_deadline' AS first_deadline;
SELECT pg_temp.age(:r, 'beat', interval '2 s');
SELECT wfe.heartbeat(:r, 'beat', :b_attempt, :b_fence);
SELECT * FROM pg_temp.lease(:r, 'beat');
SELECT wfe.complete_task(:r, 'beat', :b_attempt, :b_fence, '{}');
SELECT state FROM wfe.runs WHERE run_id = :r;
-- accept_task (the broker handshake) grants no lease: its heartbeats renew only heartbeat_ms
-- (a broker queue's task: accept_task cannot start a poll queue's)
SELECT wfe.configure_queue('rt-ls-beat', 'broker');
SELECT attempt AS a_attempt, fence AS a_fence FROM wfe.run_stages WHERE run_id = :l AND stage = 'beat' \gset
SELECT wfe.accept_task(:l, 'beat', :a_attempt, :a_fence, 'w-ls');
SELECT pg_temp.age(:l, 'beat', interval '2 s');
SELECT wfe.heartbeat(:l, 'beat', :a_attempt, :a_fence);
SELECT * FROM pg_temp.lease(:l, 'beat');
