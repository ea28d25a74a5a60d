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


-- ---------------------------------------------------------------------
-- A handler acts as its registrant (issue 20, item 5): wfe._caller() and
-- the new wfe._identity() answer the registrant inside a handler, and
-- every identity wfe records or compares (created_by, approved_by, the
-- four-eyes rule, events' "by", resolved_by, granted_by, updated_by) is
-- wfe._identity() instead of session_user.
-- ---------------------------------------------------------------------
COMMENT ON FUNCTION wfe._caller() IS
'The role acting in this session, SET ROLE included (inside SECURITY DEFINER functions current_user is the owner); inside a handler, its registrant.';
CREATE FUNCTION wfe._identity()
RETURNS name AS 'MODULE_PATHNAME', 'wfe_identity' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._identity() IS
'Who wfe records and the four-eyes rule compares: session_user; inside a handler, its registrant.';
REVOKE ALL ON FUNCTION wfe._identity() FROM PUBLIC;

ALTER TABLE wfe.tenant_members ALTER COLUMN granted_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.contracts ALTER COLUMN created_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.definitions ALTER COLUMN created_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.queue_grants ALTER COLUMN granted_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.tenant_limits ALTER COLUMN updated_by SET DEFAULT wfe._identity();
COMMENT ON COLUMN wfe.contracts.created_by IS 'Who registered the contract (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.created_by IS 'Who created the version (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.approved_by IS 'Who approved the version (wfe._identity(): session_user, or a handler''s registrant)';

CREATE OR REPLACE FUNCTION wfe._register_contract(p_ref text, p_kind text, p_queue text,
                                       p_handler regprocedure,
                                       p_input_schema jsonb, p_output_schema jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    version_text text;
    fn           record;
    old          wfe.contracts;
    differs      text[];
    inserted     bigint;
BEGIN
    IF p_ref IS NULL THEN
        RAISE EXCEPTION 'contract reference must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_ref !~ '^[a-z][a-z0-9_.-]*@[1-9][0-9]*$' THEN
        RAISE EXCEPTION 'invalid contract reference "%"', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A contract reference is name@N: a name matching [a-z][a-z0-9_.-]* and a version number from 1, e.g. cache.lookup@1.';
    END IF;
    version_text := split_part(p_ref, '@', 2);
    IF length(version_text) > 10 OR version_text::numeric > 2147483647 THEN
        RAISE EXCEPTION 'version of contract reference "%" is out of range', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Contract versions are integers from 1 to 2147483647.';
    END IF;

    IF p_kind = 'worker' THEN
        IF p_queue IS NULL THEN
            RAISE EXCEPTION 'worker contract "%" needs a queue', p_ref
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
    ELSIF (p_handler IS NULL) = (p_queue IS NULL) THEN
        RAISE EXCEPTION 'action contract "%" needs exactly one of handler and queue', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An action either runs in the database (handler => a function (input jsonb) RETURNS jsonb) or is dispatched to workers (queue => a queue name).';
    END IF;

    IF p_queue IS NOT NULL AND p_queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid queue name "%"', p_queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name matches [a-z][a-z0-9_.-]* and has at most 63 characters.';
    END IF;

    IF p_handler IS NOT NULL THEN
        SELECT p.prokind, p.pronargs, p.proargtypes, p.prorettype, p.proretset
          INTO fn
          FROM pg_catalog.pg_proc AS p
         WHERE p.oid = p_handler;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'action handler with OID % does not exist', p_handler::oid
                USING ERRCODE = 'undefined_function';
        END IF;
        IF fn.prokind <> 'f' OR fn.pronargs <> 1
           OR fn.proargtypes[0] <> 'pg_catalog.jsonb'::regtype
           OR fn.prorettype <> 'pg_catalog.jsonb'::regtype OR fn.proretset
        THEN
            RAISE EXCEPTION 'action handler % must be a function (input jsonb) RETURNS jsonb', p_handler
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Declare it as CREATE FUNCTION ... (input jsonb) RETURNS jsonb; wfe runs it with the bound input and stores its result.';
        END IF;
        -- it will run as the caller: refuse what the caller could not run itself
        PERFORM wfe._check_handler(p_handler, wfe._caller());
    END IF;

    -- NULL schemas mean "no constraint", like the default '{}'.
    p_input_schema := coalesce(p_input_schema, '{}');
    p_output_schema := coalesce(p_output_schema, '{}');
    PERFORM wfe._check_json_schema(p_input_schema, 'input_schema');
    PERFORM wfe._check_json_schema(p_output_schema, 'output_schema');

    INSERT INTO wfe.contracts AS c
           (ref, kind, name, version, queue, handler, input_schema, output_schema,
            created_at, created_by, run_as)
    VALUES (p_ref, p_kind, split_part(p_ref, '@', 1), version_text::int, p_queue,
            p_handler, p_input_schema, p_output_schema, now(), wfe._identity(),
            CASE WHEN p_handler IS NOT NULL THEN wfe._caller() END)
    ON CONFLICT (ref) DO NOTHING;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 THEN
        RETURN;
    END IF;

    -- The ref exists (perhaps registered concurrently, now committed):
    -- identical content is a no-op, anything else is refused.
    SELECT * INTO STRICT old FROM wfe.contracts AS c WHERE c.ref = p_ref;
    differs := array_remove(ARRAY[
        CASE WHEN old.kind <> p_kind THEN 'kind' END,
        CASE WHEN old.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN old.handler IS DISTINCT FROM p_handler THEN 'handler' END,
        CASE WHEN old.input_schema <> p_input_schema THEN 'input_schema' END,
        CASE WHEN old.output_schema <> p_output_schema THEN 'output_schema' END], NULL);
    IF cardinality(differs) > 0 THEN
        RAISE EXCEPTION 'contract "%" is already registered with different content', p_ref
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('A registered contract version is immutable; this registration differs in %s.',
                                  array_to_string(differs, ', ')),
                  HINT = format('Register the changed contract as a new version, e.g. %s@%s.',
                                old.name, old.version::bigint + 1);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._register_contract(text, text, text, regprocedure, jsonb, jsonb) IS
'Validates and stores a contract; identical re-registration is a no-op, different content raises 23505.';

CREATE OR REPLACE FUNCTION wfe.create_definition(source text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_result jsonb;
    v_plan   jsonb;
    v_digest text;
    n        int;
    new_id   bigint;
    stored   text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'workflow definition source must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    v_result := wfe._compile($1, wfe._contracts_json());
    IF NOT coalesce((v_result ->> 'ok')::boolean, false) THEN
        n := jsonb_array_length(v_result -> 'diagnostics');
        RAISE EXCEPTION 'workflow definition is invalid: % %', n,
                CASE WHEN n = 1 THEN 'diagnostic' ELSE 'diagnostics' END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = (v_result -> 'diagnostics')::text,
                  HINT = 'wfe.compile(source) returns the same diagnostics without raising.';
    END IF;
    v_plan := v_result -> 'plan';
    v_digest := v_result ->> 'digest';

    -- ON CONFLICT waits for a concurrent creator of the same version, so of
    -- two sessions creating it at once exactly one inserts.  No conflict
    -- target: the digest names the workflow and version, so a clash on
    -- either unique key is the same definition, and both keys must arbitrate
    -- (a non-arbiter unique index would raise instead of waiting).
    INSERT INTO wfe.definitions AS d
           (workflow, version, digest, state, source, plan, dsl_version,
            compiler_version, created_at, created_by)
    VALUES (v_plan ->> 'name', v_plan ->> 'version', v_digest, 'draft', $1, v_plan,
            v_plan ->> 'dsl_version', v_plan ->> 'compiler_version', now(), wfe._identity())
    ON CONFLICT DO NOTHING
    RETURNING d.definition_id INTO new_id;

    IF new_id IS NULL THEN
        SELECT d.digest INTO STRICT stored
          FROM wfe.definitions AS d
         WHERE d.workflow = v_plan ->> 'name' AND d.version = v_plan ->> 'version';
        IF stored = v_digest THEN
            RETURN v_digest;    -- the same definition again: nothing to do
        END IF;
        RAISE EXCEPTION 'workflow definition "%@%" already exists with a different digest',
                v_plan ->> 'name', v_plan ->> 'version'
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('The stored version has digest %s; this source compiles to %s.',
                                  stored, v_digest),
                  HINT = 'A stored definition version is immutable: give the changed definition a new version.';
    END IF;

    PERFORM wfe._store_plan(new_id, v_plan);
    RETURN v_digest;
END
$$;
COMMENT ON FUNCTION wfe.create_definition(text) IS
'Compiles a YAML definition and stores it as a new immutable draft version with its plan tables; returns the digest. The same name, version and digest again is a no-op; the same name and version with another digest raises 23505; an invalid definition raises 22023 with the diagnostics as JSON in DETAIL.';

CREATE OR REPLACE FUNCTION wfe.approve(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- The row lock makes a concurrent second approval wait and then see
    -- the approved state.
    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state <> 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is %, not draft', $1, $2, d.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a draft can be approved.';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not approve it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must approve it.';
    END IF;

    UPDATE wfe.definitions AS x
       SET state = 'approved', approved_at = now(), approved_by = wfe._identity()
     WHERE x.definition_id = d.definition_id;
END
$$;
COMMENT ON FUNCTION wfe.approve(text, text) IS
'Approves a draft definition version (draft -> approved). With wfe.four_eyes on, not by the role that created it.';

CREATE OR REPLACE FUNCTION wfe.activate(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- NB: lock every version of the workflow, in definition_id order, before
    -- looking at states.  Two activations of the same workflow therefore run
    -- one after the other, and the second sees (READ COMMITTED: in its next
    -- statement's snapshot) the version the first activated; in REPEATABLE
    -- READ or SERIALIZABLE the second fails with a serialization error.
    -- NO KEY UPDATE: submits take a key-share lock on the version they pin
    -- (the runs foreign key), which must not wait for an activation.
    PERFORM FROM wfe.definitions AS x
      WHERE x.workflow = $1
      ORDER BY x.definition_id
        FOR NO KEY UPDATE;

    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state = 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is draft, not approved', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Approve it first with wfe.approve().';
    ELSIF d.state = 'active' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is already active', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not activate it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must activate it.';
    END IF;

    -- The previous active version stops serving new runs; its runs drain on
    -- their pinned plan.  Retire first: at most one version is active.
    UPDATE wfe.definitions AS x
       SET state = 'retired', retired_at = now()
     WHERE x.workflow = $1 AND x.state = 'active';

    UPDATE wfe.definitions AS x
       SET state = 'active', activated_at = now(), retired_at = NULL
     WHERE x.definition_id = d.definition_id;
END
$$;
COMMENT ON FUNCTION wfe.activate(text, text) IS
'Makes an approved or retired definition version the active one of its workflow; the previously active version is retired for new runs. Activating an earlier version is the rollback.';

CREATE OR REPLACE FUNCTION wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL,
                           options jsonb DEFAULT '{}')
RETURNS TABLE (run_id bigint, accepted boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    d          wfe.definitions;
    r          wfe.runs;
    v_context  jsonb := coalesce(submit.context, '{}');
    v_opts     jsonb := coalesce(submit.options, '{}');
    v_tenant   text;
    v_priority int := 0;
    v_deadline bigint;
    v_start    timestamptz;
    v_existing bigint;
    v_bad      text;
    v_limit    int;
    v_live     bigint;
BEGIN
    IF submit.workflow IS NULL THEN
        RAISE EXCEPTION 'workflow must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- the admission limits, before anything is built from the arguments
    PERFORM wfe._admit_name(submit.workflow, 'workflow');
    PERFORM wfe._admit_name(submit.idempotency_key, 'idempotency_key');
    PERFORM wfe._admit(v_context, 'context');
    PERFORM wfe._admit(v_opts, 'options');
    IF jsonb_typeof(v_context) <> 'object' THEN
        RAISE EXCEPTION 'context must be a JSON object, not %', jsonb_typeof(v_context)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(v_opts) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, not %', jsonb_typeof(v_opts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(v_opts) = 'object' THEN
        PERFORM wfe._admit_name(k, 'submit option key') FROM jsonb_object_keys(v_opts) AS k;
        IF jsonb_typeof(v_opts -> 'execution_context') = 'string' THEN
            PERFORM wfe._admit_name(v_opts ->> 'execution_context', 'execution_context');
        END IF;
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(v_opts) AS k
     WHERE k NOT IN ('tenant', 'execution_context', 'run_deadline_ms', 'priority', 'not_before');
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown submit option: %', v_bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Options are tenant, execution_context, run_deadline_ms, priority and not_before.';
    END IF;
    v_tenant := coalesce(v_opts ->> 'tenant', 'default');
    IF v_tenant !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'tenant "%" is not valid', v_tenant
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
    -- a role submits only for the tenants it acts for, the default one too
    IF NOT wfe._tenant_ok(v_tenant) THEN
        RAISE EXCEPTION 'role "%" does not act for tenant "%"', wfe._caller(), v_tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps a role to a tenant with wfe.add_tenant_member(role, tenant).';
    END IF;
    IF v_opts ? 'priority' THEN
        IF jsonb_typeof(v_opts -> 'priority') <> 'number'
           OR (v_opts ->> 'priority')::numeric NOT BETWEEN -1000000 AND 1000000
           OR (v_opts ->> 'priority')::numeric % 1 <> 0 THEN
            RAISE EXCEPTION 'priority must be an integer between -1000000 and 1000000, not %', v_opts -> 'priority'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_priority := (v_opts ->> 'priority')::int;
    END IF;
    IF v_opts ? 'run_deadline_ms' THEN
        IF jsonb_typeof(v_opts -> 'run_deadline_ms') <> 'number'
           OR (v_opts ->> 'run_deadline_ms')::numeric < 1
           OR (v_opts ->> 'run_deadline_ms')::numeric % 1 <> 0 THEN
            RAISE EXCEPTION 'run_deadline_ms must be a positive integer, not %', v_opts -> 'run_deadline_ms'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF v_opts ? 'not_before' THEN
        BEGIN
            v_start := (v_opts ->> 'not_before')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'not_before must be a timestamp, not %', v_opts -> 'not_before'
                USING ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    IF v_opts ? 'execution_context' AND jsonb_typeof(v_opts -> 'execution_context') <> 'string' THEN
        RAISE EXCEPTION 'execution_context must be a string' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    d := wfe._submittable(submit.workflow);
    v_deadline := coalesce((v_opts ->> 'run_deadline_ms')::bigint, (d.plan ->> 'run_deadline_ms')::bigint);

    -- The definition's context_schema, checked by the one validator.
    IF jsonb_typeof(d.plan -> 'context_schema') IN ('object', 'boolean') THEN
        v_bad := wfe._validate(d.plan -> 'context_schema', v_context);
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'context does not satisfy the context_schema of %@%: %', d.workflow, d.version, v_bad
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The message names the context path and the schema keyword it breaks.';
        END IF;
    END IF;

    IF submit.idempotency_key IS NOT NULL THEN
        v_existing := wfe._idempotent_run(v_tenant, d.workflow, submit.idempotency_key, v_context);
        IF v_existing IS NOT NULL THEN
            -- an insert, not a counter on the run: no lock on a run in flight
            PERFORM wfe._event(v_existing, v_tenant, NULL, NULL, 'run.deduplicated',
                               jsonb_build_object('by', wfe._identity()));
            RETURN QUERY SELECT v_existing, false;
            RETURN;
        END IF;
    END IF;

    -- Admission: the tenant's runs in flight (wfe.configure_tenant).  One
    -- submit of a limited tenant at a time counts and inserts, so two cannot
    -- both take the last slot; the count is a statement of its own after the
    -- lock, so (under READ COMMITTED) it sees what the previous one committed.
    SELECT t.max_runs_in_flight INTO v_limit FROM wfe.tenant_limits AS t
     WHERE t.tenant = v_tenant AND t.max_runs_in_flight IS NOT NULL;
    IF v_limit IS NOT NULL THEN
        PERFORM wfe._lock('wfe.max_runs_in_flight', v_tenant, false);
        SELECT count(*) INTO v_live FROM wfe.runs AS x WHERE x.tenant = v_tenant AND x.finished_at IS NULL;
        IF v_live >= v_limit THEN
            RAISE EXCEPTION 'tenant "%" has % runs in flight, its max_runs_in_flight', v_tenant, v_live
                USING ERRCODE = 'configuration_limit_exceeded',
                      DETAIL = format('Limit max_runs_in_flight = %s (wfe.tenant_limits).', v_limit),
                      HINT = 'Submit again when a run has finished, or raise the limit with wfe.configure_tenant.';
        END IF;
    END IF;

    INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version,
                               compiler_version, engine_version, contracts, context, execution_context,
                               idempotency_key, priority, not_before, deadline_at, form)
    VALUES (v_tenant, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe'),
            (SELECT coalesce(jsonb_object_agg(c.ref, jsonb_build_object('kind', c.kind, 'queue', c.queue,
                                                                         'handler', c.handler::text)), '{}')
               FROM wfe.contracts AS c
              WHERE c.ref IN (SELECT jsonb_array_elements_text(d.plan -> 'contracts'))),
            v_context, coalesce(v_opts ->> 'execution_context', d.plan ->> 'context'),
            submit.idempotency_key, v_priority, v_start,
            now() + make_interval(secs => v_deadline / 1000.0), d.plan ->> 'form')
    ON CONFLICT (tenant, workflow, idempotency_key)
       WHERE idempotency_key IS NOT NULL AND state NOT IN ('failed', 'cancelled')
       DO NOTHING
    RETURNING x.* INTO r;
    IF NOT FOUND THEN
        -- A concurrent submit with the same key won: answer with its run.
        -- (Should that run have failed in between, the key is free again:
        -- the caller's retry starts a new run.)
        v_existing := wfe._idempotent_run(v_tenant, d.workflow, submit.idempotency_key, v_context);
        IF v_existing IS NULL THEN
            RAISE EXCEPTION 'idempotency key "%" was released while this submit ran', submit.idempotency_key
                USING ERRCODE = 'serialization_failure',
                      HINT = 'Submit again: the run that held the key has ended failed or cancelled.';
        END IF;
        PERFORM wfe._event(v_existing, v_tenant, NULL, NULL, 'run.deduplicated',
                           jsonb_build_object('by', wfe._identity()));
        RETURN QUERY SELECT v_existing, false;
        RETURN;
    END IF;

    INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority,
                                awaits, exec_ms, queue_ms, heartbeat_ms)
    SELECT r.run_id, ps.stage, r.tenant, ps.ordinal, ps.type,
           CASE WHEN ps.type = 'worker' THEN ps.spec ->> 'queue' ELSE c.queue END,
           coalesce(ps.spec ->> 'worker', ps.spec ->> 'action'), c.handler, r.priority,
           coalesce((ps.spec ->> 'awaits')::boolean, true),
           (ps.spec ->> 'execution_deadline_ms')::int, (ps.spec ->> 'queue_deadline_ms')::int,
           (ps.spec ->> 'heartbeat_ms')::int
      FROM wfe.plan_stages AS ps
      LEFT JOIN wfe.contracts AS c ON c.ref = coalesce(ps.spec ->> 'worker', ps.spec ->> 'action')
     WHERE ps.definition_id = d.definition_id;

    INSERT INTO wfe.events (run_id, tenant, type, detail)
    VALUES (r.run_id, r.tenant, 'run.submitted',
            jsonb_build_object('workflow', r.workflow, 'version', r.version,
                               'digest', r.definition_digest, 'idempotency_key', r.idempotency_key));
    IF r.deadline_at IS NOT NULL THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'run_deadline', r.deadline_at);
        PERFORM wfe._wake(r.deadline_at);
    END IF;
    IF v_start IS NOT NULL AND v_start > now() THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'not_before', v_start);
        PERFORM wfe._wake(v_start);
    ELSE
        PERFORM wfe._start_run(r.run_id);
    END IF;
    RETURN QUERY SELECT r.run_id, true;
END
$$;
COMMENT ON FUNCTION wfe.submit(text, jsonb, text, jsonb) IS
'Starts a run of the active (or a named approved) version, in the caller''s transaction; an idempotency key returns the earlier run with accepted = false.';

CREATE OR REPLACE FUNCTION wfe.cancel_run(run_id bigint, reason text DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF configure_queue.queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'queue name "%" is not valid', configure_queue.queue
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Queue names match ^[a-z][a-z0-9_.-]{0,62}$.';
    END IF;
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT q.delivery, q.paused INTO v_was, v_was_paused
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused)
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now();
    -- Tasks waiting in the old mode follow the queue into the new one: to
    -- broker (or resumed as broker), queued attempts get their dispatch
    -- message; to poll, dispatched attempts become claimable (a broker worker
    -- that still accepts one is answered duplicate once a poll worker has it).
    -- A paused queue keeps everything as it is until it is resumed.
    IF configure_queue.paused THEN
        NULL;                       -- paused: what waits stays queued
    ELSIF configure_queue.delivery = 'broker'
          AND (coalesce(v_was, 'poll') = 'poll' OR coalesce(v_was_paused, false)) THEN
        -- Every queued attempt without a dispatch message still to publish
        -- is re-dispatched through the engine: a new fence, a new message.
        -- (One whose earlier message was published -- broker, then poll,
        -- then broker again -- would otherwise wait for a message that is
        -- gone.)  No stage row is locked here: the engine locks the run,
        -- then the stage, and one that moved on meanwhile is passed over.
        FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
                  WHERE st.queue = configure_queue.queue AND st.state = 'queued' AND st.handler IS NULL
                    AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                     WHERE o.run_id = st.run_id AND o.stage = st.stage
                                       AND o.attempt = st.attempt AND o.fence = st.fence
                                       AND o.kind = 'dispatch' AND o.state <> 'published')
                  ORDER BY st.run_id, st.stage
        LOOP
            BEGIN
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, wfe._identity(),
                                     format('queue %s switched to broker delivery', configure_queue.queue));
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                NULL;
            END;
        END LOOP;
    ELSIF configure_queue.delivery = 'poll' AND (v_was = 'broker' OR coalesce(v_was_paused, false)) THEN
        UPDATE wfe.run_stages AS st SET state = 'queued'
         WHERE st.queue = configure_queue.queue AND st.state = 'dispatched';
        PERFORM wfe._notify_ready(configure_queue.queue);     -- resumed or switched: wake the pollers
    ELSIF configure_queue.delivery = 'broker' THEN
        -- the same mode, maybe a raised or lifted max_in_flight: what fits now goes
        PERFORM wfe._release_held(configure_queue.queue, NULL);
    ELSE
        PERFORM wfe._notify_ready(configure_queue.queue);     -- the same for pollers
    END IF;
    PERFORM wfe._wake(now());      -- the publisher declares a new broker queue's topology
END
$$;
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit and pause.';

CREATE OR REPLACE FUNCTION wfe.configure_tenant(tenant text, max_runs_in_flight int DEFAULT NULL,
                                     max_tasks_in_flight int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF configure_tenant.tenant !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'tenant "%" is not valid', configure_tenant.tenant
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
    IF configure_tenant.max_runs_in_flight < 1 OR configure_tenant.max_tasks_in_flight < 1 THEN
        RAISE EXCEPTION 'max_runs_in_flight and max_tasks_in_flight must be positive or NULL (unlimited)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.tenant_limits AS t (tenant, max_runs_in_flight, max_tasks_in_flight)
    VALUES (configure_tenant.tenant, configure_tenant.max_runs_in_flight, configure_tenant.max_tasks_in_flight)
    ON CONFLICT (tenant) DO UPDATE
       SET max_runs_in_flight = excluded.max_runs_in_flight,
           max_tasks_in_flight = excluded.max_tasks_in_flight,
           updated_at = now(), updated_by = wfe._identity();
    -- A raised or lifted task limit makes room now: the tenant's held broker
    -- tasks that fit are dispatched, and the pollers of the queues where it
    -- has queued tasks are woken.  A lowered one holds what comes next; the
    -- tasks in flight finish.
    PERFORM wfe._notify_ready(q) FROM wfe._release_held(NULL, configure_tenant.tenant) AS q;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears); NULL is unlimited.';

CREATE OR REPLACE FUNCTION wfe._resolve_dead_letters(p_run_id bigint, p_stage text, p_resolution text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.dead_letters AS d
       SET resolved_at = now(), resolved_by = wfe._identity(), resolution = p_resolution
     WHERE d.run_id = p_run_id AND (p_stage IS NULL OR d.stage = p_stage) AND d.resolved_at IS NULL;
END;
COMMENT ON FUNCTION wfe._resolve_dead_letters(bigint, text, text) IS
'Closes the open dead letters of a stage (or, stage NULL, of a run) with how an operator resolved them.';

CREATE OR REPLACE FUNCTION wfe.redrive(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_code text;
BEGIN
    PERFORM wfe._require_stage(redrive.run_id, redrive.stage);
    -- a binding failure has no attempt to run again: the run's context and
    -- the results it read do not change, so its input would fail again
    SELECT st.error ->> 'code' INTO v_code FROM wfe.run_stages AS st
     WHERE st.run_id = redrive.run_id AND st.stage = redrive.stage AND st.state = 'failed';
    IF v_code LIKE 'binding.%' THEN
        RAISE EXCEPTION 'cannot redrive stage "%" of run %: its input could not be bound (%)', redrive.stage,
                        redrive.run_id, v_code
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The run''s context and results do not change, so binding would fail again: skip_stage completes it by hand, replay starts a new run.';
    END IF;
    PERFORM wfe._operate(redrive.run_id, redrive.stage, 'redrive', NULL, wfe._identity(), redrive.reason);
    PERFORM wfe._resolve_dead_letters(redrive.run_id, redrive.stage, 'redriven');
END
$$;
COMMENT ON FUNCTION wfe.redrive(bigint, text, text) IS
'Runs a failed or timed-out task again: a new attempt with a new fence; a run that ended failed is reopened and goes on from there.';

CREATE OR REPLACE FUNCTION wfe.skip_stage(run_id bigint, stage text, result jsonb DEFAULT '{}', reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._require_stage(skip_stage.run_id, skip_stage.stage);
    PERFORM wfe._operate(skip_stage.run_id, skip_stage.stage, 'skip',
                         coalesce(skip_stage.result, '{}')::text, wfe._identity(), skip_stage.reason);
    PERFORM wfe._resolve_dead_letters(skip_stage.run_id, skip_stage.stage, 'skipped');
END
$$;
COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';

CREATE OR REPLACE FUNCTION wfe.fail_stage(run_id bigint, stage text, reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._require_stage(fail_stage.run_id, fail_stage.stage);
    IF fail_stage.reason IS NULL THEN
        RAISE EXCEPTION 'reason must not be null' USING ERRCODE = 'null_value_not_allowed',
              HINT = 'Say why: the worker sees it in the error, and the event log keeps it.';
    END IF;
    PERFORM wfe._operate(fail_stage.run_id, fail_stage.stage, 'fail', fail_stage.reason, wfe._identity(),
                         fail_stage.reason);
    PERFORM wfe._resolve_dead_letters(fail_stage.run_id, fail_stage.stage, 'failed');
END
$$;
COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';

CREATE OR REPLACE FUNCTION wfe.redispatch(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  text;
    v_broker boolean;
    v_paused boolean;
BEGIN
    PERFORM wfe._require_stage(redispatch.run_id, redispatch.stage);
    SELECT st.queue, q.delivery = 'broker', q.paused INTO v_queue, v_broker, v_paused
      FROM wfe.run_stages AS st LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.run_id = redispatch.run_id AND st.stage = redispatch.stage;
    IF FOUND AND NOT coalesce(v_broker, false) THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is a poll queue', redispatch.stage,
                        redispatch.run_id, coalesce(v_queue, '(none)')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Poll workers claim queued tasks with wfe.claim_task; nothing is dispatched.';
    END IF;
    IF FOUND AND v_paused THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is paused', redispatch.stage,
                        redispatch.run_id, v_queue
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Resume it with wfe.configure_queue(..., paused => false): its tasks are dispatched then.';
    END IF;
    PERFORM wfe._operate(redispatch.run_id, redispatch.stage, 'redispatch', NULL, wfe._identity(),
                         redispatch.reason);
END
$$;
COMMENT ON FUNCTION wfe.redispatch(bigint, text, text) IS
'Sends a queued or dispatched broker attempt again: same attempt, new fence, a new dispatch message (the old one''s accept is stale).';

CREATE OR REPLACE FUNCTION wfe.replay(run_id bigint, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r     wfe.runs;
    v_new bigint;
BEGIN
    IF replay.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = replay.run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % does not exist', replay.run_id USING ERRCODE = 'undefined_object';
    END IF;
    IF r.finished_at IS NULL THEN
        RAISE EXCEPTION 'cannot replay run %: it is %', r.run_id, r.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Replay a run that has ended; cancel it first (wfe.cancel_run) to replay it now.';
    END IF;
    -- the same pinned definition (name@version: even once retired), context,
    -- tenant, execution context and priority; no idempotency key
    SELECT s.run_id INTO v_new
      FROM wfe.submit(r.workflow || '@' || r.version, r.context, NULL,
                      jsonb_build_object('tenant', r.tenant, 'priority', r.priority)
                      || CASE WHEN r.execution_context IS NULL THEN '{}'::jsonb
                              ELSE jsonb_build_object('execution_context', r.execution_context) END) AS s;
    UPDATE wfe.runs AS x SET replay_of = r.run_id WHERE x.run_id = v_new;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.replayed',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay', v_new));
    PERFORM wfe._event(v_new, r.tenant, NULL, NULL, 'run.replay_of',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay_of', r.run_id));
    PERFORM wfe._resolve_dead_letters(r.run_id, NULL, 'replayed');
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION wfe.replay(bigint, text) IS
'Starts a new run of an ended run''s pinned definition with its context, tenant, execution context and priority; the new run''s replay_of names the old one.';



-- ---------------------------------------------------------------------
-- No login can freeze the worker or a tenant's admissions (issue 20, item
-- 3): wfe's admission and cache locks are taken with wfe._lock (C,
-- src/pg/locks.c: advisory lock tags no SQL function can name) instead of
-- pg_advisory_xact_lock(hashtext(...)); the worker's lock waits are
-- bounded (lock_timeout), and an item whose wait timed out (55P03) is put
-- off a second like a deadlock.  wfe.submit's new text is above.
-- ---------------------------------------------------------------------
CREATE FUNCTION wfe._lock(space text, key text, try boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_lock_sql' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._lock(text, text, boolean) IS
'Takes wfe''s transaction lock (space, key), which no login can take: waits (bounded by lock_timeout), or with try only takes it if free; returns whether it was taken.';
REVOKE EXECUTE ON FUNCTION wfe._lock(text, text, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION wfe._lock_tenant(p_tenant text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max text := coalesce(current_setting('wfe_admission.tenant', true), '');
BEGIN
    IF coalesce(current_setting('wfe_admission.queue', true), '') <> ''
       OR (v_max <> '' AND p_tenant COLLATE "C" <= v_max COLLATE "C") THEN
        -- out of order (or already held: a held lock is granted again at once)
        IF wfe._lock('wfe.max_tasks_in_flight', p_tenant, true) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(NULL, p_tenant);
        RETURN false;
    END IF;
    PERFORM wfe._lock('wfe.max_tasks_in_flight', p_tenant, false);
    PERFORM set_config('wfe_admission.tenant', p_tenant, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_tenant(text) IS
'Takes a tenant''s max_tasks_in_flight lock, waiting only in lock order (tenants by name before any queue); out of order it only tries, and a miss is rechecked later.';

CREATE OR REPLACE FUNCTION wfe._lock_queue(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max text := coalesce(current_setting('wfe_admission.queue', true), '');
BEGIN
    IF v_max <> '' AND p_queue COLLATE "C" <= v_max COLLATE "C" THEN
        IF wfe._lock('wfe.max_in_flight', p_queue, true) THEN
            RETURN true;
        END IF;
        PERFORM wfe._recheck_later(p_queue, NULL);
        RETURN false;
    END IF;
    PERFORM wfe._lock('wfe.max_in_flight', p_queue, false);
    PERFORM set_config('wfe_admission.queue', p_queue, true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION wfe._lock_queue(text) IS
'Takes a broker queue''s max_in_flight lock, waiting only in lock order (queues by name, after the tenants); out of order it only tries, and a miss is rechecked later.  From then on tenant locks are only tried.';

CREATE OR REPLACE FUNCTION wfe._item_failed(p_run_id bigint, p_stage text, p_what text,
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
            INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
            SELECT r.run_id, r.tenant, p_stage, NULL, 'run.engine_error',
                   jsonb_build_object('error', v_error, 'failing_run', jsonb_build_object(
                       'sqlstate', v_state,
                       'message', left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000)))
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


CREATE OR REPLACE FUNCTION wfe._worker_round(p_max int)
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
    -- the admission locks in their order): the held tasks that an
    -- admission's missed try kept back (69_admission.sql).
    BEGIN
        PERFORM wfe._recheck_admission();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking held tasks raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
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
              WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at <= now()
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
'Releases what missed admission tries held back, fires up to p_max due timers and times out up to p_max expired attempts; returns how many timers and attempts.';
