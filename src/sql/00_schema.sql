-- wfe: durable workflow engine.
--
-- The extension script wfe--<version>.sql is built from src/sql/*.sql,
-- concatenated in lexical order by the Makefile (which also adds the psql
-- guard line); each file holds one concern.  The schema itself is created by
-- CREATE EXTENSION (wfe.control: schema = wfe, relocatable = false), so
-- nothing here creates it; it is not a member of the extension and outlives
-- DROP EXTENSION, like the roles.
--
-- Rules every file follows:
--  * every object is schema-qualified, in the script and in function bodies;
--  * every function pins `SET search_path = pg_catalog, pg_temp`.  With that
--    path no function or operator can be captured by objects a user creates
--    elsewhere (pg_temp is never searched for functions or operators), so
--    bodies use plain operators; SQL bodies written as BEGIN ATOMIC are bound
--    when the script runs and cannot be captured afterwards either;
--  * a function on a hot path that the planner cannot inline -- and with
--    that SET clause it inlines no SQL function -- is PL/pgSQL, not SQL: a
--    SQL function's statements are planned again for every query that calls
--    it (every transaction, called from PL/pgSQL or SPI), PL/pgSQL keeps its
--    plans for the session (docs/benchmarks.md, "The submit regression and the write path");
--  * functions that write, or read tables their callers are not granted, are
--    SECURITY DEFINER;
--  * privileges stand beside what they grant: after each function's COMMENT,
--    REVOKE ALL ... FROM PUBLIC and GRANT EXECUTE to the roles that call it
--    (internal functions, wfe._*, are granted to nobody: they run inside the
--    SECURITY DEFINER ones); after each table's or view's COMMENT, its GRANT;
--  * functions that write raise 22004 on a NULL argument instead of being
--    STRICT (a STRICT void function silently does nothing); pure readers are
--    STRICT;
--  * identities recorded by wfe (created_by, approved_by, "by") are
--    wfe._identity(): session_user -- inside a SECURITY DEFINER function
--    current_user is the owner, and session_user cannot be changed with SET
--    ROLE, so the four-eyes rule cannot be sidestepped that way -- or,
--    inside an in-database action's handler, the role that registered it
--    (never the background worker's superuser).  The role acting is
--    wfe._caller() (SET ROLE included), the same way.

-- Refuse a schema someone else prepared (docs: operations.md "Security
-- model"): objects planted in it -- an operator, a function, a type --
-- would be what this script's own SQL binds to, and the background worker
-- would then run them as a superuser.  CREATE EXTENSION makes the schema
-- (owned by the installing role) when it is missing, so it only exists
-- here already if somebody created it.
DO $guard$
DECLARE
    v_owner name;
    v_foreign text;
BEGIN
    SELECT r.rolname INTO v_owner
      FROM pg_catalog.pg_namespace AS n JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'wfe';
    IF v_owner OPERATOR(pg_catalog.<>) CURRENT_USER THEN
        RAISE EXCEPTION 'schema wfe already exists and is owned by role "%", not by "%"', v_owner, CURRENT_USER
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Objects another role created in it could capture what the extension runs.',
                  HINT = 'Drop or rename that schema (or have its owner drop it), then CREATE EXTENSION wfe again.';
    END IF;
    SELECT pg_catalog.string_agg(x.what, ', ') INTO v_foreign
      FROM (SELECT 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text AS what
              FROM pg_catalog.pg_proc AS p, pg_catalog.pg_namespace AS n
             WHERE n.nspname OPERATOR(pg_catalog.=) 'wfe' AND p.pronamespace OPERATOR(pg_catalog.=) n.oid
               AND p.proowner OPERATOR(pg_catalog.<>) n.nspowner
            UNION ALL
            SELECT 'operator ' OPERATOR(pg_catalog.||) o.oid::pg_catalog.regoperator::pg_catalog.text
              FROM pg_catalog.pg_operator AS o, pg_catalog.pg_namespace AS n
             WHERE n.nspname OPERATOR(pg_catalog.=) 'wfe' AND o.oprnamespace OPERATOR(pg_catalog.=) n.oid
               AND o.oprowner OPERATOR(pg_catalog.<>) n.nspowner
            UNION ALL
            SELECT 'type ' OPERATOR(pg_catalog.||) t.oid::pg_catalog.regtype::pg_catalog.text
              FROM pg_catalog.pg_type AS t, pg_catalog.pg_namespace AS n
             WHERE n.nspname OPERATOR(pg_catalog.=) 'wfe' AND t.typnamespace OPERATOR(pg_catalog.=) n.oid
               AND t.typowner OPERATOR(pg_catalog.<>) n.nspowner
            UNION ALL
            SELECT 'relation ' OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text
              FROM pg_catalog.pg_class AS c, pg_catalog.pg_namespace AS n
             WHERE n.nspname OPERATOR(pg_catalog.=) 'wfe' AND c.relnamespace OPERATOR(pg_catalog.=) n.oid
               AND c.relowner OPERATOR(pg_catalog.<>) n.nspowner) AS x;
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION 'schema wfe holds objects of other roles: %', v_foreign
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Remove them (or the schema) before CREATE EXTENSION wfe.';
    END IF;
END
$guard$;

COMMENT ON SCHEMA wfe IS 'wfe: durable workflow engine (contracts, definitions, runs)';

-- Trigger function for tables whose rows never change once written.
-- TG_ARGV[0] says what is immutable, TG_ARGV[1] is the hint.
CREATE FUNCTION wfe._immutable()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'cannot % %.%: %', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = TG_ARGV[1];
END
$$;

COMMENT ON FUNCTION wfe._immutable() IS
'Trigger: refuses UPDATE, DELETE and TRUNCATE of an immutable table (SQLSTATE 55000). Arguments: what is immutable, and a hint.';
REVOKE ALL ON FUNCTION wfe._immutable() FROM PUBLIC;
