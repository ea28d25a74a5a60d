-- Signals: what a wait stage waits for (docs: runtime.md "Signals").
--
-- A signal contract is a row of wfe.contracts (kind 'signal', name@N,
-- immutable) whose output_schema is its payload's schema: the payload is
-- the wait's result.  Who may send it is granted per ref (grant_signal),
-- and the sender must also act for the run's tenant.  A signal a released
-- wait took, or one kept for a wait yet to be released (buffered), is a
-- row of wfe.signals; a late one is only an event.  The step core
-- (src/core/engine/step.c) decides accepted / buffered / late under the
-- run's lock (src/pg/engine.c, wfe._signal).

CREATE TABLE wfe.signal_grants (
    ref        text NOT NULL,
    role       regrole NOT NULL,
    granted_by name NOT NULL DEFAULT wfe._identity(),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ref, role)
);
COMMENT ON TABLE wfe.signal_grants IS
'Which roles may send each signal (wfe.grant_signal, wfe.revoke_signal; ref a registered signal when granted); superusers and wfe_admin always may.';
GRANT SELECT ON wfe.signal_grants TO wfe_admin, wfe_operator, wfe_reader;
SELECT pg_catalog.pg_extension_config_dump('wfe.signal_grants', '');

CREATE TABLE wfe.signals (
    signal_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text NOT NULL,
    run_id          bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    signal          text NOT NULL,
    payload         jsonb NOT NULL,
    idempotency_key text,
    sent_by         name NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    stage           text,
    taken_at        timestamptz,
    CONSTRAINT signals_taken CHECK ((stage IS NULL) = (taken_at IS NULL))
);
COMMENT ON TABLE wfe.signals IS
'Signals kept for a run: taken by a wait (stage, taken_at) or buffered until a wait on them is released (oldest first).';
COMMENT ON COLUMN wfe.signals.stage IS 'The wait stage that took the signal; NULL while it is buffered';
GRANT SELECT ON wfe.signals TO wfe_reader, wfe_operator;
-- one signal per (run, signal, idempotency key): a resend is a duplicate or a conflict
CREATE UNIQUE INDEX signals_idempotency ON wfe.signals (run_id, signal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- a released wait takes the oldest buffered signal
CREATE INDEX signals_buffered ON wfe.signals (run_id, signal, signal_id) WHERE taken_at IS NULL;
ALTER TABLE wfe.signals ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.signals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.signals FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
SELECT pg_catalog.pg_extension_config_dump('wfe.signals', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.signals_signal_id_seq', '');

CREATE FUNCTION wfe.register_signal(ref text, payload_schema jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._register_contract($1, 'signal', NULL, NULL, '{}', $2);
END
$$;
COMMENT ON FUNCTION wfe.register_signal(text, jsonb) IS
'Registers signal contract ref (name@N) with the JSON schema its payload must satisfy. Idempotent; a registered version is immutable.';
REVOKE ALL ON FUNCTION wfe.register_signal(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.register_signal(text, jsonb) TO wfe_admin;

-- Check a signal grant's arguments: a real role (not PUBLIC) and a registered signal.
CREATE FUNCTION wfe._check_signal_grant(p_role name, p_ref text)
RETURNS regrole
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_ref IS NULL THEN
        RAISE EXCEPTION 'role and ref must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF lower(p_role) = 'public' THEN
        RAISE EXCEPTION 'a signal cannot be granted to PUBLIC'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Grant it to the role of the system that sends it (a gateway, a review tool).';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.ref = p_ref AND c.kind = 'signal') THEN
        RAISE EXCEPTION 'no signal "%" is registered', p_ref
            USING ERRCODE = 'undefined_object',
                  HINT = 'Register it first with wfe.register_signal(ref, payload_schema).';
    END IF;
    RETURN p_role::regrole;
END
$$;
COMMENT ON FUNCTION wfe._check_signal_grant(name, text) IS
'Raises 22004, 22023, 42704 unless role is a real role and ref a registered signal; returns the role.';
REVOKE ALL ON FUNCTION wfe._check_signal_grant(name, text) FROM PUBLIC;

CREATE FUNCTION wfe.grant_signal(role name, ref text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO wfe.signal_grants (ref, role)
    VALUES (grant_signal.ref, wfe._check_signal_grant(grant_signal.role, grant_signal.ref))
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.grant_signal(name, text) IS
'Lets role (and every role with its privileges) send signal ref to the runs of the tenants it acts for. Idempotent.';
REVOKE ALL ON FUNCTION wfe.grant_signal(name, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.grant_signal(name, text) TO wfe_admin;

CREATE FUNCTION wfe.revoke_signal(role name, ref text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM wfe.signal_grants AS g
     WHERE g.ref = revoke_signal.ref
       AND g.role = wfe._check_signal_grant(revoke_signal.role, revoke_signal.ref);
END
$$;
COMMENT ON FUNCTION wfe.revoke_signal(name, text) IS
'Takes back a grant_signal. Idempotent.';
REVOKE ALL ON FUNCTION wfe.revoke_signal(name, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.revoke_signal(name, text) TO wfe_admin;

-- May the role acting in this session send signal ref?
CREATE FUNCTION wfe._may_signal(p_ref text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = wfe._caller())
        OR pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE')
        OR EXISTS (SELECT 1 FROM wfe.signal_grants AS g
                    WHERE g.ref = p_ref AND pg_catalog.pg_has_role(wfe._caller(), g.role, 'USAGE'));
END;
COMMENT ON FUNCTION wfe._may_signal(text) IS
'Whether the role acting in this session may send signal ref: granted (wfe.grant_signal), a superuser or wfe_admin.';
REVOKE ALL ON FUNCTION wfe._may_signal(text) FROM PUBLIC;

-- The step: under the run's lock, a released wait takes it, or it is buffered, or late (src/pg/engine.c).
CREATE FUNCTION wfe._signal(run_id bigint, signal text, payload jsonb, idempotency_key text, by name)
RETURNS text AS 'MODULE_PATHNAME', 'wfe_signal' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._signal(bigint, text, jsonb, text, name) IS
'A checked signal for a locked run: accepted (a released wait took it), buffered (kept for a wait yet to be released) or late.';
REVOKE ALL ON FUNCTION wfe._signal(bigint, text, jsonb, text, name) FROM PUBLIC;

CREATE FUNCTION wfe.signal(run_id bigint, signal text, payload jsonb DEFAULT '{}',
                           idempotency_key text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r        wfe.runs;
    v_schema jsonb;
    v_tenant text;
    v_kept   jsonb;
    v_why    text;
BEGIN
    IF signal.run_id IS NULL OR signal.signal IS NULL THEN
        RAISE EXCEPTION 'run_id and signal must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- who may send it comes first: it does not depend on any run
    PERFORM wfe._admit_name(signal.signal, 'signal');
    PERFORM wfe._admit_name(signal.idempotency_key, 'idempotency_key');
    IF NOT wfe._may_signal(signal.signal) THEN
        RAISE EXCEPTION 'permission denied to send signal "%"', signal.signal
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator grants it with wfe.grant_signal(role, ref).';
    END IF;
    SELECT c.output_schema INTO v_schema FROM wfe.contracts AS c
     WHERE c.ref = signal.signal AND c.kind = 'signal';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no signal "%" is registered', signal.signal
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Signals are registered with wfe.register_signal(ref, payload_schema).';
    END IF;
    payload := coalesce(payload, '{}');
    PERFORM wfe._admit(payload, 'the payload');

    -- another tenant's run is answered as one that does not exist (and not locked)
    SELECT x.tenant INTO v_tenant FROM wfe.runs AS x WHERE x.run_id = signal.run_id;
    IF NOT FOUND OR NOT wfe._tenant_ok(v_tenant) THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = signal.run_id FOR NO KEY UPDATE;
    IF NOT EXISTS (SELECT 1 FROM wfe.plan_stages AS ps
                    WHERE ps.definition_id = r.definition_id AND ps.type = 'wait'
                      AND ps.spec ->> 'signal' = signal.signal) THEN
        RAISE EXCEPTION 'run % (workflow %@%) does not wait for signal "%"', r.run_id, r.workflow, r.version,
                        signal.signal
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Only a signal a wait stage of the run''s plan names can be sent to it.';
    END IF;
    v_why := wfe._validate(v_schema, payload);
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION 'payload of signal "%" is not valid: %', signal.signal, v_why
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The payload must satisfy the payload_schema the signal was registered with.';
    END IF;
    IF signal.idempotency_key IS NOT NULL THEN
        SELECT s.payload INTO v_kept FROM wfe.signals AS s
         WHERE s.run_id = r.run_id AND s.signal = signal.signal AND s.idempotency_key = signal.idempotency_key;
        IF FOUND THEN
            PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'signal.received',
                               jsonb_build_object('signal', signal.signal,
                                                  'outcome', CASE WHEN v_kept = payload THEN 'duplicate' ELSE 'conflict' END,
                                                  'idempotency_key', signal.idempotency_key, 'by', wfe._identity()));
            RETURN CASE WHEN v_kept = payload THEN 'duplicate' ELSE 'conflict' END;
        END IF;
    END IF;
    RETURN wfe._signal(r.run_id, signal.signal, payload, signal.idempotency_key, wfe._identity());
END
$$;
COMMENT ON FUNCTION wfe.signal(bigint, text, jsonb, text) IS
'Sends a signal to a run: accepted (a released wait took it), buffered, duplicate, conflict, late or unknown. 42501 without grant_signal; 22023 for a payload its schema refuses or a signal the run never waits for.';
REVOKE ALL ON FUNCTION wfe.signal(bigint, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.signal(bigint, text, jsonb, text) TO wfe_submitter, wfe_worker, wfe_operator;

CREATE FUNCTION wfe.find_run(workflow text, idempotency_key text, tenant text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    -- the run that holds the key now (live or completed), else the latest that held it
    SELECT x.run_id FROM wfe.runs AS x
     WHERE x.workflow = find_run.workflow AND x.idempotency_key = find_run.idempotency_key
       AND (find_run.tenant IS NULL OR x.tenant = find_run.tenant)
       AND wfe._tenant_ok(x.tenant)
     ORDER BY wfe._run_keeps_key(x.state) DESC, x.run_id DESC
     LIMIT 1;
END;
COMMENT ON FUNCTION wfe.find_run(text, text, text) IS
'The run of workflow submitted with idempotency_key (the business key a caller knows), within the tenants the caller acts for; NULL when none.';
REVOKE ALL ON FUNCTION wfe.find_run(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.find_run(text, text, text) TO wfe_submitter, wfe_worker, wfe_operator, wfe_reader;
