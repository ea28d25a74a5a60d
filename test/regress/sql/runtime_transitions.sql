--
-- The legal state transitions of stages and runs (runtime.md "States"):
-- wfe.stage_transitions() and wfe.run_transitions() list the tables the C
-- triggers enforce.  Every legal transition is exercised below -- by the
-- engine where the engine makes it, by a direct UPDATE (an operator, or a
-- broker publisher this suite does not run) where it does not -- and a
-- sample of illegal ones is refused with SQLSTATE 55000.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

--
-- The tables
--
SELECT * FROM wfe.stage_transitions();
SELECT * FROM wfe.run_transitions();
-- every state of the CHECK constraints appears in the tables
SELECT s.state,
       EXISTS (SELECT FROM wfe.stage_transitions() AS t WHERE s.state IN (t.from_state, t.to_state)) AS listed
  FROM unnest(ARRAY['waiting', 'queued', 'dispatched', 'running', 'retry_scheduled', 'completed',
                    'failed', 'timed_out', 'skipped', 'cancelled']) AS s(state);
-- stage states with no way out: none (completed and skipped wait again only
-- when an operator reopens a failed run); runs: completed and cancelled
SELECT s.state FROM unnest(ARRAY['waiting', 'queued', 'dispatched', 'running', 'retry_scheduled', 'completed',
                                 'failed', 'timed_out', 'skipped', 'cancelled']) AS s(state)
 WHERE NOT EXISTS (SELECT FROM wfe.stage_transitions() AS t WHERE t.from_state = s.state);
SELECT r.state FROM unnest(ARRAY['running', 'finalising', 'completed', 'failed', 'cancelled']) AS r(state)
 WHERE NOT EXISTS (SELECT FROM wfe.run_transitions() AS t WHERE t.from_state = r.state);

--
-- Record every state change this file causes, and who made it: the engine
-- (through wfe's functions) or a direct UPDATE (rt_tr.by = 'update').
--
CREATE SCHEMA rt_tr;
CREATE TABLE rt_tr.seen (seq bigserial, kind text, from_state text, to_state text, by text);
CREATE FUNCTION rt_tr.track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rt_tr.seen (kind, from_state, to_state, by)
    VALUES (TG_ARGV[0], OLD.state, NEW.state, coalesce(nullif(current_setting('rt_tr.by', true), ''), 'engine'));
    RETURN NULL;
END
$$;
CREATE TRIGGER rt_tr_stage AFTER UPDATE OF state ON wfe.run_stages
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION rt_tr.track('stage');
CREATE TRIGGER rt_tr_run AFTER UPDATE OF state ON wfe.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION rt_tr.track('run');

--
-- A workflow with a decision, a fork of two branches into a join, a worker
-- with a queue deadline and a bound input.  1.0.0 has no finaliser, 2.0.0 has one.
--
SELECT wfe.register_worker('rt-tr.step@1', 'rt-tr-solo');
SELECT wfe.register_worker('rt-tr.left@1', 'rt-tr-left');
SELECT wfe.register_worker('rt-tr.right@1', 'rt-tr-right');
SELECT wfe.register_action('rt-tr.audit@1', queue => 'rt-tr-audit');
\set body '\nentry: pick\nstages:\n  - name: pick\n    type: decision\n    on_evaluation_error: failed\n    branches:\n      - when: ''context.path == "fork"''\n        next: split\n      - when: "true"\n        next: solo\n  - name: solo\n    type: worker\n    queue: rt-tr-solo\n    worker: rt-tr.step@1\n    input: { v: "${context.v}" }\n    queue_deadline_ms: 60000\n    retry: { max_attempts: 2 }\n    on_success: completed\n    on_failure: failed\n  - name: split\n    type: fork\n    branches: [left, right]\n  - name: left\n    type: worker\n    queue: rt-tr-left\n    worker: rt-tr.left@1\n    on_success: meet\n    on_failure: meet\n  - name: right\n    type: worker\n    queue: rt-tr-right\n    worker: rt-tr.right@1\n    on_success: meet\n    on_failure: meet\n  - name: meet\n    type: join\n    required: [left, right]\n    on_success: completed\n    on_failure: failed\n'
SELECT wfe.create_definition(E'name: tr-test\nversion: "1.0.0"' || :'body') LIKE 'sha256:%' AS created;
SELECT wfe.create_definition(E'name: tr-test\nversion: "2.0.0"' || :'body' || E'finalisers: [rt-tr.audit@1]\n') LIKE 'sha256:%' AS created;
SELECT wfe.approve('tr-test', '1.0.0');
SELECT wfe.approve('tr-test', '2.0.0');
SELECT wfe.activate('tr-test', '1.0.0');

-- Helpers: callbacks with the stage's current attempt and fence.
CREATE FUNCTION pg_temp.cur(p_run bigint, p_stage text)
RETURNS wfe.run_stages LANGUAGE sql AS $$
SELECT * FROM wfe.run_stages WHERE run_id = p_run AND stage = p_stage
$$;
CREATE FUNCTION pg_temp.complete(p_run bigint, p_stage text)
RETURNS text LANGUAGE sql AS $$
SELECT wfe.complete_task(p_run, p_stage, s.attempt, s.fence, '{}') FROM pg_temp.cur(p_run, p_stage) AS s
$$;
CREATE FUNCTION pg_temp.fail(p_run bigint, p_stage text, p_retryable boolean)
RETURNS text LANGUAGE sql AS $$
SELECT wfe.fail_task(p_run, p_stage, s.attempt, s.fence, '{"code": "test"}', p_retryable)
  FROM pg_temp.cur(p_run, p_stage) AS s
$$;
-- accept_task starts only a broker queue's tasks (a poll queue's are
-- claim_task's): the handshake is made with the stage's queue in broker
-- mode, and the queue is a poll queue again afterwards (a queued attempt
-- switched to broker is re-dispatched: cur() reads its new fence).
CREATE FUNCTION pg_temp.accept(p_run bigint, p_stage text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    q text := (SELECT s.queue FROM pg_temp.cur(p_run, p_stage) AS s);
    poll boolean := NOT EXISTS (SELECT 1 FROM wfe.queues AS x WHERE x.queue = q AND x.delivery = 'broker');
    answer text;
BEGIN
    IF poll THEN
        PERFORM wfe.configure_queue(q, 'broker');
    END IF;
    SELECT wfe.accept_task(p_run, p_stage, s.attempt, s.fence, 'w-tr') INTO answer FROM pg_temp.cur(p_run, p_stage) AS s;
    IF poll THEN
        PERFORM wfe.configure_queue(q, 'poll');
    END IF;
    RETURN answer;
END
$$;
-- What a broker publisher does once it has published the dispatch message.
CREATE FUNCTION pg_temp.published(p_run bigint, p_stage text)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('rt_tr.by', 'update', true);
    UPDATE wfe.run_stages SET state = 'dispatched' WHERE run_id = p_run AND stage = p_stage;
    PERFORM set_config('rt_tr.by', '', true);
    RETURN (pg_temp.cur(p_run, p_stage)).state;
END
$$;
-- Let the current deadline of a stage pass, then tick.
CREATE FUNCTION pg_temp.expire(p_run bigint, p_stage text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE wfe.run_stages SET deadline_at = now() - interval '1 s' WHERE run_id = p_run AND stage = p_stage;
    RETURN wfe.tick() IS NOT NULL;   -- how many it handled depends on other tests
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
CREATE FUNCTION pg_temp.states(p_run bigint)
RETURNS text LANGUAGE sql AS $$
SELECT (SELECT r.state || coalesce('/' || r.intent, '') FROM wfe.runs AS r WHERE r.run_id = p_run) || ': '
       || string_agg(s.stage || '=' || s.state || coalesce('(' || s.skip_reason || ')', ''), ' ' ORDER BY s.ordinal)
  FROM wfe.run_stages AS s WHERE s.run_id = p_run
$$;

--
-- 1. The decision takes solo: pick waiting -> completed, the fork side
--    waiting -> skipped, solo waiting -> queued -> running -> completed;
--    the run running -> completed (no finalisers).
--
SELECT run_id AS r1 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.states(:r1);
SELECT task.stage, task.input FROM wfe.claim_task('rt-tr-solo', 'w-tr') AS task;
SELECT pg_temp.complete(:r1, 'solo');
SELECT pg_temp.states(:r1);

-- 2. A binding failure: solo waiting -> failed; the run running -> failed.
SELECT run_id AS r2 FROM wfe.submit('tr-test', '{"path": "solo"}') \gset
SELECT pg_temp.states(:r2);

-- 3. No queued -> completed | failed | retry_scheduled: a report before
--    any claim is stale and changes nothing (runtime.md "Who may report").
SELECT run_id AS r3 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.complete(:r3, 'solo');
SELECT pg_temp.fail(:r3, 'solo', true);
SELECT pg_temp.fail(:r3, 'solo', false);
SELECT pg_temp.states(:r3);
SELECT pg_temp.accept(:r3, 'solo');
SELECT pg_temp.complete(:r3, 'solo');
SELECT pg_temp.states(:r3);

-- 4. running -> retry_scheduled -> queued -> running -> failed (retries exhausted).
SELECT run_id AS r4 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:r4, 'solo');
SELECT pg_temp.fail(:r4, 'solo', true);
SELECT pg_temp.states(:r4);
SELECT pg_temp.retry_now(:r4);
SELECT pg_temp.accept(:r4, 'solo');
SELECT pg_temp.fail(:r4, 'solo', true);
SELECT pg_temp.states(:r4);

-- 5. queued -> timed_out (queue deadline) -> retry_scheduled, then the run
--    is cancelled: retry_scheduled -> cancelled, running -> cancelled.
SELECT run_id AS r5 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.expire(:r5, 'solo');
SELECT pg_temp.states(:r5);
SELECT wfe.cancel_run(:r5, 'test');
SELECT pg_temp.states(:r5);

-- 6. queued -> cancelled.
SELECT run_id AS r6 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT wfe.cancel_run(:r6);
SELECT pg_temp.states(:r6);

-- 7. running -> failed (no retry asked for), running -> timed_out,
--    running -> retry_scheduled, running -> cancelled.
SELECT run_id AS r7 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:r7, 'solo');
SELECT pg_temp.fail(:r7, 'solo', false);
SELECT pg_temp.states(:r7);
SELECT run_id AS r8 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:r8, 'solo');
SELECT pg_temp.expire(:r8, 'solo');
SELECT pg_temp.states(:r8);
SELECT wfe.cancel_run(:r8);
SELECT run_id AS r10 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:r10, 'solo');
SELECT pg_temp.fail(:r10, 'solo', true);            -- running -> retry_scheduled
SELECT pg_temp.states(:r10);
SELECT wfe.cancel_run(:r10);
SELECT run_id AS r9 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:r9, 'solo');
SELECT wfe.cancel_run(:r9);
SELECT pg_temp.states(:r9);

--
-- 8. The fork: split waiting -> completed, both branches queued.  Dispatched
--    attempts (a publisher's UPDATE) are accepted or time out; until
--    accepted they cannot be reported (stale: no dispatched -> completed |
--    failed | retry_scheduled).
--
SELECT run_id AS f1 FROM wfe.submit('tr-test', '{"path": "fork"}') \gset
SELECT pg_temp.states(:f1);
SELECT pg_temp.published(:f1, 'left'), pg_temp.published(:f1, 'right');
SELECT pg_temp.accept(:f1, 'left');                 -- dispatched -> running
SELECT pg_temp.complete(:f1, 'left');
SELECT pg_temp.complete(:f1, 'right');              -- stale: not accepted
SELECT pg_temp.states(:f1);
SELECT pg_temp.accept(:f1, 'right');
SELECT pg_temp.complete(:f1, 'right');
SELECT pg_temp.states(:f1);

SELECT run_id AS f2 FROM wfe.submit('tr-test', '{"path": "fork"}') \gset
SELECT pg_temp.published(:f2, 'left'), pg_temp.published(:f2, 'right');
SELECT pg_temp.fail(:f2, 'left', true);             -- stale: not accepted
SELECT pg_temp.fail(:f2, 'left', false);            -- stale: not accepted
SELECT pg_temp.states(:f2);
SELECT pg_temp.accept(:f2, 'left');
SELECT pg_temp.fail(:f2, 'left', true);
SELECT pg_temp.retry_now(:f2);
SELECT pg_temp.published(:f2, 'left');
SELECT pg_temp.accept(:f2, 'left');
SELECT pg_temp.fail(:f2, 'left', false);
SELECT pg_temp.states(:f2);
SELECT pg_temp.expire(:f2, 'right');                -- dispatched -> timed_out -> retry_scheduled
SELECT pg_temp.retry_now(:f2);
SELECT pg_temp.accept(:f2, 'right');
SELECT pg_temp.complete(:f2, 'right');              -- the join sees a failed branch: waiting -> failed
SELECT pg_temp.states(:f2);

-- A publisher gives a message back (dispatched -> queued); a cancel catches
-- a dispatched attempt (dispatched -> cancelled).
SELECT run_id AS f3 FROM wfe.submit('tr-test', '{"path": "fork"}') \gset
SELECT pg_temp.published(:f3, 'left');
SET rt_tr.by = 'update';
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :f3 AND stage = 'left';
RESET rt_tr.by;
SELECT pg_temp.published(:f3, 'left');
SELECT wfe.cancel_run(:f3);
SELECT pg_temp.states(:f3);

-- A decision whose expression fails: pick waiting -> failed.
SELECT run_id AS e1 FROM wfe.submit('tr-test', '{}') \gset
SELECT pg_temp.states(:e1);
SELECT error ->> 'code' AS code FROM wfe.run_stages WHERE run_id = :e1 AND stage = 'pick';

--
-- 9. With a finaliser (2.0.0): running -> finalising -> completed | failed | cancelled.
--
SELECT run_id AS g1 FROM wfe.submit('tr-test@2.0.0', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:g1, 'solo');
SELECT pg_temp.complete(:g1, 'solo');
SELECT pg_temp.states(:g1);
SELECT pg_temp.accept(:g1, 'finaliser.1');
SELECT pg_temp.complete(:g1, 'finaliser.1');
SELECT pg_temp.states(:g1);
SELECT run_id AS g2 FROM wfe.submit('tr-test@2.0.0', '{"path": "solo"}') \gset
SELECT pg_temp.accept(:g2, 'finaliser.1');
SELECT pg_temp.complete(:g2, 'finaliser.1');
SELECT pg_temp.states(:g2);
SELECT run_id AS g3 FROM wfe.submit('tr-test@2.0.0', '{"path": "solo", "v": "x"}') \gset
SELECT wfe.cancel_run(:g3);
SELECT pg_temp.accept(:g3, 'finaliser.1');
SELECT pg_temp.complete(:g3, 'finaliser.1');
SELECT pg_temp.states(:g3);

--
-- 10. Transitions no wfe function makes: an operator's direct UPDATEs.
--
SELECT run_id AS o1 FROM wfe.submit('tr-test', '{"path": "fork"}') \gset
SET rt_tr.by = 'update';
UPDATE wfe.run_stages SET state = 'cancelled' WHERE run_id = :o1 AND stage = 'meet';     -- waiting -> cancelled
-- re-drives, each put back where it was (queued -> running -> failed,
-- queued -> timed_out, queued -> cancelled are legal)
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r7 AND stage = 'solo';        -- failed -> queued
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :r7 AND stage = 'solo';
UPDATE wfe.run_stages SET state = 'failed' WHERE run_id = :r7 AND stage = 'solo';
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r6 AND stage = 'solo';        -- cancelled -> queued
UPDATE wfe.run_stages SET state = 'timed_out' WHERE run_id = :r6 AND stage = 'solo';
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r6 AND stage = 'solo';        -- timed_out -> queued
UPDATE wfe.run_stages SET state = 'cancelled' WHERE run_id = :r6 AND stage = 'solo';
-- an update that leaves the state as it is is always allowed
UPDATE wfe.run_stages SET state = state WHERE run_id = :r1;
UPDATE wfe.runs SET state = state WHERE run_id = :r1;
RESET rt_tr.by;
SELECT wfe.cancel_run(:o1);

--
-- 10b. Operator recovery (81_recovery.sql), through the engine: a skip
--     completes a failed or timed-out stage (failed | timed_out -> completed)
--     and reopens its failed run (failed -> running); a redrive reopens a
--     run whose join failed (failed -> waiting) and whose finaliser ran
--     (completed -> waiting); a scheduled retry is failed by hand
--     (retry_scheduled -> failed).
--
SELECT run_id AS k1 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.accept(:k1, 'solo');
SELECT pg_temp.fail(:k1, 'solo', false);
SELECT wfe.skip_stage(:k1, 'solo', '{}', 'done by hand');
SELECT pg_temp.states(:k1);
SELECT run_id AS k2 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.expire(:k2, 'solo');
SELECT pg_temp.retry_now(:k2);
SELECT pg_temp.expire(:k2, 'solo');
SELECT pg_temp.states(:k2);
SELECT wfe.skip_stage(:k2, 'solo', '{}', 'done by hand');
SELECT pg_temp.states(:k2);
SELECT run_id AS k3 FROM wfe.submit('tr-test@2.0.0', '{"path": "fork"}') \gset
SELECT pg_temp.accept(:k3, 'left'), pg_temp.accept(:k3, 'right');
SELECT pg_temp.fail(:k3, 'left', false), pg_temp.fail(:k3, 'right', false);
SELECT pg_temp.accept(:k3, 'finaliser.1');
SELECT pg_temp.complete(:k3, 'finaliser.1');
SELECT pg_temp.states(:k3);
SELECT wfe.redrive(:k3, 'left', 'again');
SELECT pg_temp.states(:k3);
SELECT pg_temp.accept(:k3, 'left');
SELECT pg_temp.fail(:k3, 'left', true);
SELECT wfe.fail_stage(:k3, 'left', 'give up');
SELECT pg_temp.states(:k3);
SELECT pg_temp.accept(:k3, 'finaliser.1');
SELECT pg_temp.complete(:k3, 'finaliser.1');
-- an operator fails an attempt nobody took yet (queued -> failed), and one
-- published but not accepted (dispatched -> failed)
SELECT run_id AS k4 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT wfe.fail_stage(:k4, 'solo', 'not needed');
SELECT run_id AS k5 FROM wfe.submit('tr-test', '{"path": "solo", "v": "x"}') \gset
SELECT pg_temp.published(:k5, 'solo');
SELECT wfe.fail_stage(:k5, 'solo', 'not needed');
SELECT pg_temp.states(:k4), pg_temp.states(:k5);
-- what the engine makes only in shapes this workflow has not: a direct UPDATE
SET rt_tr.by = 'update';
UPDATE wfe.run_stages SET state = 'waiting' WHERE run_id = :k1 AND stage = 'left';       -- skipped -> waiting
UPDATE wfe.run_stages SET state = 'skipped' WHERE run_id = :k1 AND stage = 'left';
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r6 AND stage = 'solo';
UPDATE wfe.run_stages SET state = 'timed_out' WHERE run_id = :r6 AND stage = 'solo';
UPDATE wfe.run_stages SET state = 'waiting' WHERE run_id = :r6 AND stage = 'solo';       -- timed_out -> waiting
UPDATE wfe.run_stages SET state = 'cancelled' WHERE run_id = :r6 AND stage = 'solo';
RESET rt_tr.by;

--
-- 11. Illegal transitions: refused by the trigger (55000), whoever tries.
--
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r1 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :r1 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :r1 AND stage = 'left';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :r2 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :r9 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'completed' WHERE run_id = :r8 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
SELECT run_id AS x1 FROM wfe.submit('tr-test', '{"path": "fork"}') \gset
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :x1 AND stage = 'meet';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'waiting' WHERE run_id = :x1 AND stage = 'left';
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.accept(:x1, 'left');
UPDATE wfe.run_stages SET state = 'queued' WHERE run_id = :x1 AND stage = 'left';
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.accept(:x1, 'right');
SELECT pg_temp.fail(:x1, 'right', true);
UPDATE wfe.run_stages SET state = 'running' WHERE run_id = :x1 AND stage = 'right';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = 'completed' WHERE run_id = :x1 AND stage = 'right';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.runs SET state = 'running' WHERE run_id = :r1;
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.runs SET state = 'completed' WHERE run_id = :r2;
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.runs SET state = 'finalising' WHERE run_id = :r6;
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.runs SET state = 'running' WHERE run_id = :g1;
\echo :LAST_ERROR_SQLSTATE
-- a multi-row update is refused as a whole
UPDATE wfe.run_stages SET state = 'skipped' WHERE run_id = :x1;
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.states(:x1);
SELECT wfe.cancel_run(:x1);

--
-- Coverage: every legal transition was made, and nothing else.
--
DROP TRIGGER rt_tr_stage ON wfe.run_stages;
DROP TRIGGER rt_tr_run ON wfe.runs;
SELECT t.from_state, t.to_state,
       (SELECT string_agg(DISTINCT s.by, ', ') FROM rt_tr.seen AS s
         WHERE s.kind = 'stage' AND (s.from_state, s.to_state) = (t.from_state, t.to_state)) AS made_by
  FROM wfe.stage_transitions() AS t;
SELECT t.from_state, t.to_state,
       (SELECT string_agg(DISTINCT s.by, ', ') FROM rt_tr.seen AS s
         WHERE s.kind = 'run' AND (s.from_state, s.to_state) = (t.from_state, t.to_state)) AS made_by
  FROM wfe.run_transitions() AS t;
-- seen but not in the tables (none: the triggers refuse them)
SELECT kind, from_state, to_state FROM rt_tr.seen
EXCEPT
(SELECT 'stage', from_state, to_state FROM wfe.stage_transitions()
 UNION ALL SELECT 'run', from_state, to_state FROM wfe.run_transitions());
DROP SCHEMA rt_tr CASCADE;

--
-- The stage row's CHECK (run_stages_valid): values outside the domains are
-- refused with 23514, whoever writes them; the row is unchanged.
--
\set VERBOSITY sqlstate
CREATE TEMP TABLE rt_chk AS
  SELECT run_id, stage, to_jsonb(s) AS before FROM wfe.run_stages AS s ORDER BY run_id, stage LIMIT 1;
UPDATE wfe.run_stages AS s SET skip_reason = 'bored' FROM rt_chk AS c WHERE (s.run_id, s.stage) = (c.run_id, c.stage);
UPDATE wfe.run_stages AS s SET outcome = 'maybe' FROM rt_chk AS c WHERE (s.run_id, s.stage) = (c.run_id, c.stage);
UPDATE wfe.run_stages AS s SET attempt = -1 FROM rt_chk AS c WHERE (s.run_id, s.stage) = (c.run_id, c.stage);
UPDATE wfe.run_stages AS s SET fence = -1 FROM rt_chk AS c WHERE (s.run_id, s.stage) = (c.run_id, c.stage);
UPDATE wfe.run_stages AS s SET kind = 'robot' FROM rt_chk AS c WHERE (s.run_id, s.stage) = (c.run_id, c.stage);
INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, state)
  SELECT run_id, 'rt-chk-new', 'default', 99, 'worker', 'sleeping' FROM rt_chk;
SELECT to_jsonb(s) = c.before AS unchanged FROM wfe.run_stages AS s JOIN rt_chk AS c USING (run_id, stage);
SELECT wfe._stage_row_ok('worker', 'queued', 1, 2, NULL, NULL) AS ok,
       wfe._stage_row_ok('worker', 'skipped', 0, 0, NULL, 'run_aborted') AS ok_skipped,
       wfe._stage_row_ok('worker', 'queued', 1, 2, 'completed', 'nope') AS bad_reason;
\set VERBOSITY default

--
-- A NULL state is refused with 23502 (not XX000) by the NOT NULL
-- constraints, before the state guards (AFTER triggers) run, the row
-- unchanged.  Terse: the failing row's detail has the run's times.
--
\set VERBOSITY terse
UPDATE wfe.runs SET state = NULL WHERE run_id = :r1;
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.run_stages SET state = NULL WHERE run_id = :r1 AND stage = 'solo';
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT r.state AS run_state, s.state AS stage_state
  FROM wfe.runs AS r JOIN wfe.run_stages AS s USING (run_id) WHERE r.run_id = :r1 AND s.stage = 'solo';
