-- wfe--0.2.0--0.3.0.sql: what ALTER EXTENSION wfe UPDATE TO '0.3.0' runs
-- on a database that has wfe 0.2.0.
--
-- How this file is maintained: as sql/wfe--0.1.0--0.2.0.sql says in its
-- header (written by hand in the same commit as the change to src/sql it
-- follows; test/tap/005_upgrade.pl upgrades a database with runs in flight
-- through the chain 0.1.0 -> 0.2.0 -> 0.3.0 and compares its catalog with a
-- fresh CREATE EXTENSION's).  sql/wfe--0.2.0.sql is 0.2.0's install script
-- as released (commit 669fd53), frozen: never edit it.
\echo Use "ALTER EXTENSION wfe UPDATE TO '0.3.0'" to load this file. \quit
