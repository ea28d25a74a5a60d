-- Run commands from RabbitMQ (docs: delivery.md "Run commands from
-- RabbitMQ"): seed 004's envelope, consumed by the background worker from
-- wfe.ingress.NAME (src/bgw/ingress.c) and submitted here, as the
-- ingress's role, in the transaction whose commit the ack waits for.

-- The configured ingresses: one queue each, and the role its commands act as.
CREATE TABLE wfe.ingresses (
    name       text PRIMARY KEY CONSTRAINT ingresses_name CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    role       regrole NOT NULL,
    options    jsonb NOT NULL DEFAULT '{}',
    created_by name NOT NULL DEFAULT session_user,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.ingresses IS
'Run-command ingresses: the background worker consumes wfe.ingress.NAME and submits each command as role';
GRANT SELECT ON wfe.ingresses TO wfe_admin, wfe_operator;

-- What each ingress did with the commands it took: submitted, duplicate or
-- rejected (with the SQLSTATE as reason), counted in the transaction that did it.
CREATE TABLE wfe.ingress_counts (
    ingress text NOT NULL REFERENCES wfe.ingresses ON DELETE CASCADE,
    outcome text NOT NULL CONSTRAINT ingress_counts_outcome CHECK (outcome IN ('submitted', 'duplicate', 'rejected')),
    reason  text NOT NULL DEFAULT '',
    n       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (ingress, outcome, reason)
);
COMMENT ON TABLE wfe.ingress_counts IS
'Per ingress: commands submitted, duplicates (accepted = false) and rejected by SQLSTATE';

-- Large-track inputs stored ahead of their command (wfe.put_payload), for
-- the tenants their uploader acted for then (NULL: every tenant).
CREATE TABLE wfe.ingress_payloads (
    key        text PRIMARY KEY,
    tenants    text[],
    sha256     text NOT NULL CONSTRAINT ingress_payloads_sha256 CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    body       jsonb NOT NULL,
    created_by name NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.ingress_payloads IS
'Inputs of large-track run commands, by the key wfe.put_payload returned; a command''s payload_ref must name one of its tenant with the same SHA-256';

-- How the submit in progress came (set only by wfe._ingress_submit_as).
CREATE FUNCTION wfe._submit_via()
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_submit_via'
LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._submit_via() IS
'How the submit in progress came, for its run.submitted event: {"via": "amqp", "ingress", "message_id", "correlation_id"}, or {} for a SQL call.';
REVOKE ALL ON FUNCTION wfe._submit_via() FROM PUBLIC;

CREATE FUNCTION wfe._ingress_submit_as(role regrole, tenant text, workflow text, context jsonb, key text,
                                       options jsonb, via jsonb, OUT run_id bigint, OUT accepted boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'wfe_ingress_submit_as'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._ingress_submit_as(regrole, text, text, jsonb, text, jsonb, jsonb) IS
'wfe.submit as role (its tenant membership, limits and identity apply), via recorded in run.submitted; NULLs when role does not act for tenant.';
REVOKE ALL ON FUNCTION wfe._ingress_submit_as(regrole, text, text, jsonb, text, jsonb, jsonb) FROM PUBLIC;

CREATE FUNCTION wfe.configure_ingress(name text, role name, options jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_role regrole;
    v_bad  text;
BEGIN
    IF configure_ingress.name IS NULL OR configure_ingress.name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid ingress name "%"', configure_ingress.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An ingress name is 1 to 63 lowercase letters, digits, "_" or "-" (it names the queue wfe.ingress.NAME).';
    END IF;
    IF configure_ingress.role IS NULL THEN
        DELETE FROM wfe.ingresses AS i WHERE i.name = configure_ingress.name;
        RETURN;
    END IF;
    SELECT r.oid::regrole INTO v_role FROM pg_catalog.pg_roles AS r WHERE r.rolname = configure_ingress.role;
    IF v_role IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', configure_ingress.role USING ERRCODE = 'undefined_object';
    END IF;
    -- a superuser acts for every tenant: a command could name any of them
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = v_role)
       OR pg_catalog.pg_has_role(v_role, 'wfe_admin', 'USAGE') THEN
        RAISE EXCEPTION 'an ingress must not act as "%", which acts for every tenant', configure_ingress.role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Create a role with wfe_submitter, map it to the tenants its commands may name (wfe.add_tenant_member), and use it.';
    END IF;
    IF NOT pg_catalog.pg_has_role(v_role, 'wfe_submitter', 'USAGE') THEN
        RAISE EXCEPTION 'role "%" cannot submit runs', configure_ingress.role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'GRANT wfe_submitter TO the role.';
    END IF;
    IF jsonb_typeof(coalesce(configure_ingress.options, '{}')) <> 'object' THEN
        RAISE EXCEPTION 'ingress options must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(coalesce(configure_ingress.options, '{}')) AS k
     WHERE k <> 'workflows';
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown ingress option: %', v_bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The option is workflows (an array of the workflow names its commands may start).';
    END IF;
    IF configure_ingress.options ? 'workflows' AND
       (jsonb_typeof(configure_ingress.options -> 'workflows') <> 'array' OR
        EXISTS (SELECT 1 FROM jsonb_array_elements(configure_ingress.options -> 'workflows') AS w
                 WHERE jsonb_typeof(w) <> 'string')) THEN
        RAISE EXCEPTION 'ingress option workflows must be an array of workflow names'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.ingresses AS i (name, role, options)
    VALUES (configure_ingress.name, v_role, coalesce(configure_ingress.options, '{}'))
    ON CONFLICT (name) DO UPDATE
       SET role = EXCLUDED.role, options = EXCLUDED.options, created_by = session_user, updated_at = now();
END
$$;
COMMENT ON FUNCTION wfe.configure_ingress(text, name, jsonb) IS
'Has the background worker consume run commands from wfe.ingress.NAME and submit them as role; role NULL drops the ingress.';
REVOKE ALL ON FUNCTION wfe.configure_ingress(text, name, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_ingress(text, name, jsonb) TO wfe_admin;

CREATE FUNCTION wfe.put_payload(body jsonb)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key text := pg_catalog.gen_random_uuid()::text;
BEGIN
    IF put_payload.body IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit(put_payload.body, 'payload');
    IF jsonb_typeof(put_payload.body) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object (a run''s context), not %', jsonb_typeof(put_payload.body)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.ingress_payloads (key, tenants, sha256, body, created_by)
    VALUES (v_key, wfe.my_tenants(), wfe.payload_sha256(put_payload.body), put_payload.body, wfe._identity());
    RETURN v_key;
END
$$;
COMMENT ON FUNCTION wfe.put_payload(jsonb) IS
'Stores a large-track run command''s input for the tenants the caller acts for; returns the key its payload_ref names (with sha256 = wfe.payload_sha256(body)).';
REVOKE ALL ON FUNCTION wfe.put_payload(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.put_payload(jsonb) TO wfe_submitter;

-- The SHA-256 a payload_ref carries: of the body's jsonb text, in hex.
CREATE FUNCTION wfe.payload_sha256(body jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(body::text, 'UTF8')), 'hex');
END;
COMMENT ON FUNCTION wfe.payload_sha256(jsonb) IS
'The sha256 a payload_ref names for body (wfe.put_payload): hex SHA-256 of its jsonb text.';
REVOKE ALL ON FUNCTION wfe.payload_sha256(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.payload_sha256(jsonb) TO wfe_submitter;

-- Count one command's outcome for an ingress.
CREATE FUNCTION wfe._ingress_count(p_ingress text, p_outcome text, p_reason text DEFAULT '')
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.ingress_counts AS c (ingress, outcome, reason, n)
    SELECT i.name, p_outcome, p_reason, 1 FROM wfe.ingresses AS i WHERE i.name = p_ingress
    ON CONFLICT (ingress, outcome, reason) DO UPDATE SET n = c.n + 1;
END;
COMMENT ON FUNCTION wfe._ingress_count(text, text, text) IS
'Counts one command of an ingress: submitted, duplicate, or rejected with its SQLSTATE as reason.';
REVOKE ALL ON FUNCTION wfe._ingress_count(text, text, text) FROM PUBLIC;

-- Raise 22023 about an envelope's field.
CREATE FUNCTION wfe._envelope_error(p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'not a run command envelope: %', p_what
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'See delivery.md "Run commands from RabbitMQ" for the envelope''s fields.';
END
$$;
COMMENT ON FUNCTION wfe._envelope_error(text) IS
'Raises 22023 naming what is wrong with a run command''s envelope.';
REVOKE ALL ON FUNCTION wfe._envelope_error(text) FROM PUBLIC;

-- The string field of an envelope (or object) p, or 22023.
CREATE FUNCTION wfe._envelope_string(p jsonb, p_field text, p_where text DEFAULT '')
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(p -> p_field) IS DISTINCT FROM 'string' OR p ->> p_field = '' THEN
        PERFORM wfe._envelope_error(format('%s%s must be a non-empty string', p_where, p_field));
    END IF;
    RETURN p ->> p_field;
END
$$;
COMMENT ON FUNCTION wfe._envelope_string(jsonb, text, text) IS
'The non-empty string field of a run command''s envelope, or 22023 naming it.';
REVOKE ALL ON FUNCTION wfe._envelope_string(jsonb, text, text) FROM PUBLIC;

-- One run command of ingress p_ingress (the message body): validated, its
-- payload resolved, submitted as the ingress's role and counted; with the
-- envelope's correlation_id, for the reply.  Raises for a command to
-- reject (the SQLSTATE becomes x-wfe-error).
CREATE FUNCTION wfe._ingress_submit(p_ingress text, p_body text, OUT run_id bigint, OUT accepted boolean,
                                    OUT correlation_id text)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    i        wfe.ingresses;
    e        jsonb;
    p        wfe.ingress_payloads;
    v_bad    text;
    v_track  text;
    v_tenant text;
    v_flow   text;
    v_ctx    jsonb;
    v_ref    jsonb;
    v_opts   jsonb;
    v_key    text;
BEGIN
    SELECT * INTO i FROM wfe.ingresses AS x WHERE x.name = p_ingress;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ingress "%" is not configured', p_ingress USING ERRCODE = 'undefined_object';
    END IF;
    BEGIN
        e := p_body::jsonb;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character OR character_not_in_repertoire THEN
        RAISE EXCEPTION 'a run command must be a JSON envelope: the message body is not JSON'
            USING ERRCODE = 'invalid_text_representation';
    END;
    PERFORM wfe._admit(e, 'run command');
    IF jsonb_typeof(e) <> 'object' THEN
        PERFORM wfe._envelope_error('the body is a JSON ' || jsonb_typeof(e) || ', not an object');
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(e) AS k
     WHERE k NOT IN ('message_id', 'correlation_id', 'workflow_name', 'track', 'headers', 'idempotency_key',
                     'payload_inline', 'payload_ref', 'created_at', 'options');
    IF v_bad IS NOT NULL THEN
        PERFORM wfe._envelope_error('unknown field ' || v_bad);
    END IF;
    PERFORM wfe._envelope_string(e, 'message_id');
    correlation_id := wfe._envelope_string(e, 'correlation_id');
    v_flow := wfe._envelope_string(e, 'workflow_name');
    v_track := wfe._envelope_string(e, 'track');
    IF v_track NOT IN ('small', 'large') THEN
        PERFORM wfe._envelope_error('track must be "small" or "large"');
    END IF;
    IF jsonb_typeof(e -> 'headers') IS DISTINCT FROM 'object' THEN
        PERFORM wfe._envelope_error('headers must be an object');
    END IF;
    IF wfe._envelope_string(e -> 'headers', 'content_type', 'headers.') <> 'application/json' THEN
        PERFORM wfe._envelope_error('headers.content_type must be "application/json"');
    END IF;
    PERFORM wfe._envelope_string(e -> 'headers', 'source', 'headers.');
    v_tenant := wfe._envelope_string(e -> 'headers', 'tenant', 'headers.');
    IF jsonb_typeof(e -> 'idempotency_key') NOT IN ('string', 'null') THEN
        PERFORM wfe._envelope_error('idempotency_key must be a string');
    END IF;
    BEGIN
        PERFORM wfe._envelope_string(e, 'created_at')::timestamptz;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        PERFORM wfe._envelope_error('created_at must be a timestamp');
    END;
    -- exactly one payload; the small track carries it inline, the large by reference
    IF jsonb_typeof(e -> 'payload_inline') IS NOT NULL AND jsonb_typeof(e -> 'payload_inline') <> 'null'
       AND jsonb_typeof(e -> 'payload_ref') IS NOT NULL AND jsonb_typeof(e -> 'payload_ref') <> 'null' THEN
        PERFORM wfe._envelope_error('it has both payload_inline and payload_ref');
    END IF;
    IF v_track = 'small' THEN
        IF jsonb_typeof(e -> 'payload_inline') IS DISTINCT FROM 'object' THEN
            PERFORM wfe._envelope_error('track "small" requires payload_inline, an object');
        END IF;
        v_ctx := e -> 'payload_inline';
    ELSE
        v_ref := e -> 'payload_ref';
        IF jsonb_typeof(v_ref) IS DISTINCT FROM 'object' THEN
            PERFORM wfe._envelope_error('track "large" requires payload_ref, an object');
        END IF;
        IF v_ref ? 'bucket' AND v_ref -> 'bucket' NOT IN ('"wfe"', 'null') THEN
            PERFORM wfe._envelope_error('payload_ref.bucket must be "wfe" (a wfe.put_payload key)');
        END IF;
        SELECT * INTO p FROM wfe.ingress_payloads AS x
         WHERE x.key = wfe._envelope_string(v_ref, 'key', 'payload_ref.');
        -- another tenant's key is answered as a key that does not exist
        IF NOT FOUND OR NOT (p.tenants IS NULL OR v_tenant = ANY (p.tenants)) THEN
            RAISE EXCEPTION 'payload_ref names no payload of tenant "%"', v_tenant
                USING ERRCODE = 'undefined_object',
                      HINT = 'Store the input with wfe.put_payload as a role of that tenant and name the key it returns.';
        END IF;
        IF wfe._envelope_string(v_ref, 'sha256', 'payload_ref.') <> p.sha256 THEN
            RAISE EXCEPTION 'payload_ref''s sha256 does not match payload "%"', p.key
                USING ERRCODE = 'data_corrupted',
                      HINT = 'sha256 is wfe.payload_sha256 of the stored body.';
        END IF;
        v_ctx := p.body;
    END IF;
    v_opts := jsonb_build_object('tenant', v_tenant);
    IF e ? 'options' AND jsonb_typeof(e -> 'options') <> 'null' THEN
        IF jsonb_typeof(e -> 'options') <> 'object' THEN
            PERFORM wfe._envelope_error('options must be an object');
        END IF;
        SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(e -> 'options') AS k
         WHERE k NOT IN ('priority', 'not_before', 'traceparent');
        IF v_bad IS NOT NULL THEN
            PERFORM wfe._envelope_error('unknown option ' || v_bad || ' (options are priority, not_before, traceparent)');
        END IF;
        v_opts := v_opts || (e -> 'options');
    END IF;
    IF i.options ? 'workflows' AND NOT (i.options -> 'workflows') ? regexp_replace(v_flow, '@[^@]*$', '') THEN
        RAISE EXCEPTION 'ingress "%" does not start workflow "%"', i.name, v_flow
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Its option workflows lists the workflows its commands may start.';
    END IF;
    -- the role may have lost the right to submit since the ingress was configured
    IF NOT pg_catalog.pg_has_role(i.role, 'wfe_submitter', 'USAGE') THEN
        RAISE EXCEPTION 'role "%" of ingress "%" cannot submit runs', i.role, i.name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    v_key := coalesce(e ->> 'idempotency_key', e ->> 'message_id');
    SELECT x.run_id, x.accepted INTO run_id, accepted
      FROM wfe._ingress_submit_as(i.role, v_tenant, v_flow, v_ctx, v_key, v_opts,
                                  jsonb_build_object('via', 'amqp', 'ingress', i.name,
                                                     'message_id', e ->> 'message_id',
                                                     'correlation_id', e ->> 'correlation_id')) AS x;
    IF run_id IS NULL THEN
        RAISE EXCEPTION 'role "%" of ingress "%" does not act for tenant "%"', i.role, i.name, v_tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps the role to the tenant with wfe.add_tenant_member(role, tenant).';
    END IF;
    PERFORM wfe._ingress_count(i.name, CASE WHEN accepted THEN 'submitted' ELSE 'duplicate' END);
END
$$;
COMMENT ON FUNCTION wfe._ingress_submit(text, text) IS
'Validates a run command (seed 004''s envelope) of an ingress and submits it as the ingress''s role; raises for a command to reject.';
REVOKE ALL ON FUNCTION wfe._ingress_submit(text, text) FROM PUBLIC;

-- The configured ingresses' names, for the background worker.
CREATE FUNCTION wfe._ingress_names()
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(array_agg(i.name ORDER BY i.name), '{}') FROM wfe.ingresses AS i;
END;
COMMENT ON FUNCTION wfe._ingress_names() IS
'The ingresses the background worker consumes.';
REVOKE ALL ON FUNCTION wfe._ingress_names() FROM PUBLIC;

-- Per ingress: commands received, submitted, duplicates, rejected (and by reason).
CREATE VIEW wfe.dashboard_ingress AS
SELECT i.name AS ingress, i.role,
       coalesce(sum(c.n), 0)::bigint AS received,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'submitted'), 0)::bigint AS submitted,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'duplicate'), 0)::bigint AS duplicates,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'rejected'), 0)::bigint AS rejected,
       coalesce(jsonb_object_agg(c.reason, c.n) FILTER (WHERE c.outcome = 'rejected'), '{}') AS rejected_by_reason
  FROM wfe.ingresses AS i
  LEFT JOIN wfe.ingress_counts AS c ON c.ingress = i.name
 GROUP BY i.name, i.role
 ORDER BY i.name;
COMMENT ON VIEW wfe.dashboard_ingress IS
'Per ingress: run commands received, submitted, duplicates (accepted = false) and rejected, by reason (SQLSTATE).';
GRANT SELECT ON wfe.dashboard_ingress TO wfe_admin, wfe_operator;
