-- Queues: delivery modes, switching between them, external relays, large
-- payloads by reference, and cancellation acknowledgements.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY terse

-- SQLSTATE and message of a statement that is meant to fail
CREATE FUNCTION pg_temp.try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT wfe.register_worker('rt-q.step@1', 'rt-q-jobs');
SELECT wfe.create_definition($y$
name: rt-q-flow
version: "1.0.0"
entry: a
stages:
  - { name: a, type: worker, queue: rt-q-jobs, worker: rt-q.step@1, input: { v: "${context.v}" }, on_success: completed, on_failure: failed }
$y$) IS NOT NULL AS created;
SELECT wfe.approve('rt-q-flow', '1.0.0');
SELECT wfe.activate('rt-q-flow', '1.0.0');

-- configure_queue refuses what it cannot mean
SELECT pg_temp.try($q$SELECT wfe.configure_queue('Bad Queue')$q$);
SELECT pg_temp.try($q$SELECT wfe.configure_queue('rt-q-jobs', 'carrier-pigeon')$q$);
SELECT pg_temp.try($q$SELECT wfe.configure_queue('rt-q-jobs', 'poll', 0)$q$);
SELECT pg_temp.try($q$SELECT wfe.configure_queue(NULL)$q$);

-- a poll queue: two tasks wait, claimable
SELECT count(*) AS submitted FROM generate_series(1, 2) AS i,
       LATERAL wfe.submit('rt-q-flow', jsonb_build_object('v', i));
SELECT state, count(*) FROM wfe.run_stages WHERE queue = 'rt-q-jobs' GROUP BY state;

-- switched to broker: the waiting tasks get their dispatch messages, and
-- claim_task no longer serves the queue
SELECT wfe.configure_queue('rt-q-jobs', 'broker');
SELECT count(*) AS dispatch_rows FROM wfe.outbox
 WHERE kind = 'dispatch' AND routing_key = 'run.rt-q-jobs.small' AND state = 'pending';
SELECT pg_temp.try($q$SELECT * FROM wfe.claim_task('rt-q-jobs', 'w1')$q$);

-- an external relay claims and acknowledges them: the attempts are dispatched
SELECT pg_temp.try($q$SELECT wfe.outbox_claim(0, 'relay-1')$q$);
SELECT pg_temp.try($q$SELECT wfe.outbox_claim(10, '')$q$);
SELECT count(*) AS claimed FROM wfe.outbox_claim(10, 'relay-1') WHERE routing_key = 'run.rt-q-jobs.small';
SELECT wfe.outbox_ack(array(SELECT id FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.small'), 'relay-2') AS acked_by_another;
SELECT wfe.outbox_ack(array(SELECT id FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.small'), 'relay-1') AS acked;
SELECT state, count(*) FROM wfe.run_stages WHERE queue = 'rt-q-jobs' GROUP BY state;

-- a broker worker accepts one; the other is switched back to poll and claimed
SELECT wfe.accept_task(s.run_id, s.stage, s.attempt, s.fence, 'broker-w')
  FROM wfe.run_stages AS s WHERE s.queue = 'rt-q-jobs' ORDER BY s.run_id LIMIT 1;
SELECT wfe.configure_queue('rt-q-jobs', 'poll');
SELECT state, count(*) FROM wfe.run_stages WHERE queue = 'rt-q-jobs' GROUP BY state ORDER BY state;
SELECT count(*) AS claimed FROM wfe.claim_task('rt-q-jobs', 'w1', 10);

-- large inputs go by reference; the reference is checked
SET wfe.track_threshold_bytes = 1024;
SELECT wfe.configure_queue('rt-q-jobs', 'broker');
SELECT count(*) FROM wfe.submit('rt-q-flow', jsonb_build_object('v', repeat('x', 2000)));
RESET wfe.track_threshold_bytes;
SELECT routing_key, jsonb_typeof(body -> 'payload_inline') = 'null' AS by_reference,
       (body -> 'payload_ref') ?& array['bucket', 'key', 'sha256', 'bytes', 'run_id', 'stage', 'attempt', 'fence'] AS ref_shape
  FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.large';
SELECT length(wfe.fetch_payload(body -> 'payload_ref') ->> 'v') AS fetched
  FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.large';
SELECT pg_temp.try($q$SELECT wfe.fetch_payload('{"key": "sha256:00", "sha256": "11"}')$q$);
SELECT pg_temp.try($q$SELECT wfe.fetch_payload(jsonb_build_object('key', 'sha256:' || repeat('0', 64), 'sha256', repeat('0', 64)))$q$);
-- the reference names its attempt (wfe 0.3.0): a payload that attempt did
-- not dispatch does not exist for it, nor does another attempt's
SELECT pg_temp.try(format('SELECT wfe.fetch_payload(%L)',
                          (body -> 'payload_ref') || jsonb_build_object('key', 'sha256:' || repeat('0', 64), 'sha256', repeat('0', 64))))
  FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.large';
SELECT pg_temp.try(format('SELECT wfe.fetch_payload(%L)',
                          jsonb_set(body -> 'payload_ref', '{fence}', to_jsonb((body #>> '{payload_ref,fence}')::bigint + 1))))
  FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.large';
UPDATE wfe.payloads SET body = '{"v": "tampered"}';
SELECT pg_temp.try(format('SELECT wfe.fetch_payload(%L)', body -> 'payload_ref'))
  FROM wfe.outbox WHERE routing_key = 'run.rt-q-jobs.large';

-- a paused broker queue keeps its new tasks queued, without dispatch
-- messages; resuming it dispatches them
SELECT wfe.configure_queue('rt-q-jobs', 'broker', paused => true);
SELECT run_id AS paused_run FROM wfe.submit('rt-q-flow', '{"v": "p"}') \gset
SELECT state FROM wfe.run_stages WHERE run_id = :paused_run;
SELECT count(*) AS dispatches FROM wfe.outbox WHERE run_id = :paused_run;
SELECT wfe.configure_queue('rt-q-jobs', 'broker');
SELECT count(*) AS dispatches FROM wfe.outbox WHERE run_id = :paused_run;

-- cancellation acknowledgements
-- (an acknowledgement names the fence of the attempt asked to stop)
SELECT run_id AS cancel_run, fence AS cancel_fence FROM wfe.run_stages
 WHERE queue = 'rt-q-jobs' AND state = 'queued' LIMIT 1 \gset
SELECT wfe.cancel_run(:cancel_run, 'test');
SELECT wfe.ack_cancel(:cancel_run, 'a', 1, (SELECT fence FROM wfe.run_stages WHERE run_id = :cancel_run AND stage = 'a'))
       AS new_fence;
SELECT wfe.ack_cancel(:cancel_run, 'a', 1, :cancel_fence) AS ack;
SELECT wfe.ack_cancel(:cancel_run, 'a', 1, 7) AS wrong_fence;
SELECT wfe.ack_cancel(:cancel_run, 'nope', 1, 1) AS unknown_stage;
SELECT type FROM wfe.events WHERE run_id = :cancel_run AND type LIKE '%cancel%' ORDER BY event_id;

-- a queue's delivery mode as a worker learns it (wfe_worker cannot read
-- wfe.queues): broker, poll, poll for a queue never configured, NULL for NULL
SET ROLE wfe_worker;
SELECT wfe.queue_delivery('rt-q-jobs') AS jobs, wfe.queue_delivery('rt-q-never') AS never,
       wfe.queue_delivery(NULL) IS NULL AS null_in_null_out;
SELECT pg_temp.try($q$SELECT count(*) FROM wfe.queues$q$);
RESET ROLE;
