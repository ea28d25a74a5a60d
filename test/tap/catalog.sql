-- catalog.sql: wfe's schema as text, one block per object, sorted, with
-- nothing that differs between two databases of the same schema (no OIDs,
-- no sequence values, no dropped columns, no order of GRANTs).
-- test/tap/005_upgrade.pl compares an upgraded database's with a fresh
-- one's.  By hand:
--
--   psql -X -At -f test/tap/catalog.sql -d db1 > db1.txt
--   psql -X -At -f test/tap/catalog.sql -d db2 > db2.txt
--   diff -u -F '^[0-9] [a-z]' db1.txt db2.txt   (-F: each hunk names its object)
--
-- What it lists:
--   the extension (version, schema, relocatable, its configuration tables
--   and their conditions), and every member object (pg_describe_object);
--   schema wfe: owner, privileges, comment, default privileges;
--   every relation in it: kind, persistence, options, row security, owner,
--   privileges, comment; columns in order (type, collation, NOT NULL,
--   default, identity, generated, storage, statistics, privileges, comment);
--   index definitions; sequence parameters and owning column; view
--   definitions; partitioning; inheritance;
--   constraints, triggers (and whether enabled), policies, rules, with
--   their comments;
--   types: kind, owner, privileges, comment, enum labels, domain base type,
--   default, NOT NULL and constraints;
--   functions and procedures: pg_get_functiondef (arguments, result,
--   language, volatility, strictness, SECURITY DEFINER, parallel safety,
--   cost, rows, SET options, the body, the C symbol), owner, privileges,
--   comment; aggregates by their parts;
--   the roles named wfe_*: attributes, comment, memberships;
--   the rows of the tables that pg_dump does not dump (not configuration
--   tables: rows the install script writes, e.g. wfe.publisher_lease;
--   of wfe.ready_key, a random key, only the length).
-- Privileges are the ACL items sorted, with a NULL ACL shown as its default.
-- Column options named pg_attver are left out: some builds of the server stamp
-- every column with one, with a different value in every database.

\set QUIET on

-- The rows of a table, one line each, sorted.
CREATE FUNCTION pg_temp.wfe_catalog_rows(rel regclass) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    -- each database draws its own wfe_task_ready key: its length is the catalog's part
    IF rel = to_regclass('wfe.ready_key') THEN
        SELECT coalesce(string_agg(format('(%s,%s bytes)', k.one, octet_length(k.key)), E'\n'), '')
          INTO v FROM wfe.ready_key AS k;
        RETURN v;
    END IF;
    EXECUTE format('SELECT coalesce(string_agg(t::text, E''\n'' ORDER BY t::text COLLATE "C"), '''') FROM %s AS t',
                   rel) INTO v;
    RETURN v;
END
$$;

-- An ACL as text: its items sorted, a NULL ACL as the default one.
CREATE FUNCTION pg_temp.wfe_catalog_acl(acl aclitem[], kind text, owner oid) RETURNS text
LANGUAGE sql AS $$
SELECT coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text COLLATE "C")
                   FROM unnest(coalesce(acl, CASE WHEN kind IS NULL THEN NULL ELSE acldefault(kind::"char", owner) END)) AS a),
                '-')
$$;

WITH
ext AS (SELECT e.* FROM pg_extension AS e WHERE e.extname = 'wfe'),
ns AS (SELECT n.* FROM pg_namespace AS n WHERE n.nspname = 'wfe'),
-- (the day partitions of wfe.events, their indexes and their TOAST are
-- data: the background worker makes and drops them, no member of the
-- extension; docs/scaling.md "History partitions")
days AS (SELECT c.oid FROM pg_class AS c JOIN pg_inherits AS i ON i.inhrelid = c.oid
          WHERE i.inhparent = to_regclass('wfe.events') AND c.relname ~ '^events_p[0-9]{8}$'),
rel AS (SELECT c.*, quote_ident(c.relname) AS qname
          FROM pg_class AS c WHERE c.relnamespace = (SELECT oid FROM ns)
           AND c.oid NOT IN (SELECT oid FROM days)
           AND NOT EXISTS (SELECT 1 FROM pg_index AS x WHERE x.indexrelid = c.oid
                            AND x.indrelid IN (SELECT oid FROM days))),
config AS (SELECT u.cfg::regclass AS cfg, u.cond
             FROM ext, unnest(ext.extconfig, ext.extcondition) AS u(cfg, cond)),
blocks(key, body) AS (
    -- the extension
    SELECT '0 extension wfe',
           format('version %s, schema %s, relocatable %s', e.extversion, e.extnamespace::regnamespace,
                  e.extrelocatable)
           || coalesce((SELECT E'\n' || string_agg(format('  configuration table %s, condition %L', c.cfg, c.cond),
                                                    E'\n' ORDER BY c.cfg::text COLLATE "C")
                          FROM config AS c), '')
      FROM ext AS e
    UNION ALL
    SELECT '1 member ' || pg_describe_object(d.classid, d.objid, d.objsubid), ''
      FROM pg_depend AS d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
    UNION ALL
    -- the schema
    SELECT '2 schema ' || n.nspname,
           format('owner %s, privileges %s, comment %L', pg_get_userbyid(n.nspowner),
                  pg_temp.wfe_catalog_acl(n.nspacl, 'n', n.nspowner), obj_description(n.oid, 'pg_namespace'))
      FROM ns AS n
    UNION ALL
    SELECT '2 schema default privileges ' || d.defaclobjtype::text || ' ' || pg_get_userbyid(d.defaclrole),
           pg_temp.wfe_catalog_acl(d.defaclacl, NULL, NULL)
      FROM pg_default_acl AS d WHERE d.defaclnamespace = (SELECT oid FROM ns)
    UNION ALL
    -- relations, with their columns
    SELECT '3 relation ' || c.qname,
           format('kind %s, persistence %s, options %s, row security %s/%s, replica identity %s, owner %s, privileges %s, comment %L',
                  c.relkind, c.relpersistence, coalesce(array_to_string(c.reloptions, ','), '-'),
                  c.relrowsecurity, c.relforcerowsecurity, c.relreplident, pg_get_userbyid(c.relowner),
                  pg_temp.wfe_catalog_acl(c.relacl, CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END, c.relowner),
                  obj_description(c.oid, 'pg_class'))
           || CASE WHEN c.relkind = 'p' THEN E'\n  partition key ' || pg_get_partkeydef(c.oid) ELSE '' END
           || CASE WHEN c.relispartition THEN E'\n  partition bound ' || pg_get_expr(c.relpartbound, c.oid) ELSE '' END
           || coalesce((SELECT E'\n' || string_agg('  inherits ' || i.inhparent::regclass::text, E'\n'
                                                   ORDER BY i.inhseqno)
                          FROM pg_inherits AS i WHERE i.inhrelid = c.oid), '')
           || CASE WHEN c.relkind IN ('i', 'I') THEN
                  (SELECT format(E'\n  %s%s%s', pg_get_indexdef(x.indexrelid),
                                 CASE WHEN x.indisclustered THEN ' (clustered)' ELSE '' END,
                                 CASE WHEN x.indisreplident THEN ' (replica identity)' ELSE '' END)
                     FROM pg_index AS x WHERE x.indexrelid = c.oid)
              ELSE coalesce((SELECT E'\n' || string_agg(
                                 format('  column %s %s%s%s%s%s%s, storage %s%s, privileges %s, comment %L',
                                        quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
                                        CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                                             THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END,
                                        CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                                        CASE WHEN a.attgenerated = '' AND ad.adbin IS NOT NULL
                                             THEN ' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid) ELSE '' END,
                                        CASE WHEN a.attgenerated <> ''
                                             THEN ' GENERATED ALWAYS AS (' || pg_get_expr(ad.adbin, ad.adrelid) || ') STORED'
                                             ELSE '' END,
                                        CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
                                                           WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END,
                                        a.attstorage,
                                        CASE WHEN a.attstattarget <> -1 THEN ', statistics ' || a.attstattarget ELSE '' END
                                        || coalesce(', options ' || (SELECT string_agg(o, ',' ORDER BY o COLLATE "C")
                                                                       FROM unnest(a.attoptions) AS o
                                                                      WHERE o NOT LIKE 'pg\_attver=%'), ''),
                                        pg_temp.wfe_catalog_acl(a.attacl, NULL, NULL),
                                        col_description(c.oid, a.attnum)),
                                 E'\n' ORDER BY a.attnum)
                               FROM pg_attribute AS a
                               JOIN pg_type AS t ON t.oid = a.atttypid
                               LEFT JOIN pg_attrdef AS ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
           END
           || CASE WHEN c.relkind = 'S' THEN
                  (SELECT format(E'\n  sequence %s start %s increment %s min %s max %s cache %s%s',
                                 format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
                                 s.seqcache, CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END)
                     FROM pg_sequence AS s WHERE s.seqrelid = c.oid)
                  || coalesce((SELECT E'\n' || string_agg(format('  owned by %s.%s (%s)', d.refobjid::regclass,
                                                                 quote_ident(a.attname), d.deptype),
                                                          E'\n' ORDER BY d.refobjid::regclass::text COLLATE "C")
                                 FROM pg_depend AS d
                                 JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                  AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0
                                  AND d.deptype IN ('a', 'i')), '')
              ELSE '' END
           || CASE WHEN c.relkind IN ('v', 'm') THEN E'\n  ' || pg_get_viewdef(c.oid) ELSE '' END
      FROM rel AS c
     WHERE c.relkind <> 't'
    UNION ALL
    -- constraints of tables and of domains
    SELECT '4 constraint ' || coalesce(r.qname, format_type(k.contypid, NULL)) || ' ' || quote_ident(k.conname),
           format('%s%s, comment %L', pg_get_constraintdef(k.oid),
                  CASE WHEN k.convalidated THEN '' ELSE ' (not validated)' END,
                  obj_description(k.oid, 'pg_constraint'))
      FROM pg_constraint AS k
      LEFT JOIN rel AS r ON r.oid = k.conrelid
     WHERE k.connamespace = (SELECT oid FROM ns) AND k.conrelid NOT IN (SELECT oid FROM days)
    UNION ALL
    SELECT '5 trigger ' || r.qname || ' ' || quote_ident(g.tgname),
           format('%s, enabled %s, comment %L', pg_get_triggerdef(g.oid), g.tgenabled,
                  obj_description(g.oid, 'pg_trigger'))
      FROM pg_trigger AS g JOIN rel AS r ON r.oid = g.tgrelid
     WHERE NOT g.tgisinternal
    UNION ALL
    SELECT '5 policy ' || p.tablename || ' ' || quote_ident(p.policyname),
           format('%s %s to %s using %s with check %s', p.permissive, p.cmd, p.roles, p.qual, p.with_check)
      FROM pg_policies AS p WHERE p.schemaname = 'wfe'
    UNION ALL
    SELECT '5 rule ' || r.tablename || ' ' || quote_ident(r.rulename), r.definition
      FROM pg_rules AS r WHERE r.schemaname = 'wfe'
    UNION ALL
    -- types (not array types, not the row types of tables and views)
    SELECT '6 type ' || format_type(t.oid, NULL),
           format('kind %s, owner %s, privileges %s, comment %L', t.typtype, pg_get_userbyid(t.typowner),
                  pg_temp.wfe_catalog_acl(t.typacl, 'T', t.typowner), obj_description(t.oid, 'pg_type'))
           || CASE WHEN t.typtype = 'e' THEN
                  E'\n  labels ' || (SELECT string_agg(quote_literal(l.enumlabel), ', ' ORDER BY l.enumsortorder)
                                       FROM pg_enum AS l WHERE l.enumtypid = t.oid)
              ELSE '' END
           || CASE WHEN t.typtype = 'd' THEN
                  format(E'\n  domain over %s%s%s', format_type(t.typbasetype, t.typtypmod),
                         CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END,
                         CASE WHEN t.typdefaultbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(t.typdefaultbin, 0)
                              ELSE '' END)
              ELSE '' END
           || CASE WHEN t.typtype = 'r' THEN
                  (SELECT format(E'\n  range of %s', format_type(g.rngsubtype, NULL)) FROM pg_range AS g
                    WHERE g.rngtypid = t.oid)
              ELSE '' END
      FROM pg_type AS t
     WHERE t.typnamespace = (SELECT oid FROM ns)
       AND NOT (t.typcategory = 'A' AND t.typelem <> 0)
       AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_class AS c WHERE c.oid = t.typrelid) = 'c')
    UNION ALL
    -- functions, procedures, aggregates
    SELECT '7 function ' || p.oid::regprocedure::text,
           format('owner %s, privileges %s, comment %L', pg_get_userbyid(p.proowner),
                  pg_temp.wfe_catalog_acl(p.proacl, 'f', p.proowner), obj_description(p.oid, 'pg_proc'))
           || E'\n' || CASE WHEN p.prokind = 'a' THEN
                  (SELECT format('aggregate returns %s, transition %s(%s), final %s, combine %s, initial %L',
                                 format_type(p.prorettype, NULL), g.aggtransfn, format_type(g.aggtranstype, NULL),
                                 g.aggfinalfn, g.aggcombinefn, g.agginitval)
                     FROM pg_aggregate AS g WHERE g.aggfnoid = p.oid)
              ELSE pg_get_functiondef(p.oid) END
      FROM pg_proc AS p
     WHERE p.pronamespace = (SELECT oid FROM ns)
    UNION ALL
    -- the group roles (cluster-wide: created by CREATE EXTENSION if absent)
    SELECT '8 role ' || a.rolname,
           format('super %s, inherit %s, createrole %s, createdb %s, login %s, replication %s, bypassrls %s, '
                  'connection limit %s, comment %L, member of %s',
                  a.rolsuper, a.rolinherit, a.rolcreaterole, a.rolcreatedb, a.rolcanlogin, a.rolreplication,
                  a.rolbypassrls, a.rolconnlimit, shobj_description(a.oid, 'pg_authid'),
                  coalesce((SELECT string_agg(m.roleid::regrole::text || CASE WHEN m.admin_option THEN ' (admin)'
                                                                              ELSE '' END,
                                              ', ' ORDER BY m.roleid::regrole::text COLLATE "C")
                              FROM pg_auth_members AS m WHERE m.member = a.oid), '-'))
      FROM pg_roles AS a
     WHERE a.rolname LIKE 'wfe\_%'
    UNION ALL
    -- the rows of the tables pg_dump leaves out (not configuration tables)
    SELECT '9 rows of ' || c.qname, pg_temp.wfe_catalog_rows(c.oid)
      FROM rel AS c
     WHERE c.relkind IN ('r', 'p') AND c.oid NOT IN (SELECT cfg FROM config)
)
SELECT b.key || CASE WHEN b.body = '' THEN '' ELSE E'\n' || b.body END
  FROM blocks AS b
 ORDER BY b.key COLLATE "C", b.body COLLATE "C";
