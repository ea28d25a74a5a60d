-- Tenants (docs: operations.md "Tenants").
--
-- A role acts for the tenants it is mapped to: wfe.tenant_members(role,
-- tenant), managed by wfe_admin, and every role with the privileges of a
-- mapped role (so mapping a group maps its members).  Superusers and
-- members of wfe_admin act for every tenant.  A submit's tenant must be
-- one the caller acts for -- the default tenant too -- and every function
-- that reads or changes a run answers for another tenant's run exactly as
-- for a run that does not exist.  Row-level security (76_tenant_rls.sql)
-- limits what the readers' roles SELECT to the same tenants.

CREATE TABLE wfe.tenant_members (
    role       regrole NOT NULL,
    tenant     wfe.tenant_name NOT NULL,
    granted_by name NOT NULL DEFAULT wfe._identity(),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, tenant)
);
COMMENT ON TABLE wfe.tenant_members IS
'Which roles act for which tenants (wfe.add_tenant_member); superusers and wfe_admin act for all.';
GRANT SELECT ON wfe.tenant_members TO wfe_admin;

-- The tenants the calling role acts for; NULL when it acts for all (a
-- superuser, or with wfe_admin's privileges).  Public: the row-level
-- security policies call it as the role that queries, once per query.
-- C (src/pg/tenants.c, the one place of the rule, which a submit asks
-- too): no PL/pgSQL on the submit path (00_schema.sql's rules).
CREATE FUNCTION wfe.my_tenants()
RETURNS text[] AS 'MODULE_PATHNAME', 'wfe_my_tenants'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.my_tenants() IS
'The tenants the role acting in this session acts for (mapped directly or through roles whose privileges it has); NULL: every tenant (a superuser or wfe_admin).';
REVOKE ALL ON FUNCTION wfe.my_tenants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.my_tenants() TO wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_worker, wfe_operator, wfe_reader;

-- May the calling role act for p_tenant?  (The same rule, tenants.c.)
CREATE FUNCTION wfe._tenant_ok(p_tenant text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_tenant_ok'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe._tenant_ok(text) IS
'Whether the role acting in this session acts for tenant p_tenant (mapped to it, or a superuser or wfe_admin).';
REVOKE ALL ON FUNCTION wfe._tenant_ok(text) FROM PUBLIC;

-- Check a membership's arguments: a real role (not PUBLIC) and a tenant name.
CREATE FUNCTION wfe._check_tenant_member(p_role regrole, p_tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_tenant IS NULL THEN
        RAISE EXCEPTION 'role and tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_role = 0 THEN
        RAISE EXCEPTION 'a tenant cannot be mapped to PUBLIC' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM wfe._check_tenant_name(p_tenant);
END
$$;
COMMENT ON FUNCTION wfe._check_tenant_member(regrole, text) IS
'Raises 22004 or 22023 unless role is a real role and tenant a valid tenant name.';
REVOKE ALL ON FUNCTION wfe._check_tenant_member(regrole, text) FROM PUBLIC;

CREATE FUNCTION wfe.add_tenant_member(role regrole, tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_tenant_member(add_tenant_member.role, add_tenant_member.tenant);
    INSERT INTO wfe.tenant_members (role, tenant) VALUES (add_tenant_member.role, add_tenant_member.tenant)
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.add_tenant_member(regrole, text) IS
'Lets role (and every role with its privileges) act for tenant: submit, read, cancel its runs. Idempotent.';
REVOKE ALL ON FUNCTION wfe.add_tenant_member(regrole, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.add_tenant_member(regrole, text) TO wfe_admin;

CREATE FUNCTION wfe.remove_tenant_member(role regrole, tenant text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_tenant_member(remove_tenant_member.role, remove_tenant_member.tenant);
    DELETE FROM wfe.tenant_members AS m
     WHERE m.role = remove_tenant_member.role AND m.tenant = remove_tenant_member.tenant;
END
$$;
COMMENT ON FUNCTION wfe.remove_tenant_member(regrole, text) IS
'Takes back add_tenant_member. Idempotent.';
REVOKE ALL ON FUNCTION wfe.remove_tenant_member(regrole, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.remove_tenant_member(regrole, text) TO wfe_admin;
