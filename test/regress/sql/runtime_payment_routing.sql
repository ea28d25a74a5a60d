--
-- Seed 004's payment routing as a decision stage (examples/payment-routing.yaml):
-- both branches, the has() false path, typed bindings, and retries with
-- exponential backoff -- a retryable failure schedules a timer, the timer
-- queues a new attempt with a new fence, the old attempt's callbacks are
-- stale, and exhaustion fails the stage with a dead letter.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-pr.payment.review@1', 'rt-pr-review');
SELECT wfe.register_worker('rt-pr.payment.process@1', 'rt-pr-payments');
SELECT wfe.create_definition($yaml$
name: payroute-test
version: "1.0.0"
entry: route
stages:
  - name: route
    type: decision
    on_evaluation_error: failed
    branches:
      - when: "has(payload.amount) && payload.amount > 10000"
        next: high-value
      - when: "true"
        next: standard
  - name: high-value
    type: worker
    queue: rt-pr-review
    worker: rt-pr.payment.review@1
    input: { amount: "${context.amount}", account: "${context.account}" }
    retry: { max_attempts: 5, initial_ms: 500, multiplier: 2.0, max_ms: 30000, jitter: full }
    on_success: completed
    on_failure: failed
  - name: standard
    type: worker
    queue: rt-pr-payments
    worker: rt-pr.payment.process@1
    input: { amount: "${context.amount}", account: "${context.account}" }
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('payroute-test', '1.0.0');
SELECT wfe.activate('payroute-test', '1.0.0');

-- (fences are shown by generation, their high 32 bits: the low half is random)
CREATE FUNCTION pg_temp.stages(p_run bigint)
RETURNS TABLE (stage text, state text, attempt int, fence_gen bigint, skip_reason text, error text, result jsonb)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.fence >> 32, s.skip_reason, s.error ->> 'code', s.result
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.run(p_run bigint)
RETURNS TABLE (state text, intent text, reason text)
LANGUAGE sql AS $$
SELECT r.state, r.intent, r.reason FROM wfe.runs AS r WHERE r.run_id = p_run
$$;
-- Claim a task of a queue; answer it with a result or a retryable failure.
CREATE FUNCTION pg_temp.work(p_queue text, p_result jsonb DEFAULT '{}')
RETURNS TABLE (stage text, attempt int, fence_gen bigint, input jsonb, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task(p_queue, 'w-pr') LOOP
        stage := t.stage; attempt := t.attempt; fence_gen := t.fence >> 32; input := t.input;
        outcome := wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result);
        RETURN NEXT;
    END LOOP;
END
$$;
-- Claim, fail (retryable), and check the retry timer the failure wrote: its
-- due time lies between the failure and the failure plus the policy's
-- backoff before jitter, min(max_ms, initial_ms * multiplier^(attempt-1)).
-- The timer names the failed attempt's fence (timer_fence: the same).
CREATE FUNCTION pg_temp.fail_once(p_queue text)
RETURNS TABLE (stage text, attempt int, fence_gen bigint, outcome text, state text,
               timer_attempt int, timer_fence boolean, within_backoff boolean)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task(p_queue, 'w-pr') LOOP
        stage := t.stage; attempt := t.attempt; fence_gen := t.fence >> 32;
        outcome := wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "gateway.timeout"}');
        SELECT s.state INTO state FROM wfe.run_stages AS s WHERE s.run_id = t.run_id AND s.stage = t.stage;
        SELECT x.attempt, x.fence = t.fence,
               x.due_at >= now()
               AND x.due_at <= now() + make_interval(secs => least(30000, 500 * 2 ^ (t.attempt - 1)) / 1000.0)
          INTO timer_attempt, timer_fence, within_backoff
          FROM wfe.timers AS x
         WHERE x.run_id = t.run_id AND x.stage = t.stage AND x.attempt = t.attempt AND x.kind = 'retry';
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE FUNCTION pg_temp.retry_now(p_run bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE wfe.timers SET due_at = now() - interval '1 s'
     WHERE run_id = p_run AND kind = 'retry' AND fired_at IS NULL;
    RETURN wfe.tick() IS NOT NULL;   -- how many it handled depends on other tests
END
$$;

--
-- High value: the first branch.  The standard branch is not taken.
--
SELECT run_id AS hv FROM wfe.submit('payroute-test', '{"amount": 15000, "account": "A-1"}') \gset
SELECT * FROM pg_temp.stages(:hv);
-- the bound input keeps the JSON types: amount is a number
SELECT * FROM pg_temp.work('rt-pr-review', '{"approved": true}');
SELECT * FROM pg_temp.run(:hv);
SELECT * FROM pg_temp.stages(:hv);

--
-- Standard: the fallback branch, also at the boundary (10000 is not > 10000).
--
SELECT run_id AS st FROM wfe.submit('payroute-test', '{"amount": 50, "account": "B-1"}') \gset
SELECT * FROM pg_temp.stages(:st);
SELECT * FROM pg_temp.work('rt-pr-payments', '{"charged": 50}');
SELECT * FROM pg_temp.run(:st);
SELECT run_id AS edge FROM wfe.submit('payroute-test', '{"amount": 10000, "account": "B-2"}') \gset
SELECT stage, state, skip_reason FROM pg_temp.stages(:edge);
SELECT * FROM pg_temp.work('rt-pr-payments');
SELECT * FROM pg_temp.run(:edge);
SELECT run_id AS big FROM wfe.submit('payroute-test', '{"amount": 10000.5, "account": "B-3"}') \gset
SELECT stage, state, skip_reason FROM pg_temp.stages(:big);
SELECT * FROM pg_temp.work('rt-pr-review');

--
-- has() false: no amount at all.  The decision takes the fallback without an
-- evaluation error; standard then cannot bind ${context.amount}
-- (binding.missing), which fails it without retry and follows on_failure.
--
SELECT run_id AS na, accepted FROM wfe.submit('payroute-test', '{"account": "C-1"}') \gset
SELECT :'accepted' AS accepted;
SELECT * FROM pg_temp.stages(:na);
SELECT result FROM wfe.run_stages WHERE run_id = :na AND stage = 'route';
SELECT error FROM wfe.run_stages WHERE run_id = :na AND stage = 'standard';
SELECT count(*) AS timers FROM wfe.timers WHERE run_id = :na;
SELECT * FROM pg_temp.run(:na);
-- amount present but null: has() is true, then null > 10000 cannot be evaluated
SELECT run_id AS nul FROM wfe.submit('payroute-test', '{"amount": null, "account": "C-2"}') \gset
SELECT stage, state, skip_reason, error FROM pg_temp.stages(:nul);
-- amount of the wrong type: an evaluation error, which routes to failed
SELECT run_id AS str FROM wfe.submit('payroute-test', '{"amount": "20000", "account": "C-3"}') \gset
SELECT stage, state, skip_reason, error FROM pg_temp.stages(:str);
SELECT error ->> 'code' AS code, error -> 'branch' AS branch FROM wfe.run_stages WHERE run_id = :str AND stage = 'route';
SELECT * FROM pg_temp.run(:str);

--
-- Retries with backoff: five attempts, 500 ms doubling, full jitter.
--
SELECT run_id AS rt FROM wfe.submit('payroute-test', '{"amount": 20000, "account": "D-1"}') \gset
SELECT * FROM pg_temp.fail_once('rt-pr-review');
SELECT fence AS rt_f1 FROM wfe.run_stages WHERE run_id = :rt AND stage = 'high-value' \gset
SELECT * FROM pg_temp.stages(:rt);
-- while the retry is scheduled nothing can be claimed, and a tick before the
-- timer is due does nothing
SELECT count(*) AS claimable FROM wfe.claim_task('rt-pr-review', 'w-pr');
UPDATE wfe.timers SET due_at = now() + interval '1 hour' WHERE run_id = :rt AND fired_at IS NULL;
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT stage, state, attempt, fence_gen FROM pg_temp.stages(:rt) WHERE stage = 'high-value';
-- due: the tick queues attempt 2 with a new fence
SELECT pg_temp.retry_now(:rt) AS ticked;
SELECT stage, state, attempt, fence_gen FROM pg_temp.stages(:rt) WHERE stage = 'high-value';
SELECT attempt, fence >> 32 AS fence_gen, fence = :rt_f1 AS attempt_1_fence, fired_at IS NOT NULL AS fired
  FROM wfe.timers WHERE run_id = :rt ORDER BY timer_id;
SELECT fence > :rt_f1 AS new_fence FROM wfe.run_stages WHERE run_id = :rt AND stage = 'high-value';
-- attempt 1's callbacks (with its real fence) are stale now, and change nothing
SELECT wfe.complete_task(:rt, 'high-value', 1, :rt_f1, '{"approved": true}');
SELECT wfe.fail_task(:rt, 'high-value', 1, :rt_f1, '{"code": "gateway.timeout"}');
SELECT wfe.heartbeat(:rt, 'high-value', 1, :rt_f1);
SELECT stage, state, attempt, fence_gen FROM pg_temp.stages(:rt) WHERE stage = 'high-value';
-- attempts 2, 3 and 4 fail too, each with a longer backoff
SELECT * FROM pg_temp.fail_once('rt-pr-review');
SELECT pg_temp.retry_now(:rt) AS ticked;
SELECT * FROM pg_temp.fail_once('rt-pr-review');
SELECT pg_temp.retry_now(:rt) AS ticked;
SELECT * FROM pg_temp.fail_once('rt-pr-review');
SELECT pg_temp.retry_now(:rt) AS ticked;
-- the event log has each delay, within the policy
SELECT attempt, (detail ->> 'delay_ms')::numeric BETWEEN 0 AND least(30000, 500 * 2 ^ (attempt - 1)) AS within_backoff,
       detail -> 'error' AS error
  FROM wfe.events WHERE run_id = :rt AND type = 'stage.retry_scheduled' ORDER BY event_id;
-- attempt 5 is the last: its failure fails the stage, the run, and leaves a dead letter
SELECT * FROM pg_temp.fail_once('rt-pr-review');
SELECT * FROM pg_temp.stages(:rt);
SELECT * FROM pg_temp.run(:rt);
SELECT stage, attempt, reason, error FROM wfe.dead_letters WHERE run_id = :rt;
SELECT count(*) FILTER (WHERE fired_at IS NULL) AS pending_timers, count(*) AS timers
  FROM wfe.timers WHERE run_id = :rt;
SELECT s ->> 'stage' AS stage, s ->> 'status' AS status, s -> 'attempts' AS attempts
  FROM jsonb_array_elements(wfe.report(:rt) -> 'stages') AS s;

--
-- A retry that succeeds: the second attempt completes the run.
--
SELECT run_id AS ok FROM wfe.submit('payroute-test', '{"amount": 30000, "account": "E-1"}') \gset
SELECT stage, attempt, fence_gen, outcome, state FROM pg_temp.fail_once('rt-pr-review');
SELECT pg_temp.retry_now(:ok) AS ticked;
SELECT * FROM pg_temp.work('rt-pr-review', '{"approved": true}');
SELECT * FROM pg_temp.run(:ok);
SELECT count(*) AS dead_letters FROM wfe.dead_letters WHERE run_id = :ok;
