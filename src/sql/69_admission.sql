-- Run-time admission limits per tenant (docs: operations.md "Backpressure").
--
-- Queue limits live on wfe.queues (max_in_flight, paused); tenant limits
-- live here.  A tenant with no row is unlimited.

CREATE TABLE wfe.tenant_limits (
    tenant             text PRIMARY KEY
                       CONSTRAINT tenant_limits_tenant CHECK (tenant ~ '^[A-Za-z0-9_.-]{1,63}$'),
    max_runs_in_flight int CONSTRAINT tenant_limits_runs CHECK (max_runs_in_flight > 0),
    max_tasks_in_flight int CONSTRAINT tenant_limits_tasks CHECK (max_tasks_in_flight > 0),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    updated_by         text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE wfe.tenant_limits IS
'Per-tenant limits: runs in flight (refused at submit, 53400) and tasks in flight (held queued at release).  NULL: unlimited.';
-- settings, like wfe.queues: pg_dump keeps them (68_dump.sql)
SELECT pg_catalog.pg_extension_config_dump('wfe.tenant_limits', '');

CREATE FUNCTION wfe.configure_tenant(tenant text, max_runs_in_flight int DEFAULT NULL,
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
           updated_at = now(), updated_by = session_user;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight; NULL is unlimited.';
