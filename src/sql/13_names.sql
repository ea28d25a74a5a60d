-- Names callers give wfe: one rule each (docs: operations.md "Tenants",
-- delivery.md "Queues").  The rule is an IMMUTABLE predicate; the domain
-- over it types the columns that hold such names, and the functions that
-- take one check it with the _check_ function, which answers 22023 with
-- the rule as a hint (a cast to the domain would answer 23514, and catching
-- that would cost a subtransaction).  The predicates are plain SQL without
-- SET: the planner inlines them (their bodies are bound at CREATE, so
-- nothing can capture them).

CREATE FUNCTION wfe._is_tenant_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN name ~ '^[A-Za-z0-9_.-]{1,63}$';
COMMENT ON FUNCTION wfe._is_tenant_name(text) IS
'The rule of tenant names: 1 to 63 ASCII letters, digits, "_", "." or "-".';
REVOKE ALL ON FUNCTION wfe._is_tenant_name(text) FROM PUBLIC;

CREATE DOMAIN wfe.tenant_name AS text
    CONSTRAINT tenant_name_format CHECK (wfe._is_tenant_name(VALUE));
COMMENT ON DOMAIN wfe.tenant_name IS 'A tenant name: matches ^[A-Za-z0-9_.-]{1,63}$ (wfe._is_tenant_name).';

-- Raise 22023 unless p_tenant is a tenant name.
CREATE FUNCTION wfe._check_tenant_name(p_tenant text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT wfe._is_tenant_name(p_tenant) THEN
        RAISE EXCEPTION 'tenant "%" is not valid', left(p_tenant, 80)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_tenant_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a tenant name; NULL passes.';
REVOKE ALL ON FUNCTION wfe._check_tenant_name(text) FROM PUBLIC;

CREATE FUNCTION wfe._is_queue_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN name ~ '^[a-z][a-z0-9_.-]{0,62}$';
COMMENT ON FUNCTION wfe._is_queue_name(text) IS
'The rule of queue names: a lower-case ASCII letter, then up to 62 lower-case letters, digits, "_", "." or "-".';
REVOKE ALL ON FUNCTION wfe._is_queue_name(text) FROM PUBLIC;

CREATE DOMAIN wfe.queue_name AS text
    CONSTRAINT queue_name_format CHECK (wfe._is_queue_name(VALUE));
COMMENT ON DOMAIN wfe.queue_name IS 'A queue name: matches ^[a-z][a-z0-9_.-]{0,62}$ (wfe._is_queue_name).';

-- Raise 22023 unless p_queue is a queue name.
CREATE FUNCTION wfe._check_queue_name(p_queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT wfe._is_queue_name(p_queue) THEN
        RAISE EXCEPTION 'invalid queue name "%"', left(p_queue, 80)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name matches [a-z][a-z0-9_.-]* and has at most 63 characters.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_queue_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a queue name; NULL passes.';
REVOKE ALL ON FUNCTION wfe._check_queue_name(text) FROM PUBLIC;
