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

-- The layout (0.3.0): comments in these bodies name the files' new paths.
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
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now()
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

CREATE OR REPLACE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
BEGIN
    IF ack_cancel.run_id IS NULL OR ack_cancel.stage IS NULL OR ack_cancel.attempt IS NULL
       OR ack_cancel.fence IS NULL THEN
        RAISE EXCEPTION 'run_id, stage, attempt and fence must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(ack_cancel.stage, 'stage');
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = ack_cancel.run_id AND st.stage = ack_cancel.stage;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    -- who may call back: the callbacks' rule (src/pg/grants.c)
    IF NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'report for') THEN
        RETURN 'unknown';
    END IF;
    -- the cancelled attempt is the one whose fence the cancel superseded
    -- (stage.cancelled names it; 0.1.0 grew fences by one)
    IF s.attempt <> ack_cancel.attempt OR s.state <> 'cancelled'
       OR NOT EXISTS (SELECT 1 FROM wfe.events AS e
                       WHERE e.run_id = s.run_id AND e.stage = s.stage AND e.attempt = s.attempt
                         AND e.type = 'stage.cancelled'
                         AND coalesce((e.detail ->> 'cancelled_fence')::bigint,
                                      (e.detail ->> 'fence')::bigint - 1) = ack_cancel.fence)
    THEN
        PERFORM wfe._event(s.run_id, s.tenant, s.stage, ack_cancel.attempt, 'callback.stale',
                           jsonb_build_object('callback', 'ack_cancel', 'fence', ack_cancel.fence));
        RETURN 'stale';
    END IF;
    PERFORM wfe._event(s.run_id, s.tenant, s.stage, s.attempt, 'stage.cancel_acknowledged',
                       jsonb_build_object('fence', ack_cancel.fence));
    RETURN 'accepted';
END
$$;

