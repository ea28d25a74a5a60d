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
--  * functions that write, or read tables their callers are not granted, are
--    SECURITY DEFINER; EXECUTE is revoked from PUBLIC and granted per role in
--    90_grants.sql;
--  * functions that write raise 22004 on a NULL argument instead of being
--    STRICT (a STRICT void function silently does nothing); pure readers are
--    STRICT;
--  * identities recorded by wfe (created_by, approved_by) are session_user:
--    inside a SECURITY DEFINER function current_user is the owner, and
--    session_user cannot be changed with SET ROLE, so the four-eyes rule
--    cannot be sidestepped that way.

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
