-- Group roles: who may do what with wfe.
--
-- Roles are cluster-wide: each is created if absent and never dropped (DROP
-- EXTENSION leaves them), so CREATE EXTENSION wfe works in any number of
-- databases.  An existing role of the same name is left exactly as it is.
-- Users get the rights by membership: GRANT wfe_author TO alice.

DO $roles$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT v.rolname, v.about
        FROM (VALUES
            ('wfe_admin',     'wfe: registers contracts and action handlers, sets queue modes and limits, manages callback keys'),
            ('wfe_author',    'wfe: compiles and creates workflow definitions'),
            ('wfe_approver',  'wfe: approves and activates workflow definitions'),
            ('wfe_submitter', 'wfe: submits and cancels runs of its tenants'),
            ('wfe_worker',    'wfe: claims and reports tasks of the queues granted to it'),
            ('wfe_operator',  'wfe: dead letters, re-drive, skip, cancel, pause and resume queues'),
            ('wfe_reader',    'wfe: reads the dashboard views')
        ) AS v(rolname, about)
    LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS a
                       WHERE a.rolname OPERATOR(pg_catalog.=) r.rolname::pg_catalog.name)
        THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.rolname);
                EXECUTE pg_catalog.format('COMMENT ON ROLE %I IS %L', r.rolname, r.about);
            EXCEPTION WHEN duplicate_object THEN
                NULL;           -- created meanwhile by CREATE EXTENSION in another database
            END;
        END IF;
    END LOOP;
END
$roles$;

-- Each role reaches the schema; what it may do in it is granted beside
-- each function, table and view (EXECUTE is revoked from PUBLIC there).
GRANT USAGE ON SCHEMA wfe
    TO wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_worker, wfe_operator, wfe_reader;

-- Who is calling: the role the session acts as, SET ROLE included.  Inside
-- a SECURITY DEFINER function current_user is the owner, so wfe asks C
-- (GetOuterUserId) when it needs the caller, e.g. as whom a handler runs.
-- Inside an in-database action's handler both functions answer the role
-- that registered it, not the background worker's superuser
-- (src/pg/handler.c): a handler can do exactly what its registrant can.
CREATE FUNCTION wfe._caller()
RETURNS regrole AS 'MODULE_PATHNAME', 'wfe_caller' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._caller() IS
'The role acting in this session, SET ROLE included (inside SECURITY DEFINER functions current_user is the owner); inside a handler, its registrant.';
REVOKE ALL ON FUNCTION wfe._caller() FROM PUBLIC;

-- Who wfe records (created_by, approved_by, "by") and the four-eyes rule
-- compares: session_user, which SET ROLE does not change.
CREATE FUNCTION wfe._identity()
RETURNS name AS 'MODULE_PATHNAME', 'wfe_identity' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._identity() IS
'Who wfe records and the four-eyes rule compares: session_user; inside a handler, its registrant.';
REVOKE ALL ON FUNCTION wfe._identity() FROM PUBLIC;

