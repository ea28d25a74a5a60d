-- Contracts: the registry of the actions and workers definitions may use.
--
-- A contract version (name@N) is immutable once registered.  Registering the
-- same ref again with identical content is a no-op, so set-up scripts can be
-- re-run; with different content it is an error with SQLSTATE 23505
-- (unique_violation: the ref is taken by other content), naming what differs.

CREATE TABLE wfe.contracts (
    ref           text PRIMARY KEY
                  CONSTRAINT contracts_ref_format
                  CHECK (ref ~ '^[a-z][a-z0-9_.-]*@[1-9][0-9]*$'),
    kind          text NOT NULL
                  CONSTRAINT contracts_kind CHECK (kind IN ('worker', 'action', 'signal')),
    name          text NOT NULL,
    version       int NOT NULL CONSTRAINT contracts_version CHECK (version >= 1),
    queue         wfe.queue_name,
    handler       regprocedure,
    input_schema  jsonb NOT NULL DEFAULT '{}'
                  CONSTRAINT contracts_input_schema
                  CHECK (jsonb_typeof(input_schema) IN ('object', 'boolean')),
    output_schema jsonb NOT NULL DEFAULT '{}'
                  CONSTRAINT contracts_output_schema
                  CHECK (jsonb_typeof(output_schema) IN ('object', 'boolean')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    name NOT NULL DEFAULT wfe._identity(),
    run_as        regrole,
    CONSTRAINT contracts_ref_parts CHECK (ref = name || '@' || version::text),
    -- a worker has a queue; an action has exactly one of handler and queue; a signal neither
    CONSTRAINT contracts_executor CHECK (
        CASE kind
            WHEN 'worker' THEN queue IS NOT NULL AND handler IS NULL
            WHEN 'signal' THEN queue IS NULL AND handler IS NULL
            ELSE (queue IS NULL) <> (handler IS NULL)
        END),
    -- only handlers run as someone (NULL for one registered under 0.1.0 by a role since dropped)
    CONSTRAINT contracts_run_as CHECK (handler IS NOT NULL OR run_as IS NULL)
);

COMMENT ON TABLE wfe.contracts IS
'Registered action, worker and signal contracts (name@N). Rows are immutable: register a new version instead.';
GRANT SELECT ON wfe.contracts TO wfe_admin, wfe_author, wfe_approver, wfe_operator, wfe_reader;
COMMENT ON COLUMN wfe.contracts.ref IS 'Contract reference name@N, as definitions name it';
COMMENT ON COLUMN wfe.contracts.kind IS 'worker (runs outside the database, claimed from a queue), action, or signal (what a wait stage waits for: wfe.signal)';
COMMENT ON COLUMN wfe.contracts.queue IS 'Queue the worker or queued action is dispatched to; NULL for an in-database action';
COMMENT ON COLUMN wfe.contracts.handler IS 'In-database action: a function (input jsonb) RETURNS jsonb; NULL otherwise';
COMMENT ON COLUMN wfe.contracts.run_as IS 'In-database action: the role its handler runs as -- the role that registered it (SET ROLE included)';

-- Handlers run as their registrant (src/pg/handler.c).
CREATE FUNCTION wfe._check_handler(handler regprocedure, run_as regrole)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_check_handler' LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION wfe._check_handler(regprocedure, regrole) IS
'Raises 42501 unless handler may run as run_as: owned by it or a superuser, not in a temporary schema, executable by it.';
REVOKE ALL ON FUNCTION wfe._check_handler(regprocedure, regrole) FROM PUBLIC;
CREATE FUNCTION wfe._invoke_handler(handler regprocedure, run_as regrole, input jsonb)
RETURNS jsonb AS 'MODULE_PATHNAME', 'wfe_invoke_handler' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._invoke_handler(regprocedure, regrole, jsonb) IS
'Calls handler(input) as run_as, under SECURITY_RESTRICTED_OPERATION, after checking it still may.';
REVOKE ALL ON FUNCTION wfe._invoke_handler(regprocedure, regrole, jsonb) FROM PUBLIC;
COMMENT ON COLUMN wfe.contracts.input_schema IS 'JSON-Schema subset the bound input must satisfy';
COMMENT ON COLUMN wfe.contracts.output_schema IS 'JSON-Schema subset a result must satisfy; a signal''s payload schema (its payload is the wait''s result)';
COMMENT ON COLUMN wfe.contracts.created_by IS 'Who registered the contract (wfe._identity(): session_user, or a handler''s registrant)';

CREATE TRIGGER contracts_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON wfe.contracts
    FOR EACH STATEMENT
    EXECUTE FUNCTION wfe._immutable('registered contracts are immutable',
                                    'Register a new version of the contract (name@N+1) instead.');

-- Registered contracts are user data: pg_dump dumps them.
SELECT pg_catalog.pg_extension_config_dump('wfe.contracts', '');


-- Schemas are checked by wfe._check_json_schema (35_runtime_helpers.sql,
-- the core's JSON Schema validator): one validator for registration,
-- binding, results and context_schema.


-- Validates and stores one contract; shared by register_worker and
-- register_action, which are its only callers.
CREATE FUNCTION wfe._register_contract(p_ref text, p_kind text, p_queue text,
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
    ELSIF p_kind = 'action' AND (p_handler IS NULL) = (p_queue IS NULL) THEN
        RAISE EXCEPTION 'action contract "%" needs exactly one of handler and queue', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An action either runs in the database (handler => a function (input jsonb) RETURNS jsonb) or is dispatched to workers (queue => a queue name).';
    END IF;

    PERFORM wfe._check_queue_name(p_queue);

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
REVOKE ALL ON FUNCTION wfe._register_contract(text, text, text, regprocedure, jsonb, jsonb) FROM PUBLIC;


CREATE FUNCTION wfe.register_worker(ref text, queue text,
                                    input_schema jsonb DEFAULT '{}',
                                    output_schema jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._register_contract($1, 'worker', $2, NULL, $3, $4);
END
$$;

COMMENT ON FUNCTION wfe.register_worker(text, text, jsonb, jsonb) IS
'Registers worker contract ref (name@N) served from queue, with its input and output JSON schemas. Idempotent; a registered version is immutable.';
REVOKE ALL ON FUNCTION wfe.register_worker(text, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.register_worker(text, text, jsonb, jsonb) TO wfe_admin;


CREATE FUNCTION wfe.register_action(ref text, handler regprocedure DEFAULT NULL,
                                    queue text DEFAULT NULL,
                                    input_schema jsonb DEFAULT '{}',
                                    output_schema jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._register_contract($1, 'action', $3, $2, $4, $5);
END
$$;

COMMENT ON FUNCTION wfe.register_action(text, regprocedure, text, jsonb, jsonb) IS
'Registers action contract ref (name@N): either an in-database handler (input jsonb) RETURNS jsonb or a queue. Idempotent; a registered version is immutable.';
REVOKE ALL ON FUNCTION wfe.register_action(text, regprocedure, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.register_action(text, regprocedure, text, jsonb, jsonb) TO wfe_admin;
