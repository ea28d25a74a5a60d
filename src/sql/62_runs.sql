-- Starting and stopping runs: wfe.submit and wfe.cancel_run (docs: runtime.md).

-- The definition a submit names: 'name' (active) or 'name@version'
-- (approved); a schedule checks its workflow with it (69_schedules.sql).
CREATE FUNCTION wfe._submittable(p_workflow text)
RETURNS wfe.definitions
AS 'MODULE_PATHNAME', 'wfe_submittable'
LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._submittable(text) IS
'Resolves a submit''s workflow argument: the active version of a name, or an approved name@version.';
REVOKE ALL ON FUNCTION wfe._submittable(text) FROM PUBLIC;

-- wfe.submit is C (src/pg/submit.c): its checks and the new run's rows --
-- the run, its stage rows and its run.submitted event in one statement --
-- with plans kept per backend and no PL/pgSQL on the way (docs:
-- architecture.md "Starting a run").
CREATE FUNCTION wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL,
                           options jsonb DEFAULT '{}')
RETURNS TABLE (run_id bigint, accepted boolean)
AS 'MODULE_PATHNAME', 'wfe_submit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.submit(text, jsonb, text, jsonb) IS
'Starts a run of the active (or a named approved) version, in the caller''s transaction; an idempotency key returns the earlier run with accepted = false.';
REVOKE ALL ON FUNCTION wfe.submit(text, jsonb, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.submit(text, jsonb, text, jsonb) TO wfe_submitter;

CREATE FUNCTION wfe.cancel_run(run_id bigint, reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs;
BEGIN
    IF cancel_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(cancel_run.reason, 'reason');
    -- another tenant's run is answered as one that does not exist (and not locked)
    IF NOT coalesce((SELECT wfe._tenant_ok(x.tenant) FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id), false) THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF r.intent IS NOT NULL THEN
        PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'callback.late',
                           jsonb_build_object('callback', 'cancel_run', 'by', wfe._identity()));
        RETURN 'late';
    END IF;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.cancel_requested',
                       jsonb_build_object('by', wfe._identity(), 'reason', cancel_run.reason));
    PERFORM wfe._cancel(r.run_id, coalesce(cancel_run.reason, 'cancelled by ' || wfe._identity()));
    -- nothing is left to do about its dead letters
    UPDATE wfe.dead_letters AS d SET resolved_at = now(), resolved_by = wfe._identity(), resolution = 'cancelled'
     WHERE d.run_id = r.run_id AND d.resolved_at IS NULL;
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.cancel_run(bigint, text) IS
'Cancels a run: in-flight attempts are fenced and asked to stop, unstarted stages skipped, finalisers run; answers accepted, late or unknown.';
REVOKE ALL ON FUNCTION wfe.cancel_run(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.cancel_run(bigint, text) TO wfe_submitter, wfe_operator;
