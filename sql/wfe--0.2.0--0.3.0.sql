-- wfe--0.2.0--0.3.0.sql: what ALTER EXTENSION wfe UPDATE TO '0.3.0' runs
-- on a database that has wfe 0.2.0.
--
-- How this file is maintained: as sql/wfe--0.1.0--0.2.0.sql says in its
-- header (written by hand in the same commit as the change to src/sql it
-- follows; test/tap/005_upgrade.pl upgrades a database with runs in flight
-- through the chain 0.1.0 -> 0.2.0 -> 0.3.0 and compares its catalog with a
-- fresh CREATE EXTENSION's).  sql/wfe--0.2.0.sql is 0.2.0's install script
-- as released (commit 669fd53), frozen: never edit it.
\echo Use "ALTER EXTENSION wfe UPDATE TO '0.3.0'" to load this file. \quit


-- ---------------------------------------------------------------------
-- Every attempt that can be running carries a clock (issue 20, item 13):
-- an in-database action's attempt gets its execution deadline when it
-- starts, and _repair times out those a stopped runner left running.
-- Attempts 0.2.0 left running with no deadline get one here.
-- ---------------------------------------------------------------------
CREATE OR REPLACE FUNCTION wfe._run_handler(p_run_id bigint, p_stage text, p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r         wfe.runs;
    s         wfe.run_stages;
    v_result  jsonb;
    v_error   jsonb;
    v_state   text;
    v_message text;
    v_run_as  regrole;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    IF s.state <> 'queued' OR s.handler IS NULL THEN
        RETURN false;
    END IF;
    -- the attempt carries its execution deadline like a worker's: should
    -- its running state ever outlive this transaction, the clock ends it
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now(),
           deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)
     WHERE st.run_id = p_run_id AND st.stage = p_stage;
    PERFORM wfe._event(p_run_id, r.tenant, p_stage, s.attempt, 'stage.claimed',
                       jsonb_build_object('worker_id', p_by, 'handler', s.handler::text));
    BEGIN
        -- a subtransaction: a failing handler undoes only its own writes;
        -- it runs as the role that registered it (src/pg/handler.c)
        SELECT c.run_as INTO v_run_as FROM wfe.contracts AS c WHERE c.ref = s.worker;
        IF v_run_as IS NULL THEN
            RAISE EXCEPTION 'contract % records no role for its handler to run as', s.worker
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Register the handler again as a new contract version, as the role it should run as.';
        END IF;
        v_result := wfe._invoke_handler(s.handler, v_run_as, s.input);
        -- a result over the limits fails the attempt like any handler error
        PERFORM wfe._admit(v_result, 'the handler''s result');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        v_error := jsonb_build_object('code', 'handler.error', 'sqlstate', v_state, 'message', v_message);
    END;
    PERFORM wfe._action_done(p_run_id, p_stage,
                             CASE WHEN v_error IS NULL THEN coalesce(v_result, '{}') END, v_error);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._run_handler(bigint, text, text) IS
'Runs a queued in-database action''s handler in a subtransaction; an error fails the attempt (retried per policy).';

CREATE OR REPLACE FUNCTION wfe._repair()
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

UPDATE wfe.run_stages AS st
   SET deadline_at = coalesce(st.started_at, now()) + make_interval(secs => coalesce(st.exec_ms, 0) / 1000.0)
 WHERE st.state = 'running' AND st.handler IS NOT NULL AND st.deadline_at IS NULL;
