-- citus-check.sql: does wfe's schema meet Citus's rules for distributing
-- its runtime by run?  (docs/scaling.md "Past one primary".)  Citus is not
-- a Debian package, so this reads the catalog of a database with wfe
-- installed and applies the rules that decide whether a table can be
-- distributed, and co-located, by a column:
--
--   psql -X -f scripts/citus-check.sql -d DB
--
-- The plan it checks: every table of schema wfe with a run_id column is
-- distributed by run_id, co-located with wfe.runs; every other table is a
-- reference table (a copy on each node).  The rules (Citus documentation,
-- "Distributing tables", "Table management", "Foreign keys"):
--
--   unique    a PRIMARY KEY, UNIQUE or EXCLUDE constraint (or unique index)
--             of a distributed table includes the distribution column
--   fk        a foreign key between distributed tables includes the
--             distribution column on both sides (co-located)
--   fk-ref    a reference table has no foreign key to a distributed table
--   not-null  the distribution column holds no NULL (Citus routes a row by
--             it; an INSERT with NULL there is refused)
--             (warn: the column may hold NULL, no row does now)
--
-- Each line: table, how it would be distributed, rule, ok or FAIL, why.

\pset footer off
\pset null '-'

CREATE TEMP TABLE citus_check AS
WITH
tabs AS (
    SELECT c.oid, c.relname, c.relkind,
           EXISTS (SELECT 1 FROM pg_attribute AS a
                    WHERE a.attrelid = c.oid AND a.attname = 'run_id' AND NOT a.attisdropped) AS by_run
      FROM pg_class AS c
     WHERE c.relnamespace = 'wfe'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
),
dist_col AS (
    SELECT t.oid, a.attnum, a.attnotnull
      FROM tabs AS t JOIN pg_attribute AS a ON a.attrelid = t.oid AND a.attname = 'run_id'
     WHERE t.by_run
),
uniq AS (
    -- unique indexes (those of constraints included) without the distribution column
    SELECT t.relname, pg_get_indexdef(x.indexrelid) AS def,
           d.attnum = ANY (x.indkey::int2[]) AS has_col
      FROM tabs AS t
      JOIN dist_col AS d ON d.oid = t.oid
      JOIN pg_index AS x ON x.indrelid = t.oid AND x.indisunique
),
fks AS (
    SELECT src.relname AS src, dst.relname AS dst, src.by_run AS src_dist, dst.by_run AS dst_dist,
           k.conname, pg_get_constraintdef(k.oid) AS def,
           (SELECT a.attname FROM pg_attribute AS a WHERE a.attrelid = k.conrelid AND a.attnum = k.conkey[1]) AS src_col,
           (SELECT a.attname FROM pg_attribute AS a WHERE a.attrelid = k.confrelid AND a.attnum = k.confkey[1]) AS dst_col,
           (SELECT array_agg(a.attname) FROM pg_attribute AS a
             WHERE a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)) AS src_cols
      FROM pg_constraint AS k
      JOIN tabs AS src ON src.oid = k.conrelid
      JOIN tabs AS dst ON dst.oid = k.confrelid
     WHERE k.contype = 'f'
),
nulls AS (
    SELECT t.relname, d.attnotnull,
           (xpath('/row/n/text()',
                  query_to_xml(format('SELECT count(*) AS n FROM wfe.%I WHERE run_id IS NULL', t.relname),
                               false, true, '')))[1]::text::bigint AS null_rows
      FROM tabs AS t JOIN dist_col AS d ON d.oid = t.oid
),
lines AS (
    SELECT t.relname AS "table",
           CASE WHEN t.by_run THEN 'distributed by run_id' ELSE 'reference' END AS plan,
           '-' AS rule, 'ok' AS verdict,
           CASE WHEN t.relkind = 'p' THEN 'partitioned (Citus distributes partitioned tables)' ELSE '' END AS why
      FROM tabs AS t
    UNION ALL
    SELECT u.relname, 'distributed by run_id', 'unique', CASE WHEN u.has_col THEN 'ok' ELSE 'FAIL' END, u.def
      FROM uniq AS u
    UNION ALL
    SELECT f.src, CASE WHEN f.src_dist THEN 'distributed by run_id' ELSE 'reference' END,
           CASE WHEN f.src_dist AND f.dst_dist THEN 'fk' ELSE 'fk-ref' END,
           CASE WHEN f.src_dist AND f.dst_dist
                     THEN CASE WHEN f.src_col = 'run_id' AND f.dst_col = 'run_id' THEN 'ok' ELSE 'FAIL' END
                WHEN NOT f.src_dist AND f.dst_dist THEN 'FAIL'
                ELSE 'ok' END,
           f.conname || ' -> ' || f.dst || ': ' || f.def
      FROM fks AS f
    UNION ALL
    SELECT n.relname, 'distributed by run_id', 'not-null',
           CASE WHEN n.attnotnull THEN 'ok' WHEN n.null_rows = 0 THEN 'warn' ELSE 'FAIL' END,
           CASE WHEN n.attnotnull THEN 'run_id NOT NULL'
                ELSE format('run_id nullable; %s rows with NULL now', n.null_rows) END
      FROM nulls AS n
)
SELECT * FROM lines;

SELECT * FROM citus_check ORDER BY verdict <> 'FAIL', verdict = 'ok', "table", rule, why;

-- The summary.
SELECT count(*) FILTER (WHERE verdict = 'FAIL') AS failures,
       count(*) FILTER (WHERE verdict = 'warn') AS warnings,
       count(DISTINCT "table") FILTER (WHERE verdict = 'FAIL') AS tables_failing,
       count(DISTINCT "table") FILTER (WHERE plan LIKE 'distributed%') AS distributed,
       count(DISTINCT "table") FILTER (WHERE plan = 'reference') AS reference
  FROM citus_check;
