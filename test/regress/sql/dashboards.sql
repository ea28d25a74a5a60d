--
-- The psql dashboards (operations.md "Dashboards"): each view's output on a
-- known data set, at terminal width.  The test works in a database of its
-- own, so what the other tests leave does not show, and ids start at 1; the
-- times are set relative to one transaction's now(), so every age and
-- duration is exact.  wfe_reader reads every view (publisher health
-- included) without superuser.
--
SET client_min_messages = warning;
DROP DATABASE IF EXISTS wfe_dashboards;
\set regress_db :DBNAME
CREATE DATABASE wfe_dashboards;
\c wfe_dashboards
CREATE EXTENSION wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('dash.fetch@1', 'fetch');
SELECT wfe.register_worker('dash.render@1', 'render');
SELECT wfe.create_definition($yaml$
name: dash-flow
version: "1.0.0"
entry: fetch
defaults:
  retry: { max_attempts: 2, initial_ms: 1000, multiplier: 2.0, max_ms: 1000, jitter: none }
stages:
  - name: fetch
    type: worker
    queue: fetch
    worker: dash.fetch@1
    on_success: render
    on_failure: failed
  - name: render
    type: worker
    queue: render
    worker: dash.render@1
    execution_deadline_ms: 60000
    on_success: completed
    on_failure: failed
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('dash-flow', '1.0.0');
SELECT wfe.activate('dash-flow', '1.0.0');

-- Take n tasks of a queue and report them: completed, failed (retryable) or
-- left running.
CREATE FUNCTION pg_temp.work(p_queue text, p_n int, p_how text)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
    n int := 0;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task(p_queue, 'w-dash', p_n) LOOP
        IF p_how = 'complete' THEN
            PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, '{}');
        ELSIF p_how = 'fail' THEN
            PERFORM wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence,
                                  '{"code": "render.crash", "message": "segfault"}', true);
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- 12 runs: 8 of tenant acme, 4 of globex; two keyed submits repeated.
SELECT count(*) AS submitted FROM generate_series(1, 12) AS i,
       LATERAL wfe.submit('dash-flow', jsonb_build_object('n', i),
                          CASE WHEN i <= 3 THEN 'key-' || i END,
                          jsonb_build_object('tenant', CASE WHEN i <= 8 THEN 'acme' ELSE 'globex' END));
SELECT run_id, accepted FROM wfe.submit('dash-flow', '{"n": 1}', 'key-1', '{"tenant": "acme"}');
SELECT run_id, accepted FROM wfe.submit('dash-flow', '{"n": 2}', 'key-2', '{"tenant": "acme"}');
-- runs 1-7 get past fetch; render: 1-5 complete, 6 and 7 fail twice
-- (retries exhausted: failed, two dead letters)
SELECT pg_temp.work('fetch', 7, 'complete') AS fetched;
SELECT pg_temp.work('render', 5, 'complete') AS rendered;
SELECT pg_temp.work('render', 2, 'fail') AS failed_once;
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE kind = 'retry' AND fired_at IS NULL;
SELECT wfe.tick() >= 2 AS retried;
SELECT pg_temp.work('render', 2, 'fail') AS failed_twice;
-- 8-10 get past fetch; 8 and 9 are left running (the queue's limit is 2),
-- 10 waits; 11 and 12 wait on fetch
SELECT pg_temp.work('fetch', 3, 'complete') AS fetched;
SELECT pg_temp.work('render', 2, 'run') AS running;
-- acme's limits, set once the work above is done (it took up to 7 of its
-- tasks at once): 10 runs and 4 tasks in flight
SELECT wfe.configure_tenant('acme', max_runs_in_flight => 10, max_tasks_in_flight => 4);
-- render's limit: 2 in flight, so 10 waits for room
SELECT wfe.configure_queue('render', 'poll', max_in_flight => 2);
SELECT count(*) AS over_the_limit FROM wfe.claim_task('render', 'w-dash', 5);
SELECT run_id, state FROM wfe.runs ORDER BY run_id;

-- The clock: run i was submitted 40 - 3i minutes ago; fetch took i seconds
-- after waiting i/2 s; render took 10i seconds after waiting 2 s; every
-- finished run ended 5 minutes after its start, plus i seconds.
BEGIN;
UPDATE wfe.runs AS r
   SET submitted_at = now() - make_interval(mins => 40 - 3 * r.run_id::int),
       finished_at = CASE WHEN r.finished_at IS NOT NULL
                          THEN now() - make_interval(mins => 35 - 3 * r.run_id::int)
                               + make_interval(secs => r.run_id::int) END;
UPDATE wfe.run_stages AS st
   SET ready_at = r.submitted_at + CASE st.stage WHEN 'fetch' THEN interval '0' ELSE interval '1 min' END,
       started_at = CASE WHEN st.started_at IS NOT NULL THEN
                    r.submitted_at + CASE st.stage WHEN 'fetch' THEN make_interval(secs => st.run_id / 2.0)
                                                   ELSE interval '1 min 2 s' END END,
       finished_at = CASE WHEN st.finished_at IS NOT NULL THEN
                     r.submitted_at + CASE st.stage WHEN 'fetch' THEN make_interval(secs => st.run_id * 1.5)
                                                    ELSE interval '1 min 2 s' + make_interval(secs => 10 * st.run_id::int) END END,
       deadline_at = CASE WHEN st.deadline_at IS NOT NULL THEN
                     CASE WHEN st.run_id = 9 THEN now() - interval '30 s' ELSE now() + interval '1 min' END END
  FROM wfe.runs AS r WHERE r.run_id = st.run_id;
UPDATE wfe.dead_letters AS d SET at = now() - make_interval(mins => 20 - d.run_id::int);
-- the outbox: 3 dispatches a broker queue never took (one unroutable), 4
-- published in the last minute
INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key, message_id,
                        body, state, last_error, created_at, published_at)
SELECT 'acme', 11, 'fetch', 1, 1, 'dispatch', 'wfe.commands', 'run.fetch.small',
       wfe._message_id(i, 'fetch', 1, 1, 'dispatch'), '{}',
       CASE WHEN i <= 3 THEN 'pending' ELSE 'published' END,
       CASE WHEN i = 1 THEN 'unroutable: no queue is bound for wfe.commands run.fetch.small' END,
       now() - make_interval(mins => 10 - i), CASE WHEN i > 3 THEN now() - make_interval(secs => i) END
  FROM generate_series(1, 7) AS i;
UPDATE wfe.publisher_lease
   SET holder = 'wfe worker 4242', token = 7, heartbeat_at = now() - interval '2 s', connected = false,
       last_error = 'a socket error occurred (connection refused)';
-- run 12 as a lost update would leave it: nothing under way, nothing due
-- (the transition guard is a trigger; replica mode skips it)
SET LOCAL session_replication_role = replica;
UPDATE wfe.run_stages SET state = 'waiting', attempt = 0 WHERE run_id = 12 AND stage = 'fetch';
SET LOCAL session_replication_role = origin;

-- the dashboards read through row-level security: the reader acts for both tenants
SELECT wfe.add_tenant_member('wfe_reader', 'acme'), wfe.add_tenant_member('wfe_reader', 'globex');
SET LOCAL ROLE wfe_reader;
SELECT * FROM wfe.dashboard_runs;
SELECT * FROM wfe.dashboard_queues;
\x on
SELECT * FROM wfe.dashboard_outbox;
\x off
SELECT * FROM wfe.dashboard_stages;
SELECT * FROM wfe.dashboard_tenants;
SELECT * FROM wfe.idempotency;
SELECT * FROM wfe.dashboard_stuck;
-- the pictures: run 6 failed at render (its failure route bold), run 9
-- renders now, run 12 never started its first stage
SELECT wfe.run_mermaid(6);
SELECT wfe.run_mermaid(9) ~ 'class s1 running' AS render_running,
       wfe.run_mermaid(9) ~ 'linkStyle 0,1 stroke' AS path_so_far;
SELECT wfe.run_mermaid(12) !~ 'linkStyle' AS nothing_taken;
-- a reader reads, and writes nothing
UPDATE wfe.publisher_lease SET connected = true;
ROLLBACK;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE wfe_dashboards;
