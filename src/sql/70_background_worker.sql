-- What the background worker calls, each in a transaction of its own
-- (src/bgw/bgw.c), and the wakeup backends send it at commit (src/bgw/shmem.c).

CREATE FUNCTION wfe._wake(due timestamptz DEFAULT now())
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_wake'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION wfe._wake(timestamptz) IS
'Asks for the background worker to be awake by due, once this transaction commits (no-op without the worker).';
REVOKE ALL ON FUNCTION wfe._wake(timestamptz) FROM PUBLIC;

-- An item of a round raised (src/sql: _worker_round, _run_next_handler):
-- the round goes on without it.  A deadlock, a serialization failure
-- (SQLSTATE class 40) or a lock wait past the worker's lock_timeout
-- (55P03: a transaction holds the run, a stage or a lock too long) is the
-- moment's, not the run's: the item is put off a second and tried again.  For anything else its run is failed through the engine
-- (run.engine_error, finalisers run); should even that raise, the error is
-- recorded as an event and the item put off for a minute, so one poisoned
-- run never holds up the others' clocks.  The run is named in the log once
-- per failure, with control characters removed (no forged log lines).
CREATE FUNCTION wfe._item_failed(p_run_id bigint, p_stage text, p_what text,
                                 p_sqlstate text, p_message text, p_timer_id bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_error   jsonb := jsonb_build_object(
                  'code', 'engine.error', 'what', p_what, 'sqlstate', p_sqlstate,
                  'message', left(regexp_replace(p_message, '[[:cntrl:]]+', ' ', 'g'), 1000));
    v_state   text;
    v_message text;
    v_other   text;
BEGIN
    IF p_sqlstate LIKE '40%' OR p_sqlstate = '55P03' THEN
        RAISE WARNING 'wfe: % of run % raised % (%): it is tried again in a second', p_what, p_run_id,
            p_sqlstate, v_error ->> 'message';
        UPDATE wfe.timers AS t SET due_at = now() + interval '1 second', fired_at = NULL
         WHERE t.timer_id = p_timer_id;
        UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
        UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
           AND st.handler IS NOT NULL;
        RETURN;
    END IF;
    RAISE WARNING 'wfe: % of run % raised % (%): the run is failed', p_what, p_run_id, p_sqlstate,
        v_error ->> 'message';
    BEGIN
        PERFORM wfe._engine_error(p_run_id, p_stage, v_error);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: failing run % raised % too: it is put off for a minute', p_run_id, v_state;
        BEGIN
            UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
            UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
               AND st.handler IS NOT NULL;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: run % cannot be put off (%)', p_run_id, v_other;
        END;
        BEGIN
            PERFORM wfe._event(r.run_id, r.tenant, p_stage, NULL, 'run.engine_error',
                               jsonb_build_object('error', v_error, 'failing_run', jsonb_build_object(
                                   'sqlstate', v_state,
                                   'message', left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000))))
              FROM wfe.runs AS r WHERE r.run_id = p_run_id;
        EXCEPTION WHEN OTHERS THEN
            -- nothing of this run can be written: the log line is all there is
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: the error of run % cannot be recorded (%)', p_run_id, v_other;
        END;
    END;
END
$$;
COMMENT ON FUNCTION wfe._item_failed(bigint, text, text, text, text, bigint) IS
'An item of a worker round (a timer: p_timer_id) raised: put it off a second for a deadlock, serialization failure or lock timeout, else fail its run (run.engine_error), or record the error and put the item off; logs the run id.';
REVOKE ALL ON FUNCTION wfe._item_failed(bigint, text, text, text, text, bigint) FROM PUBLIC;

-- Fire due timers and time out expired attempts: one bounded round.
CREATE FUNCTION wfe._worker_round(p_max int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t         wfe.timers;
    c         record;
    done      int := 0;
    v_state   text;
    v_message text;
BEGIN
    -- First, while this transaction holds no lock yet (so it may wait for
    -- the keys' locks, which nothing else waits for: 79_concurrency.sql):
    -- the keys an ending attempt could not lock.
    BEGIN
        PERFORM wfe._recheck_concurrency();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking keyed concurrency raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
    -- Then (so it may wait for the admission locks in their order): the
    -- held tasks that an admission's missed try kept back (74_admission.sql).
    BEGIN
        PERFORM wfe._recheck_admission();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking held tasks raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
    -- Attempts whose rate-limit token is due (78_rate_limits.sql): ready again.
    PERFORM wfe._release_rate_held(p_max);
    -- Open circuits whose open_ms has passed (79_circuits.sql): half open.
    PERFORM wfe._half_open_circuits();
    -- Schedules' due ticks (69_schedules.sql): each submits a run.
    done := done + wfe._fire_schedules(p_max);
    -- Lock the batch first, then fire it in run order: each firing takes
    -- its run's lock and keeps it, so two firers (this worker, a manual
    -- wfe.tick()) firing in due order could each wait for a run the other
    -- holds -- a deadlock (test/isolation/specs/tick-lock-order.spec).
    FOR t IN SELECT d.* FROM (SELECT * FROM wfe.timers AS x
                               WHERE x.fired_at IS NULL AND x.due_at <= now()
                               ORDER BY x.due_at LIMIT p_max
                                 FOR UPDATE SKIP LOCKED) AS d
              ORDER BY d.run_id, d.due_at, d.timer_id
    LOOP
        -- each item in a subtransaction of its own: one that raises rolls
        -- back alone, and the round goes on (delivery.md)
        BEGIN
            PERFORM wfe._fire_timer(t);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            -- putting it off can wait on the same run (a foreign key check):
            -- should that time out too, the timer stays due for the next round
            BEGIN
                UPDATE wfe.timers AS x SET fired_at = now() WHERE x.timer_id = t.timer_id;
                PERFORM wfe._item_failed(t.run_id, t.stage, t.kind || ' timer', v_state, v_message, t.timer_id);
            EXCEPTION WHEN lock_not_available THEN
                RAISE WARNING 'wfe: % timer of run % waits for a lock: it is tried again next round', t.kind, t.run_id;
            END;
        END;
        done := done + 1;
    END LOOP;
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE wfe._stage_clocked(st.state) AND st.deadline_at <= now()
              ORDER BY st.deadline_at LIMIT p_max
    LOOP
        BEGIN
            IF wfe._expire(c.run_id, c.stage) THEN
                done := done + 1;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            BEGIN
                PERFORM wfe._item_failed(c.run_id, c.stage, 'deadline', v_state, v_message);
            EXCEPTION WHEN lock_not_available THEN
                RAISE WARNING 'wfe: the deadline of run % waits for a lock: it is tried again next round', c.run_id;
            END;
            done := done + 1;
        END;
    END LOOP;
    RETURN done;
END
$$;
COMMENT ON FUNCTION wfe._worker_round(int) IS
'Releases what missed admission tries held back and rate-limited attempts whose token is due, fires up to p_max due schedules and timers and times out up to p_max expired attempts; returns how many runs submitted, timers and attempts.';
REVOKE ALL ON FUNCTION wfe._worker_round(int) FROM PUBLIC;

-- Run the oldest queued in-database action that nobody else is handling.
CREATE FUNCTION wfe._run_next_handler(p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c         record;
    v_state   text;
    v_message text;
BEGIN
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.state = 'queued' AND st.handler IS NOT NULL AND st.ready_at <= now()
              ORDER BY st.ready_at LIMIT 20
    LOOP
        BEGIN
            IF wfe._run_handler(c.run_id, c.stage, p_by) THEN
                RETURN true;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            -- the handler's own errors fail its attempt inside _run_handler;
            -- this is anything else (binding what it released, a bug)
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            PERFORM wfe._item_failed(c.run_id, c.stage, 'action', v_state, v_message);
            RETURN true;
        END;
    END LOOP;
    RETURN false;
END
$$;
COMMENT ON FUNCTION wfe._run_next_handler(text) IS
'Runs one queued in-database action (its own transaction when called by the worker); false when there was none.';
REVOKE ALL ON FUNCTION wfe._run_next_handler(text) FROM PUBLIC;

-- Milliseconds until the next timer, deadline or queued action is due.
-- PL/pgSQL, not SQL: the worker asks after every round, and a SQL
-- function that pins search_path is not inlined, so its body was parsed
-- and planned at every call (2 ms idle, tens under load: docs/benchmarks.md
-- "The write path"); PL/pgSQL keeps the plan for the session.
CREATE FUNCTION wfe._next_due_ms()
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NULL when nothing is due (greatest() would turn that into 0)
    RETURN (SELECT CASE WHEN min(due) IS NOT NULL
                        THEN greatest(0, ceil(extract(epoch FROM min(due) - clock_timestamp()) * 1000))::bigint END
              FROM (SELECT min(t.due_at) AS due FROM wfe.timers AS t WHERE t.fired_at IS NULL
                    UNION ALL
                    SELECT min(st.deadline_at) FROM wfe.run_stages AS st
                     WHERE wfe._stage_clocked(st.state) AND st.deadline_at IS NOT NULL
                    UNION ALL
                    SELECT min(st.ready_at) FROM wfe.run_stages AS st
                     WHERE st.state = 'queued' AND st.handler IS NOT NULL
                    UNION ALL
                    SELECT min(s.next_fire_at) FROM wfe.schedule_defs AS s WHERE NOT s.paused) AS d);
END
$$;
COMMENT ON FUNCTION wfe._next_due_ms() IS
'How long the background worker may sleep: until the earliest timer, deadline, queued action or schedule tick (NULL: nothing due).';
REVOKE ALL ON FUNCTION wfe._next_due_ms() FROM PUBLIC;

-- On start: what a crashed incarnation left claimed goes back to pending.
CREATE FUNCTION wfe._repair()
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
    c record;
BEGIN
    -- outbox rows a publisher claimed but never marked: publish them again
    -- (their message ids are deterministic, so consumers deduplicate)
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by LIKE 'wfe worker%';
    GET DIAGNOSTICS n = ROW_COUNT;
    -- in-database attempts left running: a handler runs in the transaction
    -- that marks its attempt running and records its end, so one committed
    -- as running was left by a runner that stopped between the two (0.2.0's
    -- stale caches did that).  Its execution deadline is brought to now:
    -- the round that follows times it out through the engine, and its
    -- retry policy decides.  A run another transaction holds is left alone.
    FOR c IN SELECT st.run_id, st.stage, st.tenant, st.attempt, st.claimed_by FROM wfe.run_stages AS st
              WHERE st.state = 'running' AND st.handler IS NOT NULL
              ORDER BY st.run_id, st.stage
    LOOP
        PERFORM FROM wfe.runs AS r WHERE r.run_id = c.run_id FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE wfe.run_stages AS st SET deadline_at = now()
         WHERE st.run_id = c.run_id AND st.stage = c.stage AND st.state = 'running' AND st.handler IS NOT NULL;
        CONTINUE WHEN NOT FOUND;
        PERFORM wfe._event(c.run_id, c.tenant, c.stage, c.attempt, 'stage.interrupted',
                           jsonb_build_object('claimed_by', c.claimed_by, 'by', 'wfe._repair'));
        PERFORM wfe._wake(now());
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._repair() IS
'Repair after a crash: outbox rows left claimed go back to pending; in-database attempts left running are timed out now (retried per policy).  Transitions are single transactions, so nothing else can be half done.';
REVOKE ALL ON FUNCTION wfe._repair() FROM PUBLIC;

-- Remove finished runs older than the retention, in small batches, with
-- their stages, outputs, timers and payloads, and published outbox rows;
-- their events go with the day partitions of wfe.events (86_history.sql).
CREATE FUNCTION wfe._retention(p_retention_s int, p_batch int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz := now() - make_interval(secs => p_retention_s);
    v_runs   bigint[];
    n        int := 0;
BEGIN
    SELECT array_agg(x.run_id) INTO v_runs
      FROM (SELECT r.run_id FROM wfe.runs AS r
             WHERE r.finished_at < v_cutoff
             ORDER BY r.finished_at LIMIT p_batch
               FOR UPDATE SKIP LOCKED) AS x;
    IF v_runs IS NOT NULL THEN
        -- their events in day partitions go with the partition
        -- (wfe._history_maintain, below); those in the default one now
        DELETE FROM wfe.events_default AS e WHERE e.run_id = ANY (v_runs);
        DELETE FROM wfe.outbox AS o WHERE o.run_id = ANY (v_runs) AND o.state = 'published';
        DELETE FROM wfe.runs AS r WHERE r.run_id = ANY (v_runs);     -- their stages by wfe.runs_deleted; outputs, timers, payloads by cascade
        n := cardinality(v_runs);
    END IF;
    DELETE FROM wfe.outbox AS o
     WHERE o.id IN (SELECT o2.id FROM wfe.outbox AS o2
                     WHERE o2.state = 'published' AND o2.published_at < v_cutoff
                     LIMIT p_batch);
    -- expired result cache entries (a read treats them as a miss already)
    DELETE FROM wfe.cache_entries AS c
     WHERE c.key IN (SELECT c2.key FROM wfe.cache_entries AS c2
                      WHERE c2.expires_at < now() LIMIT p_batch);
    -- unauthenticated signed callbacks: nobody's, kept for the retention
    DELETE FROM wfe.unauthenticated_callbacks AS u
     WHERE u.id IN (SELECT u2.id FROM wfe.unauthenticated_callbacks AS u2
                     WHERE u2.at < v_cutoff LIMIT p_batch);
    -- schedules' skipped ticks and failures (69_schedules.sql), oldest
    -- first: those up to the p_batch-th one's time (events have no key to
    -- name rows by, 60_runtime_tables.sql; rows of that very time go too)
    DELETE FROM wfe.events AS e
     WHERE e.run_id IS NULL AND e.type IN ('schedule.skipped', 'schedule.failed')
       AND e.at < v_cutoff
       AND e.at <= (SELECT max(x.at)
                      FROM (SELECT e2.at FROM wfe.events AS e2
                             WHERE e2.run_id IS NULL AND e2.type IN ('schedule.skipped', 'schedule.failed')
                               AND e2.at < v_cutoff
                             ORDER BY e2.at LIMIT p_batch) AS x);
    -- run commands' stored inputs (85_ingress.sql): a run keeps its own copy
    -- in its context, so a payload older than the retention is needed by
    -- nobody but a command that late, used or not
    DELETE FROM wfe.ingress_payloads AS p
     WHERE p.key IN (SELECT p2.key FROM wfe.ingress_payloads AS p2
                      WHERE p2.created_at < v_cutoff LIMIT p_batch);
    -- callbacks about runs that never existed (or are gone), the same way
    DELETE FROM wfe.events AS e
     WHERE e.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
       AND e.at < v_cutoff
       AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e.run_id)
       AND e.at <= (SELECT max(x.at)
                      FROM (SELECT e2.at FROM wfe.events AS e2
                             WHERE e2.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
                               AND e2.at < v_cutoff
                               AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e2.run_id)
                             ORDER BY e2.at LIMIT p_batch) AS x);
    -- the history partitions: made ahead, and dropped once past retention
    PERFORM wfe._history_maintain(v_cutoff);
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their stages and large payloads), old published outbox rows, old unauthenticated callbacks, old schedule events, old run command payloads (wfe.put_payload) and expired result cache entries; makes the coming days'' event partitions and drops those past retention (wfe._history_maintain).';
REVOKE ALL ON FUNCTION wfe._retention(int, int) FROM PUBLIC;

CREATE FUNCTION wfe.worker_status(OUT pid int, OUT started_at timestamptz, OUT sleeping_until timestamptz,
                                  OUT last_wake_requested timestamptz, OUT last_woke timestamptz,
                                  OUT wakeups bigint, OUT rounds bigint, OUT timers_fired bigint,
                                  OUT actions_run bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'wfe_worker_status'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe.worker_status() IS
'The background worker as the shared state sees it: pid (NULL when none runs), its planned wakeup, counters.';
REVOKE ALL ON FUNCTION wfe.worker_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.worker_status() TO wfe_reader, wfe_operator;
