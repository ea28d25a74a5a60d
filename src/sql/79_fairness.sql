-- Fairness between tenants on a shared queue (docs: operations.md "Flow
-- control"): configure_queue(..., fairness => 'tenant') and
-- configure_tenant(..., weight => n).  A fair queue's claims serve the
-- tenants with ready work in proportion to their weights, within a priority
-- level (src/pg/fairness.c, run_stages_fair in 60_runtime_tables.sql).
--
-- Which queues are fair, and which have a circuit (79_circuits.sql), every
-- claim and every attempt's end asks: each backend keeps the answer in
-- memory (src/pg/flow_cache.c), and this trigger has every backend drop it
-- when either table changes, at commit, so a queue with neither control
-- pays nothing for them.

CREATE FUNCTION wfe._flow_settings_changed()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_flow_settings_changed' LANGUAGE C;
COMMENT ON FUNCTION wfe._flow_settings_changed() IS
'Trigger: every backend drops its cached lists of fair queues and queues with a circuit when this transaction commits.';
REVOKE ALL ON FUNCTION wfe._flow_settings_changed() FROM PUBLIC;
CREATE TRIGGER queues_flow_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wfe.queues
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._flow_settings_changed();
-- a circuit's state changes at claims and attempt ends: only its existence is cached
CREATE TRIGGER circuits_flow_changed AFTER INSERT OR DELETE OR TRUNCATE ON wfe.circuits
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._flow_settings_changed();
