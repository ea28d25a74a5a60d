-- Row-level security on every table that carries a tenant (docs:
-- operations.md "Tenants").  The roles that may SELECT these tables see
-- the rows of the tenants they act for (wfe.tenant_members; superusers
-- and wfe_admin see all).  Nobody but wfe's functions writes them, so
-- there are no write policies.  FORCE makes the policies bind a table's
-- owner too; wfe's own SECURITY DEFINER functions belong to a superuser,
-- which row-level security never binds, and check tenants themselves.
--
-- wfe.my_tenants() is NULL for a role that acts for every tenant; as a
-- sub-select it runs once per query, not once per row.
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs', 'run_stages', 'outputs', 'events', 'outbox', 'timers',
                             'dead_letters', 'payloads', 'tenant_limits', 'cache_entries']
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE wfe.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format('ALTER TABLE wfe.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_read ON wfe.%I FOR SELECT'
            ' USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true))', t);
    END LOOP;
END
$rls$;
