-- What the background worker calls, each in a transaction of its own
-- (src/worker.c), and the wakeup backends send it at commit (src/shmem.c).

CREATE FUNCTION wfe._wake(due timestamptz DEFAULT now())
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_wake'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION wfe._wake(timestamptz) IS
'Asks for the background worker to be awake by due, once this transaction commits (no-op without the worker).';

-- Fire due timers and time out expired attempts: one bounded round.
CREATE FUNCTION wfe._worker_round(p_max int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t    wfe.timers;
    c    record;
    done int := 0;
BEGIN
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
        PERFORM wfe._fire_timer(t);
        done := done + 1;
    END LOOP;
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at <= now()
              ORDER BY st.deadline_at LIMIT p_max
    LOOP
        IF wfe._expire(c.run_id, c.stage) THEN
            done := done + 1;
        END IF;
    END LOOP;
    RETURN done;
END
$$;
COMMENT ON FUNCTION wfe._worker_round(int) IS
'Fires up to p_max due timers and times out up to p_max expired attempts; returns how many.';

-- Run the oldest queued in-database action that nobody else is handling.
CREATE FUNCTION wfe._run_next_handler(p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE st.state = 'queued' AND st.handler IS NOT NULL
              ORDER BY st.ready_at LIMIT 20
    LOOP
        IF wfe._run_handler(c.run_id, c.stage, p_by) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;
COMMENT ON FUNCTION wfe._run_next_handler(text) IS
'Runs one queued in-database action (its own transaction when called by the worker); false when there was none.';

-- Milliseconds until the next timer, deadline or queued action is due.
CREATE FUNCTION wfe._next_due_ms()
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    -- NULL when nothing is due (greatest() would turn that into 0)
    SELECT CASE WHEN min(due) IS NOT NULL
                THEN greatest(0, ceil(extract(epoch FROM min(due) - clock_timestamp()) * 1000))::bigint END
      FROM (SELECT min(t.due_at) AS due FROM wfe.timers AS t WHERE t.fired_at IS NULL
            UNION ALL
            SELECT min(st.deadline_at) FROM wfe.run_stages AS st
             WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at IS NOT NULL
            UNION ALL
            SELECT min(st.ready_at) FROM wfe.run_stages AS st
             WHERE st.state = 'queued' AND st.handler IS NOT NULL) AS d;
END;
COMMENT ON FUNCTION wfe._next_due_ms() IS
'How long the background worker may sleep: until the earliest timer, deadline or queued action (NULL: nothing due).';

-- On start: what a crashed incarnation left claimed goes back to pending.
CREATE FUNCTION wfe._repair()
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    -- outbox rows a publisher claimed but never marked: publish them again
    -- (their message ids are deterministic, so consumers deduplicate)
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by LIKE 'wfe worker%';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._repair() IS
'Repair after a crash: outbox rows left claimed go back to pending.  (Transitions are single transactions, so nothing else can be half done.)';

-- Remove finished runs older than the retention, in small batches, with
-- their stages, outputs, timers and events, and published outbox rows.
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
        DELETE FROM wfe.events AS e WHERE e.run_id = ANY (v_runs);
        DELETE FROM wfe.outbox AS o WHERE o.run_id = ANY (v_runs) AND o.state = 'published';
        DELETE FROM wfe.runs AS r WHERE r.run_id = ANY (v_runs);     -- cascades to stages, outputs, timers
        n := cardinality(v_runs);
    END IF;
    DELETE FROM wfe.outbox AS o
     WHERE o.id IN (SELECT o2.id FROM wfe.outbox AS o2
                     WHERE o2.state = 'published' AND o2.published_at < v_cutoff
                     LIMIT p_batch);
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their history) plus old published outbox rows.';

CREATE FUNCTION wfe.worker_status(OUT pid int, OUT started_at timestamptz, OUT sleeping_until timestamptz,
                                  OUT last_wake_requested timestamptz, OUT last_woke timestamptz,
                                  OUT wakeups bigint, OUT rounds bigint, OUT timers_fired bigint,
                                  OUT actions_run bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'wfe_worker_status'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe.worker_status() IS
'The background worker as the shared state sees it: pid (NULL when none runs), its planned wakeup, counters.';
