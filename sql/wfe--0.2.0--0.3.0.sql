-- wfe--0.2.0--0.3.0.sql: what ALTER EXTENSION wfe UPDATE TO '0.3.0' runs
-- on a database that has wfe 0.2.0.
--
-- How this file is maintained: as sql/wfe--0.1.0--0.2.0.sql says in its
-- header (written by hand in the same commit as the change to src/sql it
-- follows; test/tap/005_upgrade.pl upgrades a database with runs in flight
-- through the chain 0.1.0 -> 0.2.0 -> 0.3.0 and compares its catalog with a
-- fresh CREATE EXTENSION's).  sql/wfe--0.2.0.sql is 0.2.0's install script
-- as released (commit 669fd53), frozen: never edit it.
--
-- The sections below change tables, types, grants and data, and create the
-- functions that are new, each with its COMMENT and its grants, in their
-- text as src/sql has it.  A function whose last text in the sections is
-- not its final one (an existing function a change rewrote, or one two
-- changes both rewrote) is written once more, at the end ("Final bodies"):
-- its whole text as src/sql has it, after everything it may refer to
-- exists, with the function comments that changed.  A body replaced for a
-- moment inside a section (to let a column change type under it) is put
-- back there.
\echo Use "ALTER EXTENSION wfe UPDATE TO '0.3.0'" to load this file. \quit

-- 0.3.0, layout (issue 19): one rule, one place.  No table changes shape;
-- what changes is where the rules live.

-- Settings are read through wfe._setting (11_settings.sql), which loads the
-- library that defines them: no default is written again in SQL.
CREATE FUNCTION wfe._load_setting(p_name text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    LOAD 'MODULE_PATHNAME';         -- SECURITY DEFINER: only a superuser may LOAD from $libdir
    RETURN current_setting(p_name);
END
$$;
COMMENT ON FUNCTION wfe._load_setting(text) IS
'Loads the wfe library (which defines its settings, with their defaults), then returns the setting''s value.';
REVOKE ALL ON FUNCTION wfe._load_setting(text) FROM PUBLIC;
CREATE FUNCTION wfe._setting(p_name text)
RETURNS text
LANGUAGE sql VOLATILE
RETURN coalesce(current_setting(p_name, true), wfe._load_setting(p_name));
COMMENT ON FUNCTION wfe._setting(text) IS
'The value of a setting the wfe library defines (wfe.notify, wfe.track_threshold_bytes, ...), its default included: loads the library when the setting is not defined yet.';
REVOKE ALL ON FUNCTION wfe._setting(text) FROM PUBLIC;

-- The name rules (13_names.sql): a predicate each, a domain over it, and
-- the check the functions call.
CREATE FUNCTION wfe._is_tenant_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN name ~ '^[A-Za-z0-9_.-]{1,63}$';
COMMENT ON FUNCTION wfe._is_tenant_name(text) IS
'The rule of tenant names: 1 to 63 ASCII letters, digits, "_", "." or "-".';
REVOKE ALL ON FUNCTION wfe._is_tenant_name(text) FROM PUBLIC;
CREATE DOMAIN wfe.tenant_name AS text
    CONSTRAINT tenant_name_format CHECK (wfe._is_tenant_name(VALUE));
COMMENT ON DOMAIN wfe.tenant_name IS 'A tenant name: matches ^[A-Za-z0-9_.-]{1,63}$ (wfe._is_tenant_name).';
CREATE FUNCTION wfe._check_tenant_name(p_tenant text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT wfe._is_tenant_name(p_tenant) THEN
        RAISE EXCEPTION 'tenant "%" is not valid', left(p_tenant, 80)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Tenants match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_tenant_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a tenant name; NULL passes.';
REVOKE ALL ON FUNCTION wfe._check_tenant_name(text) FROM PUBLIC;
CREATE FUNCTION wfe._is_queue_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN name ~ '^[a-z][a-z0-9_.-]{0,62}$';
COMMENT ON FUNCTION wfe._is_queue_name(text) IS
'The rule of queue names: a lower-case ASCII letter, then up to 62 lower-case letters, digits, "_", "." or "-".';
REVOKE ALL ON FUNCTION wfe._is_queue_name(text) FROM PUBLIC;
CREATE DOMAIN wfe.queue_name AS text
    CONSTRAINT queue_name_format CHECK (wfe._is_queue_name(VALUE));
COMMENT ON DOMAIN wfe.queue_name IS 'A queue name: matches ^[a-z][a-z0-9_.-]{0,62}$ (wfe._is_queue_name).';
CREATE FUNCTION wfe._check_queue_name(p_queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT wfe._is_queue_name(p_queue) THEN
        RAISE EXCEPTION 'invalid queue name "%"', left(p_queue, 80)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A queue name matches [a-z][a-z0-9_.-]* and has at most 63 characters.';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._check_queue_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a queue name; NULL passes.';
REVOKE ALL ON FUNCTION wfe._check_queue_name(text) FROM PUBLIC;

-- What the states mean (60_runtime_tables.sql): one definition each.
CREATE FUNCTION wfe._stage_clocked(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('queued', 'dispatched', 'running');
COMMENT ON FUNCTION wfe._stage_clocked(text) IS
'Queued, dispatched or running: a stage''s attempt is live, its queue, execution or heartbeat deadline runs.';
REVOKE ALL ON FUNCTION wfe._stage_clocked(text) FROM PUBLIC;
CREATE FUNCTION wfe._stage_handed_out(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('dispatched', 'running');
COMMENT ON FUNCTION wfe._stage_handed_out(text) IS
'Dispatched or running: a worker holds the attempt, or its dispatch message was published (it counts against in-flight limits).';
REVOKE ALL ON FUNCTION wfe._stage_handed_out(text) FROM PUBLIC;
CREATE FUNCTION wfe._stage_under_way(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('queued', 'dispatched', 'running', 'retry_scheduled');
COMMENT ON FUNCTION wfe._stage_under_way(text) IS
'Queued, dispatched, running or retry_scheduled: an attempt of the stage is under way or due.';
REVOKE ALL ON FUNCTION wfe._stage_under_way(text) FROM PUBLIC;
CREATE FUNCTION wfe._run_keeps_key(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state NOT IN ('failed', 'cancelled');
COMMENT ON FUNCTION wfe._run_keeps_key(text) IS
'Any run state but failed and cancelled: the run keeps its idempotency key (a failed or cancelled run frees it).';
REVOKE ALL ON FUNCTION wfe._run_keeps_key(text) FROM PUBLIC;

-- The functions that wrote a rule again now call the one place.

-- The columns that hold tenant and queue names take the domains, whose
-- checks replace the columns' own.  ALTER COLUMN TYPE refuses a column that
-- a view, a policy or a SQL-standard function body reads: the three
-- dashboards that read them and tenant_limits' policy are dropped and made
-- again below; the function bodies are swapped for a placeholder while
-- the column changes, then restored.  (The tables are small: settings.)
DROP VIEW wfe.dashboard_queues;
DROP VIEW wfe.dashboard_tenants;
DROP VIEW wfe.dashboard_stuck;
DROP POLICY tenant_read ON wfe.tenant_limits;
CREATE OR REPLACE FUNCTION wfe.my_tenants()
RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT NULL::text[];
END;
CREATE OR REPLACE FUNCTION wfe._contracts_json()
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT NULL::jsonb;
END;
CREATE OR REPLACE FUNCTION wfe._broker_queues()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT NULL::text WHERE false;
END;
ALTER TABLE wfe.tenant_members DROP CONSTRAINT tenant_members_tenant_format,
    ALTER COLUMN tenant TYPE wfe.tenant_name;
ALTER TABLE wfe.tenant_limits DROP CONSTRAINT tenant_limits_tenant,
    ALTER COLUMN tenant TYPE wfe.tenant_name;
ALTER TABLE wfe.contracts DROP CONSTRAINT contracts_queue_format,
    ALTER COLUMN queue TYPE wfe.queue_name;
ALTER TABLE wfe.queue_grants DROP CONSTRAINT queue_grants_queue_format,
    ALTER COLUMN queue TYPE wfe.queue_name;
ALTER TABLE wfe.queues ALTER COLUMN queue TYPE wfe.queue_name;
CREATE OR REPLACE FUNCTION wfe.my_tenants()
RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
           WHEN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r
                           WHERE r.oid OPERATOR(pg_catalog.=) wfe._caller()), false)
                OR pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE') THEN NULL
           ELSE (SELECT coalesce(pg_catalog.array_agg(DISTINCT m.tenant ORDER BY m.tenant), '{}')
                   FROM wfe.tenant_members AS m
                  WHERE pg_catalog.pg_has_role(wfe._caller(), m.role, 'USAGE'))
           END;
END;
CREATE OR REPLACE FUNCTION wfe._contracts_json()
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'ref', c.ref,
                        'kind', c.kind,
                        'queue', c.queue,
                        'handler', c.handler IS NOT NULL,
                        'input_schema', c.input_schema,
                        'output_schema', c.output_schema)
                    ORDER BY c.ref),
                    '[]'::jsonb)
      FROM wfe.contracts AS c;
END;
CREATE OR REPLACE FUNCTION wfe._broker_queues()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT q.queue FROM wfe.queues AS q WHERE q.delivery = 'broker' ORDER BY q.queue;
END;
CREATE POLICY tenant_read ON wfe.tenant_limits FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
CREATE VIEW wfe.dashboard_queues WITH (security_invoker = true) AS
WITH settings AS (
    -- NB: wfe._setting is not the readers' to call (this view is
    -- security_invoker), so the default stands here too, for a session that
    -- has not loaded the library
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY 1, 2
), started AS (
    -- attempts that started in the last hour, in runs live or finished in it
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p95,
           sum(st.attempt - 1)::double precision / nullif(sum(st.attempt), 0) AS retry_rate
      FROM wfe.runs AS r
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
       AND st.started_at >= now() - interval '1 hour' AND st.queue IS NOT NULL
     GROUP BY 1, 2
), dead AS (
    SELECT st.queue, count(*) AS dead_letters
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY st.queue
), names AS (
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT s.queue, s.track FROM started AS s
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
    UNION SELECT d.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM dead AS d LEFT JOIN wfe.queues AS q ON q.queue = d.queue
)
SELECT n.queue, n.track,
       coalesce(l.depth, 0) AS depth,
       wfe.human_ms(extract(epoch FROM now() - l.oldest_ready) * 1000) AS oldest,
       coalesce(l.in_flight, 0) AS in_flight,
       q.max_in_flight AS max,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS wait_p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS wait_p95,
       wfe.bar(s.retry_rate, 4) AS retries,
       -- a queue's dead letters are counted on its first track only
       CASE WHEN n.track IN ('poll', 'small') THEN coalesce(d.dead_letters, 0) ELSE 0 END AS dlq,
       CASE WHEN q.paused THEN 'paused'
            WHEN sum(l.in_flight) OVER (PARTITION BY n.queue) >= q.max_in_flight THEN 'full'
            ELSE '' END AS state
  FROM names AS n
  LEFT JOIN wfe.queues AS q ON q.queue = n.queue
  LEFT JOIN live AS l ON l.queue = n.queue AND l.track = n.track
  LEFT JOIN started AS s ON s.queue = n.queue AND s.track = n.track
  LEFT JOIN dead AS d ON d.queue = n.queue
 ORDER BY n.queue, n.track;
COMMENT ON VIEW wfe.dashboard_queues IS
'Per queue and track (poll, or the broker''s small and large): depth, oldest ready age, in flight and limit, dequeue wait p50/p95 and retry rate over the last hour, open dead letters, paused or full.';
GRANT SELECT ON wfe.dashboard_queues TO wfe_reader, wfe_operator;
CREATE VIEW wfe.dashboard_tenants WITH (security_invoker = true) AS
WITH runs AS (
    SELECT r.tenant, count(*) AS runs FROM wfe.runs AS r WHERE r.finished_at IS NULL GROUP BY r.tenant
), tasks AS (
    SELECT st.tenant,
           count(*) FILTER (WHERE st.state = 'queued') AS queued,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY st.tenant
), names AS (
    SELECT runs.tenant FROM runs UNION SELECT tasks.tenant FROM tasks
    UNION SELECT t.tenant FROM wfe.tenant_limits AS t
)
SELECT n.tenant,
       coalesce(r.runs, 0) AS runs,
       t.max_runs_in_flight AS max_runs,
       wfe.bar(coalesce(r.runs, 0)::double precision / t.max_runs_in_flight, 8) AS runs_used,
       coalesce(k.queued, 0) AS tasks_queued,
       coalesce(k.in_flight, 0) AS tasks,
       t.max_tasks_in_flight AS max_tasks,
       wfe.bar(coalesce(k.in_flight, 0)::double precision / t.max_tasks_in_flight, 8) AS tasks_used
  FROM names AS n
  LEFT JOIN runs AS r ON r.tenant = n.tenant
  LEFT JOIN tasks AS k ON k.tenant = n.tenant
  LEFT JOIN wfe.tenant_limits AS t ON t.tenant = n.tenant
 ORDER BY n.tenant;
COMMENT ON VIEW wfe.dashboard_tenants IS
'Per tenant: runs in flight and tasks queued and in flight, against the tenant''s limits (wfe.configure_tenant).';
GRANT SELECT ON wfe.dashboard_tenants TO wfe_reader, wfe_operator;
-- wfe.dashboard_stuck comes back below, with the fences section, in its
-- 0.3.0 form (it matches dispatches by attempt: readers see no fences).

-- 0.3.0's layout moved the C files into folders (src/pg/...): two function
-- bodies name them in comments.

-- The layout (0.3.0): comments in these bodies name the files' new paths.

-- Operators act for their tenants only, within the admission limits, and
-- count reopened runs against max_runs_in_flight (issue 20, items 1, 10,
-- 12; docs: operations.md "Security model").  The run admission a submit
-- passes is one function, wfe._admit_run, which wfe._operate calls too;
-- the operators' functions check their arguments and the run's tenant
-- through wfe._operator_target, which replaces wfe._require_stage.
CREATE FUNCTION wfe._admit_run(p_tenant text, p_again text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_limit int;
    v_live  bigint;
BEGIN
    SELECT t.max_runs_in_flight INTO v_limit FROM wfe.tenant_limits AS t
     WHERE t.tenant = p_tenant AND t.max_runs_in_flight IS NOT NULL;
    IF v_limit IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('wfe.max_runs_in_flight'), hashtext(p_tenant));
    SELECT count(*) INTO v_live FROM wfe.runs AS x WHERE x.tenant = p_tenant AND x.finished_at IS NULL;
    IF v_live >= v_limit THEN
        RAISE EXCEPTION 'tenant "%" has % runs in flight, its max_runs_in_flight', p_tenant, v_live
            USING ERRCODE = 'configuration_limit_exceeded',
                  DETAIL = format('Limit max_runs_in_flight = %s (wfe.tenant_limits).', v_limit),
                  HINT = format('%s again when a run has finished, or raise the limit with wfe.configure_tenant.',
                                p_again);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._admit_run(text, text) IS
'Admits one more run of a tenant in flight (a submit, or a redrive or skip_stage reopening a failed run): 53400 at its max_runs_in_flight.';
REVOKE ALL ON FUNCTION wfe._admit_run(text, text) FROM PUBLIC;

COMMENT ON FUNCTION wfe.submit(text, jsonb, text, jsonb) IS
'Starts a run of the active (or a named approved) version, in the caller''s transaction; an idempotency key returns the earlier run with accepted = false.';

COMMENT ON FUNCTION wfe.cache_invalidate(text, text, text) IS
'Removes result cache entries by key, contract and/or tenant (of the tenants the caller acts for); returns how many.';

COMMENT ON FUNCTION wfe._operate(bigint, text, text, text, text, text) IS
'An operator''s redrive, skip, fail or redispatch of one stage, through the step core under the run''s lock; 55000 when the core refuses, 53400 when reopening the run would pass its tenant''s max_runs_in_flight.';

CREATE FUNCTION wfe._operator_target(p_run_id bigint, p_stage text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_run_id IS NULL OR p_stage IS NULL THEN
        RAISE EXCEPTION 'run_id and stage must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(p_stage, 'stage');
    PERFORM wfe._admit_name(p_reason, 'reason');
    PERFORM wfe._run(p_run_id);
END
$$;
COMMENT ON FUNCTION wfe._operator_target(bigint, text, text) IS
'Checks an operator action''s run, stage and reason: 22004, 54000, 22023, and 42704 when there is no such run or it is of a tenant the caller does not act for.';
REVOKE ALL ON FUNCTION wfe._operator_target(bigint, text, text) FROM PUBLIC;

COMMENT ON FUNCTION wfe.redrive(bigint, text, text) IS
'Runs a failed or timed-out task again: a new attempt with a new fence; a run that ended failed is reopened and goes on from there.';

COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';

COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';

COMMENT ON FUNCTION wfe.redispatch(bigint, text, text) IS
'Sends a queued or dispatched broker attempt again: same attempt, new fence, a new dispatch message (the old one''s accept is stale).';

COMMENT ON FUNCTION wfe.replay(bigint, text) IS
'Starts a new run of an ended run''s pinned definition with its context, tenant, execution context and priority; the new run''s replay_of names the old one.';

COMMENT ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) IS
'Redrives every stage with an open dead letter on queue since a time, of the tenants the caller acts for; returns how many (stages that can no longer be redriven, or whose runs max_runs_in_flight keeps closed, are passed over).';

DROP FUNCTION wfe._require_stage(bigint, text);

-- One place for what names a message (issue 19): the message id, the
-- exchange and the routing key are computed in C (src/pg/message.c,
-- src/amqp/topology.c); _dispatch and _project_event ask for them.
COMMENT ON FUNCTION wfe._message_id(bigint, text, int, bigint, text) IS
'Deterministic message id of (run, stage, attempt, fence, kind): a republished message keeps its id, so consumers deduplicate.';
REVOKE ALL ON FUNCTION wfe._message_id(bigint, text, int, bigint, text) FROM PUBLIC;

CREATE FUNCTION wfe._exchange(p_kind text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_exchange_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION wfe._exchange(text) IS
'The exchange an outbox message of kind dispatch, cancel (wfe.commands) or event (wfe.events) goes to. Internal.';
REVOKE ALL ON FUNCTION wfe._exchange(text) FROM PUBLIC;

CREATE FUNCTION wfe._routing_key(p_kind text, p_queue text, p_track text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_routing_key_sql'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION wfe._routing_key(text, text, text) IS
'The routing key of a dispatch (run.<queue>.<track>) or a cancel (cancel.<queue>) of a queue. Internal.';
REVOKE ALL ON FUNCTION wfe._routing_key(text, text, text) FROM PUBLIC;

-- 0.3.0: a boolean schema (true: anything, false: nothing) is a contract
-- schema too, as JSON Schema and the validator say (issue 28).  Existing
-- rows are objects, which the new constraints accept.
ALTER TABLE wfe.contracts
    DROP CONSTRAINT contracts_input_schema,
    ADD CONSTRAINT contracts_input_schema
        CHECK (jsonb_typeof(input_schema) IN ('object', 'boolean')),
    DROP CONSTRAINT contracts_output_schema,
    ADD CONSTRAINT contracts_output_schema
        CHECK (jsonb_typeof(output_schema) IN ('object', 'boolean'));

-- ---------------------------------------------------------------------
-- Every attempt that can be running carries a clock (issue 20, item 13):
-- an in-database action's attempt gets its execution deadline when it
-- starts, and _repair times out those a stopped runner left running.
-- Attempts 0.2.0 left running with no deadline get one here.
-- ---------------------------------------------------------------------
COMMENT ON FUNCTION wfe._run_handler(bigint, text, text) IS
'Runs a queued in-database action''s handler in a subtransaction; an error fails the attempt (retried per policy).';

COMMENT ON FUNCTION wfe._repair() IS
'Repair after a crash: outbox rows left claimed go back to pending; in-database attempts left running are timed out now (retried per policy).  Transitions are single transactions, so nothing else can be half done.';

UPDATE wfe.run_stages AS st
   SET deadline_at = coalesce(st.started_at, now()) + make_interval(secs => coalesce(st.exec_ms, 0) / 1000.0)
 WHERE st.state = 'running' AND st.handler IS NOT NULL AND st.deadline_at IS NULL;

-- ---------------------------------------------------------------------
-- A handler acts as its registrant (issue 20, item 5): wfe._caller() and
-- the new wfe._identity() answer the registrant inside a handler, and
-- every identity wfe records or compares (created_by, approved_by, the
-- four-eyes rule, events' "by", resolved_by, granted_by, updated_by) is
-- wfe._identity() instead of session_user.
-- ---------------------------------------------------------------------
COMMENT ON FUNCTION wfe._caller() IS
'The role acting in this session, SET ROLE included (inside SECURITY DEFINER functions current_user is the owner); inside a handler, its registrant.';
CREATE FUNCTION wfe._identity()
RETURNS name AS 'MODULE_PATHNAME', 'wfe_identity' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._identity() IS
'Who wfe records and the four-eyes rule compares: session_user; inside a handler, its registrant.';
REVOKE ALL ON FUNCTION wfe._identity() FROM PUBLIC;

ALTER TABLE wfe.tenant_members ALTER COLUMN granted_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.contracts ALTER COLUMN created_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.definitions ALTER COLUMN created_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.queue_grants ALTER COLUMN granted_by SET DEFAULT wfe._identity();
ALTER TABLE wfe.tenant_limits ALTER COLUMN updated_by SET DEFAULT wfe._identity();
COMMENT ON COLUMN wfe.contracts.created_by IS 'Who registered the contract (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.created_by IS 'Who created the version (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.approved_by IS 'Who approved the version (wfe._identity(): session_user, or a handler''s registrant)';

COMMENT ON FUNCTION wfe._register_contract(text, text, text, regprocedure, jsonb, jsonb) IS
'Validates and stores a contract; identical re-registration is a no-op, different content raises 23505.';

COMMENT ON FUNCTION wfe.create_definition(text) IS
'Compiles a YAML definition and stores it as a new immutable draft version with its plan tables; returns the digest. The same name, version and digest again is a no-op; the same name and version with another digest raises 23505; an invalid definition raises 22023 with the diagnostics as JSON in DETAIL.';

COMMENT ON FUNCTION wfe.approve(text, text) IS
'Approves a draft definition version (draft -> approved). With wfe.four_eyes on, not by the role that created it.';

COMMENT ON FUNCTION wfe.activate(text, text) IS
'Makes an approved or retired definition version the active one of its workflow; the previously active version is retired for new runs. Activating an earlier version is the rollback.';

COMMENT ON FUNCTION wfe.submit(text, jsonb, text, jsonb) IS
'Starts a run of the active (or a named approved) version, in the caller''s transaction; an idempotency key returns the earlier run with accepted = false.';

COMMENT ON FUNCTION wfe.cancel_run(bigint, text) IS
'Cancels a run: in-flight attempts are fenced and asked to stop, unstarted stages skipped, finalisers run; answers accepted, late or unknown.';

COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit and pause.';

COMMENT ON FUNCTION wfe.configure_tenant(text, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears); NULL is unlimited.';

COMMENT ON FUNCTION wfe._resolve_dead_letters(bigint, text, text) IS
'Closes the open dead letters of a stage (or, stage NULL, of a run) with how an operator resolved them.';

COMMENT ON FUNCTION wfe.redrive(bigint, text, text) IS
'Runs a failed or timed-out task again: a new attempt with a new fence; a run that ended failed is reopened and goes on from there.';

COMMENT ON FUNCTION wfe.skip_stage(bigint, text, jsonb, text) IS
'Completes a failed or timed-out stage by hand with result (checked like a report; a decision takes {"next": stage}); a failed run is reopened.';

COMMENT ON FUNCTION wfe.fail_stage(bigint, text, text) IS
'Fails an attempt under way by hand: fenced (a pushed worker is asked to stop), failed without retry, its failure route taken.';

COMMENT ON FUNCTION wfe.redispatch(bigint, text, text) IS
'Sends a queued or dispatched broker attempt again: same attempt, new fence, a new dispatch message (the old one''s accept is stale).';

COMMENT ON FUNCTION wfe.replay(bigint, text) IS
'Starts a new run of an ended run''s pinned definition with its context, tenant, execution context and priority; the new run''s replay_of names the old one.';

-- ---------------------------------------------------------------------
-- No login can freeze the worker or a tenant's admissions (issue 20, item
-- 3): wfe's admission and cache locks are taken with wfe._lock (C,
-- src/pg/locks.c: advisory lock tags no SQL function can name) instead of
-- pg_advisory_xact_lock(hashtext(...)); the worker's lock waits are
-- bounded (lock_timeout), and an item whose wait timed out (55P03) is put
-- off a second like a deadlock.  wfe.submit's new text is above.
-- ---------------------------------------------------------------------
CREATE FUNCTION wfe._lock(space text, key text, try boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_lock_sql' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._lock(text, text, boolean) IS
'Takes wfe''s transaction lock (space, key), which no login can take: waits (bounded by lock_timeout), or with try only takes it if free; returns whether it was taken.';
REVOKE EXECUTE ON FUNCTION wfe._lock(text, text, boolean) FROM PUBLIC;

COMMENT ON FUNCTION wfe._lock_tenant(text) IS
'Takes a tenant''s max_tasks_in_flight lock, waiting only in lock order (tenants by name before any queue); out of order it only tries, and a miss is rechecked later.';

COMMENT ON FUNCTION wfe._lock_queue(text) IS
'Takes a broker queue''s max_in_flight lock, waiting only in lock order (queues by name, after the tenants); out of order it only tries, and a miss is rechecked later.  From then on tenant locks are only tried.';

COMMENT ON FUNCTION wfe._item_failed(bigint, text, text, text, text, bigint) IS
'An item of a worker round (a timer: p_timer_id) raised: put it off a second for a deadlock, serialization failure or lock timeout, else fail its run (run.engine_error), or record the error and put the item off; logs the run id.';

COMMENT ON FUNCTION wfe._worker_round(int) IS
'Releases what missed admission tries held back, fires up to p_max due timers and times out up to p_max expired attempts; returns how many timers and attempts.';

-- 0.3.0, issue 20 (tenant-proof relays, fences kept from readers, payloads
-- bound to their attempts, unauthenticated callbacks apart).

-- Fences leave the events' details for a column of their own, which the
-- readers' roles cannot select.  Events written before: the fence they
-- name moves to the column (stage.cancelled's is the fence of the attempt
-- asked to stop: cancelled_fence, or 0.1.0's fence - 1).
ALTER TABLE wfe.events ADD COLUMN fence bigint;
COMMENT ON COLUMN wfe.events.fence IS
'The fence the event is about (an attempt released, cancelled, reported about); kept out of detail, and not readable by wfe_reader or wfe_operator: only the claim and the envelope carry fences';
UPDATE wfe.events AS e
   SET fence = CASE WHEN e.type = 'stage.cancelled'
                    THEN coalesce((e.detail ->> 'cancelled_fence')::bigint, (e.detail ->> 'fence')::bigint - 1)
                    ELSE (e.detail ->> 'fence')::bigint END,
       detail = e.detail - 'fence' - 'cancelled_fence' - 'current_fence'
 WHERE e.detail ?| ARRAY['fence', 'cancelled_fence', 'current_fence'];
COMMENT ON COLUMN wfe.run_stages.fence IS
'Fencing token of the current attempt; grows with every new attempt and every fencing.  Not readable by wfe_reader or wfe_operator: only the claim and the envelope carry fences';

DROP FUNCTION wfe._event(bigint, text, text, int, text, jsonb);
CREATE FUNCTION wfe._event(p_run_id bigint, p_tenant text, p_stage text, p_attempt int,
                           p_type text, p_detail jsonb DEFAULT NULL, p_fence bigint DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail, fence)
    VALUES (p_run_id, p_tenant, p_stage, p_attempt, p_type, p_detail, p_fence);
END;
COMMENT ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb, bigint) IS
'Appends one row to the event log (p_fence: the fence it is about, kept out of the detail).';
REVOKE ALL ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb, bigint) FROM PUBLIC;

-- The readers' roles select every column but those holding fences.
REVOKE SELECT ON wfe.run_stages, wfe.events, wfe.timers, wfe.outbox FROM wfe_reader, wfe_operator;
GRANT SELECT (run_id, stage, tenant, ordinal, kind, state, attempt, queue, worker, handler, priority,
              awaits, branch, input, result, error, outcome, skip_reason, exec_ms, queue_ms,
              heartbeat_ms, ready_at, claimed_by, started_at, heartbeat_at, deadline_at, finished_at,
              lease_ms, cache_key, cache)
    ON wfe.run_stages TO wfe_reader, wfe_operator;
GRANT SELECT (event_id, run_id, tenant, stage, attempt, type, at, detail)
    ON wfe.events TO wfe_reader, wfe_operator;
GRANT SELECT (timer_id, tenant, run_id, stage, attempt, kind, due_at, fired_at)
    ON wfe.timers TO wfe_reader, wfe_operator;
GRANT SELECT (id, tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, state,
              attempts, last_error, available_at, claimed_by, claimed_at, created_at, published_at)
    ON wfe.outbox TO wfe_reader, wfe_operator;

CREATE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       -- (by attempt: the view runs as its reader, who may not see fences)
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, dispatches unpublished for a minute, open dead letters.';
GRANT SELECT ON wfe.dashboard_stuck TO wfe_reader, wfe_operator;

-- Unauthenticated signed callbacks: a table apart from the tenants' events;
-- those 0.2.0 recorded as events move there.
CREATE TABLE wfe.unauthenticated_callbacks (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    caller   name,                  -- the role that called (SET ROLE included); NULL: recorded before 0.3.0
    run_id   bigint,
    stage    text,
    attempt  int,
    detail   jsonb NOT NULL,
    fence    bigint
);
CREATE INDEX unauthenticated_callbacks_at ON wfe.unauthenticated_callbacks (at);
COMMENT ON TABLE wfe.unauthenticated_callbacks IS
'Signed callbacks whose signature did not authenticate them (wfe.callback answered unauthenticated): the login that sent them, what they claimed (run, stage, attempt; callback, callback_id, key_id, timestamp and why in detail). Readable by wfe_operator and wfe_admin, never a tenant''s event.';
SELECT pg_catalog.pg_extension_config_dump('wfe.unauthenticated_callbacks', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.unauthenticated_callbacks_id_seq', '');
GRANT SELECT ON wfe.unauthenticated_callbacks TO wfe_admin, wfe_operator;
WITH moved AS (
    DELETE FROM wfe.events AS e WHERE e.type = 'callback.unauthenticated'
    RETURNING e.at, e.run_id, e.stage, e.attempt, e.detail, e.fence
)
INSERT INTO wfe.unauthenticated_callbacks (at, caller, run_id, stage, attempt, detail, fence)
SELECT m.at, NULL, m.run_id, m.stage, m.attempt, m.detail, m.fence FROM moved AS m ORDER BY m.at;
COMMENT ON FUNCTION wfe.callback(text, text) IS
'A worker''s report signed by its gateway: the gate''s outcome word when authentic; otherwise unauthenticated (recorded in wfe.unauthenticated_callbacks), expired or replayed (recorded as events of the run).';

-- Payloads belong to the stage that dispatched them.  References published
-- by 0.2.0 name no attempt and cannot be fetched any more (their attempts
-- time out and are retried with new messages), so their rows go.
ALTER TABLE wfe.payloads DROP CONSTRAINT payloads_pkey;
DELETE FROM wfe.payloads;
ALTER TABLE wfe.payloads
    ADD COLUMN run_id bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    ADD COLUMN stage text NOT NULL,
    ADD CONSTRAINT payloads_pkey PRIMARY KEY (run_id, stage, key);
COMMENT ON TABLE wfe.payloads IS
'Large inputs (the large track) of the stages that dispatched them, under sha256:<hex> of their JSON text; deleted with their runs';

COMMENT ON FUNCTION wfe._dispatch(wfe.runs, wfe.run_stages) IS
'Writes the dispatch message of a released attempt to the outbox (broker-mode queues), by reference on the large track.';

COMMENT ON FUNCTION wfe.fetch_payload(jsonb) IS
'The input a large-track envelope refers to, for a holder of the attempt the reference names, after checking its SHA-256 against the reference.';

-- An external relay claims and acknowledges only the rows of its tenants.
CREATE FUNCTION wfe._relay_sees(p_tenant text, p_tenants text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN p_tenants IS NULL OR p_tenant OPERATOR(pg_catalog.=) ANY (p_tenants);
COMMENT ON FUNCTION wfe._relay_sees(text, text[]) IS
'Whether an external relay acting for p_tenants (wfe.my_tenants(); NULL: every tenant) may claim and acknowledge an outbox row of p_tenant.';
REVOKE ALL ON FUNCTION wfe._relay_sees(text, text[]) FROM PUBLIC;

COMMENT ON FUNCTION wfe.outbox_claim(int, text) IS
'External relay: claims up to max pending outbox rows of the tenants the caller acts for (SKIP LOCKED, id order); acknowledge them with wfe.outbox_ack.';

COMMENT ON FUNCTION wfe.outbox_ack(bigint[], text) IS
'External relay: marks the rows it claimed and published as published; returns how many (rows it no longer holds, or of tenants it does not act for, are not counted).';

-- The fence a cancel acknowledgement names is the stage.cancelled event's
-- fence column; a dead dispatch's event names its fence there too.
COMMENT ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) IS
'Records a worker''s acknowledgement of a cooperative cancellation request.';

COMMENT ON FUNCTION wfe._broker_dead_letter(text, text, jsonb, text) IS
'A dispatch RabbitMQ dead-lettered (wfe.dlq): recorded in wfe.dead_letters (reason broker.redeliveries, the x-death history) and its attempt failed through the gate, per the stage''s retry policy.';

-- Retention removes old unauthenticated callbacks too.
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their history and large payloads), old published outbox rows, old unauthenticated callbacks and expired result cache entries.';

-- 0.3.0: wfe.metrics, the Prometheus data model (issue 27); all new, as
-- src/sql/83_metrics.sql has it.  The counters start at 0 here: what
-- happened before the update was not counted.
-- (spec: operations.md "Metrics and traces").
--
-- wfe.metrics is the Prometheus data model as a view: one row per series.
-- Gauges are read from live work only, through the partial indexes of
-- unfinished runs, live stages, pending outbox rows, unfired timers and
-- open dead letters, so a scrape costs the same at 1M finished runs as at
-- 1,000 (docs/benchmarks.md).  Counters cannot be counted from history
-- (retention deletes it, and counting it is the scan a scrape must not
-- do): triggers add a row of +1 to wfe.metric_counters as each thing
-- happens, and the view sums them.  Those rows are only ever inserted, so
-- two transactions never wait on each other for a counter; every 256th
-- insert folds the rows committed so far into one row per series (one
-- fold at a time, src/pg/metrics.c), so the table stays a few rows per
-- series.  No primary key: the fold takes every row and nothing looks one
-- up by id (its identity only counts the inserts), and an index entry per
-- counted attempt end is a WAL record on every step (docs/benchmarks.md).

CREATE TABLE wfe.metric_counters (
    id     bigint GENERATED ALWAYS AS IDENTITY,
    tenant text NOT NULL,
    metric text NOT NULL,
    labels jsonb NOT NULL,
    value  bigint NOT NULL
);
COMMENT ON TABLE wfe.metric_counters IS
'The counters of wfe.metrics, as rows to sum per tenant, metric and labels: +1 rows written by triggers, folded now and then.';
GRANT SELECT ON wfe.metric_counters TO wfe_reader, wfe_operator;
ALTER TABLE wfe.metric_counters ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.metric_counters FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.metric_counters FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));

-- Open dead letters (wfe_dead_letters, the dashboards), without reading resolved ones.
CREATE INDEX dead_letters_open ON wfe.dead_letters (run_id, stage) WHERE resolved_at IS NULL;

-- Trigger: count what just happened, as TG_ARGV[0] names it.  In C
-- (src/pg/metrics.c): it fires at the end of every attempt, on the path
-- of every step; it writes as its owner, as a SECURITY DEFINER one would.
CREATE FUNCTION wfe._metrics_count()
RETURNS trigger
AS 'MODULE_PATHNAME', 'wfe_metrics_count'
LANGUAGE C;
COMMENT ON FUNCTION wfe._metrics_count() IS
'Trigger: adds 1 to the counter TG_ARGV[0] of wfe.metrics for the row''s tenant, with the labels the row gives; folds the counter rows every 256th.';
REVOKE ALL ON FUNCTION wfe._metrics_count() FROM PUBLIC;

-- The WHEN clauses are evaluated without calling the function: a row that
-- counts nothing costs a comparison.
CREATE TRIGGER metrics_run_finished
    AFTER UPDATE ON wfe.runs
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION wfe._metrics_count('wfe_runs_finished_total');
CREATE TRIGGER metrics_run_finished_at_submit
    AFTER INSERT ON wfe.runs
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION wfe._metrics_count('wfe_runs_finished_total');
CREATE TRIGGER metrics_keyed_run
    AFTER INSERT ON wfe.runs
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION wfe._metrics_count('wfe_idempotent_submits_total');
CREATE TRIGGER metrics_deduplicated
    AFTER INSERT ON wfe.events
    FOR EACH ROW WHEN (NEW.type = 'run.deduplicated')
    EXECUTE FUNCTION wfe._metrics_count('wfe_idempotent_submits_total');
-- an attempt ends when its stage leaves a clocked state (wfe._stage_clocked)
CREATE TRIGGER metrics_attempt_ended
    AFTER UPDATE OF state ON wfe.run_stages
    FOR EACH ROW WHEN (OLD.state IN ('queued', 'dispatched', 'running')
                       AND NEW.state IN ('completed', 'failed', 'retry_scheduled', 'timed_out', 'cancelled'))
    EXECUTE FUNCTION wfe._metrics_count('wfe_stage_attempts_total');
CREATE TRIGGER metrics_cache_hit
    AFTER UPDATE OF cache ON wfe.run_stages
    FOR EACH ROW WHEN (NEW.cache IN ('hit', 'coalesced') AND OLD.cache IS DISTINCT FROM NEW.cache)
    EXECUTE FUNCTION wfe._metrics_count('wfe_cache_hits_total');
CREATE TRIGGER metrics_cache_miss
    AFTER UPDATE OF cache ON wfe.run_stages
    FOR EACH ROW WHEN (NEW.cache = 'miss' AND OLD.cache IS DISTINCT FROM NEW.cache)
    EXECUTE FUNCTION wfe._metrics_count('wfe_cache_misses_total');

-- One row per series, in the Prometheus data model.  NB: security_invoker,
-- like the dashboards: the reader's row-level security decides whose work
-- it sums, and the state lists and the track threshold's default are
-- written out (see 80_dashboards.sql).
CREATE VIEW wfe.metrics WITH (security_invoker = true) AS
WITH settings AS (
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL    -- wfe._stage_clocked
     GROUP BY 1, 2
), tracks AS (
    -- every configured queue has its series, 0 when idle (KEDA scales to zero on it)
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
), queues AS (
    SELECT t.queue FROM tracks AS t GROUP BY t.queue
), dead AS (
    -- an in-database action's stage has no queue: ''
    SELECT coalesce(st.queue, '') AS queue, count(*) AS dead
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY 1
), counters(metric, labelled, help) AS (
    VALUES ('wfe_runs_finished_total', true, 'Runs that finished, per workflow and final state.'),
           ('wfe_stage_attempts_total', true,
            'Attempts that ended, per workflow, stage and outcome (completed, failed, timed_out, cancelled).'),
           ('wfe_cache_hits_total', false,
            'Cached stages released with a result from the cache (hit) or from the attempt in flight under their key (coalesced).'),
           ('wfe_cache_misses_total', false, 'Cached stages released with no result under their key, so run.'),
           ('wfe_idempotent_submits_total', true,
            'Submits with an idempotency key: result created (a new run) or deduplicated (the existing run).')
)
SELECT 'wfe_runs' AS metric, jsonb_build_object('workflow', r.workflow, 'state', r.state) AS labels,
       count(*)::double precision AS value, 'gauge' AS kind,
       'Runs in flight, per workflow and state.' AS help
  FROM wfe.runs AS r
 WHERE r.finished_at IS NULL
 GROUP BY r.workflow, r.state
UNION ALL
SELECT k.metric, coalesce(c.labels, '{}'), coalesce(sum(c.value), 0)::double precision, 'counter', k.help
  FROM counters AS k
  LEFT JOIN wfe.metric_counters AS c ON c.metric = k.metric
 GROUP BY k.metric, c.labels, k.labelled, k.help
 -- a counter without labels is there at 0 before it first counts
HAVING c.labels IS NOT NULL OR NOT k.labelled
UNION ALL
SELECT 'wfe_queue_depth', jsonb_build_object('queue', t.queue, 'track', t.track),
       coalesce(l.depth, 0)::double precision, 'gauge',
       'Tasks queued (ready, not yet handed out), per queue and track (poll, or the broker''s small and large).'
  FROM tracks AS t
  LEFT JOIN live AS l ON l.queue = t.queue AND l.track = t.track
UNION ALL
SELECT 'wfe_queue_oldest_ready_seconds', jsonb_build_object('queue', q.queue),
       coalesce(extract(epoch FROM now() - (SELECT min(l.oldest_ready) FROM live AS l WHERE l.queue = q.queue)), 0)::double precision,
       'gauge', 'Age of the oldest queued task of the queue, in seconds (0: none queued).'
  FROM queues AS q
UNION ALL
SELECT 'wfe_tasks_in_flight', jsonb_build_object('queue', q.queue),
       coalesce((SELECT sum(l.in_flight) FROM live AS l WHERE l.queue = q.queue), 0)::double precision,
       'gauge', 'Tasks dispatched or running, per queue.'
  FROM queues AS q
UNION ALL
SELECT 'wfe_outbox_pending', '{}', count(*)::double precision, 'gauge',
       'Outbox messages not yet published.'
  FROM wfe.outbox AS o
 WHERE o.state = 'pending'
UNION ALL
SELECT 'wfe_outbox_oldest_pending_seconds', '{}',
       coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::double precision, 'gauge',
       'Age of the oldest pending outbox message, in seconds (0: none pending).'
  FROM wfe.outbox AS o
 WHERE o.state = 'pending'
UNION ALL
SELECT 'wfe_dead_letters', jsonb_build_object('queue', n.queue), coalesce(d.dead, 0)::double precision, 'gauge',
       'Open (unresolved) dead letters, per queue of their stage.'
  FROM (SELECT q.queue FROM queues AS q UNION SELECT d.queue FROM dead AS d) AS n
  LEFT JOIN dead AS d ON d.queue = n.queue
UNION ALL
SELECT 'wfe_timers_due', '{}', count(*)::double precision, 'gauge',
       'Timers due and not fired yet (more than a few: the background worker or wfe.tick is behind).'
  FROM wfe.timers AS t
 WHERE t.fired_at IS NULL AND t.due_at <= now();
COMMENT ON VIEW wfe.metrics IS
'The Prometheus data model, one row per series: metric name, labels, value, kind (gauge or counter), help; under the reader''s row-level security.';
GRANT SELECT ON wfe.metrics TO wfe_reader, wfe_operator;

-- ---------------------------------------------------------------------
-- Workers learn a queue's delivery mode (issue 26, 63_queues.sql).
-- A queue's delivery mode, for the workers that serve it (the clients'
-- mode="auto"): wfe_worker cannot read wfe.queues, and a worker started in
-- the wrong mode would wait for tasks that never come its way.
CREATE FUNCTION wfe.queue_delivery(queue text)
RETURNS text
LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce((SELECT q.delivery FROM wfe.queues AS q WHERE q.queue::text = $1), 'poll');
END;
COMMENT ON FUNCTION wfe.queue_delivery(text) IS
'The delivery mode of a queue: broker, or poll (also for a queue never configured).';
REVOKE ALL ON FUNCTION wfe.queue_delivery(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.queue_delivery(text) TO wfe_worker, wfe_reader, wfe_operator, wfe_admin;

-- ---------------------------------------------------------------------
-- Waits, signals and sleeps (issue 21; docs: runtime.md "Signals"): a
-- signal is a contract (kind 'signal'), wait and sleep are stage kinds
-- with an on_timeout edge, their timers are wait_timeout and sleep, and
-- the signals kept for runs and the grants to send them are tables.
-- ---------------------------------------------------------------------
ALTER TABLE wfe.contracts DROP CONSTRAINT contracts_kind;
ALTER TABLE wfe.contracts ADD CONSTRAINT contracts_kind CHECK (kind IN ('worker', 'action', 'signal'));
ALTER TABLE wfe.contracts DROP CONSTRAINT contracts_executor;
ALTER TABLE wfe.contracts ADD CONSTRAINT contracts_executor CHECK (
        CASE kind
            WHEN 'worker' THEN queue IS NOT NULL AND handler IS NULL
            WHEN 'signal' THEN queue IS NULL AND handler IS NULL
            ELSE (queue IS NULL) <> (handler IS NULL)
        END);
COMMENT ON TABLE wfe.contracts IS
'Registered action, worker and signal contracts (name@N). Rows are immutable: register a new version instead.';
COMMENT ON COLUMN wfe.contracts.kind IS 'worker (runs outside the database, claimed from a queue), action, or signal (what a wait stage waits for: wfe.signal)';
COMMENT ON COLUMN wfe.contracts.output_schema IS 'JSON-Schema subset a result must satisfy; a signal''s payload schema (its payload is the wait''s result)';
ALTER TABLE wfe.plan_stages DROP CONSTRAINT plan_stages_type;
ALTER TABLE wfe.plan_stages ADD CONSTRAINT plan_stages_type
    CHECK (type IN ('action', 'worker', 'decision', 'fork', 'join', 'finaliser', 'wait', 'sleep'));
ALTER TABLE wfe.plan_edges DROP CONSTRAINT plan_edges_kind;
ALTER TABLE wfe.plan_edges ADD CONSTRAINT plan_edges_kind
    CHECK (kind IN ('success', 'failure', 'branch', 'evaluation_error',
                    'fork', 'join', 'depends_on', 'timeout'));
COMMENT ON COLUMN wfe.plan_edges.kind IS
'success (on_success), failure (on_failure), branch (decision next), evaluation_error (on_evaluation_error), timeout (a wait''s on_timeout), fork (fork -> branch), join (required stage -> join), depends_on (dependency -> task)';
ALTER TABLE wfe.timers DROP CONSTRAINT timers_kind;
ALTER TABLE wfe.timers ADD CONSTRAINT timers_kind CHECK (kind IN ('retry', 'not_before', 'run_deadline', 'cache_ready',
                                                                  'wait_timeout', 'sleep'));
COMMENT ON TABLE wfe.timers IS 'Durable timers: retry delays, delayed starts (not_before), run deadlines, a cached stage''s wake-up when the attempt it waited on ended (cache_ready), a wait''s timeout (wait_timeout), a sleep''s end (sleep)';

CREATE TABLE wfe.signal_grants (
    ref        text NOT NULL,
    role       regrole NOT NULL,
    granted_by name NOT NULL DEFAULT wfe._identity(),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ref, role)
);
COMMENT ON TABLE wfe.signal_grants IS
'Which roles may send each signal (wfe.grant_signal, wfe.revoke_signal; ref a registered signal when granted); superusers and wfe_admin always may.';
GRANT SELECT ON wfe.signal_grants TO wfe_admin, wfe_operator, wfe_reader;
SELECT pg_catalog.pg_extension_config_dump('wfe.signal_grants', '');

CREATE TABLE wfe.signals (
    signal_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text NOT NULL,
    run_id          bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    signal          text NOT NULL,
    payload         jsonb NOT NULL,
    idempotency_key text,
    sent_by         name NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    stage           text,
    taken_at        timestamptz,
    CONSTRAINT signals_taken CHECK ((stage IS NULL) = (taken_at IS NULL))
);
COMMENT ON TABLE wfe.signals IS
'Signals kept for a run: taken by a wait (stage, taken_at) or buffered until a wait on them is released (oldest first).';
COMMENT ON COLUMN wfe.signals.stage IS 'The wait stage that took the signal; NULL while it is buffered';
GRANT SELECT ON wfe.signals TO wfe_reader, wfe_operator;
-- one signal per (run, signal, idempotency key): a resend is a duplicate or a conflict
CREATE UNIQUE INDEX signals_idempotency ON wfe.signals (run_id, signal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- a released wait takes the oldest buffered signal
CREATE INDEX signals_buffered ON wfe.signals (run_id, signal, signal_id) WHERE taken_at IS NULL;
ALTER TABLE wfe.signals ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.signals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.signals FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
SELECT pg_catalog.pg_extension_config_dump('wfe.signals', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.signals_signal_id_seq', '');

CREATE FUNCTION wfe.register_signal(ref text, payload_schema jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._register_contract($1, 'signal', NULL, NULL, '{}', $2);
END
$$;
COMMENT ON FUNCTION wfe.register_signal(text, jsonb) IS
'Registers signal contract ref (name@N) with the JSON schema its payload must satisfy. Idempotent; a registered version is immutable.';
REVOKE ALL ON FUNCTION wfe.register_signal(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.register_signal(text, jsonb) TO wfe_admin;

-- Check a signal grant's arguments: a real role (not PUBLIC) and a registered signal.
CREATE FUNCTION wfe._check_signal_grant(p_role name, p_ref text)
RETURNS regrole
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_ref IS NULL THEN
        RAISE EXCEPTION 'role and ref must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF lower(p_role) = 'public' THEN
        RAISE EXCEPTION 'a signal cannot be granted to PUBLIC'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Grant it to the role of the system that sends it (a gateway, a review tool).';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.ref = p_ref AND c.kind = 'signal') THEN
        RAISE EXCEPTION 'no signal "%" is registered', p_ref
            USING ERRCODE = 'undefined_object',
                  HINT = 'Register it first with wfe.register_signal(ref, payload_schema).';
    END IF;
    RETURN p_role::regrole;
END
$$;
COMMENT ON FUNCTION wfe._check_signal_grant(name, text) IS
'Raises 22004, 22023, 42704 unless role is a real role and ref a registered signal; returns the role.';
REVOKE ALL ON FUNCTION wfe._check_signal_grant(name, text) FROM PUBLIC;

CREATE FUNCTION wfe.grant_signal(role name, ref text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO wfe.signal_grants (ref, role)
    VALUES (grant_signal.ref, wfe._check_signal_grant(grant_signal.role, grant_signal.ref))
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.grant_signal(name, text) IS
'Lets role (and every role with its privileges) send signal ref to the runs of the tenants it acts for. Idempotent.';
REVOKE ALL ON FUNCTION wfe.grant_signal(name, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.grant_signal(name, text) TO wfe_admin;

CREATE FUNCTION wfe.revoke_signal(role name, ref text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM wfe.signal_grants AS g
     WHERE g.ref = revoke_signal.ref
       AND g.role = wfe._check_signal_grant(revoke_signal.role, revoke_signal.ref);
END
$$;
COMMENT ON FUNCTION wfe.revoke_signal(name, text) IS
'Takes back a grant_signal. Idempotent.';
REVOKE ALL ON FUNCTION wfe.revoke_signal(name, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.revoke_signal(name, text) TO wfe_admin;

-- May the role acting in this session send signal ref?
CREATE FUNCTION wfe._may_signal(p_ref text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = wfe._caller())
        OR pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE')
        OR EXISTS (SELECT 1 FROM wfe.signal_grants AS g
                    WHERE g.ref = p_ref AND pg_catalog.pg_has_role(wfe._caller(), g.role, 'USAGE'));
END;
COMMENT ON FUNCTION wfe._may_signal(text) IS
'Whether the role acting in this session may send signal ref: granted (wfe.grant_signal), a superuser or wfe_admin.';
REVOKE ALL ON FUNCTION wfe._may_signal(text) FROM PUBLIC;

-- The step: under the run's lock, a released wait takes it, or it is buffered, or late (src/pg/engine.c).
CREATE FUNCTION wfe._signal(run_id bigint, signal text, payload jsonb, idempotency_key text, by name)
RETURNS text AS 'MODULE_PATHNAME', 'wfe_signal' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._signal(bigint, text, jsonb, text, name) IS
'A checked signal for a locked run: accepted (a released wait took it), buffered (kept for a wait yet to be released) or late.';
REVOKE ALL ON FUNCTION wfe._signal(bigint, text, jsonb, text, name) FROM PUBLIC;

CREATE FUNCTION wfe.signal(run_id bigint, signal text, payload jsonb DEFAULT '{}',
                           idempotency_key text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r        wfe.runs;
    v_schema jsonb;
    v_tenant text;
    v_kept   jsonb;
    v_why    text;
BEGIN
    IF signal.run_id IS NULL OR signal.signal IS NULL THEN
        RAISE EXCEPTION 'run_id and signal must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- who may send it comes first: it does not depend on any run
    PERFORM wfe._admit_name(signal.signal, 'signal');
    PERFORM wfe._admit_name(signal.idempotency_key, 'idempotency_key');
    IF NOT wfe._may_signal(signal.signal) THEN
        RAISE EXCEPTION 'permission denied to send signal "%"', signal.signal
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator grants it with wfe.grant_signal(role, ref).';
    END IF;
    SELECT c.output_schema INTO v_schema FROM wfe.contracts AS c
     WHERE c.ref = signal.signal AND c.kind = 'signal';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no signal "%" is registered', signal.signal
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Signals are registered with wfe.register_signal(ref, payload_schema).';
    END IF;
    payload := coalesce(payload, '{}');
    PERFORM wfe._admit(payload, 'the payload');

    -- another tenant's run is answered as one that does not exist (and not locked)
    SELECT x.tenant INTO v_tenant FROM wfe.runs AS x WHERE x.run_id = signal.run_id;
    IF NOT FOUND OR NOT wfe._tenant_ok(v_tenant) THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = signal.run_id FOR NO KEY UPDATE;
    IF NOT EXISTS (SELECT 1 FROM wfe.plan_stages AS ps
                    WHERE ps.definition_id = r.definition_id AND ps.type = 'wait'
                      AND ps.spec ->> 'signal' = signal.signal) THEN
        RAISE EXCEPTION 'run % (workflow %@%) does not wait for signal "%"', r.run_id, r.workflow, r.version,
                        signal.signal
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Only a signal a wait stage of the run''s plan names can be sent to it.';
    END IF;
    v_why := wfe._validate(v_schema, payload);
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION 'payload of signal "%" is not valid: %', signal.signal, v_why
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The payload must satisfy the payload_schema the signal was registered with.';
    END IF;
    IF signal.idempotency_key IS NOT NULL THEN
        SELECT s.payload INTO v_kept FROM wfe.signals AS s
         WHERE s.run_id = r.run_id AND s.signal = signal.signal AND s.idempotency_key = signal.idempotency_key;
        IF FOUND THEN
            PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'signal.received',
                               jsonb_build_object('signal', signal.signal,
                                                  'outcome', CASE WHEN v_kept = payload THEN 'duplicate' ELSE 'conflict' END,
                                                  'idempotency_key', signal.idempotency_key, 'by', wfe._identity()));
            RETURN CASE WHEN v_kept = payload THEN 'duplicate' ELSE 'conflict' END;
        END IF;
    END IF;
    RETURN wfe._signal(r.run_id, signal.signal, payload, signal.idempotency_key, wfe._identity());
END
$$;
COMMENT ON FUNCTION wfe.signal(bigint, text, jsonb, text) IS
'Sends a signal to a run: accepted (a released wait took it), buffered, duplicate, conflict, late or unknown. 42501 without grant_signal; 22023 for a payload its schema refuses or a signal the run never waits for.';
REVOKE ALL ON FUNCTION wfe.signal(bigint, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.signal(bigint, text, jsonb, text) TO wfe_submitter, wfe_worker, wfe_operator;

CREATE FUNCTION wfe.find_run(workflow text, idempotency_key text, tenant text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    -- the run that holds the key now (live or completed), else the latest that held it
    SELECT x.run_id FROM wfe.runs AS x
     WHERE x.workflow = find_run.workflow AND x.idempotency_key = find_run.idempotency_key
       AND (find_run.tenant IS NULL OR x.tenant = find_run.tenant)
       AND wfe._tenant_ok(x.tenant)
     ORDER BY wfe._run_keeps_key(x.state) DESC, x.run_id DESC
     LIMIT 1;
END;
COMMENT ON FUNCTION wfe.find_run(text, text, text) IS
'The run of workflow submitted with idempotency_key (the business key a caller knows), within the tenants the caller acts for; NULL when none.';
REVOKE ALL ON FUNCTION wfe.find_run(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.find_run(text, text, text) TO wfe_submitter, wfe_worker, wfe_operator, wfe_reader;

-- Waits per workflow, stage and signal: runs waiting now, the oldest wait,
-- signals buffered for a wait not yet released, waits timed out in the
-- last hour (runtime.md "Signals, waits and sleeps").
CREATE VIEW wfe.dashboard_waits WITH (security_invoker = true) AS
WITH live AS (
    SELECT r.run_id, r.workflow FROM wfe.runs AS r
     WHERE r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour'
), waits AS (
    SELECT l.workflow, s.stage, s.worker AS signal, s.state, s.started_at, s.finished_at
      FROM live AS l JOIN wfe.run_stages AS s ON s.run_id = l.run_id
     WHERE s.kind = 'wait'
), buffered AS (
    SELECT l.workflow, g.signal, count(*) AS n
      FROM live AS l JOIN wfe.signals AS g ON g.run_id = l.run_id
     WHERE g.taken_at IS NULL
     GROUP BY l.workflow, g.signal
), per AS (
    SELECT w.workflow, w.stage, w.signal,
           count(*) FILTER (WHERE w.state = 'running') AS waiting,
           min(w.started_at) FILTER (WHERE w.state = 'running') AS oldest,
           count(*) FILTER (WHERE w.state = 'timed_out' AND w.finished_at >= now() - interval '1 hour') AS timed_out
      FROM waits AS w
     GROUP BY w.workflow, w.stage, w.signal
)
SELECT p.workflow, p.stage, p.signal, p.waiting,
       wfe.human_ms(extract(epoch FROM now() - p.oldest) * 1000) AS oldest_wait,
       coalesce(b.n, 0) AS buffered, p.timed_out AS timed_out_1h
  FROM per AS p
  LEFT JOIN buffered AS b ON b.workflow = p.workflow AND b.signal = p.signal
 WHERE p.waiting > 0 OR b.n > 0 OR p.timed_out > 0
 ORDER BY p.workflow, p.stage;
COMMENT ON VIEW wfe.dashboard_waits IS
'Wait stages per workflow, stage and signal: runs waiting now, the oldest wait''s age, signals buffered for the workflow''s runs, waits timed out in the last hour.';
GRANT SELECT ON wfe.dashboard_waits TO wfe_reader, wfe_operator;

-- ---------------------------------------------------------------------
-- Schedules (issue 23; 69_schedules.sql, 84_schedule_dashboards.sql):
-- both files as they are.  wfe._worker_round, wfe._next_due_ms and
-- wfe.report change with them (final bodies).
-- ---------------------------------------------------------------------
-- Schedules: runs that start themselves on a cron (docs: delivery.md
-- "Schedules", operations.md "Schedules").  The background worker fires due
-- ticks in its round (wfe._worker_round calls wfe._fire_schedules), and so
-- does wfe.tick().
--
-- One run per tick: a tick submits with the idempotency key
-- schedule:NAME:<tick in UTC, ISO 8601>, in the same transaction that moves
-- the schedule past it.  A crash before the commit loses both (the tick is
-- fired again, once); a backfill or trigger over a tick already fired gets
-- the same run back (accepted = false) -- the key decides, not the clock.
--
-- Cron expressions and wall-clock time zones are C (src/core/sched/cron.c,
-- src/pg/schedule.c); overlap, catch-up, jitter and ownership are here.
--
-- NB: a round locks the due schedules (SKIP LOCKED), then, submitting,
-- takes the locks wfe.submit takes; nothing else locks a schedule row after
-- a run's, so two firers cannot deadlock and never fire one tick twice.

CREATE FUNCTION wfe._cron_next(cron text, time_zone text, after timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'wfe_cron_next_sql'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION wfe._cron_next(text, text, timestamptz) IS
'The first tick of cron in time_zone strictly after `after` (a nonexistent local time: the first instant after the gap; a repeated one: the first); NULL when none; 22023 for a bad expression (naming its field) or zone.';
REVOKE ALL ON FUNCTION wfe._cron_next(text, text, timestamptz) FROM PUBLIC;

CREATE TABLE wfe.schedule_defs (
    name          text PRIMARY KEY,
    workflow      text NOT NULL,
    cron          text NOT NULL,
    context       jsonb NOT NULL DEFAULT '{}',
    tenant        wfe.tenant_name NOT NULL DEFAULT 'default',
    time_zone     text NOT NULL DEFAULT 'UTC',
    overlap       text NOT NULL DEFAULT 'skip'
                  CONSTRAINT schedule_overlap CHECK (overlap IN ('skip', 'allow', 'buffer_one', 'cancel_previous')),
    catch_up      text NOT NULL DEFAULT 'latest'
                  CONSTRAINT schedule_catch_up CHECK (catch_up IN ('latest', 'all', 'none')),
    jitter_ms     int NOT NULL DEFAULT 0 CONSTRAINT schedule_jitter CHECK (jitter_ms BETWEEN 0 AND 3600000),
    priority      int,
    start_at      timestamptz,
    end_at        timestamptz,
    owner         regrole NOT NULL,
    paused        boolean NOT NULL DEFAULT false,
    paused_reason text,
    next_tick     timestamptz,              -- the next cron instant; NULL: none left (end_at)
    next_fire_at  timestamptz,              -- next_tick plus its jitter
    buffered_tick timestamptz,              -- buffer_one: a tick waiting for the live run to end
    last_tick     timestamptz,
    last_fire_at  timestamptz,
    last_run_id   bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    name NOT NULL DEFAULT wfe._identity(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.schedule_defs IS
'Schedules (wfe.create_schedule): a workflow submitted on a cron in a time zone, as its owner; read it through wfe.schedules.';
CREATE INDEX schedule_defs_due ON wfe.schedule_defs (next_fire_at) WHERE NOT paused;
CREATE INDEX schedule_defs_buffered ON wfe.schedule_defs (name) WHERE buffered_tick IS NOT NULL AND NOT paused;
GRANT SELECT ON wfe.schedule_defs TO wfe_reader, wfe_operator;

-- Which runs a schedule started, and for which tick (the run's report).
CREATE TABLE wfe.schedule_runs (
    run_id        bigint PRIMARY KEY REFERENCES wfe.runs ON DELETE CASCADE,
    schedule      text NOT NULL,
    scheduled_for timestamptz NOT NULL,
    tenant        wfe.tenant_name NOT NULL
);
COMMENT ON TABLE wfe.schedule_runs IS
'The runs schedules started: the schedule and the tick (scheduled_for) each was submitted for.';
CREATE INDEX schedule_runs_schedule ON wfe.schedule_runs (schedule, scheduled_for);
GRANT SELECT ON wfe.schedule_runs TO wfe_reader, wfe_operator;
-- a schedule's skipped ticks and failures belong to no run: the dashboard
-- counts the last hour's and retention removes old ones by this index
CREATE INDEX events_schedules ON wfe.events (at)
    WHERE run_id IS NULL AND type IN ('schedule.skipped', 'schedule.failed');

-- Row-level security like every table that carries a tenant (76_tenant_rls.sql).
ALTER TABLE wfe.schedule_defs ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.schedule_defs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.schedule_defs FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
ALTER TABLE wfe.schedule_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.schedule_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.schedule_runs FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));

-- A tick's idempotency key: schedule:NAME:<UTC ISO 8601>, microseconds only when it has them.
CREATE FUNCTION wfe._schedule_key(p_name text, p_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN 'schedule:' || p_name || ':'
    || to_char(p_at AT TIME ZONE 'UTC',
               CASE WHEN extract(microseconds FROM p_at) % 1000000 = 0 THEN 'YYYY-MM-DD"T"HH24:MI:SS"Z"'
                    ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"' END);
COMMENT ON FUNCTION wfe._schedule_key(text, timestamptz) IS
'The idempotency key of schedule p_name''s run for instant p_at: schedule:NAME:2026-03-29T01:00:00Z.';
REVOKE ALL ON FUNCTION wfe._schedule_key(text, timestamptz) FROM PUBLIC;

-- The schedule p_name, locked, or 42704; another tenant's is one that does not exist.
CREATE FUNCTION wfe._schedule(p_name text)
RETURNS wfe.schedule_defs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s wfe.schedule_defs;
BEGIN
    IF p_name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO s FROM wfe.schedule_defs AS x WHERE x.name = p_name;
    IF NOT FOUND OR NOT wfe._tenant_ok(s.tenant) THEN
        RAISE EXCEPTION 'schedule "%" does not exist', left(p_name, 80) USING ERRCODE = 'undefined_object';
    END IF;
    SELECT * INTO s FROM wfe.schedule_defs AS x WHERE x.name = p_name FOR UPDATE;
    RETURN s;
END
$$;
COMMENT ON FUNCTION wfe._schedule(text) IS
'The schedule row, locked; SQLSTATE 42704 when there is none or it is of a tenant the caller does not act for.';
REVOKE ALL ON FUNCTION wfe._schedule(text) FROM PUBLIC;

-- Apply options (create_schedule, alter_schedule) to s, checking each: 22023 naming what is wrong.
CREATE FUNCTION wfe._schedule_options(s wfe.schedule_defs, p_options jsonb)
RETURNS wfe.schedule_defs
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad text;
    k     text;
    v     jsonb;
BEGIN
    PERFORM wfe._admit(p_options, 'options');
    IF jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, not %', jsonb_typeof(p_options)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(x, ', ' ORDER BY x) INTO v_bad FROM jsonb_object_keys(p_options) AS x
     WHERE x NOT IN ('tenant', 'time_zone', 'overlap', 'catch_up', 'jitter_ms', 'priority', 'start_at', 'end_at');
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown schedule option: %', left(v_bad, 200)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Options are tenant, time_zone, overlap, catch_up, jitter_ms, priority, start_at and end_at.';
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_options) LOOP
        IF k IN ('tenant', 'time_zone', 'overlap', 'catch_up') AND jsonb_typeof(v) <> 'string' THEN
            RAISE EXCEPTION 'schedule option % must be a string, not %', k, v USING ERRCODE = 'invalid_parameter_value';
        END IF;
        CASE k
        WHEN 'tenant' THEN
            PERFORM wfe._check_tenant_name(v #>> '{}');
            s.tenant := v #>> '{}';
        WHEN 'time_zone' THEN
            s.time_zone := v #>> '{}';
        WHEN 'overlap' THEN
            IF v #>> '{}' NOT IN ('skip', 'allow', 'buffer_one', 'cancel_previous') THEN
                RAISE EXCEPTION 'schedule option overlap must be skip, allow, buffer_one or cancel_previous, not %', v
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            s.overlap := v #>> '{}';
        WHEN 'catch_up' THEN
            IF v #>> '{}' NOT IN ('latest', 'all', 'none') THEN
                RAISE EXCEPTION 'schedule option catch_up must be latest, all or none, not %', v
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            s.catch_up := v #>> '{}';
        WHEN 'jitter_ms' THEN
            IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric NOT BETWEEN 0 AND 3600000
               OR (v #>> '{}')::numeric % 1 <> 0 THEN
                RAISE EXCEPTION 'schedule option jitter_ms must be an integer between 0 and 3600000, not %', v
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            s.jitter_ms := (v #>> '{}')::int;
        WHEN 'priority' THEN
            IF jsonb_typeof(v) = 'null' THEN
                s.priority := NULL;
            ELSIF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric NOT BETWEEN -1000000 AND 1000000
               OR (v #>> '{}')::numeric % 1 <> 0 THEN
                RAISE EXCEPTION 'schedule option priority must be an integer between -1000000 and 1000000, not %', v
                    USING ERRCODE = 'invalid_parameter_value';
            ELSE
                s.priority := (v #>> '{}')::int;
            END IF;
        ELSE    -- start_at, end_at
            BEGIN
                IF jsonb_typeof(v) NOT IN ('string', 'null') THEN
                    RAISE invalid_datetime_format;
                END IF;
                IF k = 'start_at' THEN
                    s.start_at := (v #>> '{}')::timestamptz;
                ELSE
                    s.end_at := (v #>> '{}')::timestamptz;
                END IF;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_text_representation THEN
                RAISE EXCEPTION 'schedule option % must be a timestamp, not %', k, v
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        END CASE;
    END LOOP;
    IF s.start_at >= s.end_at THEN
        RAISE EXCEPTION 'schedule option start_at (%) must be before end_at (%)', s.start_at, s.end_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN s;
END
$$;
COMMENT ON FUNCTION wfe._schedule_options(wfe.schedule_defs, jsonb) IS
'A schedule with options applied (tenant, time_zone, overlap, catch_up, jitter_ms, priority, start_at, end_at); 22023 naming a bad or unknown one.';
REVOKE ALL ON FUNCTION wfe._schedule_options(wfe.schedule_defs, jsonb) FROM PUBLIC;

-- Check a schedule's definition and plan its next tick from p_after (22023 for a bad cron, zone or workflow).
CREATE FUNCTION wfe._schedule_plan(s wfe.schedule_defs, p_after timestamptz)
RETURNS wfe.schedule_defs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_message text;
BEGIN
    PERFORM wfe._admit_name(s.workflow, 'workflow');
    PERFORM wfe._admit_name(s.cron, 'cron');
    PERFORM wfe._admit_name(s.time_zone, 'time_zone');
    PERFORM wfe._admit(s.context, 'context');
    IF jsonb_typeof(s.context) <> 'object' THEN
        RAISE EXCEPTION 'context must be a JSON object, not %', jsonb_typeof(s.context)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        PERFORM wfe._submittable(s.workflow);
    EXCEPTION WHEN undefined_object OR object_not_in_prerequisite_state THEN
        GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
        RAISE EXCEPTION 'schedule workflow: %', v_message
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A schedule names a workflow with an active version, or an approved name@version.';
    END;
    -- the first tick after p_after (and not before start_at); none past end_at
    s.next_tick := wfe._cron_next(s.cron, s.time_zone,
                                  greatest(p_after, s.start_at - interval '1 microsecond'));
    IF s.next_tick IS NULL AND s.end_at IS NULL THEN
        RAISE EXCEPTION 'invalid cron expression "%": it never matches a date', s.cron
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The offending field is the day of month.',
                  HINT = 'Check the day of month against the months (e.g. "0 0 30 2 *" never fires).';
    END IF;
    IF s.next_tick > s.end_at THEN
        s.next_tick := NULL;
    END IF;
    s.next_fire_at := s.next_tick + make_interval(secs => floor(random() * (s.jitter_ms + 1)) / 1000.0);
    s.updated_at := now();
    RETURN s;
END
$$;
COMMENT ON FUNCTION wfe._schedule_plan(wfe.schedule_defs, timestamptz) IS
'A schedule checked (workflow, context, cron, zone) with its next tick after p_after planned (jitter included).';
REVOKE ALL ON FUNCTION wfe._schedule_plan(wfe.schedule_defs, timestamptz) FROM PUBLIC;

-- Raise 42501 unless the caller acts for the schedule's tenant.
CREATE FUNCTION wfe._schedule_tenant_ok(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT wfe._tenant_ok(p_tenant) THEN
        RAISE EXCEPTION 'role "%" does not act for tenant "%"', wfe._caller(), p_tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps a role to a tenant with wfe.add_tenant_member(role, tenant).';
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._schedule_tenant_ok(text) IS
'Raises 42501 unless the role acting acts for the tenant (a schedule is made only for a tenant its creator acts for).';
REVOKE ALL ON FUNCTION wfe._schedule_tenant_ok(text) FROM PUBLIC;

CREATE FUNCTION wfe.create_schedule(name text, workflow text, cron text, context jsonb DEFAULT '{}',
                                    options jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.schedule_defs;
BEGIN
    IF create_schedule.name IS NULL OR create_schedule.workflow IS NULL OR create_schedule.cron IS NULL THEN
        RAISE EXCEPTION 'name, workflow and cron must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(create_schedule.name, 'schedule name');
    IF create_schedule.name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'schedule name "%" is not valid', left(create_schedule.name, 80)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Schedule names match ^[A-Za-z0-9_.-]{1,63}$.';
    END IF;
    s.name := create_schedule.name;
    s.workflow := create_schedule.workflow;
    s.cron := create_schedule.cron;
    s.context := coalesce(create_schedule.context, '{}');
    s.tenant := 'default';
    s.time_zone := 'UTC';
    s.overlap := 'skip';
    s.catch_up := 'latest';
    s.jitter_ms := 0;
    s.owner := wfe._caller();
    s.paused := false;
    s.created_at := now();
    s.created_by := wfe._identity();
    s := wfe._schedule_options(s, coalesce(create_schedule.options, '{}'));
    PERFORM wfe._schedule_tenant_ok(s.tenant);
    s := wfe._schedule_plan(s, now());
    INSERT INTO wfe.schedule_defs AS x VALUES (s.*) ON CONFLICT (name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule "%" already exists', s.name
            USING ERRCODE = 'duplicate_object', HINT = 'Change it with wfe.alter_schedule(), or drop it first.';
    END IF;
    PERFORM wfe._wake(s.next_fire_at) WHERE s.next_fire_at IS NOT NULL;
END
$$;
COMMENT ON FUNCTION wfe.create_schedule(text, text, text, jsonb, jsonb) IS
'Creates a schedule: workflow submitted with context on each tick of cron (five fields or @daily ...) as the calling role; options tenant, time_zone, overlap, catch_up, jitter_ms, priority, start_at, end_at.';
REVOKE ALL ON FUNCTION wfe.create_schedule(text, text, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.create_schedule(text, text, text, jsonb, jsonb) TO wfe_submitter;

CREATE FUNCTION wfe.alter_schedule(name text, cron text DEFAULT NULL, context jsonb DEFAULT NULL,
                                   options jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.schedule_defs := wfe._schedule(alter_schedule.name);
BEGIN
    s.cron := coalesce(alter_schedule.cron, s.cron);
    s.context := coalesce(alter_schedule.context, s.context);
    s := wfe._schedule_options(s, coalesce(alter_schedule.options, '{}'));
    -- a new tenant too must be one the caller acts for
    PERFORM wfe._schedule_tenant_ok(s.tenant);
    -- whoever last said what a schedule runs is whom it runs as
    s.owner := wfe._caller();
    s := wfe._schedule_plan(s, greatest(now(), s.last_tick));
    UPDATE wfe.schedule_defs AS x
       SET cron = s.cron, context = s.context, tenant = s.tenant, time_zone = s.time_zone,
           overlap = s.overlap, catch_up = s.catch_up, jitter_ms = s.jitter_ms, priority = s.priority,
           start_at = s.start_at, end_at = s.end_at, owner = s.owner, next_tick = s.next_tick,
           next_fire_at = s.next_fire_at, updated_at = now()
     WHERE x.name = s.name;
    PERFORM wfe._wake(s.next_fire_at) WHERE s.next_fire_at IS NOT NULL AND NOT s.paused;
END
$$;
COMMENT ON FUNCTION wfe.alter_schedule(text, text, jsonb, jsonb) IS
'Changes a schedule''s cron, context or options (NULL: unchanged; options merge); the calling role becomes its owner; the next tick is planned again.';
REVOKE ALL ON FUNCTION wfe.alter_schedule(text, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.alter_schedule(text, text, jsonb, jsonb) TO wfe_submitter;

CREATE FUNCTION wfe.pause_schedule(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.schedule_defs := wfe._schedule(pause_schedule.name);
BEGIN
    UPDATE wfe.schedule_defs AS x
       SET paused = true, paused_reason = 'paused by ' || wfe._identity(), updated_at = now()
     WHERE x.name = s.name;
END
$$;
COMMENT ON FUNCTION wfe.pause_schedule(text) IS
'Pauses a schedule: no tick fires until wfe.resume_schedule. Idempotent.';
REVOKE ALL ON FUNCTION wfe.pause_schedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.pause_schedule(text) TO wfe_submitter, wfe_operator;

CREATE FUNCTION wfe.resume_schedule(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.schedule_defs := wfe._schedule(resume_schedule.name);
BEGIN
    IF NOT s.paused THEN
        RETURN;
    END IF;
    -- the ticks missed while paused are not caught up: paused means not run
    s := wfe._schedule_plan(s, greatest(now(), s.last_tick));
    UPDATE wfe.schedule_defs AS x
       SET paused = false, paused_reason = NULL, next_tick = s.next_tick, next_fire_at = s.next_fire_at,
           buffered_tick = NULL, updated_at = now()
     WHERE x.name = s.name;
    PERFORM wfe._wake(s.next_fire_at) WHERE s.next_fire_at IS NOT NULL;
END
$$;
COMMENT ON FUNCTION wfe.resume_schedule(text) IS
'Resumes a paused schedule from its next tick after now (ticks missed while paused are not caught up). Idempotent.';
REVOKE ALL ON FUNCTION wfe.resume_schedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.resume_schedule(text) TO wfe_submitter, wfe_operator;

CREATE FUNCTION wfe.drop_schedule(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.schedule_defs := wfe._schedule(drop_schedule.name);
BEGIN
    -- the runs it started stay, and keep their schedule in their report
    DELETE FROM wfe.schedule_defs AS x WHERE x.name = s.name;
END
$$;
COMMENT ON FUNCTION wfe.drop_schedule(text) IS
'Drops a schedule; the runs it started are left as they are.';
REVOKE ALL ON FUNCTION wfe.drop_schedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.drop_schedule(text) TO wfe_submitter;

CREATE FUNCTION wfe._schedule_submit(owner regrole, tenant text, workflow text, context jsonb, key text,
                                     options jsonb, OUT run_id bigint, OUT accepted boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'wfe_schedule_submit'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._schedule_submit(regrole, text, text, jsonb, text, jsonb) IS
'wfe.submit as owner (its tenant membership, limits and identity apply); NULLs when owner does not (or no longer) act for tenant.';
REVOKE ALL ON FUNCTION wfe._schedule_submit(regrole, text, text, jsonb, text, jsonb) FROM PUBLIC;

-- Submit s's run for instant p_at as its owner.  NULL when the owner no
-- longer acts for the tenant (the schedule is then paused, schedule.failed).
CREATE FUNCTION wfe._schedule_submit_tick(s wfe.schedule_defs, p_at timestamptz, OUT run_id bigint,
                                          OUT accepted boolean)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key text := wfe._schedule_key(s.name, p_at);
BEGIN
    -- A tick that has its run already (fired, backfilled) gets it back,
    -- whatever the context is now: one run per tick.
    SELECT x.run_id, false INTO run_id, accepted
      FROM wfe.runs AS x
     WHERE x.tenant = s.tenant AND x.workflow = regexp_replace(s.workflow, '@[^@]*$', '')
       AND x.idempotency_key = v_key AND wfe._run_keeps_key(x.state);
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT x.run_id, x.accepted INTO run_id, accepted
      FROM wfe._schedule_submit(s.owner, s.tenant, s.workflow, s.context, v_key,
                                jsonb_strip_nulls(jsonb_build_object('tenant', s.tenant, 'priority', s.priority))) AS x;
    IF run_id IS NULL THEN
        UPDATE wfe.schedule_defs AS d
           SET paused = true, paused_reason = format('owner %s no longer acts for tenant %s', s.owner, s.tenant),
               updated_at = now()
         WHERE d.name = s.name;
        PERFORM wfe._event(NULL, s.tenant, NULL, NULL, 'schedule.failed',
                           jsonb_build_object('schedule', s.name, 'scheduled_for', p_at, 'owner', s.owner::text,
                                              'error', 'the owner no longer acts for the tenant: schedule paused'));
        RETURN;
    END IF;
    IF accepted THEN
        INSERT INTO wfe.schedule_runs AS r (run_id, schedule, scheduled_for, tenant)
        VALUES (run_id, s.name, p_at, s.tenant) ON CONFLICT DO NOTHING;
    END IF;
END
$$;
COMMENT ON FUNCTION wfe._schedule_submit_tick(wfe.schedule_defs, timestamptz) IS
'Submits a schedule''s run for an instant as its owner with key schedule:NAME:<instant>; NULL (schedule paused, schedule.failed) when the owner lost the tenant.';
REVOKE ALL ON FUNCTION wfe._schedule_submit_tick(wfe.schedule_defs, timestamptz) FROM PUBLIC;

-- Is the run live (running or finalising)?  NULL run: no.
CREATE FUNCTION wfe._schedule_run_live(p_run_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT EXISTS (SELECT FROM wfe.runs AS r
                    WHERE r.run_id OPERATOR(pg_catalog.=) p_run_id
                      AND r.state OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'finalising']));
END;
COMMENT ON FUNCTION wfe._schedule_run_live(bigint) IS
'Whether a schedule''s previous run is still live (running or finalising): what its overlap policy asks.';
REVOKE ALL ON FUNCTION wfe._schedule_run_live(bigint) FROM PUBLIC;

-- Fire what is due of schedule s (whose row the caller has locked); returns the runs submitted.
CREATE FUNCTION wfe._fire_schedule(s wfe.schedule_defs)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keep   int := CASE s.catch_up WHEN 'all' THEN wfe._setting('wfe.max_schedule_catch_up')::int ELSE 1 END;
    v_due    timestamptz[] := '{}';
    v_t      timestamptz := s.next_tick;
    v_tick   timestamptz;
    v_missed int := 0;
    v_looked int := 0;
    v_run    record;
    v_prev   wfe.runs;
    n        int := 0;
BEGIN
    -- buffer_one: the tick kept back fires once the run it waited for has ended
    IF s.buffered_tick IS NOT NULL AND NOT wfe._schedule_run_live(s.last_run_id) THEN
        v_run := wfe._schedule_submit_tick(s, s.buffered_tick);
        IF v_run.run_id IS NULL THEN
            RETURN n;           -- the owner lost the tenant: paused
        END IF;
        UPDATE wfe.schedule_defs AS x
           SET buffered_tick = NULL, last_tick = s.buffered_tick, last_fire_at = now(), last_run_id = v_run.run_id
         WHERE x.name = s.name;
        s.last_run_id := v_run.run_id;
        s.buffered_tick := NULL;
        n := 1;
    END IF;
    IF s.next_fire_at IS NULL OR s.next_fire_at > now() THEN
        RETURN n;
    END IF;

    -- The due ticks, oldest first: all of them up to now, of which the
    -- catch-up policy keeps the latest (latest, none: one; all: up to
    -- wfe.max_schedule_catch_up).  A round looks at no more than 100000
    -- (a minutely schedule after ten weeks down) and goes on next round.
    WHILE v_t IS NOT NULL AND v_t <= now() AND v_looked < 100000 LOOP
        IF v_t > s.end_at THEN
            v_t := NULL;
            EXIT;
        END IF;
        v_due := v_due || v_t;
        IF cardinality(v_due) > v_keep THEN
            v_due := v_due[2:];
            v_missed := v_missed + 1;
        END IF;
        v_t := wfe._cron_next(s.cron, s.time_zone, v_t);
        v_looked := v_looked + 1;
    END LOOP;
    IF v_t > s.end_at THEN
        v_t := NULL;
    END IF;
    IF v_t <= now() THEN
        -- more to look at next round: what was kept is not the latest
        v_missed := v_missed + cardinality(v_due);
        v_due := '{}';
    ELSIF s.catch_up = 'none' AND v_due[1] < now() - make_interval(secs => 60 + s.jitter_ms / 1000.0) THEN
        -- none: a tick later than its minute (and jitter) is one missed
        v_missed := v_missed + 1;
        v_due := '{}';
    END IF;

    FOREACH v_tick IN ARRAY v_due LOOP
        IF wfe._schedule_run_live(s.last_run_id) THEN
            IF s.overlap = 'skip' OR (s.overlap = 'buffer_one' AND s.buffered_tick IS NOT NULL) THEN
                PERFORM wfe._event(NULL, s.tenant, NULL, NULL, 'schedule.skipped',
                                   jsonb_build_object('schedule', s.name, 'scheduled_for', v_tick,
                                                      'reason', 'overlap', 'live_run_id', s.last_run_id));
                CONTINUE;
            ELSIF s.overlap = 'buffer_one' THEN
                s.buffered_tick := v_tick;
                CONTINUE;
            ELSIF s.overlap = 'cancel_previous' THEN
                SELECT * INTO v_prev FROM wfe.runs AS r WHERE r.run_id = s.last_run_id FOR NO KEY UPDATE;
                IF v_prev.intent IS NULL THEN
                    PERFORM wfe._event(v_prev.run_id, v_prev.tenant, NULL, NULL, 'run.cancel_requested',
                                       jsonb_build_object('by', 'schedule ' || s.name,
                                                          'reason', 'superseded by the next tick'));
                    PERFORM wfe._cancel(v_prev.run_id,
                                        format('superseded by the %s tick of schedule %s', v_tick, s.name));
                END IF;
            END IF;
        END IF;
        v_run := wfe._schedule_submit_tick(s, v_tick);
        IF v_run.run_id IS NULL THEN
            RETURN n;           -- the owner lost the tenant: paused
        END IF;
        s.last_run_id := v_run.run_id;
        s.last_tick := v_tick;
        s.last_fire_at := now();
        n := n + 1;
    END LOOP;
    IF v_missed > 0 THEN
        PERFORM wfe._event(NULL, s.tenant, NULL, NULL, 'schedule.skipped',
                           jsonb_build_object('schedule', s.name, 'reason', 'catch_up', 'catch_up', s.catch_up,
                                              'missed', v_missed, 'until', coalesce(v_t, now())));
    END IF;
    UPDATE wfe.schedule_defs AS x
       SET next_tick = v_t,
           next_fire_at = v_t + make_interval(secs => floor(random() * (s.jitter_ms + 1)) / 1000.0),
           buffered_tick = s.buffered_tick, last_tick = s.last_tick, last_fire_at = s.last_fire_at,
           last_run_id = s.last_run_id
     WHERE x.name = s.name;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._fire_schedule(wfe.schedule_defs) IS
'Fires a locked schedule''s due ticks by its catch-up and overlap policies, as its owner, and plans its next tick; returns the runs submitted.';
REVOKE ALL ON FUNCTION wfe._fire_schedule(wfe.schedule_defs) FROM PUBLIC;

-- Fire the due schedules: one bounded round (wfe._worker_round, so the background worker and wfe.tick()).
CREATE FUNCTION wfe._fire_schedules(p_max int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s         wfe.schedule_defs;
    done      int := 0;
    v_state   text;
    v_message text;
BEGIN
    FOR s IN SELECT * FROM wfe.schedule_defs AS x
              WHERE NOT x.paused AND (x.next_fire_at <= now() OR x.buffered_tick IS NOT NULL)
              ORDER BY x.next_fire_at NULLS LAST LIMIT p_max
                FOR UPDATE SKIP LOCKED
    LOOP
        -- each schedule in a subtransaction: one that raises rolls back alone
        BEGIN
            done := done + wfe._fire_schedule(s);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            v_message := left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
            IF v_state LIKE '40%' OR v_state = '55P03' THEN
                -- the moment's, not the schedule's: the next round tries again
                RAISE WARNING 'wfe: schedule % raised % (%): it is tried again next round', s.name, v_state, v_message;
                CONTINUE;
            END IF;
            -- anything else (the workflow deactivated, its context refused,
            -- a tenant limit): the due ticks are skipped, the next one planned
            RAISE WARNING 'wfe: schedule % raised % (%): its due ticks are skipped', s.name, v_state, v_message;
            BEGIN
                UPDATE wfe.schedule_defs AS x
                   SET next_tick = n.t, next_fire_at = n.t, buffered_tick = NULL
                  FROM (SELECT CASE WHEN t <= s.end_at OR s.end_at IS NULL THEN t END AS t
                          FROM wfe._cron_next(s.cron, s.time_zone, now()) AS t) AS n
                 WHERE x.name = s.name;
                PERFORM wfe._event(NULL, s.tenant, NULL, NULL, 'schedule.failed',
                                   jsonb_build_object('schedule', s.name, 'scheduled_for', s.next_tick,
                                                      'sqlstate', v_state, 'message', v_message));
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE;
                RAISE WARNING 'wfe: the error of schedule % cannot be recorded (%)', s.name, v_state;
            END;
        END;
    END LOOP;
    RETURN done;
END
$$;
COMMENT ON FUNCTION wfe._fire_schedules(int) IS
'Fires up to p_max due schedules, each in a subtransaction (an error: schedule.failed, its due ticks skipped); returns the runs submitted.';
REVOKE ALL ON FUNCTION wfe._fire_schedules(int) FROM PUBLIC;

CREATE FUNCTION wfe.trigger_schedule(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s     wfe.schedule_defs := wfe._schedule(trigger_schedule.name);
    v_run record;
BEGIN
    -- outside the cron: its own instant, the clock's (two triggers in one
    -- transaction are two runs)
    v_run := wfe._schedule_submit_tick(s, clock_timestamp());
    IF v_run.run_id IS NULL THEN
        RAISE EXCEPTION 'the owner of schedule "%", role "%", no longer acts for tenant "%"', s.name, s.owner, s.tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Map the owner to the tenant again, or take the schedule over with wfe.alter_schedule().';
    END IF;
    UPDATE wfe.schedule_defs AS x SET last_fire_at = now(), last_run_id = v_run.run_id WHERE x.name = s.name;
    RETURN v_run.run_id;
END
$$;
COMMENT ON FUNCTION wfe.trigger_schedule(text) IS
'Submits one run of a schedule now, outside its cron (as its owner, ignoring overlap); returns the run id.';
REVOKE ALL ON FUNCTION wfe.trigger_schedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.trigger_schedule(text) TO wfe_submitter, wfe_operator;

CREATE FUNCTION wfe.backfill_schedule(name text, from_time timestamptz, to_time timestamptz)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s     wfe.schedule_defs := wfe._schedule(backfill_schedule.name);
    v_t   timestamptz;
    v_run record;
    v_max int := 1000;
    i     int := 0;
    n     int := 0;
BEGIN
    IF from_time IS NULL OR to_time IS NULL THEN
        RAISE EXCEPTION 'from_time and to_time must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF to_time < from_time OR to_time > now() THEN
        RAISE EXCEPTION 'backfill range % to % must run forwards and end by now', from_time, to_time
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Ticks to come fire by themselves.';
    END IF;
    v_t := wfe._cron_next(s.cron, s.time_zone, from_time - interval '1 microsecond');
    WHILE v_t <= to_time LOOP
        i := i + 1;
        IF i > v_max THEN
            RAISE EXCEPTION 'backfill of schedule "%" covers more than % ticks', s.name, v_max
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Backfill a shorter range at a time.';
        END IF;
        -- a tick already fired gets its run back (accepted = false): one run per tick
        v_run := wfe._schedule_submit_tick(s, v_t);
        IF v_run.run_id IS NULL THEN
            RAISE EXCEPTION 'the owner of schedule "%", role "%", no longer acts for tenant "%"', s.name, s.owner, s.tenant
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Map the owner to the tenant again, or take the schedule over with wfe.alter_schedule().';
        END IF;
        IF v_run.accepted THEN
            n := n + 1;
        END IF;
        v_t := wfe._cron_next(s.cron, s.time_zone, v_t);
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe.backfill_schedule(text, timestamptz, timestamptz) IS
'Submits a schedule''s run for every tick from from_time to to_time (at most 1000, ending by now; ignoring overlap); a tick already run is not run again. Returns the runs started.';
REVOKE ALL ON FUNCTION wfe.backfill_schedule(text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.backfill_schedule(text, timestamptz, timestamptz) TO wfe_submitter;

-- The schedules' views (docs: operations.md "Schedules"): security_invoker,
-- like the dashboards (80_dashboards.sql), so a reader sees the schedules
-- of the tenants it acts for and no other.

-- What schedules there are (security_invoker: the reader's tenants only).
CREATE VIEW wfe.schedules WITH (security_invoker = true) AS
SELECT s.name, s.workflow, s.cron, s.time_zone, s.tenant, s.owner, s.paused, s.next_fire_at, s.last_fire_at,
       s.last_run_id, r.state AS last_run_state,
       s.overlap, s.catch_up, s.jitter_ms, s.priority, s.start_at, s.end_at, s.paused_reason, s.context
  FROM wfe.schedule_defs AS s
  LEFT JOIN wfe.runs AS r ON r.run_id = s.last_run_id
 ORDER BY s.tenant, s.name;
COMMENT ON VIEW wfe.schedules IS
'Schedules with their next and last firing and the last run''s state (only the tenants the reader acts for).';
GRANT SELECT ON wfe.schedules TO wfe_reader, wfe_operator;

-- The schedules' health: what fires next, what ran in the last hour, what was skipped or failed.
CREATE VIEW wfe.dashboard_schedules WITH (security_invoker = true) AS
SELECT s.tenant, s.name,
       CASE WHEN s.paused THEN 'paused' WHEN s.next_tick IS NULL THEN 'ended' ELSE 'active' END AS state,
       wfe.human_ms(extract(epoch FROM s.next_fire_at - now()) * 1000) AS next_in,
       wfe.human_ms(extract(epoch FROM now() - s.last_fire_at) * 1000) AS last_ago,
       r.state AS last_run,
       (SELECT count(*) FROM wfe.schedule_runs AS sr
         WHERE sr.schedule = s.name AND sr.scheduled_for >= now() - interval '1 hour') AS runs_1h,
       (SELECT count(*) FROM wfe.events AS e
         WHERE e.run_id IS NULL AND e.type = 'schedule.skipped' AND e.detail ->> 'schedule' = s.name
           AND e.at >= now() - interval '1 hour') AS skipped_1h,
       (SELECT count(*) FROM wfe.events AS e
         WHERE e.run_id IS NULL AND e.type = 'schedule.failed' AND e.detail ->> 'schedule' = s.name
           AND e.at >= now() - interval '1 hour') AS failed_1h,
       s.paused_reason
  FROM wfe.schedule_defs AS s
  LEFT JOIN wfe.runs AS r ON r.run_id = s.last_run_id
 ORDER BY s.tenant, s.name;
COMMENT ON VIEW wfe.dashboard_schedules IS
'Per schedule: active, paused or ended; next firing; last one and its run''s state; runs started, ticks skipped and failures in the last hour.';
GRANT SELECT ON wfe.dashboard_schedules TO wfe_reader, wfe_operator;

-- ---------------------------------------------------------------------
-- Redaction and trace context (issue 27; docs: operations.md "Redaction",
-- "Traces"): wfe.redact_keys applied to event rows (a trigger), reports and
-- spans; a trace id and span per run, a traceparent per attempt in the
-- envelope and in wfe.task; wfe.run_spans.
-- ---------------------------------------------------------------------
-- p_digits random lowercase hex digits (up to 32; from gen_random_uuid,
-- whose version digit is the 13th).
CREATE FUNCTION wfe._random_hex(p_digits int)
RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN right(replace(pg_catalog.gen_random_uuid()::text, '-', ''), p_digits);
COMMENT ON FUNCTION wfe._random_hex(int) IS
'Random lowercase hex digits (at most 32): new trace and span ids.';
REVOKE ALL ON FUNCTION wfe._random_hex(int) FROM PUBLIC;

-- A submitter's traceparent, read as W3C Trace Context says: version 00 is
-- exactly "00-<trace id>-<parent id>-<flags>"; a later version (not ff) may
-- carry more after a "-", which is ignored; ids are lowercase hex and not
-- all zero.  Only the sampled flag is passed on (the others are reserved:
-- a propagator sets them to zero).  Returns {trace id, parent id, flags}.
CREATE FUNCTION wfe._traceparent(p_value jsonb)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text[];
BEGIN
    IF jsonb_typeof(p_value) = 'string' THEN
        m := regexp_match(p_value #>> '{}', '^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$');
    END IF;
    IF m IS NULL OR m[1] = 'ff' OR (m[1] = '00' AND m[5] IS NOT NULL)
       OR m[2] = repeat('0', 32) OR m[3] = repeat('0', 16) THEN
        RAISE EXCEPTION 'option traceparent must be a W3C traceparent, not %', left(p_value::text, 80)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Write "00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>", ids not all zero.';
    END IF;
    RETURN ARRAY[m[2], m[3], CASE WHEN ('x' || m[4])::bit(8) & B'00000001' = B'00000001' THEN '01' ELSE '00' END];
END
$$;
COMMENT ON FUNCTION wfe._traceparent(jsonb) IS
'Reads a W3C traceparent (submit option): {trace id, parent span id, flags}, or 22023 naming the option.';
REVOKE ALL ON FUNCTION wfe._traceparent(jsonb) FROM PUBLIC;

-- The span id of a run's attempt: a child of the run's span.  NB: both
-- bodies are immutable (p_attempt::text: text || int is only stable), so
-- the planner inlines them into the claim; a function it cannot inline
-- is planned again at every claim (docs/benchmarks.md).
CREATE FUNCTION wfe._attempt_span_id(p_run_span text, p_stage text, p_attempt int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN left(md5(p_run_span || ':' || p_stage || ':' || p_attempt::text), 16);
COMMENT ON FUNCTION wfe._attempt_span_id(text, text, int) IS
'The span id of an attempt: derived from the run''s span id, the stage and the attempt number.';
REVOKE ALL ON FUNCTION wfe._attempt_span_id(text, text, int) FROM PUBLIC;

-- The traceparent a worker receives with an attempt (envelope, claim).
CREATE FUNCTION wfe._attempt_traceparent(p_trace_id text, p_run_span text, p_flags text,
                                         p_stage text, p_attempt int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '00-' || p_trace_id || '-' || wfe._attempt_span_id(p_run_span, p_stage, p_attempt) || '-' || p_flags;
COMMENT ON FUNCTION wfe._attempt_traceparent(text, text, text, text, int) IS
'The W3C traceparent of a run''s attempt: the run''s trace id and flags, the attempt''s span id.';
REVOKE ALL ON FUNCTION wfe._attempt_traceparent(text, text, text, text, int) FROM PUBLIC;

-- Runs 0.2.0 started get a trace of their own.
ALTER TABLE wfe.runs
    ADD COLUMN trace_id     text NOT NULL DEFAULT wfe._random_hex(32),
    ADD COLUMN span_id      text NOT NULL DEFAULT wfe._random_hex(16),
    ADD COLUMN trace_parent text,
    ADD COLUMN trace_flags  text NOT NULL DEFAULT '01';
COMMENT ON COLUMN wfe.runs.trace_id IS 'W3C trace id of the run: the submitter''s (option traceparent) or a new one';
COMMENT ON COLUMN wfe.runs.span_id IS 'Span id of the run''s span (wfe.run_spans); its attempts'' spans are its children';
COMMENT ON COLUMN wfe.runs.trace_parent IS 'Span id of the submitter''s span (option traceparent), the run span''s parent';
COMMENT ON COLUMN wfe.runs.trace_flags IS 'W3C trace flags passed on with the trace (the sampled bit)';
ALTER TYPE wfe.task ADD ATTRIBUTE traceparent text;
COMMENT ON TYPE wfe.task IS 'A claimed task: identity (run, stage, attempt, fence), what to run, its input and deadline, and the W3C traceparent of its attempt';

-- Redaction (docs: operations.md "Redaction"): the keys listed in
-- wfe.redact_keys never reach telemetry.  The rule is one C function
-- (src/pg/redact.c); the event log redacts as it is written, so the stored
-- rows, the projection on the outbox and every reader see the same detail;
-- wfe.report and wfe.run_spans redact the run data they show.

CREATE FUNCTION wfe._redact(p_doc jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_redact_sql'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION wfe._redact(jsonb) IS
'The document with the value of every key listed in wfe.redact_keys, at any depth, replaced by "[redacted]".';
REVOKE ALL ON FUNCTION wfe._redact(jsonb) FROM PUBLIC;

CREATE FUNCTION wfe._redact_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'wfe_redact_trigger'
LANGUAGE C;
COMMENT ON FUNCTION wfe._redact_trigger() IS
'BEFORE INSERT row trigger: redacts (wfe._redact) the jsonb column named by its argument.';
REVOKE ALL ON FUNCTION wfe._redact_trigger() FROM PUBLIC;

-- BEFORE triggers run before the AFTER one that projects the event onto
-- the outbox, which so copies the redacted row.
CREATE TRIGGER events_redact
    BEFORE INSERT ON wfe.events
    FOR EACH ROW EXECUTE FUNCTION wfe._redact_trigger('detail');
CREATE TRIGGER unauthenticated_callbacks_redact
    BEFORE INSERT ON wfe.unauthenticated_callbacks
    FOR EACH ROW EXECUTE FUNCTION wfe._redact_trigger('detail');

-- A run as OpenTelemetry spans (docs: operations.md "Traces"): OTLP/JSON
-- (the protobuf JSON mapping of TracesData: lowerCamelCase fields, trace
-- and span ids as lowercase hex, 64-bit integers and nanosecond times as
-- decimal strings, enums as numbers), so a collector's OTLP/HTTP receiver
-- takes it as it is.

-- One OTLP attribute: {"key", "value": {"stringValue" | "intValue"}}; NULL
-- values are left out by the caller (jsonb_strip_nulls would not do: an
-- attribute is an array element).
CREATE FUNCTION wfe._otlp_attribute(p_key text, p_value anyelement)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN p_value IS NOT NULL THEN
            jsonb_build_object('key', p_key, 'value',
                               CASE WHEN pg_typeof(p_value) IN ('bigint'::regtype, 'integer'::regtype)
                                    THEN jsonb_build_object('intValue', p_value::text)
                                    ELSE jsonb_build_object('stringValue', p_value::text) END) END
$$;
COMMENT ON FUNCTION wfe._otlp_attribute(text, anyelement) IS
'One OTLP/JSON KeyValue (intValue for integers, as a string; stringValue otherwise); NULL for a NULL value.';
REVOKE ALL ON FUNCTION wfe._otlp_attribute(text, anyelement) FROM PUBLIC;

-- Nanoseconds since the epoch, as OTLP/JSON writes a fixed64: a string.
CREATE FUNCTION wfe._otlp_time(p_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (extract(epoch FROM p_at) * 1000000000)::bigint::text;
COMMENT ON FUNCTION wfe._otlp_time(timestamptz) IS 'A time as OTLP/JSON''s timeUnixNano: nanoseconds since 1970 as a decimal string.';
REVOKE ALL ON FUNCTION wfe._otlp_time(timestamptz) FROM PUBLIC;

CREATE FUNCTION wfe.run_spans(run_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_spans.run_id);
    v_run   jsonb;
    v_tries jsonb;
BEGIN
    -- the run: SPAN_KIND_INTERNAL (1); status OK (1) when completed, ERROR (2)
    -- when failed or cancelled, UNSET (0) while it runs
    v_run := jsonb_strip_nulls(jsonb_build_object(
        'traceId', r.trace_id, 'spanId', r.span_id, 'parentSpanId', r.trace_parent,
        'name', 'wfe.run ' || r.workflow, 'kind', 1,
        'startTimeUnixNano', wfe._otlp_time(r.submitted_at),
        'endTimeUnixNano', wfe._otlp_time(coalesce(r.finished_at, now())),
        'attributes', jsonb_path_query_array(jsonb_build_array(
            wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.workflow', r.workflow),
            wfe._otlp_attribute('wfe.version', r.version), wfe._otlp_attribute('wfe.tenant', r.tenant),
            wfe._otlp_attribute('wfe.definition_digest', r.definition_digest),
            wfe._otlp_attribute('wfe.state', r.state), wfe._otlp_attribute('wfe.reason', r.reason)),
            '$[*] ? (@ != null)'),
        'status', jsonb_strip_nulls(jsonb_build_object(
            'code', CASE r.state WHEN 'completed' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 2 ELSE 0 END,
            'message', CASE WHEN r.state IN ('failed', 'cancelled') THEN coalesce(r.reason, r.state) END))));
    -- one span per attempt, as wfe.run_timeline finds them and their outcome
    -- (attempt 0, the result cache's bookkeeping, is no attempt):
    -- SPAN_KIND_PRODUCER (4), the work handed to a worker, whose own spans
    -- are children of this one (the envelope's and the claim's traceparent)
    SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'traceId', r.trace_id, 'spanId', wfe._attempt_span_id(r.span_id, t.stage, t.attempt),
               'parentSpanId', r.span_id,
               'name', 'wfe.attempt ' || t.stage, 'kind', 4,
               'startTimeUnixNano', wfe._otlp_time(t.started_at), 'endTimeUnixNano', wfe._otlp_time(t.finished_at),
               'attributes', jsonb_path_query_array(jsonb_build_array(
                   wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.stage', t.stage),
                   wfe._otlp_attribute('wfe.attempt', t.attempt), wfe._otlp_attribute('wfe.queue', s.queue),
                   wfe._otlp_attribute('wfe.outcome', t.outcome),
                   -- the stage keeps its last error whole; an earlier attempt's is its event's code
                   wfe._otlp_attribute('wfe.error', CASE
                       WHEN x.failed AND t.attempt = s.attempt AND s.error IS NOT NULL
                           THEN wfe._redact(s.error) #>> '{}'
                       WHEN x.failed
                           THEN wfe._redact(jsonb_build_object('error',
                                    (SELECT e.detail -> 'error' FROM wfe.events AS e
                                      WHERE e.run_id = r.run_id AND e.stage = t.stage AND e.attempt = t.attempt
                                        AND e.detail ? 'error'
                                      ORDER BY e.event_id DESC LIMIT 1))) #>> '{error}' END)),
                   '$[*] ? (@ != null)'),
               'status', jsonb_strip_nulls(jsonb_build_object(
                   'code', CASE WHEN t.outcome = 'completed' THEN 1 WHEN x.failed THEN 2 ELSE 0 END,
                   'message', CASE WHEN x.failed THEN t.outcome END))))
             ORDER BY t.n), '[]')
      INTO v_tries
      FROM wfe.run_timeline(r.run_id) WITH ORDINALITY AS t(stage, attempt, outcome, started_at, finished_at,
                                                          duration_ms, waterfall, n)
      JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = t.stage
      CROSS JOIN LATERAL (SELECT t.outcome IN ('failed', 'timed_out', 'retry_scheduled') AS failed) AS x
     WHERE t.attempt >= 1;
    RETURN jsonb_build_object('resourceSpans', jsonb_build_array(jsonb_build_object(
        'resource', jsonb_build_object('attributes', jsonb_build_array(
            wfe._otlp_attribute('service.name', 'wfe'::text),
            wfe._otlp_attribute('service.version', r.engine_version))),
        'scopeSpans', jsonb_build_array(jsonb_build_object(
            'scope', jsonb_build_object('name', 'wfe', 'version', r.engine_version),
            'spans', jsonb_build_array(v_run) || v_tries)))));
END
$$;
COMMENT ON FUNCTION wfe.run_spans(bigint) IS
'The run as OTLP/JSON resourceSpans: a span for the run and one per attempt (its children), with wfe.redact_keys applied to the attributes.';
REVOKE ALL ON FUNCTION wfe.run_spans(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_spans(bigint) TO wfe_submitter, wfe_operator, wfe_reader;

-- ---------------------------------------------------------------------
-- wfe_task_ready carries a keyed tag of the queue, not its name (issue 20,
-- item 11; 61_runtime_core.sql, 65_workers.sql, src/pg/ready_tag.c).
CREATE TABLE wfe.ready_key (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    key bytea NOT NULL CHECK (octet_length(key) BETWEEN 16 AND 1024)
);
COMMENT ON TABLE wfe.ready_key IS
'The per-database HMAC-SHA256 key of wfe_task_ready payloads (a queue''s tag, never its name). Readable by no wfe role.';
REVOKE ALL ON wfe.ready_key FROM PUBLIC;
INSERT INTO wfe.ready_key (key)
VALUES (pg_catalog.sha256(pg_catalog.convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')));

CREATE FUNCTION wfe._ready_key_changed()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_ready_key_changed' LANGUAGE C;
COMMENT ON FUNCTION wfe._ready_key_changed() IS
'Trigger: every backend forgets its cached wfe_task_ready key when this transaction commits.';
REVOKE ALL ON FUNCTION wfe._ready_key_changed() FROM PUBLIC;
CREATE TRIGGER ready_key_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wfe.ready_key
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._ready_key_changed();

CREATE FUNCTION wfe._ready_tag(p_queue text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_ready_tag_internal'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION wfe._ready_tag(text) IS
'The wfe_task_ready payload of a queue: lowercase hex HMAC-SHA256 of its name under wfe.ready_key. Internal.';
REVOKE ALL ON FUNCTION wfe._ready_tag(text) FROM PUBLIC;

CREATE FUNCTION wfe.ready_tag(queue text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_ready_tag_sql'
LANGUAGE C STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.ready_tag(text) IS
'The payload a wfe_task_ready notification carries for a poll queue the caller may claim from (a keyed tag: the name is never sent); 42501 for any other queue.';
REVOKE ALL ON FUNCTION wfe.ready_tag(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.ready_tag(text) TO wfe_worker;

-- ---------------------------------------------------------------------
-- Leases in broker mode (issue 26): accept_task takes the worker's lease,
-- renewed by heartbeats like a claim's (65_workers.sql, src/pg/engine.c).
DROP FUNCTION wfe.accept_task(bigint, text, int, bigint, text);
CREATE FUNCTION wfe.accept_task(run_id bigint, stage text, attempt int, fence bigint, worker_id text,
                                lease_ms int DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_accept_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt, under lease_ms (renewed by heartbeats) if given; a redelivery answers duplicate.';
REVOKE ALL ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) TO wfe_worker;

-- ---------------------------------------------------------------------
-- Rate limits (issue 24): token buckets, held attempts out of the ready
-- index (60_runtime_tables.sql, 78_rate_limits.sql, src/pg/ratelimit.c,
-- src/pg/claim.c), ratelimit.unknown (30_compiler.sql), dashboard_stuck.
ALTER TABLE wfe.run_stages
    ADD COLUMN rate_limit text,
    ADD COLUMN rate_key   text,
    ADD COLUMN held_until timestamptz;
GRANT SELECT (rate_limit, rate_key, held_until) ON wfe.run_stages TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.run_stages.rate_limit IS
'The token bucket (wfe.rate_limits) each attempt takes a token from before it is claimed; NULL: none.';
COMMENT ON COLUMN wfe.run_stages.rate_key IS
'The bound key of a keyed rate limit: the attempt''s bucket is (rate_limit, tenant, rate_key).';
COMMENT ON COLUMN wfe.run_stages.held_until IS
'A queued attempt held by its rate limit until then (infinity: its bucket is not configured); NULL: ready.';
-- The held attempts, by when they are due (the worker's timer, wfe._release_rate_held).
CREATE INDEX run_stages_held ON wfe.run_stages (held_until) WHERE held_until IS NOT NULL;
-- an attempt a rate limit holds is not ready
DROP INDEX wfe.run_stages_ready;
CREATE INDEX run_stages_ready ON wfe.run_stages (queue, priority DESC, ready_at)
    WHERE state = 'queued' AND held_until IS NULL;
CREATE TABLE wfe.rate_limits (
    name       text PRIMARY KEY,
    per_second double precision NOT NULL CONSTRAINT rate_limits_rate CHECK (per_second > 0),
    burst      int NOT NULL CONSTRAINT rate_limits_burst CHECK (burst >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT wfe._identity()
);
COMMENT ON TABLE wfe.rate_limits IS
'Token buckets stages name with rate_limit: per_second tokens a second, at most burst at once.';
GRANT SELECT ON wfe.rate_limits TO wfe_reader, wfe_operator;
SELECT pg_catalog.pg_extension_config_dump('wfe.rate_limits', '');

-- The buckets' state.  The unkeyed bucket of a limit is (name, '', '') and
-- shared by all tenants; a keyed one is per tenant and key value, so one
-- tenant's keys never drain (or show) another's.  No role reads this table:
-- key values come from runs' data.
CREATE TABLE wfe.rate_buckets (
    name         text NOT NULL REFERENCES wfe.rate_limits ON DELETE CASCADE,
    tenant       text NOT NULL,
    key          text NOT NULL,
    tokens       double precision NOT NULL,
    at           timestamptz NOT NULL,
    held_through timestamptz,
    PRIMARY KEY (name, tenant, key)
);
COMMENT ON TABLE wfe.rate_buckets IS
'The state of each token bucket: tokens as of at, and the due of the last attempt held (held_through).  Keyed buckets are per tenant; readable by no wfe role.';
REVOKE ALL ON wfe.rate_buckets FROM PUBLIC;

CREATE FUNCTION wfe._rate_buckets_reset(p_name text, p_drop boolean)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_rate_buckets_reset' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._rate_buckets_reset(text, boolean) IS
'configure_rate_limit''s part in shared memory: the limit''s buckets forget their held horizon, or are dropped.';
REVOKE ALL ON FUNCTION wfe._rate_buckets_reset(text, boolean) FROM PUBLIC;

CREATE FUNCTION wfe._rate_buckets_count(p_name text, p_tenant text)
RETURNS int AS 'MODULE_PATHNAME', 'wfe_rate_buckets_count' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._rate_buckets_count(text, text) IS
'How many buckets of a rate limit shared memory holds (a tenant''s keyed ones and its overflow bucket; all with NULL); NULL without shared memory.';
REVOKE ALL ON FUNCTION wfe._rate_buckets_count(text, text) FROM PUBLIC;

CREATE FUNCTION wfe.configure_rate_limit(name text, per_second numeric, burst int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_burst int;
    v_queue text;
BEGIN
    IF configure_rate_limit.name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(configure_rate_limit.name, 'rate limit name');
    IF configure_rate_limit.name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
        RAISE EXCEPTION 'rate limit name "%" is not valid', configure_rate_limit.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use letters, digits, ".", "_" and "-", starting with a letter or digit.';
    END IF;
    IF configure_rate_limit.per_second IS NULL THEN
        -- dropped: its queued attempts wait until it is configured again
        PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, true);
        UPDATE wfe.run_stages AS st SET held_until = 'infinity'
         WHERE st.rate_limit = configure_rate_limit.name AND st.state = 'queued';
        DELETE FROM wfe.rate_limits AS l WHERE l.name = configure_rate_limit.name;
        RETURN;
    END IF;
    IF configure_rate_limit.per_second <= 0 THEN
        RAISE EXCEPTION 'per_second must be positive, not %', configure_rate_limit.per_second
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL drops the rate limit.';
    END IF;
    IF configure_rate_limit.burst < 1 THEN
        RAISE EXCEPTION 'burst must be at least 1, not %', configure_rate_limit.burst
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL is one second''s tokens (at least 1).';
    END IF;
    v_burst := coalesce(configure_rate_limit.burst, greatest(1, ceil(configure_rate_limit.per_second))::int);
    INSERT INTO wfe.rate_limits AS l (name, per_second, burst)
    VALUES (configure_rate_limit.name, configure_rate_limit.per_second, v_burst)
    ON CONFLICT (name) DO UPDATE
       SET per_second = excluded.per_second, burst = excluded.burst,
           updated_at = now(), updated_by = wfe._identity();
    -- a new bucket starts full; a changed one keeps its tokens, within the new burst
    INSERT INTO wfe.rate_buckets AS b (name, tenant, key, tokens, at)
    VALUES (configure_rate_limit.name, '', '', v_burst, now())
    ON CONFLICT (name, tenant, key) DO NOTHING;
    UPDATE wfe.rate_buckets AS b SET tokens = least(b.tokens, v_burst), held_through = NULL
     WHERE b.name = configure_rate_limit.name;
    PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, false);
    -- what waited for it (or for the old rate) is tried again now
    FOR v_queue IN WITH x AS (UPDATE wfe.run_stages AS st SET held_until = NULL
                               WHERE st.rate_limit = configure_rate_limit.name AND st.held_until IS NOT NULL
                               RETURNING st.queue)
                   SELECT DISTINCT x.queue FROM x
    LOOP
        PERFORM wfe._notify_ready(v_queue);
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe.configure_rate_limit(text, numeric, int) IS
'Creates or changes a token bucket: per_second tokens a second, at most burst (default one second''s, at least 1); per_second NULL drops it.';
REVOKE ALL ON FUNCTION wfe.configure_rate_limit(text, numeric, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_rate_limit(text, numeric, int) TO wfe_admin;

CREATE FUNCTION wfe._release_rate_held(p_max int)
RETURNS int AS 'MODULE_PATHNAME', 'wfe_release_rate_held' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._release_rate_held(int) IS
'Makes up to p_max attempts whose rate-limit token is due ready again, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
REVOKE ALL ON FUNCTION wfe._release_rate_held(int) FROM PUBLIC;


CREATE FUNCTION wfe._rate_limit_warnings(p_result jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- plpgsql: wfe.rate_limits comes later in the script (78_rate_limits.sql)
    RETURN (SELECT CASE WHEN w.list IS NULL THEN p_result
                ELSE jsonb_set(p_result, '{diagnostics}', (p_result -> 'diagnostics') || w.list) END
      FROM (SELECT jsonb_agg(jsonb_build_object(
                       'code', 'ratelimit.unknown', 'severity', 'warning',
                       'message', format('rate limit "%s" is not configured: its attempts wait until wfe.configure_rate_limit creates it',
                                         s.value -> 'rate_limit' ->> 'name'),
                       'path', format('/%s/%s/rate_limit',
                                      CASE WHEN p_result -> 'plan' ->> 'form' = 'tasks' THEN 'tasks' ELSE 'stages' END,
                                      s.n - 1),
                       'line', NULL, 'column', NULL) ORDER BY s.n) AS list
              FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_result -> 'plan' -> 'stages') = 'array'
                                             THEN p_result -> 'plan' -> 'stages' ELSE '[]' END)
                   WITH ORDINALITY AS s(value, n)
             WHERE s.value -> 'rate_limit' ->> 'name' IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM wfe.rate_limits AS l
                                WHERE l.name = s.value -> 'rate_limit' ->> 'name')) AS w);
END
$$;
COMMENT ON FUNCTION wfe._rate_limit_warnings(jsonb) IS
'Adds a ratelimit.unknown warning to a compile result for each stage naming a rate limit that is not configured.';
REVOKE ALL ON FUNCTION wfe._rate_limit_warnings(jsonb) FROM PUBLIC;

CREATE OR REPLACE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       -- (by attempt: the view runs as its reader, who may not see fences)
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- held by a rate limit until its token is due, or naming none configured (78_rate_limits.sql)
    SELECT CASE WHEN st.held_until = 'infinity' THEN 'rate limit unknown' ELSE 'rate limited' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.rate_limit || CASE WHEN st.held_until = 'infinity' THEN ' is not configured'
                                 ELSE ' token due in '
                                      || wfe.human_ms(greatest(0, extract(epoch FROM st.held_until - now()) * 1000))
                            END
      FROM wfe.run_stages AS st
     WHERE st.held_until IS NOT NULL AND st.state = 'queued'
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, attempts a rate limit holds, dispatches unpublished for a minute, open dead letters.';

-- Run output (issue 22; dsl.md "Run output"): the top-level `output:`
-- template bound at a completed intent, shown by wfe.report.
ALTER TABLE wfe.runs ADD COLUMN output jsonb;
COMMENT ON COLUMN wfe.runs.output IS 'The run''s output (dsl.md "Run output"), bound when it reached a completed intent; NULL before';

-- ---------------------------------------------------------------------
-- Run commands from RabbitMQ (issue 23): ingresses, put_payload, the
-- dashboard (85_ingress.sql, src/bgw/ingress.c, src/pg/submit_as.c).
-- Run commands from RabbitMQ (docs: delivery.md "Run commands from
-- RabbitMQ"): seed 004's envelope, consumed by the background worker from
-- wfe.ingress.NAME (src/bgw/ingress.c) and submitted here, as the
-- ingress's role, in the transaction whose commit the ack waits for.

-- The configured ingresses: one queue each, and the role its commands act as.
CREATE TABLE wfe.ingresses (
    name       text PRIMARY KEY CONSTRAINT ingresses_name CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    role       regrole NOT NULL,
    options    jsonb NOT NULL DEFAULT '{}',
    created_by name NOT NULL DEFAULT session_user,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.ingresses IS
'Run-command ingresses: the background worker consumes wfe.ingress.NAME and submits each command as role';
GRANT SELECT ON wfe.ingresses TO wfe_admin, wfe_operator;

-- What each ingress did with the commands it took: submitted, duplicate or
-- rejected (with the SQLSTATE as reason), counted in the transaction that did it.
CREATE TABLE wfe.ingress_counts (
    ingress text NOT NULL REFERENCES wfe.ingresses ON DELETE CASCADE,
    outcome text NOT NULL CONSTRAINT ingress_counts_outcome CHECK (outcome IN ('submitted', 'duplicate', 'rejected')),
    reason  text NOT NULL DEFAULT '',
    n       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (ingress, outcome, reason)
);
COMMENT ON TABLE wfe.ingress_counts IS
'Per ingress: commands submitted, duplicates (accepted = false) and rejected by SQLSTATE';

-- Large-track inputs stored ahead of their command (wfe.put_payload), for
-- the tenants their uploader acted for then (NULL: every tenant).
CREATE TABLE wfe.ingress_payloads (
    key        text PRIMARY KEY,
    tenants    text[],
    sha256     text NOT NULL CONSTRAINT ingress_payloads_sha256 CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    body       jsonb NOT NULL,
    created_by name NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.ingress_payloads IS
'Inputs of large-track run commands, by the key wfe.put_payload returned; a command''s payload_ref must name one of its tenant with the same SHA-256';

-- How the submit in progress came (set only by wfe._ingress_submit_as).
CREATE FUNCTION wfe._submit_via()
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_submit_via'
LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._submit_via() IS
'How the submit in progress came, for its run.submitted event: {"via": "amqp", "ingress", "message_id", "correlation_id"}, or {} for a SQL call.';
REVOKE ALL ON FUNCTION wfe._submit_via() FROM PUBLIC;

CREATE FUNCTION wfe._ingress_submit_as(role regrole, tenant text, workflow text, context jsonb, key text,
                                       options jsonb, via jsonb, OUT run_id bigint, OUT accepted boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'wfe_ingress_submit_as'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._ingress_submit_as(regrole, text, text, jsonb, text, jsonb, jsonb) IS
'wfe.submit as role (its tenant membership, limits and identity apply), via recorded in run.submitted; NULLs when role does not act for tenant.';
REVOKE ALL ON FUNCTION wfe._ingress_submit_as(regrole, text, text, jsonb, text, jsonb, jsonb) FROM PUBLIC;

CREATE FUNCTION wfe.configure_ingress(name text, role name, options jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_role regrole;
    v_bad  text;
BEGIN
    IF configure_ingress.name IS NULL OR configure_ingress.name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid ingress name "%"', configure_ingress.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An ingress name is 1 to 63 lowercase letters, digits, "_" or "-" (it names the queue wfe.ingress.NAME).';
    END IF;
    IF configure_ingress.role IS NULL THEN
        DELETE FROM wfe.ingresses AS i WHERE i.name = configure_ingress.name;
        RETURN;
    END IF;
    SELECT r.oid::regrole INTO v_role FROM pg_catalog.pg_roles AS r WHERE r.rolname = configure_ingress.role;
    IF v_role IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', configure_ingress.role USING ERRCODE = 'undefined_object';
    END IF;
    -- a superuser acts for every tenant: a command could name any of them
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = v_role)
       OR pg_catalog.pg_has_role(v_role, 'wfe_admin', 'USAGE') THEN
        RAISE EXCEPTION 'an ingress must not act as "%", which acts for every tenant', configure_ingress.role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Create a role with wfe_submitter, map it to the tenants its commands may name (wfe.add_tenant_member), and use it.';
    END IF;
    IF NOT pg_catalog.pg_has_role(v_role, 'wfe_submitter', 'USAGE') THEN
        RAISE EXCEPTION 'role "%" cannot submit runs', configure_ingress.role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'GRANT wfe_submitter TO the role.';
    END IF;
    IF jsonb_typeof(coalesce(configure_ingress.options, '{}')) <> 'object' THEN
        RAISE EXCEPTION 'ingress options must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(coalesce(configure_ingress.options, '{}')) AS k
     WHERE k <> 'workflows';
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown ingress option: %', v_bad
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The option is workflows (an array of the workflow names its commands may start).';
    END IF;
    IF configure_ingress.options ? 'workflows' AND
       (jsonb_typeof(configure_ingress.options -> 'workflows') <> 'array' OR
        EXISTS (SELECT 1 FROM jsonb_array_elements(configure_ingress.options -> 'workflows') AS w
                 WHERE jsonb_typeof(w) <> 'string')) THEN
        RAISE EXCEPTION 'ingress option workflows must be an array of workflow names'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.ingresses AS i (name, role, options)
    VALUES (configure_ingress.name, v_role, coalesce(configure_ingress.options, '{}'))
    ON CONFLICT (name) DO UPDATE
       SET role = EXCLUDED.role, options = EXCLUDED.options, created_by = session_user, updated_at = now();
END
$$;
COMMENT ON FUNCTION wfe.configure_ingress(text, name, jsonb) IS
'Has the background worker consume run commands from wfe.ingress.NAME and submit them as role; role NULL drops the ingress.';
REVOKE ALL ON FUNCTION wfe.configure_ingress(text, name, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_ingress(text, name, jsonb) TO wfe_admin;

CREATE FUNCTION wfe.put_payload(body jsonb)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key text := pg_catalog.gen_random_uuid()::text;
BEGIN
    IF put_payload.body IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit(put_payload.body, 'payload');
    IF jsonb_typeof(put_payload.body) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object (a run''s context), not %', jsonb_typeof(put_payload.body)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wfe.ingress_payloads (key, tenants, sha256, body, created_by)
    VALUES (v_key, wfe.my_tenants(), wfe.payload_sha256(put_payload.body), put_payload.body, wfe._identity());
    RETURN v_key;
END
$$;
COMMENT ON FUNCTION wfe.put_payload(jsonb) IS
'Stores a large-track run command''s input for the tenants the caller acts for; returns the key its payload_ref names (with sha256 = wfe.payload_sha256(body)).';
REVOKE ALL ON FUNCTION wfe.put_payload(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.put_payload(jsonb) TO wfe_submitter;

-- The SHA-256 a payload_ref carries: of the body's jsonb text, in hex.
CREATE FUNCTION wfe.payload_sha256(body jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(body::text, 'UTF8')), 'hex');
END;
COMMENT ON FUNCTION wfe.payload_sha256(jsonb) IS
'The sha256 a payload_ref names for body (wfe.put_payload): hex SHA-256 of its jsonb text.';
REVOKE ALL ON FUNCTION wfe.payload_sha256(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.payload_sha256(jsonb) TO wfe_submitter;

-- Count one command's outcome for an ingress.
CREATE FUNCTION wfe._ingress_count(p_ingress text, p_outcome text, p_reason text DEFAULT '')
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.ingress_counts AS c (ingress, outcome, reason, n)
    SELECT i.name, p_outcome, p_reason, 1 FROM wfe.ingresses AS i WHERE i.name = p_ingress
    ON CONFLICT (ingress, outcome, reason) DO UPDATE SET n = c.n + 1;
END;
COMMENT ON FUNCTION wfe._ingress_count(text, text, text) IS
'Counts one command of an ingress: submitted, duplicate, or rejected with its SQLSTATE as reason.';
REVOKE ALL ON FUNCTION wfe._ingress_count(text, text, text) FROM PUBLIC;

-- Raise 22023 about an envelope's field.
CREATE FUNCTION wfe._envelope_error(p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'not a run command envelope: %', p_what
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'See delivery.md "Run commands from RabbitMQ" for the envelope''s fields.';
END
$$;
COMMENT ON FUNCTION wfe._envelope_error(text) IS
'Raises 22023 naming what is wrong with a run command''s envelope.';
REVOKE ALL ON FUNCTION wfe._envelope_error(text) FROM PUBLIC;

-- The string field of an envelope (or object) p, or 22023.
CREATE FUNCTION wfe._envelope_string(p jsonb, p_field text, p_where text DEFAULT '')
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(p -> p_field) IS DISTINCT FROM 'string' OR p ->> p_field = '' THEN
        PERFORM wfe._envelope_error(format('%s%s must be a non-empty string', p_where, p_field));
    END IF;
    RETURN p ->> p_field;
END
$$;
COMMENT ON FUNCTION wfe._envelope_string(jsonb, text, text) IS
'The non-empty string field of a run command''s envelope, or 22023 naming it.';
REVOKE ALL ON FUNCTION wfe._envelope_string(jsonb, text, text) FROM PUBLIC;

-- One run command of ingress p_ingress (the message body): validated, its
-- payload resolved, submitted as the ingress's role and counted; with the
-- envelope's correlation_id, for the reply.  Raises for a command to
-- reject (the SQLSTATE becomes x-wfe-error).
CREATE FUNCTION wfe._ingress_submit(p_ingress text, p_body text, OUT run_id bigint, OUT accepted boolean,
                                    OUT correlation_id text)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    i        wfe.ingresses;
    e        jsonb;
    p        wfe.ingress_payloads;
    v_bad    text;
    v_track  text;
    v_tenant text;
    v_flow   text;
    v_ctx    jsonb;
    v_ref    jsonb;
    v_opts   jsonb;
    v_key    text;
BEGIN
    SELECT * INTO i FROM wfe.ingresses AS x WHERE x.name = p_ingress;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ingress "%" is not configured', p_ingress USING ERRCODE = 'undefined_object';
    END IF;
    BEGIN
        e := p_body::jsonb;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character OR character_not_in_repertoire THEN
        RAISE EXCEPTION 'a run command must be a JSON envelope: the message body is not JSON'
            USING ERRCODE = 'invalid_text_representation';
    END;
    PERFORM wfe._admit(e, 'run command');
    IF jsonb_typeof(e) <> 'object' THEN
        PERFORM wfe._envelope_error('the body is a JSON ' || jsonb_typeof(e) || ', not an object');
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(e) AS k
     WHERE k NOT IN ('message_id', 'correlation_id', 'workflow_name', 'track', 'headers', 'idempotency_key',
                     'payload_inline', 'payload_ref', 'created_at', 'options');
    IF v_bad IS NOT NULL THEN
        PERFORM wfe._envelope_error('unknown field ' || v_bad);
    END IF;
    PERFORM wfe._envelope_string(e, 'message_id');
    correlation_id := wfe._envelope_string(e, 'correlation_id');
    v_flow := wfe._envelope_string(e, 'workflow_name');
    v_track := wfe._envelope_string(e, 'track');
    IF v_track NOT IN ('small', 'large') THEN
        PERFORM wfe._envelope_error('track must be "small" or "large"');
    END IF;
    IF jsonb_typeof(e -> 'headers') IS DISTINCT FROM 'object' THEN
        PERFORM wfe._envelope_error('headers must be an object');
    END IF;
    IF wfe._envelope_string(e -> 'headers', 'content_type', 'headers.') <> 'application/json' THEN
        PERFORM wfe._envelope_error('headers.content_type must be "application/json"');
    END IF;
    PERFORM wfe._envelope_string(e -> 'headers', 'source', 'headers.');
    v_tenant := wfe._envelope_string(e -> 'headers', 'tenant', 'headers.');
    IF jsonb_typeof(e -> 'idempotency_key') NOT IN ('string', 'null') THEN
        PERFORM wfe._envelope_error('idempotency_key must be a string');
    END IF;
    BEGIN
        PERFORM wfe._envelope_string(e, 'created_at')::timestamptz;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        PERFORM wfe._envelope_error('created_at must be a timestamp');
    END;
    -- exactly one payload; the small track carries it inline, the large by reference
    IF jsonb_typeof(e -> 'payload_inline') IS NOT NULL AND jsonb_typeof(e -> 'payload_inline') <> 'null'
       AND jsonb_typeof(e -> 'payload_ref') IS NOT NULL AND jsonb_typeof(e -> 'payload_ref') <> 'null' THEN
        PERFORM wfe._envelope_error('it has both payload_inline and payload_ref');
    END IF;
    IF v_track = 'small' THEN
        IF jsonb_typeof(e -> 'payload_inline') IS DISTINCT FROM 'object' THEN
            PERFORM wfe._envelope_error('track "small" requires payload_inline, an object');
        END IF;
        v_ctx := e -> 'payload_inline';
    ELSE
        v_ref := e -> 'payload_ref';
        IF jsonb_typeof(v_ref) IS DISTINCT FROM 'object' THEN
            PERFORM wfe._envelope_error('track "large" requires payload_ref, an object');
        END IF;
        IF v_ref ? 'bucket' AND v_ref -> 'bucket' NOT IN ('"wfe"', 'null') THEN
            PERFORM wfe._envelope_error('payload_ref.bucket must be "wfe" (a wfe.put_payload key)');
        END IF;
        SELECT * INTO p FROM wfe.ingress_payloads AS x
         WHERE x.key = wfe._envelope_string(v_ref, 'key', 'payload_ref.');
        -- another tenant's key is answered as a key that does not exist
        IF NOT FOUND OR NOT (p.tenants IS NULL OR v_tenant = ANY (p.tenants)) THEN
            RAISE EXCEPTION 'payload_ref names no payload of tenant "%"', v_tenant
                USING ERRCODE = 'undefined_object',
                      HINT = 'Store the input with wfe.put_payload as a role of that tenant and name the key it returns.';
        END IF;
        IF wfe._envelope_string(v_ref, 'sha256', 'payload_ref.') <> p.sha256 THEN
            RAISE EXCEPTION 'payload_ref''s sha256 does not match payload "%"', p.key
                USING ERRCODE = 'data_corrupted',
                      HINT = 'sha256 is wfe.payload_sha256 of the stored body.';
        END IF;
        v_ctx := p.body;
    END IF;
    v_opts := jsonb_build_object('tenant', v_tenant);
    IF e ? 'options' AND jsonb_typeof(e -> 'options') <> 'null' THEN
        IF jsonb_typeof(e -> 'options') <> 'object' THEN
            PERFORM wfe._envelope_error('options must be an object');
        END IF;
        SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(e -> 'options') AS k
         WHERE k NOT IN ('priority', 'not_before', 'traceparent');
        IF v_bad IS NOT NULL THEN
            PERFORM wfe._envelope_error('unknown option ' || v_bad || ' (options are priority, not_before, traceparent)');
        END IF;
        v_opts := v_opts || (e -> 'options');
    END IF;
    IF i.options ? 'workflows' AND NOT (i.options -> 'workflows') ? regexp_replace(v_flow, '@[^@]*$', '') THEN
        RAISE EXCEPTION 'ingress "%" does not start workflow "%"', i.name, v_flow
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Its option workflows lists the workflows its commands may start.';
    END IF;
    -- the role may have lost the right to submit since the ingress was configured
    IF NOT pg_catalog.pg_has_role(i.role, 'wfe_submitter', 'USAGE') THEN
        RAISE EXCEPTION 'role "%" of ingress "%" cannot submit runs', i.role, i.name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    v_key := coalesce(e ->> 'idempotency_key', e ->> 'message_id');
    SELECT x.run_id, x.accepted INTO run_id, accepted
      FROM wfe._ingress_submit_as(i.role, v_tenant, v_flow, v_ctx, v_key, v_opts,
                                  jsonb_build_object('via', 'amqp', 'ingress', i.name,
                                                     'message_id', e ->> 'message_id',
                                                     'correlation_id', e ->> 'correlation_id')) AS x;
    IF run_id IS NULL THEN
        RAISE EXCEPTION 'role "%" of ingress "%" does not act for tenant "%"', i.role, i.name, v_tenant
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps the role to the tenant with wfe.add_tenant_member(role, tenant).';
    END IF;
    PERFORM wfe._ingress_count(i.name, CASE WHEN accepted THEN 'submitted' ELSE 'duplicate' END);
END
$$;
COMMENT ON FUNCTION wfe._ingress_submit(text, text) IS
'Validates a run command (seed 004''s envelope) of an ingress and submits it as the ingress''s role; raises for a command to reject.';
REVOKE ALL ON FUNCTION wfe._ingress_submit(text, text) FROM PUBLIC;

-- The configured ingresses' names, for the background worker.
CREATE FUNCTION wfe._ingress_names()
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(array_agg(i.name ORDER BY i.name), '{}') FROM wfe.ingresses AS i;
END;
COMMENT ON FUNCTION wfe._ingress_names() IS
'The ingresses the background worker consumes.';
REVOKE ALL ON FUNCTION wfe._ingress_names() FROM PUBLIC;

-- Per ingress: commands received, submitted, duplicates, rejected (and by reason).
CREATE VIEW wfe.dashboard_ingress AS
SELECT i.name AS ingress, i.role,
       coalesce(sum(c.n), 0)::bigint AS received,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'submitted'), 0)::bigint AS submitted,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'duplicate'), 0)::bigint AS duplicates,
       coalesce(sum(c.n) FILTER (WHERE c.outcome = 'rejected'), 0)::bigint AS rejected,
       coalesce(jsonb_object_agg(c.reason, c.n) FILTER (WHERE c.outcome = 'rejected'), '{}') AS rejected_by_reason
  FROM wfe.ingresses AS i
  LEFT JOIN wfe.ingress_counts AS c ON c.ingress = i.name
 GROUP BY i.name, i.role
 ORDER BY i.name;
COMMENT ON VIEW wfe.dashboard_ingress IS
'Per ingress: run commands received, submitted, duplicates (accepted = false) and rejected, by reason (SQLSTATE).';
GRANT SELECT ON wfe.dashboard_ingress TO wfe_admin, wfe_operator;

-- ---------------------------------------------------------------------
-- Run commands' stored inputs are kept for the retention (issue 23):
-- wfe._retention (its new text is in the final bodies) removes
-- wfe.ingress_payloads older than wfe.retention, used or not, by this index.
-- ---------------------------------------------------------------------
CREATE INDEX ingress_payloads_created_at ON wfe.ingress_payloads (created_at);
-- ---------------------------------------------------------------------
-- set_priority (issue 24; operations.md "Flow control"): a run's priority
-- changed while it runs (79_priority.sql).
CREATE FUNCTION wfe.set_priority(run_id bigint, priority int)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs;
BEGIN
    IF set_priority.run_id IS NULL OR set_priority.priority IS NULL THEN
        RAISE EXCEPTION 'run_id and priority must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF set_priority.priority NOT BETWEEN -1000000 AND 1000000 THEN
        RAISE EXCEPTION 'priority must be an integer between -1000000 and 1000000, not %', set_priority.priority
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Higher runs first; submit''s default is 0.';
    END IF;
    r := wfe._run(set_priority.run_id);
    -- the run row first, as every writer of a run (one lock order)
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = r.run_id FOR NO KEY UPDATE;
    IF r.finished_at IS NOT NULL THEN
        RAISE EXCEPTION 'cannot set the priority of run %: it is %', r.run_id, r.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a run that has not ended has work to reorder.';
    END IF;
    IF r.priority = set_priority.priority THEN
        RETURN;
    END IF;
    UPDATE wfe.runs AS x SET priority = set_priority.priority WHERE x.run_id = r.run_id;
    UPDATE wfe.run_stages AS st SET priority = set_priority.priority
     WHERE st.run_id = r.run_id AND st.priority <> set_priority.priority;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.priority_set',
                       jsonb_build_object('by', wfe._identity(), 'from', r.priority, 'to', set_priority.priority));
END
$$;
COMMENT ON FUNCTION wfe.set_priority(bigint, int) IS
'Changes a run''s priority (-1000000 .. 1000000, higher first): its queued work, and what it releases later, is claimed in the new order; event run.priority_set.';
REVOKE ALL ON FUNCTION wfe.set_priority(bigint, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.set_priority(bigint, int) TO wfe_operator;

-- ---------------------------------------------------------------------
-- 0.3.0, child runs (issue 22 item 3; runtime.md "Child runs"): a
-- workflow stage's attempt starts a child run, linked both ways
-- (wfe.runs.parent_run_id, parent_stage, parent_attempt; report's parent
-- and children; run_timeline's child_run_id; run_mermaid); the child's end
-- reaches its parent through a child_ended timer; the compiler sees the
-- workflows (wfe._contracts_json, in the final bodies).
-- ---------------------------------------------------------------------
ALTER TABLE wfe.plan_stages DROP CONSTRAINT plan_stages_type,
    ADD CONSTRAINT plan_stages_type
        CHECK (type IN ('action', 'worker', 'decision', 'fork', 'join', 'finaliser', 'wait', 'sleep',
                        'workflow'));
COMMENT ON COLUMN wfe.plan_stages.type IS 'action, worker, decision, fork, join, wait, sleep, workflow, or finaliser';
ALTER TABLE wfe.runs ADD COLUMN parent_run_id bigint,
    ADD COLUMN parent_stage text,
    ADD COLUMN parent_attempt int,
    ADD CONSTRAINT runs_parent CHECK ((parent_run_id IS NULL) = (parent_stage IS NULL)
                                      AND (parent_run_id IS NULL) = (parent_attempt IS NULL));
COMMENT ON COLUMN wfe.runs.parent_run_id IS 'A child run (runtime.md "Child runs"): the run whose workflow stage started it; NULL for a submitted run';
COMMENT ON COLUMN wfe.runs.parent_stage IS 'A child run: the parent''s workflow stage that started it';
COMMENT ON COLUMN wfe.runs.parent_attempt IS 'A child run: the attempt of the parent''s stage that started it';
CREATE INDEX runs_parent ON wfe.runs (parent_run_id, parent_stage) WHERE parent_run_id IS NOT NULL;
ALTER TABLE wfe.timers DROP CONSTRAINT timers_kind,
    ADD CONSTRAINT timers_kind CHECK (kind IN ('retry', 'not_before', 'run_deadline', 'cache_ready',
                                               'wait_timeout', 'sleep', 'child_ended'));
COMMENT ON TABLE wfe.timers IS 'Durable timers: retry delays, delayed starts (not_before), run deadlines, a cached stage''s wake-up when the attempt it waited on ended (cache_ready), a wait''s timeout (wait_timeout), a sleep''s end (sleep), a child run''s end for its parent''s workflow stage (child_ended)';

-- The contract versions a run of a plan pins: {ref: {"kind", "queue", "handler"}}.
CREATE FUNCTION wfe._run_contracts(p_plan jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(jsonb_object_agg(c.ref, jsonb_build_object('kind', c.kind, 'queue', c.queue,
                                                               'handler', c.handler::text)), '{}')
      FROM wfe.contracts AS c
     WHERE c.ref IN (SELECT jsonb_array_elements_text(p_plan -> 'contracts'));
END;
COMMENT ON FUNCTION wfe._run_contracts(jsonb) IS
'The contract versions a new run of the plan pins (wfe.runs.contracts).';
REVOKE ALL ON FUNCTION wfe._run_contracts(jsonb) FROM PUBLIC;

-- A new run's stage rows, one per stage, task and finaliser of its plan
-- (a submitted run's and a child run's alike).
CREATE FUNCTION wfe._insert_run_stages(p_run wfe.runs)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO wfe.run_stages (run_id, stage, tenant, ordinal, kind, queue, worker, handler, priority,
                                awaits, exec_ms, queue_ms, heartbeat_ms)
    SELECT p_run.run_id, ps.stage, p_run.tenant, ps.ordinal, ps.type,
           CASE WHEN ps.type = 'worker' THEN ps.spec ->> 'queue' ELSE c.queue END,
           coalesce(ps.spec ->> 'worker', ps.spec ->> 'action', ps.spec ->> 'signal'), c.handler, p_run.priority,
           coalesce((ps.spec ->> 'awaits')::boolean, true),
           (ps.spec ->> 'execution_deadline_ms')::int, (ps.spec ->> 'queue_deadline_ms')::int,
           (ps.spec ->> 'heartbeat_ms')::int
      FROM wfe.plan_stages AS ps
      LEFT JOIN wfe.contracts AS c ON c.ref = coalesce(ps.spec ->> 'worker', ps.spec ->> 'action')
     WHERE ps.definition_id = p_run.definition_id;
END;
COMMENT ON FUNCTION wfe._insert_run_stages(wfe.runs) IS
'Inserts a new run''s stage rows (waiting), one per stage, task and finaliser of its plan.';
REVOKE ALL ON FUNCTION wfe._insert_run_stages(wfe.runs) FROM PUBLIC;

-- A child run for attempt p_attempt of the parent's workflow stage p_stage,
-- started in the caller's transaction under the parent's lock.  Unlike
-- wfe.submit it checks nothing a caller could get wrong: the step core
-- resolved the definition (p_workflow at p_version, not a draft), bound the
-- context against its context_schema and checked the depth.  The child
-- runs in the parent's tenant, with its priority and in its trace (the
-- child's run span is a child of the parent's attempt span); it counts as the parent's
-- work, not against the tenant's max_runs_in_flight again.
CREATE FUNCTION wfe._start_child(p_parent bigint, p_stage text, p_attempt int, p_workflow text,
                                 p_version text, p_context jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p     wfe.runs;
    d     wfe.definitions;
    r     wfe.runs;
    v_due timestamptz;
BEGIN
    SELECT * INTO STRICT p FROM wfe.runs AS x WHERE x.run_id = p_parent;
    SELECT * INTO STRICT d FROM wfe.definitions AS x WHERE x.workflow = p_workflow AND x.version = p_version;
    INSERT INTO wfe.runs AS x (tenant, workflow, version, definition_id, definition_digest, dsl_version,
                               compiler_version, engine_version, contracts, context, execution_context,
                               priority, deadline_at, form, trace_id, trace_parent, trace_flags,
                               parent_run_id, parent_stage, parent_attempt)
    VALUES (p.tenant, d.workflow, d.version, d.definition_id, d.digest, d.dsl_version, d.compiler_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'wfe'),
            wfe._run_contracts(d.plan), p_context, d.plan ->> 'context', p.priority,
            now() + make_interval(secs => (d.plan ->> 'run_deadline_ms')::bigint / 1000.0),
            d.plan ->> 'form', p.trace_id, wfe._attempt_span_id(p.span_id, p_stage, p_attempt), p.trace_flags,
            p_parent, p_stage, p_attempt)
    RETURNING x.* INTO r;
    PERFORM wfe._insert_run_stages(r);
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.submitted',
                       jsonb_build_object('workflow', r.workflow, 'version', r.version,
                                          'digest', r.definition_digest, 'idempotency_key', NULL,
                                          'parent_run_id', p_parent, 'parent_stage', p_stage,
                                          'parent_attempt', p_attempt));
    IF r.deadline_at IS NOT NULL THEN
        INSERT INTO wfe.timers (tenant, run_id, kind, due_at)
        VALUES (r.tenant, r.run_id, 'run_deadline', r.deadline_at);
        PERFORM wfe._wake(r.deadline_at);
    END IF;
    -- the parent's attempt has the stage's execution deadline, as a worker's does
    UPDATE wfe.run_stages AS st
       SET deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)
     WHERE st.run_id = p_parent AND st.stage = p_stage AND st.exec_ms IS NOT NULL
    RETURNING st.deadline_at INTO v_due;
    IF FOUND THEN
        PERFORM wfe._wake(v_due);
    END IF;
    PERFORM wfe._start_run(r.run_id);
    RETURN r.run_id;
END
$$;
COMMENT ON FUNCTION wfe._start_child(bigint, text, int, text, text, jsonb) IS
'Starts the child run of a parent''s workflow stage attempt (the engine calls it under the parent''s lock); returns its run_id.';
REVOKE ALL ON FUNCTION wfe._start_child(bigint, text, int, text, text, jsonb) FROM PUBLIC;

-- The parent's attempt of p_stage ended otherwise than by its child's end
-- (cancelled with the run, timed out, failed by an operator): its live
-- child is cancelled too, and so on down.  Lock order: the parent (held by
-- the caller), then its children -- never the other way round, which is
-- why a child's end reaches its parent through a child_ended timer.
CREATE FUNCTION wfe._cancel_children(p_parent bigint, p_stage text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c bigint;
BEGIN
    FOR c IN SELECT x.run_id FROM wfe.runs AS x
              WHERE x.parent_run_id = p_parent AND x.parent_stage = p_stage AND x.intent IS NULL
              ORDER BY x.run_id
    LOOP
        PERFORM wfe._cancel(c, coalesce(p_reason, 'parent attempt ended'));
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe._cancel_children(bigint, text, text) IS
'Cancels the live child runs of a parent''s workflow stage whose attempt ended otherwise (the engine calls it under the parent''s lock).';
REVOKE ALL ON FUNCTION wfe._cancel_children(bigint, text, text) FROM PUBLIC;

-- run_timeline names the child run of each attempt (a new column, so the
-- function is made again) and, in a child run, its parent (a first row) (wfe.run_spans, which reads it, is in the final bodies).
DROP FUNCTION wfe.run_timeline(bigint);
CREATE FUNCTION wfe.run_timeline(run_id bigint)
RETURNS TABLE (stage text, attempt int, outcome text, started_at timestamptz, finished_at timestamptz,
               duration_ms numeric, waterfall text, child_run_id bigint)
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_timeline.run_id);
    v_span  double precision;
BEGIN
    v_span := greatest(extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at), 0.001);
    -- a child run's first row is its parent: the parent's stage and attempt
    -- that started it, the outcome naming the parent run, the child's whole life
    IF r.parent_run_id IS NOT NULL THEN
        RETURN QUERY
        SELECT r.parent_stage, r.parent_attempt, 'child of run ' || r.parent_run_id, r.submitted_at, r.finished_at,
               round((extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at) * 1000)::numeric, 1),
               '|' || repeat('█', 40) || '|', NULL::bigint;
    END IF;
    RETURN QUERY
    WITH a AS (
        -- the outcome: the attempt's last event that says how it went; a
        -- timeout wins over the retry it led to (the attempt timed out), and
        -- an operator's bookkeeping (redriven, reset, ...) is not an outcome
        -- and what the result cache did before any attempt (or instead of
        -- one) is attempt 0: waiting on another attempt, a hit, an entry refused
        SELECT e.stage, coalesce(e.attempt, 0) AS attempt, min(e.at) AS t_start, max(e.at) AS t_end,
               min(e.event_id) AS first_event,
               (array_agg(e.type ORDER BY (e.type = 'stage.timed_out') DESC,
                                          (e.type IN ('stage.redriven', 'stage.reset', 'stage.skipped_by_operator',
                                                      'stage.failed_by_operator', 'stage.dead_lettered',
                                                      'stage.cancel_acknowledged')),
                                          e.event_id DESC))[1] AS last_type
          FROM wfe.events AS e
         WHERE e.run_id = r.run_id AND e.stage IS NOT NULL
           AND (e.attempt IS NOT NULL OR e.type LIKE 'stage.cache\_%')
           AND e.type NOT LIKE 'callback.%'
         GROUP BY e.stage, coalesce(e.attempt, 0)
    ), b AS (
        -- a wait, a sleep or a workflow stage parked now (its stage running
        -- at this attempt) has not finished: its last event is its release,
        -- so it runs to now (finished_at NULL) rather than showing a zero duration
        SELECT a.*, (s.state = 'running' AND s.kind IN ('wait', 'sleep', 'workflow')) AS parked
          FROM a
          LEFT JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = a.stage AND s.attempt = a.attempt
    ), c AS (
        SELECT b.*, CASE WHEN b.parked THEN coalesce(r.finished_at, now()) ELSE b.t_end END AS t_until
          FROM b
    )
    SELECT c.stage, c.attempt, replace(c.last_type, 'stage.', ''), c.t_start,
           CASE WHEN c.parked THEN NULL ELSE c.t_end END,
           round((extract(epoch FROM c.t_until - c.t_start) * 1000)::numeric, 1),
           -- a 40-column bar across the run's life: where the attempt sat and how long
           '|' || rpad(repeat(' ', least(39, floor(extract(epoch FROM c.t_start - r.submitted_at) / v_span * 40)::int))
                       || repeat('█', greatest(1, round(extract(epoch FROM c.t_until - c.t_start) / v_span * 40)::int)),
                       40) || '|',
           -- the child run a workflow stage's attempt started
           (SELECT x.run_id FROM wfe.runs AS x
             WHERE x.parent_run_id = r.run_id AND x.parent_stage = c.stage AND x.parent_attempt = c.attempt
             ORDER BY x.run_id DESC LIMIT 1)
      FROM c
     ORDER BY c.first_event;
END
$$;
COMMENT ON FUNCTION wfe.run_timeline(bigint) IS
'One row per stage attempt with its outcome, times, a text waterfall over the run''s life, and the child run a workflow stage''s attempt started; a child run''s first row names its parent run, stage and attempt.';
REVOKE ALL ON FUNCTION wfe.run_timeline(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_timeline(bigint) TO wfe_submitter, wfe_operator, wfe_reader;

-- ---------------------------------------------------------------------
-- Map stages (issue 22 items 1-2; dsl.md and runtime.md "New in 0.3.0"):
-- a map's elements are run_stages rows NAME[i] with their index in
-- `element`; each released map keeps one counter row in wfe.run_maps
-- (src/core/engine/map.c decides, src/pg/map.c writes).
ALTER TABLE wfe.plan_stages DROP CONSTRAINT plan_stages_type;
ALTER TABLE wfe.plan_stages ADD CONSTRAINT plan_stages_type
    CHECK (type IN ('action', 'worker', 'decision', 'fork', 'join', 'finaliser', 'wait', 'sleep',
                    'workflow', 'map'));
ALTER TABLE wfe.run_stages ADD COLUMN element int CONSTRAINT run_stages_element CHECK (element >= 0);
GRANT SELECT (element) ON wfe.run_stages TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.run_stages.element IS
'A map element''s 0-based index (its stage is NAME[element], its ordinal the map''s); NULL for every other stage';
CREATE INDEX run_stages_elements ON wfe.run_stages (run_id, ordinal, element) WHERE element IS NOT NULL;
CREATE TABLE wfe.run_maps (
    run_id     bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage      text NOT NULL,
    tenant     text NOT NULL,
    total      int NOT NULL CONSTRAINT run_maps_total CHECK (total >= 0),
    released   int NOT NULL DEFAULT 0,
    completed  int NOT NULL DEFAULT 0,
    failed     int NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, stage)
);
COMMENT ON TABLE wfe.run_maps IS
'Per released map stage: its elements bound (total), released (in index order, as max_concurrency allows), completed and failed for good';
GRANT SELECT ON wfe.run_maps TO wfe_reader, wfe_operator;
-- row-level security like every table that carries a tenant (76_tenant_rls.sql)
ALTER TABLE wfe.run_maps ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.run_maps FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.run_maps FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
SELECT pg_catalog.pg_extension_config_dump('wfe.run_maps', '');

-- ---------------------------------------------------------------------
-- History partitioned by time (issue 25, item 6; docs: scaling.md
-- "History partitions"): wfe.events becomes a table partitioned by day.
-- The 0.2.0 table is renamed, the new one made as 60_runtime_tables.sql
-- makes it, every row moves into it with its event_id (into its default
-- partition; the background worker then moves them into day partitions,
-- a day a pass), and the old table goes.  The views that read wfe.events
-- and its triggers, and the SQL-standard function bodies that write it
-- (wfe._event), are made again, as they were, on the new table (their
-- text is read from the catalog, so a section above that changed them is
-- kept).  The upgrade rewrites the event log: its time and disk space grow
-- with it.
-- ---------------------------------------------------------------------
CREATE TABLE wfe._upgrade_events_objects (n int, stmt text);
INSERT INTO wfe._upgrade_events_objects
SELECT 0, pg_catalog.pg_get_functiondef(f.oid)
  FROM pg_catalog.pg_proc AS f
 WHERE f.oid IN (SELECT d.objid FROM pg_catalog.pg_depend AS d
                  WHERE d.classid = 'pg_catalog.pg_proc'::regclass
                    AND d.refclassid = 'pg_catalog.pg_class'::regclass
                    AND d.refobjid = 'wfe.events'::regclass)
UNION ALL
SELECT 1, format('CREATE OR REPLACE VIEW %s%s AS %s', v.oid::regclass,
                 CASE WHEN v.reloptions IS NULL THEN ''
                      ELSE ' WITH (' || array_to_string(v.reloptions, ', ') || ')' END,
                 pg_catalog.pg_get_viewdef(v.oid))
  FROM pg_catalog.pg_class AS v
 WHERE v.oid IN (SELECT rw.ev_class FROM pg_catalog.pg_depend AS d
                   JOIN pg_catalog.pg_rewrite AS rw ON rw.oid = d.objid
                  WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass
                    AND d.refclassid = 'pg_catalog.pg_class'::regclass
                    AND d.refobjid = 'wfe.events'::regclass)
   AND v.oid <> 'wfe.events'::regclass
UNION ALL
SELECT 2, pg_catalog.pg_get_triggerdef(t.oid)
  FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid = 'wfe.events'::regclass AND NOT t.tgisinternal
UNION ALL
SELECT 3, format('COMMENT ON TRIGGER %I ON wfe.events IS %L', t.tgname, c.description)
  FROM pg_catalog.pg_trigger AS t
  JOIN pg_catalog.pg_description AS c ON c.objoid = t.oid AND c.classoid = 'pg_catalog.pg_trigger'::regclass
 WHERE t.tgrelid = 'wfe.events'::regclass AND NOT t.tgisinternal;

ALTER TABLE wfe.events RENAME TO events_0_2_0;
ALTER TABLE wfe.events_0_2_0 RENAME CONSTRAINT events_pkey TO events_0_2_0_pkey;
ALTER INDEX wfe.events_run RENAME TO events_0_2_0_run;
ALTER INDEX wfe.events_unknown RENAME TO events_0_2_0_unknown;
ALTER INDEX wfe.events_schedules RENAME TO events_0_2_0_schedules;
ALTER SEQUENCE wfe.events_event_id_seq RENAME TO events_0_2_0_event_id_seq;

CREATE TABLE wfe.events (
    event_id bigint GENERATED ALWAYS AS IDENTITY,
    run_id   bigint,
    tenant   text NOT NULL,
    stage    text,
    attempt  int,
    type     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    detail   jsonb,
    fence    bigint
) PARTITION BY RANGE (at);
CREATE TABLE wfe.events_default PARTITION OF wfe.events DEFAULT;
COMMENT ON TABLE wfe.events_default IS
'The events no day partition of wfe.events covers: all of them without the background worker, which splits them into day partitions (wfe._history_maintain).';
COMMENT ON COLUMN wfe.events.fence IS
'The fence the event is about (an attempt released, cancelled, reported about); kept out of detail, and not readable by wfe_reader or wfe_operator: only the claim and the envelope carry fences';
COMMENT ON TABLE wfe.events IS
'Event log: every accepted transition (run.submitted, stage.released, stage.claimed, stage.completed, ...) and every rejected callback (callback.stale, callback.late, ...).';
GRANT SELECT (event_id, run_id, tenant, stage, attempt, type, at, detail)
    ON wfe.events TO wfe_reader, wfe_operator;
CREATE INDEX events_run ON wfe.events (run_id, event_id);
CREATE INDEX events_unknown ON wfe.events (at) WHERE type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed');
CREATE INDEX events_schedules ON wfe.events (at)
    WHERE run_id IS NULL AND type IN ('schedule.skipped', 'schedule.failed');
ALTER TABLE wfe.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.events FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
SELECT pg_catalog.pg_extension_config_dump('wfe.events', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.events_default', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.events_event_id_seq', '');

-- the rows, before the triggers exist (they were redacted, counted and
-- projected when first written)
INSERT INTO wfe.events (event_id, run_id, tenant, stage, attempt, type, at, detail, fence)
OVERRIDING SYSTEM VALUE
SELECT e.event_id, e.run_id, e.tenant, e.stage, e.attempt, e.type, e.at, e.detail, e.fence
  FROM wfe.events_0_2_0 AS e;
SELECT pg_catalog.setval('wfe.events_event_id_seq', s.last_value, s.is_called)
  FROM wfe.events_0_2_0_event_id_seq AS s;

DO $history$
DECLARE
    x text;
BEGIN
    FOR x IN SELECT o.stmt FROM wfe._upgrade_events_objects AS o ORDER BY o.n, o.stmt LOOP
        EXECUTE x;
    END LOOP;
END
$history$;
DROP TABLE wfe._upgrade_events_objects;
-- out of the extension first: that takes them off pg_dump's list of its
-- configuration tables too (DROP alone would leave their oids there)
ALTER EXTENSION wfe DROP SEQUENCE wfe.events_0_2_0_event_id_seq;
ALTER EXTENSION wfe DROP TABLE wfe.events_0_2_0;
DROP TABLE wfe.events_0_2_0;

-- History partitions (docs: scaling.md "History partitions").  wfe.events
-- is partitioned by day (UTC): events_pYYYYMMDD holds the events of that
-- day, events_default whatever no day partition covers.  The background
-- worker, in its retention pass (wfe._retention), keeps the coming days'
-- partitions made ahead, moves the rows the default partition holds into
-- day partitions, and drops the day partitions retention has passed.
--
-- The day partitions are data, not schema: the worker makes them, they are
-- no members of the extension (pg_dump dumps them with their rows, DROP
-- EXTENSION drops them with wfe.events).  Each DDL here waits at most
-- lock_timeout for its lock; one that gives up is tried again on the next
-- pass, and the event path never waits on more than that.

-- Make the partition of day p_day (UTC) unless it exists, moving the rows
-- of that day the default partition holds into it.  Returns 1 if made.
CREATE FUNCTION wfe._history_make_day(p_day date)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_name text := 'events_p' || to_char(p_day, 'YYYYMMDD');
    v_lo   timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_hi   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass('wfe.' || v_name) IS NOT NULL THEN
        RETURN 0;
    END IF;
    BEGIN
        -- ATTACH takes this lock to check the default partition holds none
        -- of the day's rows: taken first, no row of the day lands there
        -- while they move (inserts of other days go on)
        LOCK TABLE wfe.events_default IN ACCESS EXCLUSIVE MODE;
        -- made apart and attached: CREATE TABLE ... PARTITION OF would lock
        -- wfe.events itself; the CHECK spares ATTACH a scan of the new table
        EXECUTE format('CREATE TABLE wfe.%I (LIKE wfe.events INCLUDING DEFAULTS,'
                       ' CONSTRAINT %I CHECK (at >= %L AND at < %L))',
                       v_name, v_name || '_day', v_lo, v_hi);
        EXECUTE format('WITH moved AS (DELETE FROM wfe.events_default AS e WHERE e.at >= %L AND e.at < %L'
                       ' RETURNING e.*) INSERT INTO wfe.%I SELECT * FROM moved',
                       v_lo, v_hi, v_name);
        EXECUTE format('ALTER TABLE wfe.events ATTACH PARTITION wfe.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;                   -- busy: the next pass tries again
    END;
    RETURN 1;
END
$$;
COMMENT ON FUNCTION wfe._history_make_day(date) IS
'Makes the day partition of wfe.events for p_day (UTC) unless it exists, moving that day''s rows out of the default partition; 1 if made, 0 if it existed or a lock was busy.';
REVOKE ALL ON FUNCTION wfe._history_make_day(date) FROM PUBLIC;

-- The day partitions of wfe.events, oldest first, with the time each ends.
CREATE FUNCTION wfe._history_days(OUT name text, OUT day date, OUT ends timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 9), 'YYYYMMDD'),
           (to_date(substr(c.relname, 9), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
      FROM pg_inherits AS i
      JOIN pg_class AS c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'wfe.events'::regclass AND c.relname ~ '^events_p[0-9]{8}$'
     ORDER BY c.relname
$$;
COMMENT ON FUNCTION wfe._history_days() IS
'The day partitions of wfe.events (events_pYYYYMMDD), oldest first, with the time each ends.';
REVOKE ALL ON FUNCTION wfe._history_days() FROM PUBLIC;

-- The worker's pass over the partitions: today's and the next two days'
-- made ahead, one day moved out of the default partition, and the day
-- partitions every event of which is past p_cutoff dropped.
CREATE FUNCTION wfe._history_maintain(p_cutoff timestamptz)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_keep  timestamptz;
    v_run   bigint;
    v_at    timestamptz;
    v_kept  boolean;
    p       record;
    n       int := 0;
BEGIN
    FOR i IN 0 .. 2 LOOP
        n := n + wfe._history_make_day(v_today + i);
    END LOOP;
    -- rows the default partition holds (after an upgrade, or a time without
    -- the worker): one day of them a pass
    SELECT e.at INTO v_at FROM wfe.events_default AS e LIMIT 1;
    IF FOUND THEN
        n := n + wfe._history_make_day((v_at AT TIME ZONE 'UTC')::date);
    END IF;
    -- A day partition goes when it ended before the cutoff and no run that
    -- is still kept can have an event in it.  A run's events are written
    -- at or after its submission, and retention removes runs oldest first:
    -- what the oldest run left (its run_id, so the primary key answers)
    -- was submitted after holds no event of a kept run.  The hour allows
    -- for transactions that began before a submission they then wrote
    -- about, and run ids drawn out of submission order.
    SELECT r.run_id, r.submitted_at - interval '1 hour' INTO v_run, v_at
      FROM wfe.runs AS r ORDER BY r.run_id LIMIT 1;
    v_keep := least(p_cutoff, v_at);
    FOR p IN SELECT d.name, d.ends FROM wfe._history_days() AS d LOOP
        EXIT WHEN p.ends > v_keep;
        -- and none of its events names a run still kept, checked: a run
        -- that old cannot have any, so this finds (by the partition's
        -- events_run index, from the oldest run's id up) only events
        -- written with a time before their run's, or about run ids that
        -- were never submitted
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM wfe.%I AS e WHERE e.run_id >= $1'
                       ' AND EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e.run_id))', p.name)
           INTO v_kept USING v_run;
        CONTINUE WHEN v_kept;
        BEGIN
            EXECUTE format('DROP TABLE wfe.%I', p.name);
        EXCEPTION WHEN lock_not_available THEN
            EXIT;                   -- busy: the next pass tries again
        END;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._history_maintain(timestamptz) IS
'The worker''s pass over wfe.events'' day partitions: makes today''s and the next two days'', moves one day out of the default partition, drops the day partitions that ended before p_cutoff and before the oldest run kept was submitted, and name no run kept.  Returns the partitions made or dropped.';
REVOKE ALL ON FUNCTION wfe._history_maintain(timestamptz) FROM PUBLIC;

-- ---------------------------------------------------------------------
-- Circuit breakers (issue 24 item 2): wfe.circuits, configure_circuit,
-- reset_circuit, the worker's half opening (79_circuits.sql,
-- src/pg/circuit.c, src/pg/claim.c; attempt ends are counted by the
-- metrics trigger, in C), dashboard_stuck.
CREATE TABLE wfe.circuits (
    queue         wfe.queue_name PRIMARY KEY,
    failure_ratio double precision NOT NULL
                  CONSTRAINT circuits_failure_ratio CHECK (failure_ratio > 0 AND failure_ratio <= 1),
    min_calls     int NOT NULL CONSTRAINT circuits_min_calls CHECK (min_calls >= 1),
    window_ms     int NOT NULL CONSTRAINT circuits_window_ms CHECK (window_ms >= 1),
    open_ms       int NOT NULL CONSTRAINT circuits_open_ms CHECK (open_ms >= 1),
    state         text NOT NULL DEFAULT 'closed'
                  CONSTRAINT circuits_state CHECK (state IN ('closed', 'open', 'half_open')),
    since         timestamptz NOT NULL DEFAULT now(),
    probe_out     boolean NOT NULL DEFAULT false,
    -- the probe's task while it is out: only its own end decides (src/pg/circuit.c)
    probe_run_id  bigint,
    probe_stage   text,
    win_start     timestamptz NOT NULL DEFAULT now(),
    calls         int NOT NULL DEFAULT 0,
    failures      int NOT NULL DEFAULT 0,
    prev_calls    int NOT NULL DEFAULT 0,
    prev_failures int NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    updated_by    text NOT NULL DEFAULT wfe._identity()
);
COMMENT ON TABLE wfe.circuits IS
'Circuit breakers per queue: configuration, state (closed, open, half_open) since when, and the sliding window''s counts.';
-- every column but the probe's task, which names a run of any tenant
GRANT SELECT (queue, failure_ratio, min_calls, window_ms, open_ms, state, since, probe_out,
              win_start, calls, failures, prev_calls, prev_failures, updated_at, updated_by)
    ON wfe.circuits TO wfe_reader, wfe_operator, wfe_admin;
SELECT pg_catalog.pg_extension_config_dump('wfe.circuits', '');

-- A circuit's change of state, in the event log (no run: tenant 'default').
CREATE FUNCTION wfe._circuit_event(p_queue text, p_type text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._event(NULL, 'default', NULL, NULL, p_type,
                      (SELECT jsonb_build_object('queue', c.queue, 'state', c.state,
                                                 'calls', c.calls, 'failures', c.failures)
                         FROM wfe.circuits AS c WHERE c.queue = p_queue));
END;
COMMENT ON FUNCTION wfe._circuit_event(text, text) IS
'Logs a circuit''s change of state (circuit.opened, circuit.half_open, circuit.closed) with its queue and counts.';
REVOKE ALL ON FUNCTION wfe._circuit_event(text, text) FROM PUBLIC;

CREATE FUNCTION wfe._half_open_circuits()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_half_open_circuits' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._half_open_circuits() IS
'Half opens the open circuits whose open_ms has passed, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
REVOKE ALL ON FUNCTION wfe._half_open_circuits() FROM PUBLIC;

CREATE FUNCTION wfe.configure_circuit(queue text, failure_ratio numeric, min_calls int DEFAULT 20,
                                      window_ms int DEFAULT 60000, open_ms int DEFAULT 30000)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_circuit.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(configure_circuit.queue, 'queue');
    IF NOT EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = configure_circuit.queue)
       AND NOT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.queue = configure_circuit.queue) THEN
        RAISE EXCEPTION 'queue "%" is not known', configure_circuit.queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Configure it with wfe.configure_queue, or install a workflow whose stages use it.';
    END IF;
    IF configure_circuit.failure_ratio IS NULL THEN
        -- dropped: what it held back may go
        DELETE FROM wfe.circuits AS c WHERE c.queue = configure_circuit.queue;
        PERFORM wfe._notify_ready(configure_circuit.queue);
        RETURN;
    END IF;
    IF configure_circuit.failure_ratio <= 0 OR configure_circuit.failure_ratio > 1 THEN
        RAISE EXCEPTION 'failure_ratio must be in (0, 1], not %', configure_circuit.failure_ratio
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The share of ended attempts that failed at which the circuit opens; NULL drops the circuit.';
    END IF;
    IF configure_circuit.min_calls IS NULL OR configure_circuit.min_calls < 1 THEN
        RAISE EXCEPTION 'min_calls must be a positive integer, not %', coalesce(configure_circuit.min_calls::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 20.';
    END IF;
    IF configure_circuit.window_ms IS NULL OR configure_circuit.window_ms < 1 THEN
        RAISE EXCEPTION 'window_ms must be a positive integer, not %', coalesce(configure_circuit.window_ms::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 60000 (one minute).';
    END IF;
    IF configure_circuit.open_ms IS NULL OR configure_circuit.open_ms < 1 THEN
        RAISE EXCEPTION 'open_ms must be a positive integer, not %', coalesce(configure_circuit.open_ms::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 30000 (30 seconds).';
    END IF;
    -- a changed circuit keeps its state and counts
    INSERT INTO wfe.circuits AS c (queue, failure_ratio, min_calls, window_ms, open_ms)
    VALUES (configure_circuit.queue, configure_circuit.failure_ratio, configure_circuit.min_calls,
            configure_circuit.window_ms, configure_circuit.open_ms)
    ON CONFLICT (queue) DO UPDATE
       SET failure_ratio = excluded.failure_ratio, min_calls = excluded.min_calls,
           window_ms = excluded.window_ms, open_ms = excluded.open_ms,
           updated_at = now(), updated_by = wfe._identity();
END
$$;
COMMENT ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) IS
'Creates or changes a queue''s circuit breaker: it opens at failure_ratio of at least min_calls attempts ended in window_ms, for open_ms; failure_ratio NULL drops it.';
REVOKE ALL ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) TO wfe_admin;

CREATE FUNCTION wfe.reset_circuit(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_state text;
BEGIN
    IF reset_circuit.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(reset_circuit.queue, 'queue');
    SELECT c.state INTO v_state FROM wfe.circuits AS c WHERE c.queue = reset_circuit.queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" has no circuit', reset_circuit.queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'wfe.configure_circuit gives a queue one.';
    END IF;
    UPDATE wfe.circuits AS c
       SET state = 'closed', since = now(), probe_out = false, probe_run_id = NULL, probe_stage = NULL,
           win_start = now(),
           calls = 0, failures = 0, prev_calls = 0, prev_failures = 0
     WHERE c.queue = reset_circuit.queue;
    IF v_state <> 'closed' THEN
        PERFORM wfe._circuit_event(reset_circuit.queue, 'circuit.closed');
        PERFORM wfe._notify_ready(reset_circuit.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe.reset_circuit(text) IS
'Closes a queue''s circuit now, with an empty window: what it held back may go.';
REVOKE ALL ON FUNCTION wfe.reset_circuit(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.reset_circuit(text) TO wfe_operator, wfe_admin;

CREATE OR REPLACE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       -- (by attempt: the view runs as its reader, who may not see fences)
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- held by a rate limit until its token is due, or naming none configured (78_rate_limits.sql)
    SELECT CASE WHEN st.held_until = 'infinity' THEN 'rate limit unknown' ELSE 'rate limited' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.rate_limit || CASE WHEN st.held_until = 'infinity' THEN ' is not configured'
                                 ELSE ' token due in '
                                      || wfe.human_ms(greatest(0, extract(epoch FROM st.held_until - now()) * 1000))
                            END
      FROM wfe.run_stages AS st
     WHERE st.held_until IS NOT NULL AND st.state = 'queued'
    UNION ALL
    -- held by its queue's open circuit, or behind the half-open probe (79_circuits.sql)
    SELECT 'circuit open', st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN c.state = 'open' THEN ' open, half opens in '
                                 || wfe.human_ms(greatest(0, extract(epoch FROM c.since - now()) * 1000 + c.open_ms))
                            ELSE ' half open: one probe' END
      FROM wfe.circuits AS c
      JOIN wfe.run_stages AS st ON st.queue = c.queue AND st.state = 'queued'
     WHERE c.state <> 'closed'
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, attempts a rate limit or an open circuit holds, dispatches unpublished for a minute, open dead letters.';

-- ---------------------------------------------------------------------
-- Fairness between tenants (issue 24 item 2; 79_fairness.sql,
-- src/pg/fairness.c, src/pg/claim.c): wfe.queues.fairness,
-- wfe.tenant_limits.weight, the run_stages_fair index, configure_queue
-- and configure_tenant with their new parameters, and the trigger that
-- keeps each backend's cached lists of fair queues and queues with a
-- circuit (src/pg/flow_cache.c).
ALTER TABLE wfe.queues ADD COLUMN fairness text NOT NULL DEFAULT 'none'
    CONSTRAINT queues_fairness CHECK (fairness IN ('none', 'tenant'));
COMMENT ON TABLE wfe.queues IS
'Queue settings: delivery mode (poll or broker), in-flight limit, paused, fairness between tenants.  Unlisted queues are poll queues.';
COMMENT ON COLUMN wfe.queues.fairness IS
'none: claims take the highest priority, then oldest, ready task; tenant: they serve the tenants with ready work by weight (wfe.configure_tenant), within a priority level.';
ALTER TABLE wfe.tenant_limits ADD COLUMN weight int NOT NULL DEFAULT 1
    CONSTRAINT tenant_limits_weight CHECK (weight BETWEEN 1 AND 10000);
COMMENT ON COLUMN wfe.tenant_limits.weight IS
'The tenant''s share on queues with fairness = ''tenant'': claims serve tenants with ready work in proportion to their weights.';
CREATE INDEX run_stages_fair ON wfe.run_stages (queue, tenant, priority DESC, ready_at)
    WHERE state = 'queued' AND held_until IS NULL;

DROP FUNCTION wfe.configure_queue(text, text, int, boolean);
CREATE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false, fairness text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._check_queue_name(configure_queue.queue);
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.fairness NOT IN ('none', 'tenant') THEN
        RAISE EXCEPTION 'fairness must be none or tenant, not "%"', configure_queue.fairness
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'tenant: claims serve the tenants with ready work by weight; NULL keeps the queue''s.';
    END IF;
    SELECT q.delivery, q.paused INTO v_was, v_was_paused
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    -- fairness NULL: the queue keeps what it has (none when new)
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused, fairness)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused,
            coalesce(configure_queue.fairness, 'none'))
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now(),
           fairness = coalesce(configure_queue.fairness, q.fairness);
    -- Tasks waiting in the old mode follow the queue into the new one: to
    -- broker (or resumed as broker), queued attempts get their dispatch
    -- message; to poll, dispatched attempts become claimable (a broker worker
    -- that still accepts one is answered duplicate once a poll worker has it).
    -- A paused queue keeps everything as it is until it is resumed.
    IF configure_queue.paused THEN
        NULL;                       -- paused: what waits stays queued
    ELSIF configure_queue.delivery = 'broker'
          AND (coalesce(v_was, 'poll') = 'poll' OR coalesce(v_was_paused, false)) THEN
        -- Every queued attempt without a dispatch message still to publish
        -- is re-dispatched through the engine: a new fence, a new message.
        -- (One whose earlier message was published -- broker, then poll,
        -- then broker again -- would otherwise wait for a message that is
        -- gone.)  No stage row is locked here: the engine locks the run,
        -- then the stage, and one that moved on meanwhile is passed over.
        FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
                  WHERE st.queue = configure_queue.queue AND st.state = 'queued' AND st.handler IS NULL
                    AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                     WHERE o.run_id = st.run_id AND o.stage = st.stage
                                       AND o.attempt = st.attempt AND o.fence = st.fence
                                       AND o.kind = 'dispatch' AND o.state <> 'published')
                  ORDER BY st.run_id, st.stage
        LOOP
            BEGIN
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, wfe._identity(),
                                     format('queue %s switched to broker delivery', configure_queue.queue));
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                NULL;
            END;
        END LOOP;
    ELSIF configure_queue.delivery = 'poll' AND (v_was = 'broker' OR coalesce(v_was_paused, false)) THEN
        UPDATE wfe.run_stages AS st SET state = 'queued'
         WHERE st.queue = configure_queue.queue AND st.state = 'dispatched';
        PERFORM wfe._notify_ready(configure_queue.queue);     -- resumed or switched: wake the pollers
    ELSIF configure_queue.delivery = 'broker' THEN
        -- the same mode, maybe a raised or lifted max_in_flight: what fits now goes
        PERFORM wfe._release_held(configure_queue.queue, NULL);
    ELSE
        PERFORM wfe._notify_ready(configure_queue.queue);     -- the same for pollers
    END IF;
    PERFORM wfe._wake(now());      -- the publisher declares a new broker queue's topology
END
$$;
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit, pause and fairness between tenants (none or tenant; NULL keeps it).';
REVOKE ALL ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) TO wfe_admin;

DROP FUNCTION wfe.configure_tenant(text, int, int);
CREATE FUNCTION wfe.configure_tenant(tenant text, max_runs_in_flight int DEFAULT NULL,
                                     max_tasks_in_flight int DEFAULT NULL, weight int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'tenant must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._check_tenant_name(configure_tenant.tenant);
    IF configure_tenant.max_runs_in_flight < 1 OR configure_tenant.max_tasks_in_flight < 1 THEN
        RAISE EXCEPTION 'max_runs_in_flight and max_tasks_in_flight must be positive or NULL (unlimited)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_tenant.weight NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'weight must be an integer between 1 and 10000, not %', configure_tenant.weight
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The tenant''s share on queues with fairness = ''tenant''; the default is 1, NULL keeps the tenant''s.';
    END IF;
    -- weight NULL: the tenant keeps its weight (1 when new)
    INSERT INTO wfe.tenant_limits AS t (tenant, max_runs_in_flight, max_tasks_in_flight, weight)
    VALUES (configure_tenant.tenant, configure_tenant.max_runs_in_flight, configure_tenant.max_tasks_in_flight,
            coalesce(configure_tenant.weight, 1))
    ON CONFLICT (tenant) DO UPDATE
       SET max_runs_in_flight = excluded.max_runs_in_flight,
           max_tasks_in_flight = excluded.max_tasks_in_flight,
           updated_at = now(), updated_by = wfe._identity(),
           weight = coalesce(configure_tenant.weight, t.weight);
    -- A raised or lifted task limit makes room now: the tenant's held broker
    -- tasks that fit are dispatched, and the pollers of the queues where it
    -- has queued tasks are woken.  A lowered one holds what comes next; the
    -- tasks in flight finish.
    PERFORM wfe._notify_ready(q) FROM wfe._release_held(NULL, configure_tenant.tenant) AS q;
END
$$;
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears), NULL is unlimited; and its weight on fair queues (NULL keeps it).';
REVOKE ALL ON FUNCTION wfe.configure_tenant(text, int, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_tenant(text, int, int, int) TO wfe_admin;

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

-- ---------------------------------------------------------------------
-- Keyed concurrency (issue 24, item 2): concurrency: {key, max} on stages
-- and tasks, gated at the claim (src/pg/concurrency.c, the decisions in
-- src/core/flow/concurrency.c), held attempts released by the attempt of
-- their key that ends (79_concurrency.sql), the worker's recheck of keys
-- whose lock was busy (70_background_worker.sql), dashboard_stuck's reason.
-- ---------------------------------------------------------------------
ALTER TABLE wfe.run_stages ADD COLUMN concurrency_key text;
ALTER TABLE wfe.run_stages ADD COLUMN concurrency_max int
    CONSTRAINT run_stages_concurrency_max CHECK (concurrency_max >= 1);
COMMENT ON COLUMN wfe.run_stages.concurrency_key IS
'The key bound at release for a stage with concurrency: {key, max} (a key over 128 bytes as its sha256 digest); NULL: none.';
COMMENT ON COLUMN wfe.run_stages.concurrency_max IS
'The stage''s concurrency.max: at most this many attempts of its queue, tenant and key run at once.';
GRANT SELECT (concurrency_key, concurrency_max) ON wfe.run_stages TO wfe_reader, wfe_operator;

-- A key's attempts in flight (the claim's count), and its queued ones not
-- held (the release's count): both bounded by max (LIMIT), whatever the backlog.
CREATE INDEX run_stages_keyed ON wfe.run_stages (queue, state, tenant, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND held_until IS NULL
      AND state IN ('queued', 'dispatched', 'running');
-- A key's held attempts, next first (the release).
CREATE INDEX run_stages_key_held ON wfe.run_stages (queue, tenant, concurrency_key, priority DESC, ready_at)
    WHERE concurrency_key IS NOT NULL AND state = 'queued' AND held_until = 'infinity';

-- Keys whose lock an ending attempt could not take at once: the next
-- worker round releases what fits (wfe._recheck_concurrency).  Key values
-- come from runs' data: no role reads this table.
CREATE TABLE wfe.concurrency_recheck (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text NOT NULL,
    tenant text NOT NULL,
    key    text NOT NULL,
    max    int NOT NULL,
    at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.concurrency_recheck IS
'A key of keyed concurrency whose lock an ending attempt could only try, and missed: the next worker round releases its held attempts that fit.';
REVOKE ALL ON wfe.concurrency_recheck FROM PUBLIC;

CREATE FUNCTION wfe._recheck_concurrency()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_recheck_concurrency' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._recheck_concurrency() IS
'Releases the held attempts that fit of the keys in wfe.concurrency_recheck (emptying it), waiting for each key''s lock in order; returns how many keys it rechecked.';
REVOKE ALL ON FUNCTION wfe._recheck_concurrency() FROM PUBLIC;

CREATE OR REPLACE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       -- (by attempt: the view runs as its reader, who may not see fences)
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- held by a rate limit until its token is due, or naming none configured (78_rate_limits.sql)
    SELECT CASE WHEN st.held_until = 'infinity' THEN 'rate limit unknown' ELSE 'rate limited' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.rate_limit || CASE WHEN st.held_until = 'infinity' THEN ' is not configured'
                                 ELSE ' token due in '
                                      || wfe.human_ms(greatest(0, extract(epoch FROM st.held_until - now()) * 1000))
                            END
      FROM wfe.run_stages AS st
     WHERE st.held_until IS NOT NULL AND st.state = 'queued'
       AND NOT (st.held_until = 'infinity' AND st.concurrency_key IS NOT NULL
                AND (st.rate_limit IS NULL OR EXISTS (SELECT 1 FROM wfe.rate_limits AS l
                                                       WHERE l.name = st.rate_limit)))
    UNION ALL
    -- held by keyed concurrency until an attempt of its key ends (79_concurrency.sql)
    SELECT 'concurrency limited', st.run_id, st.stage, st.attempt, st.ready_at,
           'key full: ' || st.concurrency_max || ' in flight'
      FROM wfe.run_stages AS st
     WHERE st.held_until = 'infinity' AND st.state = 'queued' AND st.concurrency_key IS NOT NULL
       AND (st.rate_limit IS NULL OR EXISTS (SELECT 1 FROM wfe.rate_limits AS l WHERE l.name = st.rate_limit))
    UNION ALL
    -- held by its queue's open circuit, or behind the half-open probe (79_circuits.sql)
    SELECT 'circuit open', st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN c.state = 'open' THEN ' open, half opens in '
                                 || wfe.human_ms(greatest(0, extract(epoch FROM c.since - now()) * 1000 + c.open_ms))
                            ELSE ' half open: one probe' END
      FROM wfe.circuits AS c
      JOIN wfe.run_stages AS st ON st.queue = c.queue AND st.state = 'queued'
     WHERE c.state <> 'closed'
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, attempts a rate limit, keyed concurrency or an open circuit holds, dispatches unpublished for a minute, open dead letters.';
GRANT SELECT ON wfe.dashboard_stuck TO wfe_reader, wfe_operator;

-- Map visibility (issue 22: a map's element counts in wfe.report and
-- wfe.run_mermaid; a map item's rate limit, one key per element).  The
-- changed bodies (report, run_mermaid, _insert_run_stages) are in the final
-- bodies below.
-- A map's elements counted by state: its counter row's items (bound at
-- release) and released, and one count per stage state over its element rows
-- (the run_stages_elements index).  Every state is present, zero or not, so
-- a reader needs no default; the elements max_concurrency still holds back
-- are waiting (items - released of them).  NULL before the map's release.
CREATE FUNCTION wfe._map_element_counts(p_run_id bigint, p_stage text, p_ordinal int)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object(
               'items', m.total, 'released', m.released,
               'waiting', count(*) FILTER (WHERE st.state = 'waiting'),
               'queued', count(*) FILTER (WHERE st.state = 'queued'),
               'dispatched', count(*) FILTER (WHERE st.state = 'dispatched'),
               'running', count(*) FILTER (WHERE st.state = 'running'),
               'retry_scheduled', count(*) FILTER (WHERE st.state = 'retry_scheduled'),
               'completed', count(*) FILTER (WHERE st.state = 'completed'),
               'failed', count(*) FILTER (WHERE st.state = 'failed'),
               'timed_out', count(*) FILTER (WHERE st.state = 'timed_out'),
               'cancelled', count(*) FILTER (WHERE st.state = 'cancelled'),
               'skipped', count(*) FILTER (WHERE st.state = 'skipped'))
      FROM wfe.run_maps AS m
      LEFT JOIN wfe.run_stages AS st
             ON st.run_id = m.run_id AND st.ordinal = p_ordinal AND st.element IS NOT NULL
     WHERE m.run_id = p_run_id AND m.stage = p_stage
     GROUP BY m.total, m.released;
END;
COMMENT ON FUNCTION wfe._map_element_counts(bigint, text, int) IS
'A released map''s elements for wfe.report and wfe.run_mermaid: items, released, and a count per stage state; NULL before its release.';
REVOKE ALL ON FUNCTION wfe._map_element_counts(bigint, text, int) FROM PUBLIC;

-- run_stages_fair for fair queues only (issue 24, fairness2): the column
-- run_stages.fair, set at release and when a queue's fairness changes
-- (configure_queue, in the final bodies), is in the index's predicate, so
-- the tasks of queues that are not fair take no entry.  (No queue was
-- fair in 0.2.0: every row starts false.)
ALTER TABLE wfe.run_stages ADD COLUMN fair boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN wfe.run_stages.fair IS
'Whether the task''s queue serves tenants fairly (fairness = ''tenant''), set at release and when the queue''s fairness changes: only such tasks have an entry in run_stages_fair.';
GRANT SELECT (fair) ON wfe.run_stages TO wfe_reader, wfe_operator;
DROP INDEX wfe.run_stages_fair;
CREATE INDEX run_stages_fair ON wfe.run_stages (queue, tenant, priority DESC, ready_at)
    WHERE state = 'queued' AND held_until IS NULL AND fair;

-- ---------------------------------------------------------------------
-- Dispatch envelopes built by the core (issue 24 item 1): wfe._dispatch
-- is C now (src/core/engine/envelope.c builds the envelope,
-- src/pg/dispatch.c writes it); its text, LANGUAGE C with the same
-- signature, is in the final bodies below.  The envelope is the same as
-- 0.2.0's, but for its times: body.deadline_at and body.created_at are
-- written in UTC whatever the releasing session's TimeZone.
--
-- wfe.ack_cancel is C too (its gate: src/core/engine/cancel_ack.c; its
-- record: src/pg/cancel_ack.c), same signature, answers, events and
-- SQLSTATEs; its text is in the final bodies as well.

-- ---------------------------------------------------------------------
-- The write path (issue 24, item 3): wfe._next_due_ms, which the
-- background worker calls after every round, is PL/pgSQL (its plan kept
-- for the session, not planned at each call); its body is in the final
-- bodies below.  Nothing else in the catalog changes.
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Admission in C (issue 24, item 1): the queue and tenant task limits'
-- counts, locks, lock order and held-task release move from PL/pgSQL to
-- src/pg/admission.c, deciding with src/core/flow/admission.c; the
-- transaction's "greatest lock waited for" is C state, no longer the
-- wfe_admission.* settings.  wfe._lock_tenant, wfe._release_held and
-- wfe._recheck_admission become LANGUAGE C (final bodies below); the rest
-- goes.
-- ---------------------------------------------------------------------
DROP FUNCTION wfe._broker_admit(text, text);
DROP FUNCTION wfe._lock_queue(text);
DROP FUNCTION wfe._recheck_later(text, text);
DROP FUNCTION wfe._broker_in_flight(text);
DROP FUNCTION wfe._tenant_in_flight(text);

-- ---------------------------------------------------------------------
-- Submit in C (issue 24, items 1 and 3): wfe.submit, a child run's start
-- and the admission of one more run in flight are C (src/pg/submit.c, the
-- decisions in src/core/engine/submit.c); wfe.submit and wfe._submittable
-- keep their signatures (their C bodies are in the final bodies below),
-- and the PL/pgSQL helpers nothing calls any more go.
-- ---------------------------------------------------------------------
DROP FUNCTION wfe._idempotent_run(text, text, text, jsonb);
DROP FUNCTION wfe._run_contracts(jsonb);
DROP FUNCTION wfe._insert_run_stages(wfe.runs);
DROP FUNCTION wfe._start_child(bigint, text, int, text, text, jsonb);
DROP FUNCTION wfe._admit_run(text, text);
DROP FUNCTION wfe._traceparent(jsonb);

-- Keyed concurrency on map elements; an element redriven while its map's
-- max_concurrency is full waits for a slot (issue 22, mapconc): the count of
-- such held elements in each map's counter row (src/core/engine/map.c).
ALTER TABLE wfe.run_maps ADD COLUMN held int NOT NULL DEFAULT 0 CONSTRAINT run_maps_held CHECK (held >= 0);
COMMENT ON COLUMN wfe.run_maps.held IS
'Released elements an operator redrove while max_concurrency was full: waiting for a slot, released as the map''s elements end';

-- ---------------------------------------------------------------------
-- Circuits and flow control where operators look (issue 24, circuits2):
-- wfe.circuits keeps the half-open probe's task (probe_run_id,
-- probe_stage: in the table above, not readable by wfe_reader) so that only
-- the probe's own end decides; dashboard_queues' state shows the circuit
-- (open, for how long yet, or half_open); wfe.metrics gains
-- wfe_circuit_open, wfe_rate_limited, wfe_signals_buffered and
-- wfe_schedule_next_fire_seconds.  Same columns: replaced in place.
-- ---------------------------------------------------------------------
CREATE OR REPLACE VIEW wfe.dashboard_queues WITH (security_invoker = true) AS
WITH settings AS (
    -- NB: wfe._setting is not the readers' to call (this view is
    -- security_invoker), so the default stands here too, for a session that
    -- has not loaded the library
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY 1, 2
), started AS (
    -- attempts that started in the last hour, in runs live or finished in it
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p95,
           sum(st.attempt - 1)::double precision / nullif(sum(st.attempt), 0) AS retry_rate
      FROM wfe.runs AS r
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
       AND st.started_at >= now() - interval '1 hour' AND st.queue IS NOT NULL
     GROUP BY 1, 2
), dead AS (
    SELECT st.queue, count(*) AS dead_letters
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY st.queue
), names AS (
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT s.queue, s.track FROM started AS s
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
    UNION SELECT d.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM dead AS d LEFT JOIN wfe.queues AS q ON q.queue = d.queue
    -- a circuit is operational state every reader sees (79_circuits.sql), like wfe.queues
    UNION SELECT c.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM wfe.circuits AS c LEFT JOIN wfe.queues AS q ON q.queue = c.queue
)
SELECT n.queue, n.track,
       coalesce(l.depth, 0) AS depth,
       wfe.human_ms(extract(epoch FROM now() - l.oldest_ready) * 1000) AS oldest,
       coalesce(l.in_flight, 0) AS in_flight,
       q.max_in_flight AS max,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS wait_p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS wait_p95,
       wfe.bar(s.retry_rate, 4) AS retries,
       -- a queue's dead letters are counted on its first track only
       CASE WHEN n.track IN ('poll', 'small') THEN coalesce(d.dead_letters, 0) ELSE 0 END AS dlq,
       -- what holds its work back: paused or full, and its circuit breaker
       -- when not closed (open: how long until it half opens)
       concat_ws(', ',
                 CASE WHEN q.paused THEN 'paused'
                      WHEN sum(l.in_flight) OVER (PARTITION BY n.queue) >= q.max_in_flight THEN 'full' END,
                 CASE c.state WHEN 'open' THEN 'open '
                      || wfe.human_ms(greatest(0, extract(epoch FROM c.since - now()) * 1000 + c.open_ms))
                      WHEN 'half_open' THEN 'half_open' END) AS state
  FROM names AS n
  LEFT JOIN wfe.queues AS q ON q.queue = n.queue
  LEFT JOIN wfe.circuits AS c ON c.queue = n.queue
  LEFT JOIN live AS l ON l.queue = n.queue AND l.track = n.track
  LEFT JOIN started AS s ON s.queue = n.queue AND s.track = n.track
  LEFT JOIN dead AS d ON d.queue = n.queue
 ORDER BY n.queue, n.track;
COMMENT ON VIEW wfe.dashboard_queues IS
'Per queue and track (poll, or the broker''s small and large): depth, oldest ready age, in flight and limit, dequeue wait p50/p95 and retry rate over the last hour, open dead letters, and what holds its work back: paused or full, its circuit breaker open (for how long yet) or half_open.';

CREATE OR REPLACE VIEW wfe.metrics WITH (security_invoker = true) AS
WITH settings AS (
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL    -- wfe._stage_clocked
     GROUP BY 1, 2
), tracks AS (
    -- every configured queue has its series, 0 when idle (KEDA scales to zero on it)
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
), queues AS (
    SELECT t.queue FROM tracks AS t GROUP BY t.queue
), dead AS (
    -- an in-database action's stage has no queue: ''
    SELECT coalesce(st.queue, '') AS queue, count(*) AS dead
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY 1
), rate_held AS (
    -- held for a token (held_until its due), or by a bucket not configured
    -- (infinity); an infinite hold of a configured bucket's attempt with a
    -- concurrency key is its key's (dashboard_stuck says the same)
    SELECT st.rate_limit AS bucket, count(*) AS held
      FROM wfe.run_stages AS st
     WHERE st.held_until IS NOT NULL AND st.state = 'queued' AND st.rate_limit IS NOT NULL
       AND (st.held_until <> 'infinity' OR st.concurrency_key IS NULL
            OR NOT EXISTS (SELECT 1 FROM wfe.rate_limits AS l WHERE l.name = st.rate_limit))
     GROUP BY 1
), buffered AS (
    -- a finished run's signal no wait took is kept with it, but not buffered
    SELECT g.signal, count(*) AS buffered
      FROM wfe.signals AS g
     WHERE g.taken_at IS NULL
       AND EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = g.run_id AND r.finished_at IS NULL)
     GROUP BY 1
), counters(metric, labelled, help) AS (
    VALUES ('wfe_runs_finished_total', true, 'Runs that finished, per workflow and final state.'),
           ('wfe_stage_attempts_total', true,
            'Attempts that ended, per workflow, stage and outcome (completed, failed, timed_out, cancelled).'),
           ('wfe_cache_hits_total', false,
            'Cached stages released with a result from the cache (hit) or from the attempt in flight under their key (coalesced).'),
           ('wfe_cache_misses_total', false, 'Cached stages released with no result under their key, so run.'),
           ('wfe_idempotent_submits_total', true,
            'Submits with an idempotency key: result created (a new run) or deduplicated (the existing run).')
)
SELECT 'wfe_runs' AS metric, jsonb_build_object('workflow', r.workflow, 'state', r.state) AS labels,
       count(*)::double precision AS value, 'gauge' AS kind,
       'Runs in flight, per workflow and state.' AS help
  FROM wfe.runs AS r
 WHERE r.finished_at IS NULL
 GROUP BY r.workflow, r.state
UNION ALL
SELECT k.metric, coalesce(c.labels, '{}'), coalesce(sum(c.value), 0)::double precision, 'counter', k.help
  FROM counters AS k
  LEFT JOIN wfe.metric_counters AS c ON c.metric = k.metric
 GROUP BY k.metric, c.labels, k.labelled, k.help
 -- a counter without labels is there at 0 before it first counts
HAVING c.labels IS NOT NULL OR NOT k.labelled
UNION ALL
SELECT 'wfe_queue_depth', jsonb_build_object('queue', t.queue, 'track', t.track),
       coalesce(l.depth, 0)::double precision, 'gauge',
       'Tasks queued (ready, not yet handed out), per queue and track (poll, or the broker''s small and large).'
  FROM tracks AS t
  LEFT JOIN live AS l ON l.queue = t.queue AND l.track = t.track
UNION ALL
SELECT 'wfe_queue_oldest_ready_seconds', jsonb_build_object('queue', q.queue),
       coalesce(extract(epoch FROM now() - (SELECT min(l.oldest_ready) FROM live AS l WHERE l.queue = q.queue)), 0)::double precision,
       'gauge', 'Age of the oldest queued task of the queue, in seconds (0: none queued).'
  FROM queues AS q
UNION ALL
SELECT 'wfe_tasks_in_flight', jsonb_build_object('queue', q.queue),
       coalesce((SELECT sum(l.in_flight) FROM live AS l WHERE l.queue = q.queue), 0)::double precision,
       'gauge', 'Tasks dispatched or running, per queue.'
  FROM queues AS q
UNION ALL
SELECT 'wfe_outbox_pending', '{}', count(*)::double precision, 'gauge',
       'Outbox messages not yet published.'
  FROM wfe.outbox AS o
 WHERE o.state = 'pending'
UNION ALL
SELECT 'wfe_outbox_oldest_pending_seconds', '{}',
       coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::double precision, 'gauge',
       'Age of the oldest pending outbox message, in seconds (0: none pending).'
  FROM wfe.outbox AS o
 WHERE o.state = 'pending'
UNION ALL
SELECT 'wfe_dead_letters', jsonb_build_object('queue', n.queue), coalesce(d.dead, 0)::double precision, 'gauge',
       'Open (unresolved) dead letters, per queue of their stage.'
  FROM (SELECT q.queue FROM queues AS q UNION SELECT d.queue FROM dead AS d) AS n
  LEFT JOIN dead AS d ON d.queue = n.queue
UNION ALL
SELECT 'wfe_timers_due', '{}', count(*)::double precision, 'gauge',
       'Timers due and not fired yet (more than a few: the background worker or wfe.tick is behind).'
  FROM wfe.timers AS t
 WHERE t.fired_at IS NULL AND t.due_at <= now()
UNION ALL
-- circuits and rate limits are configuration every reader sees, like wfe.queues
SELECT 'wfe_circuit_open', jsonb_build_object('queue', c.queue),
       CASE c.state WHEN 'open' THEN 1 WHEN 'half_open' THEN 0.5 ELSE 0 END::double precision, 'gauge',
       'Whether the queue''s circuit breaker is open (1), half open: one probe goes (0.5), or closed (0).'
  FROM wfe.circuits AS c
UNION ALL
SELECT 'wfe_rate_limited', jsonb_build_object('bucket', n.bucket), coalesce(h.held, 0)::double precision, 'gauge',
       'Attempts held by the rate limit now: queued, waiting for a token (or for a bucket not configured).'
  FROM (SELECT l.name AS bucket FROM wfe.rate_limits AS l UNION SELECT h.bucket FROM rate_held AS h) AS n
  LEFT JOIN rate_held AS h ON h.bucket = n.bucket
UNION ALL
SELECT 'wfe_signals_buffered', jsonb_build_object('signal', n.signal), coalesce(b.buffered, 0)::double precision,
       'gauge', 'Signals received for a wait not released yet, kept (buffered) until it is, per signal.'
  FROM (SELECT c.ref AS signal FROM wfe.contracts AS c WHERE c.kind = 'signal'
        UNION SELECT b.signal FROM buffered AS b) AS n
  LEFT JOIN buffered AS b ON b.signal = n.signal
UNION ALL
SELECT 'wfe_schedule_next_fire_seconds', jsonb_build_object('schedule', s.name),
       extract(epoch FROM s.next_fire_at - now())::double precision, 'gauge',
       'Seconds until the schedule fires next (below 0: overdue); none while it is paused or has ended.'
  FROM wfe.schedule_defs AS s
 WHERE NOT s.paused AND s.next_fire_at IS NOT NULL;
COMMENT ON VIEW wfe.metrics IS
'The Prometheus data model, one row per series: metric name, labels, value, kind (gauge or counter), help; under the reader''s row-level security.';

-- ---------------------------------------------------------------------
-- A submit that pays less up front (issue 24 item 3, submit2): a run's
-- definition_id has no foreign key (definitions are never deleted: its
-- check locked the definition's row at every submit, a MultiXact each
-- under concurrent submits), and the tenant rule is C in one place
-- (src/pg/tenants.c): wfe.my_tenants and wfe._tenant_ok, in the final
-- bodies below.
-- ---------------------------------------------------------------------
ALTER TABLE wfe.runs DROP CONSTRAINT runs_definition_id_fkey;

-- ---------------------------------------------------------------------
-- A submit, third pass (issue 24 item 3, submit3): a stage row has no
-- foreign key to its run (its check was a statement per stage row of every
-- submit and map); its run's deletion takes it through wfe.runs_deleted.
-- ---------------------------------------------------------------------
ALTER TABLE wfe.run_stages DROP CONSTRAINT run_stages_run_id_fkey;
-- Trigger: no stage row outlives its run, whoever deletes it (retention,
-- an owner's DELETE or TRUNCATE ... CASCADE), as the foreign key's cascade
-- did; it runs as the tables' owner, as the cascade did, and deletes only
-- the rows of the runs the statement deleted.
CREATE FUNCTION wfe._runs_deleted()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE wfe.run_stages;
    ELSE
        -- an array, not a join: the transition table has no statistics,
        -- and the primary key's index is the way to a run's rows
        DELETE FROM wfe.run_stages AS st WHERE st.run_id = ANY (ARRAY(SELECT g.run_id FROM gone AS g));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION wfe._runs_deleted() IS
'Trigger: deletes the stage rows of the runs a statement deleted (or truncates them with wfe.runs).';
REVOKE ALL ON FUNCTION wfe._runs_deleted() FROM PUBLIC;
CREATE TRIGGER runs_deleted AFTER DELETE ON wfe.runs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION wfe._runs_deleted();
CREATE TRIGGER runs_truncated AFTER TRUNCATE ON wfe.runs
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._runs_deleted();
-- The state guards fire AFTER the update (a BEFORE ROW trigger has the row
-- locked first: a WAL record more at every state change).
DROP TRIGGER run_stages_state_guard ON wfe.run_stages;
DROP TRIGGER runs_state_guard ON wfe.runs;
-- AFTER, not BEFORE: a BEFORE ROW UPDATE trigger has the row locked before
-- its update, a WAL record more at every state change (transitions.c).
CREATE TRIGGER run_stages_state_guard
    AFTER UPDATE OF state ON wfe.run_stages
    FOR EACH ROW WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION wfe._stage_state_guard();
CREATE TRIGGER runs_state_guard
    AFTER UPDATE OF state ON wfe.runs
    FOR EACH ROW WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION wfe._run_state_guard();

-- ---------------------------------------------------------------------
-- The dashboards at 120 columns (tidy): dashboard_outbox's broker column
-- (up/down, was the boolean connected), lease (was lease_age) and a
-- last_error cut to 30 characters; an open circuit whose time is up reads
-- "open, ending" in dashboard_queues and "half opens now" in
-- dashboard_stuck, as a due token reads "token due now".
-- ---------------------------------------------------------------------
DROP VIEW wfe.dashboard_outbox;
CREATE VIEW wfe.dashboard_outbox WITH (security_invoker = true) AS
SELECT (SELECT count(*) FROM wfe.outbox AS o WHERE o.state = 'pending') AS pending,
       (SELECT count(*) FROM wfe.outbox AS o WHERE o.state = 'claimed') AS claimed,
       wfe.human_ms(extract(epoch FROM now() - (SELECT min(o.created_at) FROM wfe.outbox AS o
                                                 WHERE o.state = 'pending')) * 1000) AS oldest,
       (SELECT round(count(*) / 60.0, 1) FROM wfe.outbox AS o
         WHERE o.state = 'published' AND o.published_at >= now() - interval '1 minute') AS per_s,
       (SELECT count(*) FROM wfe.outbox AS o
         WHERE o.state = 'pending' AND o.last_error LIKE 'unroutable:%') AS unroutable,
       CASE l.connected WHEN true THEN 'up' WHEN false THEN 'down' END AS broker,
       l.holder,
       wfe.human_ms(extract(epoch FROM now() - l.heartbeat_at) * 1000) AS lease,
       -- cut to fit a 120-column terminal beside the rest (the whole text is
       -- in wfe.publisher_lease and wfe.outbox)
       (SELECT CASE WHEN length(e.msg) > 30 THEN left(e.msg, 29) || '…' ELSE e.msg END
          FROM (SELECT coalesce(l.last_error,
                                (SELECT o.last_error FROM wfe.outbox AS o
                                  WHERE o.state = 'pending' AND o.last_error IS NOT NULL
                                  ORDER BY o.available_at DESC LIMIT 1)) AS msg) AS e) AS last_error
  FROM wfe.publisher_lease AS l;
COMMENT ON VIEW wfe.dashboard_outbox IS
'The outbox and its publisher: pending and claimed rows, oldest pending age, messages published per second over the last minute, unroutable rows, the broker connection (up or down), lease holder and age of its last renewal, last error (cut to 30 characters).';
GRANT SELECT ON wfe.dashboard_outbox TO wfe_reader, wfe_operator;

CREATE OR REPLACE VIEW wfe.dashboard_queues WITH (security_invoker = true) AS
WITH settings AS (
    -- NB: wfe._setting is not the readers' to call (this view is
    -- security_invoker), so the default stands here too, for a session that
    -- has not loaded the library
    SELECT coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) AS threshold
), live AS (
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           count(*) FILTER (WHERE st.state = 'queued') AS depth,
           min(st.ready_at) FILTER (WHERE st.state = 'queued') AS oldest_ready,
           count(*) FILTER (WHERE st.state IN ('dispatched', 'running')) AS in_flight
      FROM wfe.run_stages AS st
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.queue IS NOT NULL
     GROUP BY 1, 2
), started AS (
    -- attempts that started in the last hour, in runs live or finished in it
    SELECT st.queue,
           CASE WHEN q.delivery = 'broker' THEN
                CASE WHEN octet_length(coalesce(st.input, '{}')::text) > s.threshold THEN 'large' ELSE 'small' END
                ELSE 'poll' END AS track,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY st.started_at - st.ready_at) AS p95,
           sum(st.attempt - 1)::double precision / nullif(sum(st.attempt), 0) AS retry_rate
      FROM wfe.runs AS r
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
      LEFT JOIN wfe.queues AS q ON q.queue = st.queue
      CROSS JOIN settings AS s
     WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
       AND st.started_at >= now() - interval '1 hour' AND st.queue IS NOT NULL
     GROUP BY 1, 2
), dead AS (
    SELECT st.queue, count(*) AS dead_letters
      FROM wfe.dead_letters AS d
      JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
     WHERE d.resolved_at IS NULL
     GROUP BY st.queue
), names AS (
    SELECT l.queue, l.track FROM live AS l
    UNION SELECT s.queue, s.track FROM started AS s
    UNION SELECT q.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END FROM wfe.queues AS q
    UNION SELECT d.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM dead AS d LEFT JOIN wfe.queues AS q ON q.queue = d.queue
    -- a circuit is operational state every reader sees (79_circuits.sql), like wfe.queues
    UNION SELECT c.queue, CASE WHEN q.delivery = 'broker' THEN 'small' ELSE 'poll' END
      FROM wfe.circuits AS c LEFT JOIN wfe.queues AS q ON q.queue = c.queue
)
SELECT n.queue, n.track,
       coalesce(l.depth, 0) AS depth,
       wfe.human_ms(extract(epoch FROM now() - l.oldest_ready) * 1000) AS oldest,
       coalesce(l.in_flight, 0) AS in_flight,
       q.max_in_flight AS max,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS wait_p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS wait_p95,
       wfe.bar(s.retry_rate, 4) AS retries,
       -- a queue's dead letters are counted on its first track only
       CASE WHEN n.track IN ('poll', 'small') THEN coalesce(d.dead_letters, 0) ELSE 0 END AS dlq,
       -- what holds its work back: paused or full, and its circuit breaker
       -- when not closed (open: how long until it half opens, or 'open, ending')
       concat_ws(', ',
                 CASE WHEN q.paused THEN 'paused'
                      WHEN sum(l.in_flight) OVER (PARTITION BY n.queue) >= q.max_in_flight THEN 'full' END,
                 CASE c.state WHEN 'open' THEN 'open'
                      || CASE WHEN extract(epoch FROM c.since - now()) * 1000 + c.open_ms > 0
                              THEN ' ' || wfe.human_ms(extract(epoch FROM c.since - now()) * 1000 + c.open_ms)
                              ELSE ', ending' END
                      WHEN 'half_open' THEN 'half_open' END) AS state
  FROM names AS n
  LEFT JOIN wfe.queues AS q ON q.queue = n.queue
  LEFT JOIN wfe.circuits AS c ON c.queue = n.queue
  LEFT JOIN live AS l ON l.queue = n.queue AND l.track = n.track
  LEFT JOIN started AS s ON s.queue = n.queue AND s.track = n.track
  LEFT JOIN dead AS d ON d.queue = n.queue
 ORDER BY n.queue, n.track;
COMMENT ON VIEW wfe.dashboard_queues IS
'Per queue and track (poll, or the broker''s small and large): depth, oldest ready age, in flight and limit, dequeue wait p50/p95 and retry rate over the last hour, open dead letters, and what holds its work back: paused or full, its circuit breaker open (for how long yet) or half_open.';
GRANT SELECT ON wfe.dashboard_queues TO wfe_reader, wfe_operator;

CREATE OR REPLACE VIEW wfe.dashboard_stuck WITH (security_invoker = true) AS
SELECT x.problem, x.run_id, x.stage, x.attempt,
       wfe.human_ms(extract(epoch FROM now() - x.since) * 1000) AS age,
       CASE WHEN length(x.detail) > 36 THEN left(x.detail, 35) || '…' ELSE x.detail END AS detail
  FROM (
    -- a run with nothing under way and nothing due: no attempt can move it
    SELECT 'no live attempt' AS problem, r.run_id, NULL::text AS stage, NULL::int AS attempt,
           coalesce((SELECT max(st.finished_at) FROM wfe.run_stages AS st WHERE st.run_id = r.run_id),
                    r.submitted_at) AS since,
           r.workflow || ' ' || r.state AS detail
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st WHERE st.run_id = r.run_id
                          AND st.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       -- a cached stage waiting on the attempt in flight under its key moves when that one ends
       AND NOT EXISTS (SELECT 1 FROM wfe.run_stages AS st
                         JOIN wfe.run_stages AS l ON l.cache_key = st.cache_key AND l.tenant = st.tenant
                        WHERE st.run_id = r.run_id AND st.state = 'waiting' AND st.cache = 'waiting'
                          AND l.state IN ('queued', 'dispatched', 'running', 'retry_scheduled'))
       AND NOT EXISTS (SELECT 1 FROM wfe.timers AS t WHERE t.run_id = r.run_id AND t.fired_at IS NULL)
    UNION ALL
    -- the clocks should have fired (the background worker is down or behind)
    SELECT 'past deadline', st.run_id, st.stage, st.attempt, st.deadline_at, st.state || ' on ' || st.queue
      FROM wfe.run_stages AS st
     WHERE st.state IN ('queued', 'dispatched', 'running') AND st.deadline_at < now() - interval '5 seconds'
    UNION ALL
    SELECT 'timer overdue', t.run_id, t.stage, t.attempt, t.due_at, t.kind
      FROM wfe.timers AS t
     WHERE t.fired_at IS NULL AND t.due_at < now() - interval '5 seconds'
    UNION ALL
    -- waiting on a queue that does not release
    SELECT CASE WHEN q.paused THEN 'queue paused' ELSE 'queue full' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN q.paused THEN '' ELSE ' at max_in_flight ' || q.max_in_flight END
      FROM wfe.run_stages AS st
      JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.state = 'queued'
       AND (q.paused OR st.queue IN (SELECT s2.queue FROM wfe.run_stages AS s2
                                      WHERE s2.queue = q.queue AND s2.state IN ('dispatched', 'running')
                                      GROUP BY s2.queue HAVING count(*) >= q.max_in_flight))
    UNION ALL
    -- waiting on a tenant at its max_tasks_in_flight (broker: held; poll: not claimed)
    SELECT 'tenant full', st.run_id, st.stage, st.attempt, st.ready_at,
           l.tenant || ' at max_tasks_in_flight ' || l.max_tasks_in_flight
      FROM wfe.tenant_limits AS l
      JOIN wfe.runs AS r ON r.tenant = l.tenant AND r.finished_at IS NULL
      JOIN wfe.run_stages AS st ON st.run_id = r.run_id
     WHERE l.max_tasks_in_flight IS NOT NULL
       AND st.state = 'queued' AND st.queue IS NOT NULL AND st.handler IS NULL
       -- (by attempt: the view runs as its reader, who may not see fences)
       AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                        WHERE o.run_id = st.run_id AND o.stage = st.stage AND o.attempt = st.attempt
                          AND o.kind = 'dispatch' AND o.state <> 'published')
       AND (SELECT count(*) FROM wfe.runs AS r2 JOIN wfe.run_stages AS s2 ON s2.run_id = r2.run_id
             WHERE r2.tenant = l.tenant AND r2.finished_at IS NULL AND s2.queue IS NOT NULL
               AND s2.handler IS NULL AND s2.state IN ('dispatched', 'running')) >= l.max_tasks_in_flight
    UNION ALL
    -- held by a rate limit until its token is due, or naming none configured (78_rate_limits.sql)
    SELECT CASE WHEN st.held_until = 'infinity' THEN 'rate limit unknown' ELSE 'rate limited' END,
           st.run_id, st.stage, st.attempt, st.ready_at,
           st.rate_limit || CASE WHEN st.held_until = 'infinity' THEN ' is not configured'
                                 WHEN st.held_until <= now() THEN ' token due now'
                                 ELSE ' token due in '
                                      || wfe.human_ms(extract(epoch FROM st.held_until - now()) * 1000)
                            END
      FROM wfe.run_stages AS st
     WHERE st.held_until IS NOT NULL AND st.state = 'queued'
       AND NOT (st.held_until = 'infinity' AND st.concurrency_key IS NOT NULL
                AND (st.rate_limit IS NULL OR EXISTS (SELECT 1 FROM wfe.rate_limits AS l
                                                       WHERE l.name = st.rate_limit)))
    UNION ALL
    -- held by keyed concurrency until an attempt of its key ends (79_concurrency.sql)
    SELECT 'concurrency limited', st.run_id, st.stage, st.attempt, st.ready_at,
           'key full: ' || st.concurrency_max || ' in flight'
      FROM wfe.run_stages AS st
     WHERE st.held_until = 'infinity' AND st.state = 'queued' AND st.concurrency_key IS NOT NULL
       AND (st.rate_limit IS NULL OR EXISTS (SELECT 1 FROM wfe.rate_limits AS l WHERE l.name = st.rate_limit))
    UNION ALL
    -- held by its queue's open circuit, or behind the half-open probe (79_circuits.sql)
    SELECT 'circuit open', st.run_id, st.stage, st.attempt, st.ready_at,
           st.queue || CASE WHEN c.state = 'open' THEN ' open, half opens '
                                 || CASE WHEN extract(epoch FROM c.since - now()) * 1000 + c.open_ms > 0
                                         THEN 'in ' || wfe.human_ms(extract(epoch FROM c.since - now()) * 1000 + c.open_ms)
                                         ELSE 'now' END
                            ELSE ' half open: one probe' END
      FROM wfe.circuits AS c
      JOIN wfe.run_stages AS st ON st.queue = c.queue AND st.state = 'queued'
     WHERE c.state <> 'closed'
    UNION ALL
    -- a dispatch the broker has not taken for a minute
    SELECT 'dispatch unpublished', o.run_id, o.stage, o.attempt, o.created_at,
           coalesce(o.last_error, o.routing_key)
      FROM wfe.outbox AS o
     WHERE o.kind = 'dispatch' AND o.state <> 'published' AND o.created_at < now() - interval '1 minute'
    UNION ALL
    SELECT 'dead letter', d.run_id, d.stage, d.attempt, d.at, d.reason
      FROM wfe.dead_letters AS d
     WHERE d.resolved_at IS NULL
  ) AS x
 ORDER BY x.since, x.run_id, x.stage;
COMMENT ON VIEW wfe.dashboard_stuck IS
'Work that does not move: runs with no live attempt and no due timer, attempts past their deadline, overdue timers, tasks on a paused or full queue or of a full tenant, attempts a rate limit, keyed concurrency or an open circuit holds, dispatches unpublished for a minute, open dead letters.';
GRANT SELECT ON wfe.dashboard_stuck TO wfe_reader, wfe_operator;

-- ---------------------------------------------------------------------
-- Releases without scans (issue 24, flowscan): run_stages_live carries
-- the tenant, so that whether a tenant has tasks queued in a queue is one
-- probe (src/pg/admission.c, the releases of held tasks); no index more.
-- ---------------------------------------------------------------------
DROP INDEX wfe.run_stages_live;
CREATE INDEX run_stages_live ON wfe.run_stages (queue, state, tenant)
    WHERE state IN ('queued', 'dispatched', 'running');     -- wfe._stage_clocked

-- Final bodies: every function whose text changed in 0.3.0, as src/sql has it.
-- (Written by the same rule as the sections above: the whole text, copied.)

CREATE OR REPLACE FUNCTION wfe.my_tenants()
RETURNS text[] AS 'MODULE_PATHNAME', 'wfe_my_tenants'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION wfe._tenant_ok(p_tenant text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_tenant_ok'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION wfe._check_tenant_member(p_role regrole, p_tenant text)
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

CREATE OR REPLACE FUNCTION wfe._register_contract(p_ref text, p_kind text, p_queue text,
                                       p_handler regprocedure,
                                       p_input_schema jsonb, p_output_schema jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    version_text text;
    fn           record;
    old          wfe.contracts;
    differs      text[];
    inserted     bigint;
BEGIN
    IF p_ref IS NULL THEN
        RAISE EXCEPTION 'contract reference must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_ref !~ '^[a-z][a-z0-9_.-]*@[1-9][0-9]*$' THEN
        RAISE EXCEPTION 'invalid contract reference "%"', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A contract reference is name@N: a name matching [a-z][a-z0-9_.-]* and a version number from 1, e.g. cache.lookup@1.';
    END IF;
    version_text := split_part(p_ref, '@', 2);
    IF length(version_text) > 10 OR version_text::numeric > 2147483647 THEN
        RAISE EXCEPTION 'version of contract reference "%" is out of range', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Contract versions are integers from 1 to 2147483647.';
    END IF;

    IF p_kind = 'worker' THEN
        IF p_queue IS NULL THEN
            RAISE EXCEPTION 'worker contract "%" needs a queue', p_ref
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
    ELSIF p_kind = 'action' AND (p_handler IS NULL) = (p_queue IS NULL) THEN
        RAISE EXCEPTION 'action contract "%" needs exactly one of handler and queue', p_ref
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An action either runs in the database (handler => a function (input jsonb) RETURNS jsonb) or is dispatched to workers (queue => a queue name).';
    END IF;

    PERFORM wfe._check_queue_name(p_queue);

    IF p_handler IS NOT NULL THEN
        SELECT p.prokind, p.pronargs, p.proargtypes, p.prorettype, p.proretset
          INTO fn
          FROM pg_catalog.pg_proc AS p
         WHERE p.oid = p_handler;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'action handler with OID % does not exist', p_handler::oid
                USING ERRCODE = 'undefined_function';
        END IF;
        IF fn.prokind <> 'f' OR fn.pronargs <> 1
           OR fn.proargtypes[0] <> 'pg_catalog.jsonb'::regtype
           OR fn.prorettype <> 'pg_catalog.jsonb'::regtype OR fn.proretset
        THEN
            RAISE EXCEPTION 'action handler % must be a function (input jsonb) RETURNS jsonb', p_handler
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Declare it as CREATE FUNCTION ... (input jsonb) RETURNS jsonb; wfe runs it with the bound input and stores its result.';
        END IF;
        -- it will run as the caller: refuse what the caller could not run itself
        PERFORM wfe._check_handler(p_handler, wfe._caller());
    END IF;

    -- NULL schemas mean "no constraint", like the default '{}'.
    p_input_schema := coalesce(p_input_schema, '{}');
    p_output_schema := coalesce(p_output_schema, '{}');
    PERFORM wfe._check_json_schema(p_input_schema, 'input_schema');
    PERFORM wfe._check_json_schema(p_output_schema, 'output_schema');

    INSERT INTO wfe.contracts AS c
           (ref, kind, name, version, queue, handler, input_schema, output_schema,
            created_at, created_by, run_as)
    VALUES (p_ref, p_kind, split_part(p_ref, '@', 1), version_text::int, p_queue,
            p_handler, p_input_schema, p_output_schema, now(), wfe._identity(),
            CASE WHEN p_handler IS NOT NULL THEN wfe._caller() END)
    ON CONFLICT (ref) DO NOTHING;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 THEN
        RETURN;
    END IF;

    -- The ref exists (perhaps registered concurrently, now committed):
    -- identical content is a no-op, anything else is refused.
    SELECT * INTO STRICT old FROM wfe.contracts AS c WHERE c.ref = p_ref;
    differs := array_remove(ARRAY[
        CASE WHEN old.kind <> p_kind THEN 'kind' END,
        CASE WHEN old.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN old.handler IS DISTINCT FROM p_handler THEN 'handler' END,
        CASE WHEN old.input_schema <> p_input_schema THEN 'input_schema' END,
        CASE WHEN old.output_schema <> p_output_schema THEN 'output_schema' END], NULL);
    IF cardinality(differs) > 0 THEN
        RAISE EXCEPTION 'contract "%" is already registered with different content', p_ref
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('A registered contract version is immutable; this registration differs in %s.',
                                  array_to_string(differs, ', ')),
                  HINT = format('Register the changed contract as a new version, e.g. %s@%s.',
                                old.name, old.version::bigint + 1);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION wfe._contracts_json()
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(x.entry ORDER BY x.entry ->> 'ref', x.entry ->> 'kind'), '[]'::jsonb)
      FROM (SELECT jsonb_build_object('ref', c.ref,
                                      'kind', c.kind,
                                      'queue', c.queue,
                                      'handler', c.handler IS NOT NULL,
                                      'input_schema', c.input_schema,
                                      'output_schema', c.output_schema) AS entry
              FROM wfe.contracts AS c
            UNION ALL
            SELECT jsonb_build_object('ref', CASE WHEN v.named THEN d.workflow || '@' || d.version
                                                 ELSE d.workflow END,
                                      'kind', 'workflow',
                                      'input_schema', d.plan -> 'context_schema')
              FROM wfe.definitions AS d
             CROSS JOIN (VALUES (true), (false)) AS v (named)
             WHERE d.state <> 'draft' AND (v.named OR d.state = 'active')) AS x);
END
$$;

CREATE OR REPLACE FUNCTION wfe.compile(source text)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._rate_limit_warnings(wfe._compile(source, wfe._contracts_json()));
END;

CREATE OR REPLACE FUNCTION wfe._store_plan(p_definition_id bigint, p_plan jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.plan_stages (definition_id, ordinal, stage, type, spec)
    SELECT p_definition_id, s.ordinality, s.value ->> 'name', s.value ->> 'type', s.value
      FROM jsonb_array_elements(p_plan -> 'stages') WITH ORDINALITY AS s
    UNION ALL
    SELECT p_definition_id, jsonb_array_length(p_plan -> 'stages') + f.ordinality,
           f.value ->> 'name', 'finaliser', f.value
      FROM jsonb_array_elements(coalesce(p_plan -> 'finalisers', '[]')) WITH ORDINALITY AS f;

    INSERT INTO wfe.plan_edges (definition_id, from_stage, to_stage, kind, ordinal,
                                condition, to_terminal)
    WITH st AS (
        SELECT s.value AS spec, s.value ->> 'name' AS name, s.value ->> 'type' AS type
          FROM jsonb_array_elements(p_plan -> 'stages') AS s
    ), e (from_stage, to_stage, kind, ordinal, condition) AS (
        SELECT st.name, st.spec ->> 'on_success', 'success', 1::bigint, NULL::text
          FROM st WHERE st.spec ->> 'on_success' IS NOT NULL
        UNION ALL
        SELECT st.name, st.spec ->> 'on_failure', 'failure', 1, NULL
          FROM st WHERE st.spec ->> 'on_failure' IS NOT NULL
        UNION ALL
        SELECT st.name, b.value ->> 'next', 'branch', b.ordinality, b.value ->> 'when'
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'decision'
                                             THEN st.spec -> 'branches' ELSE '[]' END)
                   WITH ORDINALITY AS b
        UNION ALL
        SELECT st.name, st.spec ->> 'on_evaluation_error', 'evaluation_error', 1, NULL
          FROM st WHERE st.spec ->> 'on_evaluation_error' IS NOT NULL
        UNION ALL
        SELECT st.name, st.spec ->> 'on_timeout', 'timeout', 1, NULL
          FROM st WHERE st.spec ->> 'on_timeout' IS NOT NULL
        UNION ALL
        SELECT st.name, b.value #>> '{}', 'fork', b.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'fork'
                                             THEN st.spec -> 'branches' ELSE '[]' END)
                   WITH ORDINALITY AS b
        UNION ALL
        SELECT r.value #>> '{}', st.name, 'join', r.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'join'
                                             THEN st.spec -> 'required' ELSE '[]' END)
                   WITH ORDINALITY AS r
        UNION ALL
        SELECT d.value #>> '{}', st.name, 'depends_on', d.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN jsonb_typeof(st.spec -> 'depends_on') = 'array'
                                             THEN st.spec -> 'depends_on' ELSE '[]' END)
                   WITH ORDINALITY AS d
    )
    SELECT p_definition_id, e.from_stage, e.to_stage, e.kind, e.ordinal, e.condition,
           NOT EXISTS (SELECT FROM st WHERE st.name = e.to_stage)
      FROM e;
END
$$;

CREATE OR REPLACE FUNCTION wfe.create_definition(source text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_result jsonb;
    v_plan   jsonb;
    v_digest text;
    n        int;
    new_id   bigint;
    stored   text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'workflow definition source must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    v_result := wfe._compile($1, wfe._contracts_json());
    IF NOT coalesce((v_result ->> 'ok')::boolean, false) THEN
        n := jsonb_array_length(v_result -> 'diagnostics');
        RAISE EXCEPTION 'workflow definition is invalid: % %', n,
                CASE WHEN n = 1 THEN 'diagnostic' ELSE 'diagnostics' END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = (v_result -> 'diagnostics')::text,
                  HINT = 'wfe.compile(source) returns the same diagnostics without raising.';
    END IF;
    v_plan := v_result -> 'plan';
    v_digest := v_result ->> 'digest';

    -- ON CONFLICT waits for a concurrent creator of the same version, so of
    -- two sessions creating it at once exactly one inserts.  No conflict
    -- target: the digest names the workflow and version, so a clash on
    -- either unique key is the same definition, and both keys must arbitrate
    -- (a non-arbiter unique index would raise instead of waiting).
    INSERT INTO wfe.definitions AS d
           (workflow, version, digest, state, source, plan, dsl_version,
            compiler_version, created_at, created_by)
    VALUES (v_plan ->> 'name', v_plan ->> 'version', v_digest, 'draft', $1, v_plan,
            v_plan ->> 'dsl_version', v_plan ->> 'compiler_version', now(), wfe._identity())
    ON CONFLICT DO NOTHING
    RETURNING d.definition_id INTO new_id;

    IF new_id IS NULL THEN
        SELECT d.digest INTO STRICT stored
          FROM wfe.definitions AS d
         WHERE d.workflow = v_plan ->> 'name' AND d.version = v_plan ->> 'version';
        IF stored = v_digest THEN
            RETURN v_digest;    -- the same definition again: nothing to do
        END IF;
        RAISE EXCEPTION 'workflow definition "%@%" already exists with a different digest',
                v_plan ->> 'name', v_plan ->> 'version'
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('The stored version has digest %s; this source compiles to %s.',
                                  stored, v_digest),
                  HINT = 'A stored definition version is immutable: give the changed definition a new version.';
    END IF;

    PERFORM wfe._store_plan(new_id, v_plan);
    RETURN v_digest;
END
$$;

CREATE OR REPLACE FUNCTION wfe._four_eyes()
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NB: load the library first (a no-op once loaded, e.g. preloaded).  Until
    -- it is loaded wfe.four_eyes is a placeholder that any role may SET for
    -- its own session; loading it defines the real, superuser-only setting
    -- and discards such a value with a warning.
    LOAD 'MODULE_PATHNAME';
    RETURN current_setting('wfe.four_eyes')::boolean;
END
$$;

CREATE OR REPLACE FUNCTION wfe.approve(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- The row lock makes a concurrent second approval wait and then see
    -- the approved state.
    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state <> 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is %, not draft', $1, $2, d.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a draft can be approved.';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not approve it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must approve it.';
    END IF;

    UPDATE wfe.definitions AS x
       SET state = 'approved', approved_at = now(), approved_by = wfe._identity()
     WHERE x.definition_id = d.definition_id;
END
$$;

CREATE OR REPLACE FUNCTION wfe.activate(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- NB: lock every version of the workflow, in definition_id order, before
    -- looking at states.  Two activations of the same workflow therefore run
    -- one after the other, and the second sees (READ COMMITTED: in its next
    -- statement's snapshot) the version the first activated; in REPEATABLE
    -- READ or SERIALIZABLE the second fails with a serialization error.
    -- NO KEY UPDATE: submits take a key-share lock on the version they pin
    -- (the runs foreign key), which must not wait for an activation.
    PERFORM FROM wfe.definitions AS x
      WHERE x.workflow = $1
      ORDER BY x.definition_id
        FOR NO KEY UPDATE;

    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state = 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is draft, not approved', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Approve it first with wfe.approve().';
    ELSIF d.state = 'active' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is already active', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not activate it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must activate it.';
    END IF;

    -- The previous active version stops serving new runs; its runs drain on
    -- their pinned plan.  Retire first: at most one version is active.
    UPDATE wfe.definitions AS x
       SET state = 'retired', retired_at = now()
     WHERE x.workflow = $1 AND x.state = 'active';

    UPDATE wfe.definitions AS x
       SET state = 'active', activated_at = now(), retired_at = NULL
     WHERE x.definition_id = d.definition_id;
END
$$;

CREATE OR REPLACE FUNCTION wfe._event(p_run_id bigint, p_tenant text, p_stage text, p_attempt int,
                           p_type text, p_detail jsonb DEFAULT NULL, p_fence bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail, fence)
    VALUES (p_run_id, p_tenant, p_stage, p_attempt, p_type, p_detail, p_fence);
END
$$;

CREATE OR REPLACE FUNCTION wfe._message_id(p_run_id bigint, p_stage text, p_attempt int, p_fence bigint,
                                p_kind text)
RETURNS uuid
AS 'MODULE_PATHNAME', 'wfe_message_id_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION wfe._notify_ready(p_queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NOTIFY dedups identical payloads within a transaction, so a batch of
    -- releases to one queue costs one notification at commit.
    IF p_queue IS NOT NULL AND wfe._setting('wfe.notify')::boolean THEN
        PERFORM pg_notify('wfe_task_ready', wfe._ready_tag(p_queue));   -- a tag: anyone may LISTEN
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION wfe._dispatch(p_run wfe.runs, p_stage wfe.run_stages)
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_dispatch_sql'
LANGUAGE C VOLATILE;

CREATE OR REPLACE FUNCTION wfe._submittable(p_workflow text)
RETURNS wfe.definitions
AS 'MODULE_PATHNAME', 'wfe_submittable'
LANGUAGE C STABLE;

CREATE OR REPLACE FUNCTION wfe.submit(workflow text, context jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL,
                           options jsonb DEFAULT '{}')
RETURNS TABLE (run_id bigint, accepted boolean)
AS 'MODULE_PATHNAME', 'wfe_submit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION wfe.cancel_run(run_id bigint, reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs;
BEGIN
    IF cancel_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(cancel_run.reason, 'reason');
    -- another tenant's run is answered as one that does not exist (and not locked)
    IF NOT coalesce((SELECT wfe._tenant_ok(x.tenant) FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id), false) THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = cancel_run.run_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF r.intent IS NOT NULL THEN
        PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'callback.late',
                           jsonb_build_object('callback', 'cancel_run', 'by', wfe._identity()));
        RETURN 'late';
    END IF;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.cancel_requested',
                       jsonb_build_object('by', wfe._identity(), 'reason', cancel_run.reason));
    PERFORM wfe._cancel(r.run_id, coalesce(cancel_run.reason, 'cancelled by ' || wfe._identity()));
    -- nothing is left to do about its dead letters
    UPDATE wfe.dead_letters AS d SET resolved_at = now(), resolved_by = wfe._identity(), resolution = 'cancelled'
     WHERE d.run_id = r.run_id AND d.resolved_at IS NULL;
    RETURN 'accepted';
END
$$;

CREATE OR REPLACE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false, fairness text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    v_was_fair   text;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._check_queue_name(configure_queue.queue);
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.fairness NOT IN ('none', 'tenant') THEN
        RAISE EXCEPTION 'fairness must be none or tenant, not "%"', configure_queue.fairness
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'tenant: claims serve the tenants with ready work by weight; NULL keeps the queue''s.';
    END IF;
    SELECT q.delivery, q.paused, q.fairness INTO v_was, v_was_paused, v_was_fair
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    -- fairness NULL: the queue keeps what it has (none when new)
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused, fairness)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused,
            coalesce(configure_queue.fairness, 'none'))
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now(),
           fairness = coalesce(configure_queue.fairness, q.fairness);
    -- The tasks waiting follow a change of fairness: run_stages_fair holds
    -- the ready tasks of fair queues only (run_stages.fair, set at release).
    IF coalesce(configure_queue.fairness, v_was_fair, 'none') <> coalesce(v_was_fair, 'none') THEN
        UPDATE wfe.run_stages AS st SET fair = (configure_queue.fairness = 'tenant')
         WHERE st.queue = configure_queue.queue AND st.state IN ('queued', 'dispatched');
    END IF;
    -- Tasks waiting in the old mode follow the queue into the new one: to
    -- broker (or resumed as broker), queued attempts get their dispatch
    -- message; to poll, dispatched attempts become claimable (a broker worker
    -- that still accepts one is answered duplicate once a poll worker has it).
    -- A paused queue keeps everything as it is until it is resumed.
    IF configure_queue.paused THEN
        NULL;                       -- paused: what waits stays queued
    ELSIF configure_queue.delivery = 'broker'
          AND (coalesce(v_was, 'poll') = 'poll' OR coalesce(v_was_paused, false)) THEN
        -- Every queued attempt without a dispatch message still to publish
        -- is re-dispatched through the engine: a new fence, a new message.
        -- (One whose earlier message was published -- broker, then poll,
        -- then broker again -- would otherwise wait for a message that is
        -- gone.)  No stage row is locked here: the engine locks the run,
        -- then the stage, and one that moved on meanwhile is passed over.
        FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
                  WHERE st.queue = configure_queue.queue AND st.state = 'queued' AND st.handler IS NULL
                    AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                     WHERE o.run_id = st.run_id AND o.stage = st.stage
                                       AND o.attempt = st.attempt AND o.fence = st.fence
                                       AND o.kind = 'dispatch' AND o.state <> 'published')
                  ORDER BY st.run_id, st.stage
        LOOP
            BEGIN
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, wfe._identity(),
                                     format('queue %s switched to broker delivery', configure_queue.queue));
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                NULL;
            END;
        END LOOP;
    ELSIF configure_queue.delivery = 'poll' AND (v_was = 'broker' OR coalesce(v_was_paused, false)) THEN
        UPDATE wfe.run_stages AS st SET state = 'queued'
         WHERE st.queue = configure_queue.queue AND st.state = 'dispatched';
        PERFORM wfe._notify_ready(configure_queue.queue);     -- resumed or switched: wake the pollers
    ELSIF configure_queue.delivery = 'broker' THEN
        -- the same mode, maybe a raised or lifted max_in_flight: what fits now goes
        PERFORM wfe._release_held(configure_queue.queue, NULL);
    ELSE
        PERFORM wfe._notify_ready(configure_queue.queue);     -- the same for pollers
    END IF;
    PERFORM wfe._wake(now());      -- the publisher declares a new broker queue's topology
END
$$;

CREATE OR REPLACE FUNCTION wfe._check_queue_grant(p_role regrole, p_queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_queue IS NULL THEN
        RAISE EXCEPTION 'role and queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_role = 0 THEN
        RAISE EXCEPTION 'a queue cannot be granted to PUBLIC'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Grant it to a role, e.g. wfe_worker for every worker, or one login role per worker pool.';
    END IF;
    PERFORM wfe._check_queue_name(p_queue);
END
$$;

CREATE OR REPLACE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_ack_cancel'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION wfe.cache_invalidate(key text DEFAULT NULL, contract text DEFAULT NULL,
                                     tenant text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n bigint;
BEGIN
    IF key IS NULL AND contract IS NULL AND tenant IS NULL THEN
        RAISE EXCEPTION 'cache_invalidate needs a key, a contract or a tenant'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'wfe.cache_invalidate(tenant => ''t'') removes all of a tenant''s entries.';
    END IF;
    PERFORM wfe._admit_name(key, 'key');
    PERFORM wfe._admit_name(contract, 'contract');
    PERFORM wfe._admit_name(tenant, 'tenant');
    IF tenant IS NOT NULL AND NOT wfe._tenant_ok(tenant) THEN
        RAISE EXCEPTION 'role "%" does not act for tenant "%"', wfe._caller()::regrole, left(tenant, 80)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator maps roles to tenants with wfe.add_tenant_member(role, tenant).';
    END IF;
    DELETE FROM wfe.cache_entries AS e
     WHERE (key IS NULL OR e.key = key)
       AND (contract IS NULL OR e.contract = contract)
       AND (tenant IS NULL OR e.tenant = tenant)
       AND wfe._tenant_ok(e.tenant);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION wfe._run_handler(p_run_id bigint, p_stage text, p_by text DEFAULT 'wfe.tick')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r         wfe.runs;
    s         wfe.run_stages;
    v_result  jsonb;
    v_error   jsonb;
    v_state   text;
    v_message text;
    v_run_as  regrole;
BEGIN
    SELECT * INTO r FROM wfe.runs AS x WHERE x.run_id = p_run_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st WHERE st.run_id = p_run_id AND st.stage = p_stage FOR UPDATE;
    IF s.state <> 'queued' OR s.handler IS NULL THEN
        RETURN false;
    END IF;
    -- the attempt carries its execution deadline like a worker's: should
    -- its running state ever outlive this transaction, the clock ends it
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now(),
           deadline_at = now() + make_interval(secs => st.exec_ms / 1000.0)
     WHERE st.run_id = p_run_id AND st.stage = p_stage;
    PERFORM wfe._event(p_run_id, r.tenant, p_stage, s.attempt, 'stage.claimed',
                       jsonb_build_object('worker_id', p_by, 'handler', s.handler::text));
    BEGIN
        -- a subtransaction: a failing handler undoes only its own writes;
        -- it runs as the role that registered it (src/pg/handler.c)
        SELECT c.run_as INTO v_run_as FROM wfe.contracts AS c WHERE c.ref = s.worker;
        IF v_run_as IS NULL THEN
            RAISE EXCEPTION 'contract % records no role for its handler to run as', s.worker
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Register the handler again as a new contract version, as the role it should run as.';
        END IF;
        v_result := wfe._invoke_handler(s.handler, v_run_as, s.input);
        -- a result over the limits fails the attempt like any handler error
        PERFORM wfe._admit(v_result, 'the handler''s result');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        v_error := jsonb_build_object('code', 'handler.error', 'sqlstate', v_state, 'message', v_message);
    END;
    PERFORM wfe._action_done(p_run_id, p_stage,
                             CASE WHEN v_error IS NULL THEN coalesce(v_result, '{}') END, v_error);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION wfe.report(run_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r wfe.runs := wfe._run(report.run_id);
BEGIN
    RETURN jsonb_build_object(
        'run_id', r.run_id,
        'workflow', r.workflow,
        'version', r.version,
        'definition_digest', r.definition_digest,
        'tenant', r.tenant,
        'execution_context', r.execution_context,
        'state', r.state,
        'intent', r.intent,
        'reason', r.reason,
        'submitted_at', r.submitted_at,
        'finished_at', r.finished_at,
        'duration_ms', round(extract(epoch FROM coalesce(r.finished_at, now()) - r.submitted_at) * 1000),
        -- the run's result, bound at a completed intent (dsl.md "Run output")
        'output', wfe._redact(r.output),
        -- a run a schedule started (69_schedules.sql): which, and for which tick
        'schedule', (SELECT x.schedule FROM wfe.schedule_runs AS x WHERE x.run_id = r.run_id),
        'scheduled_for', (SELECT x.scheduled_for FROM wfe.schedule_runs AS x WHERE x.run_id = r.run_id),
        -- child runs both ways (runtime.md "Child runs"): a child's parent is of its tenant
        'parent', CASE WHEN r.parent_run_id IS NOT NULL THEN
                      jsonb_build_object('run_id', r.parent_run_id, 'stage', r.parent_stage,
                                         'attempt', r.parent_attempt,
                                         'state', (SELECT x.state FROM wfe.runs AS x WHERE x.run_id = r.parent_run_id))
                  END,
        'children', (SELECT coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'stage', x.parent_stage,
                                                                  'attempt', x.parent_attempt,
                                                                  'workflow', x.workflow, 'version', x.version,
                                                                  'state', x.state)
                                               ORDER BY x.run_id), '[]')
                       FROM wfe.runs AS x WHERE x.parent_run_id = r.run_id),
        'stages', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                              'stage', s.stage,
                              'kind', s.kind,
                              'status', s.state,
                              'attempts', s.attempt,
                              'duration_ms', round(extract(epoch FROM s.finished_at - s.started_at) * 1000),
                              'skip_reason', s.skip_reason,
                              'error', wfe._redact(s.error),
                              'result', wfe._redact(s.result))
                              -- a map's elements counted by state (runtime.md "Map elements")
                              || CASE WHEN s.kind = 'map' AND s.element IS NULL
                                      THEN jsonb_build_object('elements', wfe._map_element_counts(s.run_id, s.stage, s.ordinal))
                                      ELSE '{}' END
                          ORDER BY s.ordinal, s.element NULLS FIRST), '[]')
                     FROM wfe.run_stages AS s WHERE s.run_id = r.run_id),
        'outputs', (SELECT coalesce(jsonb_object_agg(o.task || '.' || o.key,
                                                wfe._redact(jsonb_build_object(o.key, o.value)) -> o.key), '{}')
                      FROM wfe.outputs AS o WHERE o.run_id = r.run_id),
        'late_callbacks', (SELECT count(*) FROM wfe.events AS e
                            WHERE e.run_id = r.run_id AND e.type = 'callback.late'),
        -- the operator's hand: replays both ways, reopenings (wfe.replay, wfe.redrive)
        'replay_of', r.replay_of,
        'replays', (SELECT coalesce(jsonb_agg(x.run_id ORDER BY x.run_id), '[]')
                      FROM wfe.runs AS x WHERE x.replay_of = r.run_id),
        'redriven', (SELECT coalesce(jsonb_agg(jsonb_build_object('at', e.at, 'stage', e.detail ->> 'stage',
                                                                  'by', e.detail ->> 'by',
                                                                  'reason', e.detail ->> 'reason')
                                               ORDER BY e.event_id), '[]')
                       FROM wfe.events AS e WHERE e.run_id = r.run_id AND e.type = 'run.redriven'));
END
$$;

CREATE OR REPLACE FUNCTION wfe.run_mermaid(run_id bigint)
RETURNS text
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_mermaid.run_id);
    v_plan  jsonb;
    v_chart text;
    v_class text;
    v_bold  text;
    v_children text;
    v_node  text;
    v_extra text;
BEGIN
    SELECT d.plan INTO v_plan FROM wfe.definitions AS d WHERE d.definition_id = r.definition_id;
    v_chart := wfe._plan_mermaid(v_plan);
    WITH nodes AS (
        -- the chart's node ids: s<i> for the i-th stage or task, f<k> for finalisers
        SELECT 's' || (p.i - 1) AS id, p.s ->> 'name' AS stage
          FROM jsonb_array_elements(v_plan -> 'stages') WITH ORDINALITY AS p(s, i)
        UNION ALL
        SELECT 'f' || (p.k - 1), p.f ->> 'name'
          FROM jsonb_array_elements(coalesce(v_plan -> 'finalisers', '[]')) WITH ORDINALITY AS p(f, k)
    ), states AS (
        SELECT n.id,
               CASE st.state
                    WHEN 'completed' THEN 'done'
                    WHEN 'failed' THEN 'failed' WHEN 'timed_out' THEN 'failed'
                    WHEN 'skipped' THEN 'skipped' WHEN 'cancelled' THEN 'cancelled'
                    WHEN 'waiting' THEN 'waiting'
                    ELSE 'running' END AS cls,          -- queued, dispatched, running, retry_scheduled
               st.state
          FROM nodes AS n
          JOIN wfe.run_stages AS st ON st.run_id = r.run_id AND st.stage = n.stage
        UNION ALL
        SELECT v.id, v.cls, v.state FROM (VALUES
            ('end_completed', CASE WHEN r.state = 'completed' THEN 'done' ELSE 'waiting' END, r.state),
            ('end_failed', CASE WHEN r.state = 'failed' THEN 'failed' ELSE 'waiting' END, r.state),
            ('intent_completed', CASE WHEN r.intent = 'completed' THEN 'done' ELSE 'waiting' END, r.intent),
            ('intent_failed', CASE WHEN r.intent = 'failed' THEN 'failed' ELSE 'waiting' END, r.intent)
        ) AS v(id, cls, state)
         WHERE strpos(v_chart, v.id) > 0
    ), links AS (
        -- every edge line, numbered from 0 as Mermaid numbers them
        SELECT l.n - 1 AS n, l.dotted,
               regexp_replace(l.parts[1], '\(.*$', '') AS src, l.parts[2] AS dst
          FROM (SELECT row_number() OVER (ORDER BY t.ord) AS n, t.line ~ ' -\. ' AS dotted,
                       regexp_match(t.line, '^\s*(\S+) .*?(\S+)\s*$') AS parts
                  FROM regexp_split_to_table(v_chart, '\n') WITH ORDINALITY AS t(line, ord)
                 WHERE t.line ~ '(-->|\.->)') AS l
    ), taken AS (
        SELECT k.n
          FROM links AS k
          LEFT JOIN states AS a ON a.id = k.src
          LEFT JOIN states AS b ON b.id = k.dst
         WHERE CASE
                 WHEN k.src = 'start' THEN b.cls NOT IN ('waiting', 'skipped')
                 WHEN k.src LIKE 'intent\_%' THEN a.cls <> 'waiting' AND b.cls NOT IN ('waiting', 'skipped')
                 -- the last finaliser to the outcome the run ended with
                 WHEN k.dst LIKE 'end\_%' AND k.src LIKE 'f%' THEN a.cls NOT IN ('waiting', 'running')
                                                                   AND b.cls <> 'waiting'
                 -- a stage's success (solid) or failure (dotted) route
                 WHEN NOT (CASE WHEN k.dotted THEN a.cls = 'failed' ELSE a.cls = 'done' END) THEN false
                 WHEN k.dst LIKE 'end\_%' OR k.dst LIKE 'intent\_%' THEN b.cls <> 'waiting'
                 ELSE b.cls NOT IN ('waiting', 'skipped')
               END
    )
    SELECT (SELECT string_agg(format('  class %s %s', s.id, s.cls), E'\n' ORDER BY s.id) FROM states AS s),
           (SELECT string_agg(t.n::text, ',' ORDER BY t.n) FROM taken AS t),
           -- each workflow stage's latest child run, by id
           (SELECT string_agg(format('  %%%% %s: child run %s (%s)', n.id, x.run_id, x.state), E'\n'
                              ORDER BY n.id)
              FROM nodes AS n
              CROSS JOIN LATERAL (SELECT c.run_id, c.state FROM wfe.runs AS c
                                   WHERE c.parent_run_id = r.run_id AND c.parent_stage = n.stage
                                   ORDER BY c.run_id DESC LIMIT 1) AS x)
      INTO v_class, v_bold, v_children;
    -- on the picture itself: a released map's node gains its elements'
    -- counts by state, a workflow stage's node its latest child run (the
    -- node's text is extended in place, so its shape and edges stay)
    FOR v_node, v_extra IN
        SELECT 's' || (p.i - 1),
               CASE WHEN st.kind = 'map' THEN
                        (SELECT format('<b>%s elements</b>', c.e ->> 'items')
                                || coalesce(': ' || string_agg(format('%s %s', c.e ->> k.state, k.state), ', '
                                                               ORDER BY k.o)
                                                    FILTER (WHERE (c.e ->> k.state)::int > 0), '')
                           FROM (SELECT wfe._map_element_counts(r.run_id, st.stage, st.ordinal) AS e) AS c,
                                unnest(ARRAY['completed', 'failed', 'timed_out', 'cancelled', 'skipped', 'running',
                                             'dispatched', 'retry_scheduled', 'queued', 'waiting'])
                                    WITH ORDINALITY AS k(state, o)
                          WHERE c.e IS NOT NULL
                          GROUP BY c.e)
                    ELSE (SELECT format('child run %s (%s)', c.run_id, c.state) FROM wfe.runs AS c
                           WHERE c.parent_run_id = r.run_id AND c.parent_stage = st.stage
                           ORDER BY c.run_id DESC LIMIT 1)
               END
          FROM jsonb_array_elements(v_plan -> 'stages') WITH ORDINALITY AS p(s, i)
          JOIN wfe.run_stages AS st ON st.run_id = r.run_id AND st.stage = p.s ->> 'name'
         WHERE st.kind IN ('map', 'workflow')
    LOOP
        CONTINUE WHEN v_extra IS NULL;
        -- a map is drawn s<i>[/"..."/], a workflow stage s<i>[["..."]] (core/lang/mermaid.c)
        v_chart := regexp_replace(v_chart, '^(  ' || v_node || '(\[/|\[\[)".*?)("/\]|"\]\])$',
                                  '\1<br/>' || v_extra || '\3', 'n');
    END LOOP;
    RETURN rtrim(v_chart, E'\n')
        || format(E'\n  %%%% run %s: %s\n', r.run_id, r.state)
        || E'  classDef done fill:#d8f3dc,stroke:#2d6a4f,color:#1b4332\n'
        || E'  classDef failed fill:#ffd6d6,stroke:#b00020,color:#7f0000\n'
        || E'  classDef running fill:#fff3bf,stroke:#e67700,color:#5c3c00\n'
        || E'  classDef skipped fill:#f1f3f5,stroke:#adb5bd,color:#868e96,stroke-dasharray: 4 3\n'
        || E'  classDef cancelled fill:#e9ecef,stroke:#495057,color:#495057,stroke-dasharray: 4 3\n'
        || E'  classDef waiting fill:#ffffff,stroke:#ced4da,color:#adb5bd\n'
        || coalesce(v_class || E'\n', '')
        || coalesce(v_children || E'\n', '')
        || coalesce(E'  linkStyle ' || v_bold || E' stroke-width:4px\n', '');
END
$$;

CREATE OR REPLACE FUNCTION wfe.run_spans(run_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_spans.run_id);
    v_run   jsonb;
    v_tries jsonb;
BEGIN
    -- the run: SPAN_KIND_INTERNAL (1); status OK (1) when completed, ERROR (2)
    -- when failed or cancelled, UNSET (0) while it runs
    v_run := jsonb_strip_nulls(jsonb_build_object(
        'traceId', r.trace_id, 'spanId', r.span_id, 'parentSpanId', r.trace_parent,
        'name', 'wfe.run ' || r.workflow, 'kind', 1,
        'startTimeUnixNano', wfe._otlp_time(r.submitted_at),
        'endTimeUnixNano', wfe._otlp_time(coalesce(r.finished_at, now())),
        'attributes', jsonb_path_query_array(jsonb_build_array(
            wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.workflow', r.workflow),
            wfe._otlp_attribute('wfe.version', r.version), wfe._otlp_attribute('wfe.tenant', r.tenant),
            wfe._otlp_attribute('wfe.definition_digest', r.definition_digest),
            wfe._otlp_attribute('wfe.state', r.state), wfe._otlp_attribute('wfe.reason', r.reason)),
            '$[*] ? (@ != null)'),
        'status', jsonb_strip_nulls(jsonb_build_object(
            'code', CASE r.state WHEN 'completed' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 2 ELSE 0 END,
            'message', CASE WHEN r.state IN ('failed', 'cancelled') THEN coalesce(r.reason, r.state) END))));
    -- one span per attempt, as wfe.run_timeline finds them and their outcome
    -- (attempt 0, the result cache's bookkeeping, is no attempt; a parked
    -- wait or sleep has no finished_at yet: it ends now, as the run does):
    -- SPAN_KIND_PRODUCER (4), the work handed to a worker, whose own spans
    -- are children of this one (the envelope's and the claim's traceparent)
    SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'traceId', r.trace_id, 'spanId', wfe._attempt_span_id(r.span_id, t.stage, t.attempt),
               'parentSpanId', r.span_id,
               'name', 'wfe.attempt ' || t.stage, 'kind', 4,
               'startTimeUnixNano', wfe._otlp_time(t.started_at), 'endTimeUnixNano', wfe._otlp_time(coalesce(t.finished_at, now())),
               'attributes', jsonb_path_query_array(jsonb_build_array(
                   wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.stage', t.stage),
                   wfe._otlp_attribute('wfe.attempt', t.attempt), wfe._otlp_attribute('wfe.queue', s.queue),
                   wfe._otlp_attribute('wfe.outcome', t.outcome),
                   wfe._otlp_attribute('wfe.child_run_id', t.child_run_id),
                   -- the stage keeps its last error whole; an earlier attempt's is its event's code
                   wfe._otlp_attribute('wfe.error', CASE
                       WHEN x.failed AND t.attempt = s.attempt AND s.error IS NOT NULL
                           THEN wfe._redact(s.error) #>> '{}'
                       WHEN x.failed
                           THEN wfe._redact(jsonb_build_object('error',
                                    (SELECT e.detail -> 'error' FROM wfe.events AS e
                                      WHERE e.run_id = r.run_id AND e.stage = t.stage AND e.attempt = t.attempt
                                        AND e.detail ? 'error'
                                      ORDER BY e.event_id DESC LIMIT 1))) #>> '{error}' END)),
                   '$[*] ? (@ != null)'),
               'status', jsonb_strip_nulls(jsonb_build_object(
                   'code', CASE WHEN t.outcome = 'completed' THEN 1 WHEN x.failed THEN 2 ELSE 0 END,
                   'message', CASE WHEN x.failed THEN t.outcome END))))
             ORDER BY t.n), '[]')
      INTO v_tries
      FROM wfe.run_timeline(r.run_id) WITH ORDINALITY AS t(stage, attempt, outcome, started_at, finished_at,
                                                          duration_ms, waterfall, child_run_id, n)
      JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = t.stage
      CROSS JOIN LATERAL (SELECT t.outcome IN ('failed', 'timed_out', 'retry_scheduled') AS failed) AS x
     WHERE t.attempt >= 1
       -- a child run's first row is its parent's attempt, no attempt of its own
       AND NOT (t.n = 1 AND r.parent_run_id IS NOT NULL);
    RETURN jsonb_build_object('resourceSpans', jsonb_build_array(jsonb_build_object(
        'resource', jsonb_build_object('attributes', jsonb_build_array(
            wfe._otlp_attribute('service.name', 'wfe'::text),
            wfe._otlp_attribute('service.version', r.engine_version))),
        'scopeSpans', jsonb_build_array(jsonb_build_object(
            'scope', jsonb_build_object('name', 'wfe', 'version', r.engine_version),
            'spans', jsonb_build_array(v_run) || v_tries)))));
END
$$;

CREATE OR REPLACE FUNCTION wfe._item_failed(p_run_id bigint, p_stage text, p_what text,
                                 p_sqlstate text, p_message text, p_timer_id bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_error   jsonb := jsonb_build_object(
                  'code', 'engine.error', 'what', p_what, 'sqlstate', p_sqlstate,
                  'message', left(regexp_replace(p_message, '[[:cntrl:]]+', ' ', 'g'), 1000));
    v_state   text;
    v_message text;
    v_other   text;
BEGIN
    IF p_sqlstate LIKE '40%' OR p_sqlstate = '55P03' THEN
        RAISE WARNING 'wfe: % of run % raised % (%): it is tried again in a second', p_what, p_run_id,
            p_sqlstate, v_error ->> 'message';
        UPDATE wfe.timers AS t SET due_at = now() + interval '1 second', fired_at = NULL
         WHERE t.timer_id = p_timer_id;
        UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
        UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 second'
         WHERE p_timer_id IS NULL AND st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
           AND st.handler IS NOT NULL;
        RETURN;
    END IF;
    RAISE WARNING 'wfe: % of run % raised % (%): the run is failed', p_what, p_run_id, p_sqlstate,
        v_error ->> 'message';
    BEGIN
        PERFORM wfe._engine_error(p_run_id, p_stage, v_error);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: failing run % raised % too: it is put off for a minute', p_run_id, v_state;
        BEGIN
            UPDATE wfe.run_stages AS st SET deadline_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.deadline_at <= now();
            UPDATE wfe.run_stages AS st SET ready_at = now() + interval '1 minute'
             WHERE st.run_id = p_run_id AND st.stage = p_stage AND st.state = 'queued'
               AND st.handler IS NOT NULL;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: run % cannot be put off (%)', p_run_id, v_other;
        END;
        BEGIN
            PERFORM wfe._event(r.run_id, r.tenant, p_stage, NULL, 'run.engine_error',
                               jsonb_build_object('error', v_error, 'failing_run', jsonb_build_object(
                                   'sqlstate', v_state,
                                   'message', left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000))))
              FROM wfe.runs AS r WHERE r.run_id = p_run_id;
        EXCEPTION WHEN OTHERS THEN
            -- nothing of this run can be written: the log line is all there is
            GET STACKED DIAGNOSTICS v_other = RETURNED_SQLSTATE;
            RAISE WARNING 'wfe: the error of run % cannot be recorded (%)', p_run_id, v_other;
        END;
    END;
END
$$;

CREATE OR REPLACE FUNCTION wfe._worker_round(p_max int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t         wfe.timers;
    c         record;
    done      int := 0;
    v_state   text;
    v_message text;
BEGIN
    -- First, while this transaction holds no lock yet (so it may wait for
    -- the keys' locks, which nothing else waits for: 79_concurrency.sql):
    -- the keys an ending attempt could not lock.
    BEGIN
        PERFORM wfe._recheck_concurrency();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking keyed concurrency raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
    -- Then (so it may wait for the admission locks in their order): the
    -- held tasks that an admission's missed try kept back (74_admission.sql).
    BEGIN
        PERFORM wfe._recheck_admission();
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE WARNING 'wfe: rechecking held tasks raised % (%)', v_state,
            left(regexp_replace(v_message, '[[:cntrl:]]+', ' ', 'g'), 1000);
    END;
    -- Attempts whose rate-limit token is due (78_rate_limits.sql): ready again.
    PERFORM wfe._release_rate_held(p_max);
    -- Open circuits whose open_ms has passed (79_circuits.sql): half open.
    PERFORM wfe._half_open_circuits();
    -- Schedules' due ticks (69_schedules.sql): each submits a run.
    done := done + wfe._fire_schedules(p_max);
    -- Lock the batch first, then fire it in run order: each firing takes
    -- its run's lock and keeps it, so two firers (this worker, a manual
    -- wfe.tick()) firing in due order could each wait for a run the other
    -- holds -- a deadlock (test/isolation/specs/tick-lock-order.spec).
    FOR t IN SELECT d.* FROM (SELECT * FROM wfe.timers AS x
                               WHERE x.fired_at IS NULL AND x.due_at <= now()
                               ORDER BY x.due_at LIMIT p_max
                                 FOR UPDATE SKIP LOCKED) AS d
              ORDER BY d.run_id, d.due_at, d.timer_id
    LOOP
        -- each item in a subtransaction of its own: one that raises rolls
        -- back alone, and the round goes on (delivery.md)
        BEGIN
            PERFORM wfe._fire_timer(t);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            -- putting it off can wait on the same run (a foreign key check):
            -- should that time out too, the timer stays due for the next round
            BEGIN
                UPDATE wfe.timers AS x SET fired_at = now() WHERE x.timer_id = t.timer_id;
                PERFORM wfe._item_failed(t.run_id, t.stage, t.kind || ' timer', v_state, v_message, t.timer_id);
            EXCEPTION WHEN lock_not_available THEN
                RAISE WARNING 'wfe: % timer of run % waits for a lock: it is tried again next round', t.kind, t.run_id;
            END;
        END;
        done := done + 1;
    END LOOP;
    FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
              WHERE wfe._stage_clocked(st.state) AND st.deadline_at <= now()
              ORDER BY st.deadline_at LIMIT p_max
    LOOP
        BEGIN
            IF wfe._expire(c.run_id, c.stage) THEN
                done := done + 1;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            BEGIN
                PERFORM wfe._item_failed(c.run_id, c.stage, 'deadline', v_state, v_message);
            EXCEPTION WHEN lock_not_available THEN
                RAISE WARNING 'wfe: the deadline of run % waits for a lock: it is tried again next round', c.run_id;
            END;
            done := done + 1;
        END;
    END LOOP;
    RETURN done;
END
$$;

CREATE OR REPLACE FUNCTION wfe._next_due_ms()
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NULL when nothing is due (greatest() would turn that into 0)
    RETURN (SELECT CASE WHEN min(due) IS NOT NULL
                        THEN greatest(0, ceil(extract(epoch FROM min(due) - clock_timestamp()) * 1000))::bigint END
              FROM (SELECT min(t.due_at) AS due FROM wfe.timers AS t WHERE t.fired_at IS NULL
                    UNION ALL
                    SELECT min(st.deadline_at) FROM wfe.run_stages AS st
                     WHERE wfe._stage_clocked(st.state) AND st.deadline_at IS NOT NULL
                    UNION ALL
                    SELECT min(st.ready_at) FROM wfe.run_stages AS st
                     WHERE st.state = 'queued' AND st.handler IS NOT NULL
                    UNION ALL
                    SELECT min(s.next_fire_at) FROM wfe.schedule_defs AS s WHERE NOT s.paused) AS d);
END
$$;

CREATE OR REPLACE FUNCTION wfe._repair()
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
    c record;
BEGIN
    -- outbox rows a publisher claimed but never marked: publish them again
    -- (their message ids are deterministic, so consumers deduplicate)
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by LIKE 'wfe worker%';
    GET DIAGNOSTICS n = ROW_COUNT;
    -- in-database attempts left running: a handler runs in the transaction
    -- that marks its attempt running and records its end, so one committed
    -- as running was left by a runner that stopped between the two (0.2.0's
    -- stale caches did that).  Its execution deadline is brought to now:
    -- the round that follows times it out through the engine, and its
    -- retry policy decides.  A run another transaction holds is left alone.
    FOR c IN SELECT st.run_id, st.stage, st.tenant, st.attempt, st.claimed_by FROM wfe.run_stages AS st
              WHERE st.state = 'running' AND st.handler IS NOT NULL
              ORDER BY st.run_id, st.stage
    LOOP
        PERFORM FROM wfe.runs AS r WHERE r.run_id = c.run_id FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE wfe.run_stages AS st SET deadline_at = now()
         WHERE st.run_id = c.run_id AND st.stage = c.stage AND st.state = 'running' AND st.handler IS NOT NULL;
        CONTINUE WHEN NOT FOUND;
        PERFORM wfe._event(c.run_id, c.tenant, c.stage, c.attempt, 'stage.interrupted',
                           jsonb_build_object('claimed_by', c.claimed_by, 'by', 'wfe._repair'));
        PERFORM wfe._wake(now());
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION wfe._retention(p_retention_s int, p_batch int)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz := now() - make_interval(secs => p_retention_s);
    v_runs   bigint[];
    n        int := 0;
BEGIN
    SELECT array_agg(x.run_id) INTO v_runs
      FROM (SELECT r.run_id FROM wfe.runs AS r
             WHERE r.finished_at < v_cutoff
             ORDER BY r.finished_at LIMIT p_batch
               FOR UPDATE SKIP LOCKED) AS x;
    IF v_runs IS NOT NULL THEN
        -- their events in day partitions go with the partition
        -- (wfe._history_maintain, below); those in the default one now
        DELETE FROM wfe.events_default AS e WHERE e.run_id = ANY (v_runs);
        DELETE FROM wfe.outbox AS o WHERE o.run_id = ANY (v_runs) AND o.state = 'published';
        DELETE FROM wfe.runs AS r WHERE r.run_id = ANY (v_runs);     -- their stages by wfe.runs_deleted; outputs, timers, payloads by cascade
        n := cardinality(v_runs);
    END IF;
    DELETE FROM wfe.outbox AS o
     WHERE o.id IN (SELECT o2.id FROM wfe.outbox AS o2
                     WHERE o2.state = 'published' AND o2.published_at < v_cutoff
                     LIMIT p_batch);
    -- expired result cache entries (a read treats them as a miss already)
    DELETE FROM wfe.cache_entries AS c
     WHERE c.key IN (SELECT c2.key FROM wfe.cache_entries AS c2
                      WHERE c2.expires_at < now() LIMIT p_batch);
    -- unauthenticated signed callbacks: nobody's, kept for the retention
    DELETE FROM wfe.unauthenticated_callbacks AS u
     WHERE u.id IN (SELECT u2.id FROM wfe.unauthenticated_callbacks AS u2
                     WHERE u2.at < v_cutoff LIMIT p_batch);
    -- schedules' skipped ticks and failures (69_schedules.sql), oldest
    -- first: those up to the p_batch-th one's time (events have no key to
    -- name rows by, 60_runtime_tables.sql; rows of that very time go too)
    DELETE FROM wfe.events AS e
     WHERE e.run_id IS NULL AND e.type IN ('schedule.skipped', 'schedule.failed')
       AND e.at < v_cutoff
       AND e.at <= (SELECT max(x.at)
                      FROM (SELECT e2.at FROM wfe.events AS e2
                             WHERE e2.run_id IS NULL AND e2.type IN ('schedule.skipped', 'schedule.failed')
                               AND e2.at < v_cutoff
                             ORDER BY e2.at LIMIT p_batch) AS x);
    -- run commands' stored inputs (85_ingress.sql): a run keeps its own copy
    -- in its context, so a payload older than the retention is needed by
    -- nobody but a command that late, used or not
    DELETE FROM wfe.ingress_payloads AS p
     WHERE p.key IN (SELECT p2.key FROM wfe.ingress_payloads AS p2
                      WHERE p2.created_at < v_cutoff LIMIT p_batch);
    -- callbacks about runs that never existed (or are gone), the same way
    DELETE FROM wfe.events AS e
     WHERE e.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
       AND e.at < v_cutoff
       AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e.run_id)
       AND e.at <= (SELECT max(x.at)
                      FROM (SELECT e2.at FROM wfe.events AS e2
                             WHERE e2.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
                               AND e2.at < v_cutoff
                               AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e2.run_id)
                             ORDER BY e2.at LIMIT p_batch) AS x);
    -- the history partitions: made ahead, and dropped once past retention
    PERFORM wfe._history_maintain(v_cutoff);
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION wfe.outbox_claim(max int, relay text)
RETURNS SETOF wfe.outbox
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenants text[] := wfe.my_tenants();
BEGIN
    IF outbox_claim.max IS NULL OR outbox_claim.max < 1 OR outbox_claim.relay IS NULL
       OR outbox_claim.relay = '' THEN
        RAISE EXCEPTION 'max must be positive and relay must name the relay'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- rows a relay claimed and never acknowledged for 5 minutes are claimable again
    RETURN QUERY
    WITH picked AS (
        SELECT o.id FROM wfe.outbox AS o
         WHERE ((o.state = 'pending' AND o.available_at <= now())
                OR (o.state = 'claimed' AND o.claimed_at < now() - interval '5 minutes'
                    AND o.claimed_by NOT LIKE 'wfe worker%'))
           AND wfe._relay_sees(o.tenant, v_tenants)
         ORDER BY o.id LIMIT outbox_claim.max
           FOR UPDATE SKIP LOCKED
    )
    UPDATE wfe.outbox AS o
       SET state = 'claimed', claimed_by = outbox_claim.relay, claimed_at = now(), attempts = o.attempts + 1
      FROM picked WHERE o.id = picked.id
    RETURNING o.*;
END
$$;

CREATE OR REPLACE FUNCTION wfe.outbox_ack(ids bigint[], relay text)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenants text[] := wfe.my_tenants();
BEGIN
    IF outbox_ack.ids IS NULL OR outbox_ack.relay IS NULL THEN
        RAISE EXCEPTION 'ids and relay must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- another tenant's row is one this relay does not hold: not marked, not counted
    RETURN wfe._mark_published(ARRAY(SELECT o.id FROM wfe.outbox AS o
                                      WHERE o.id = ANY (outbox_ack.ids)
                                        AND wfe._relay_sees(o.tenant, v_tenants)),
                               outbox_ack.relay);
END
$$;

CREATE OR REPLACE FUNCTION wfe._project_event()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_project_event'
LANGUAGE C;

CREATE OR REPLACE FUNCTION wfe.fetch_payload(ref jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
    p wfe.payloads;
BEGIN
    IF ref ->> 'key' IS NULL OR ref ->> 'sha256' IS NULL
       OR ref ->> 'key' IS DISTINCT FROM 'sha256:' || (ref ->> 'sha256') THEN
        RAISE EXCEPTION 'payload reference is malformed or its hash does not match its key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('key %s, sha256 %s', left(ref ->> 'key', 80), left(ref ->> 'sha256', 80));
    END IF;
    IF coalesce(jsonb_typeof(ref -> 'run_id') = 'number' AND jsonb_typeof(ref -> 'stage') = 'string'
                AND jsonb_typeof(ref -> 'attempt') = 'number'
                AND (ref ->> 'run_id') ~ '^[0-9]{1,18}$' AND (ref ->> 'attempt') ~ '^[0-9]{1,9}$'
                AND (ref ->> 'fence') ~ '^-?[0-9]{1,18}$', false) IS NOT TRUE THEN
        RAISE EXCEPTION 'payload reference names no attempt'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the payload_ref of a dispatch message as it is: it carries run_id, stage, attempt and fence (messages published before wfe 0.3.0 do not; their attempts are retried with new ones).';
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = (ref ->> 'run_id')::bigint AND st.stage = ref ->> 'stage';
    -- who may fetch: the callbacks' rule (src/pg/grants.c), then the attempt itself
    IF NOT FOUND
       OR NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'fetch payloads of')
       OR s.attempt <> (ref ->> 'attempt')::int OR s.fence <> (ref ->> 'fence')::bigint
       OR s.state NOT IN ('queued', 'dispatched', 'running') THEN
        RAISE EXCEPTION 'payload % does not exist', ref ->> 'key' USING ERRCODE = 'undefined_object';
    END IF;
    SELECT * INTO p FROM wfe.payloads AS x
     WHERE x.run_id = s.run_id AND x.stage = s.stage AND x.key = ref ->> 'key';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payload % does not exist', ref ->> 'key' USING ERRCODE = 'undefined_object';
    END IF;
    -- verify the content against its name: a tampered row is refused
    IF 'sha256:' || encode(sha256(convert_to(p.body::text, 'UTF8')), 'hex') <> p.key THEN
        RAISE EXCEPTION 'payload % failed its SHA-256 check', p.key USING ERRCODE = 'data_corrupted';
    END IF;
    RETURN p.body;
END
$$;

CREATE OR REPLACE FUNCTION wfe._recheck_admission()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_recheck_admission' LANGUAGE C VOLATILE STRICT;

CREATE OR REPLACE FUNCTION wfe._lock_tenant(p_tenant text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_lock_tenant_sql' LANGUAGE C VOLATILE STRICT;

CREATE OR REPLACE FUNCTION wfe._release_held(p_queue text, p_tenant text)
RETURNS SETOF text AS 'MODULE_PATHNAME', 'wfe_release_held_sql' LANGUAGE C VOLATILE;

CREATE OR REPLACE FUNCTION wfe.configure_rate_limit(name text, per_second numeric, burst int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_burst int;
    v_queue text;
BEGIN
    IF configure_rate_limit.name IS NULL THEN
        RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(configure_rate_limit.name, 'rate limit name');
    IF configure_rate_limit.name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
        RAISE EXCEPTION 'rate limit name "%" is not valid', configure_rate_limit.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use letters, digits, ".", "_" and "-", starting with a letter or digit.';
    END IF;
    IF configure_rate_limit.per_second IS NULL THEN
        -- dropped: its queued attempts wait until it is configured again
        PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, true);
        UPDATE wfe.run_stages AS st SET held_until = 'infinity'
         WHERE st.rate_limit = configure_rate_limit.name AND st.state = 'queued';
        DELETE FROM wfe.rate_limits AS l WHERE l.name = configure_rate_limit.name;
        RETURN;
    END IF;
    IF configure_rate_limit.per_second <= 0 THEN
        RAISE EXCEPTION 'per_second must be positive, not %', configure_rate_limit.per_second
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL drops the rate limit.';
    END IF;
    IF configure_rate_limit.burst < 1 THEN
        RAISE EXCEPTION 'burst must be at least 1, not %', configure_rate_limit.burst
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL is one second''s tokens (at least 1).';
    END IF;
    v_burst := coalesce(configure_rate_limit.burst, greatest(1, ceil(configure_rate_limit.per_second))::int);
    INSERT INTO wfe.rate_limits AS l (name, per_second, burst)
    VALUES (configure_rate_limit.name, configure_rate_limit.per_second, v_burst)
    ON CONFLICT (name) DO UPDATE
       SET per_second = excluded.per_second, burst = excluded.burst,
           updated_at = now(), updated_by = wfe._identity();
    -- a new bucket starts full; a changed one keeps its tokens, within the new burst
    INSERT INTO wfe.rate_buckets AS b (name, tenant, key, tokens, at)
    VALUES (configure_rate_limit.name, '', '', v_burst, now())
    ON CONFLICT (name, tenant, key) DO NOTHING;
    UPDATE wfe.rate_buckets AS b SET tokens = least(b.tokens, v_burst), held_through = NULL
     WHERE b.name = configure_rate_limit.name;
    PERFORM wfe._rate_buckets_reset(configure_rate_limit.name, false);
    -- what waited for it (or for the old rate) is tried again now
    FOR v_queue IN WITH x AS (UPDATE wfe.run_stages AS st SET held_until = NULL
                               WHERE st.rate_limit = configure_rate_limit.name AND st.held_until IS NOT NULL
                               RETURNING st.queue)
                   SELECT DISTINCT x.queue FROM x
    LOOP
        PERFORM wfe._notify_ready(v_queue);
        -- a broker queue's are dispatched, through every gate, by the worker's next round (admission.c)
        INSERT INTO wfe.admission_recheck (queue)
        SELECT q.queue FROM wfe.queues AS q WHERE q.queue = v_queue AND q.delivery = 'broker' AND NOT q.paused;
        IF FOUND THEN
            PERFORM wfe._wake(now());
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION wfe._resolve_dead_letters(p_run_id bigint, p_stage text, p_resolution text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.dead_letters AS d
       SET resolved_at = now(), resolved_by = wfe._identity(), resolution = p_resolution
     WHERE d.run_id = p_run_id AND (p_stage IS NULL OR d.stage = p_stage) AND d.resolved_at IS NULL;
END;

CREATE OR REPLACE FUNCTION wfe.redrive(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_code text;
BEGIN
    PERFORM wfe._operator_target(redrive.run_id, redrive.stage, redrive.reason);
    -- a binding failure has no attempt to run again: the run's context and
    -- the results it read do not change, so its input would fail again
    SELECT st.error ->> 'code' INTO v_code FROM wfe.run_stages AS st
     WHERE st.run_id = redrive.run_id AND st.stage = redrive.stage AND st.state = 'failed';
    IF v_code LIKE 'binding.%' THEN
        RAISE EXCEPTION 'cannot redrive stage "%" of run %: its input could not be bound (%)', redrive.stage,
                        redrive.run_id, v_code
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The run''s context and results do not change, so binding would fail again: skip_stage completes it by hand, replay starts a new run.';
    END IF;
    PERFORM wfe._operate(redrive.run_id, redrive.stage, 'redrive', NULL, wfe._identity(), redrive.reason);
    PERFORM wfe._resolve_dead_letters(redrive.run_id, redrive.stage, 'redriven');
END
$$;

CREATE OR REPLACE FUNCTION wfe.skip_stage(run_id bigint, stage text, result jsonb DEFAULT '{}', reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM wfe._admit(skip_stage.result, 'the result');
    PERFORM wfe._operator_target(skip_stage.run_id, skip_stage.stage, skip_stage.reason);
    PERFORM wfe._operate(skip_stage.run_id, skip_stage.stage, 'skip',
                         coalesce(skip_stage.result, '{}')::text, wfe._identity(), skip_stage.reason);
    PERFORM wfe._resolve_dead_letters(skip_stage.run_id, skip_stage.stage, 'skipped');
END
$$;

CREATE OR REPLACE FUNCTION wfe.fail_stage(run_id bigint, stage text, reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fail_stage.reason IS NULL THEN
        RAISE EXCEPTION 'reason must not be null' USING ERRCODE = 'null_value_not_allowed',
              HINT = 'Say why: the worker sees it in the error, and the event log keeps it.';
    END IF;
    PERFORM wfe._operator_target(fail_stage.run_id, fail_stage.stage, fail_stage.reason);
    PERFORM wfe._operate(fail_stage.run_id, fail_stage.stage, 'fail', fail_stage.reason, wfe._identity(),
                         fail_stage.reason);
    PERFORM wfe._resolve_dead_letters(fail_stage.run_id, fail_stage.stage, 'failed');
END
$$;

CREATE OR REPLACE FUNCTION wfe.redispatch(run_id bigint, stage text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  text;
    v_broker boolean;
    v_paused boolean;
BEGIN
    PERFORM wfe._operator_target(redispatch.run_id, redispatch.stage, redispatch.reason);
    -- (a map's own row has no queue: wfe._operate says to name an element, 42809)
    SELECT st.queue, q.delivery = 'broker', q.paused INTO v_queue, v_broker, v_paused
      FROM wfe.run_stages AS st LEFT JOIN wfe.queues AS q ON q.queue = st.queue
     WHERE st.run_id = redispatch.run_id AND st.stage = redispatch.stage AND st.kind <> 'map';
    IF FOUND AND NOT coalesce(v_broker, false) THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is a poll queue', redispatch.stage,
                        redispatch.run_id, coalesce(v_queue, '(none)')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Poll workers claim queued tasks with wfe.claim_task; nothing is dispatched.';
    END IF;
    IF FOUND AND v_paused THEN
        RAISE EXCEPTION 'cannot redispatch stage "%" of run %: queue "%" is paused', redispatch.stage,
                        redispatch.run_id, v_queue
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Resume it with wfe.configure_queue(..., paused => false): its tasks are dispatched then.';
    END IF;
    PERFORM wfe._operate(redispatch.run_id, redispatch.stage, 'redispatch', NULL, wfe._identity(),
                         redispatch.reason);
END
$$;

CREATE OR REPLACE FUNCTION wfe.replay(run_id bigint, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r     wfe.runs;
    v_new bigint;
BEGIN
    IF replay.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(replay.reason, 'reason');
    r := wfe._run(replay.run_id);
    IF r.finished_at IS NULL THEN
        RAISE EXCEPTION 'cannot replay run %: it is %', r.run_id, r.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Replay a run that has ended; cancel it first (wfe.cancel_run) to replay it now.';
    END IF;
    -- the same pinned definition (name@version: even once retired), context,
    -- tenant, execution context and priority; no idempotency key
    SELECT s.run_id INTO v_new
      FROM wfe.submit(r.workflow || '@' || r.version, r.context, NULL,
                      jsonb_build_object('tenant', r.tenant, 'priority', r.priority)
                      || CASE WHEN r.execution_context IS NULL THEN '{}'::jsonb
                              ELSE jsonb_build_object('execution_context', r.execution_context) END) AS s;
    UPDATE wfe.runs AS x SET replay_of = r.run_id WHERE x.run_id = v_new;
    PERFORM wfe._event(r.run_id, r.tenant, NULL, NULL, 'run.replayed',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay', v_new));
    PERFORM wfe._event(v_new, r.tenant, NULL, NULL, 'run.replay_of',
                       jsonb_build_object('by', wfe._identity(), 'reason', replay.reason, 'replay_of', r.run_id));
    PERFORM wfe._resolve_dead_letters(r.run_id, NULL, 'replayed');
    RETURN v_new;
END
$$;

CREATE OR REPLACE FUNCTION wfe.redrive_dead_letters(queue text, since timestamptz DEFAULT '-infinity', reason text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c    record;
    n    int := 0;
    held int := 0;
BEGIN
    IF redrive_dead_letters.queue IS NULL OR redrive_dead_letters.since IS NULL THEN
        RAISE EXCEPTION 'queue and since must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(redrive_dead_letters.queue, 'queue');
    PERFORM wfe._admit_name(redrive_dead_letters.reason, 'reason');
    -- the dead letters of the tenants the caller acts for (a queue is
    -- shared: other tenants' are not seen, as in wfe.dead_letters), in run
    -- order, so two bulk redrives cannot deadlock; one subtransaction each,
    -- so a stage that moved on meanwhile is passed over, not fatal, and so
    -- is one whose run its tenant's max_runs_in_flight keeps closed
    FOR c IN SELECT DISTINCT d.run_id, d.stage
               FROM wfe.dead_letters AS d
               JOIN wfe.run_stages AS st ON st.run_id = d.run_id AND st.stage = d.stage
              WHERE d.resolved_at IS NULL AND d.at >= redrive_dead_letters.since
                AND st.queue = redrive_dead_letters.queue AND wfe._tenant_ok(d.tenant)
              ORDER BY d.run_id, d.stage
    LOOP
        BEGIN
            PERFORM wfe.redrive(c.run_id, c.stage, redrive_dead_letters.reason);
            n := n + 1;
        EXCEPTION
            WHEN object_not_in_prerequisite_state THEN
                NULL;
            WHEN configuration_limit_exceeded THEN
                held := held + 1;
        END;
    END LOOP;
    IF held > 0 THEN
        RAISE NOTICE 'redrive_dead_letters passed over % stage(s): reopening their runs would pass their tenants'' max_runs_in_flight', held
            USING HINT = 'Their dead letters stay open: redrive them when runs have finished, or raise the limit with wfe.configure_tenant.';
    END IF;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION wfe._broker_dead_letter(p_message_id text, p_routing_key text, p_headers jsonb, p_body text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_env     jsonb;
    v_run     bigint;
    v_stage   text;
    v_attempt int;
    v_fence   bigint;
    v_tenant  text;
    v_deaths  int;
    v_error   jsonb;
    v_outcome text;
    v_dead    bigint;
BEGIN
    -- a run command an ingress rejected: logged and counted when it was
    -- (src/bgw/ingress.c), no attempt waits for it
    IF p_headers ? 'x-wfe-ingress' THEN
        RETURN 'ingress';
    END IF;
    -- the attempt's identity: its x-wfe-* headers, else its envelope
    BEGIN
        v_env := p_body::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        v_env := NULL;
    END;
    BEGIN
        v_run := coalesce(p_headers ->> 'x-wfe-run-id', v_env ->> 'run_id')::bigint;
        v_stage := coalesce(p_headers ->> 'x-wfe-stage', v_env ->> 'stage');
        v_attempt := coalesce(p_headers ->> 'x-wfe-attempt', v_env ->> 'attempt')::int;
        v_fence := coalesce(p_headers ->> 'x-wfe-fence', v_env ->> 'fence')::bigint;
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        v_run := NULL;
    END;
    IF v_run IS NULL OR v_stage IS NULL OR v_attempt IS NULL OR v_fence IS NULL THEN
        RAISE WARNING 'wfe: a message in wfe.dlq names no wfe attempt (message_id %, routing key %): dropped',
              coalesce(p_message_id, '(none)'), p_routing_key;
        RETURN 'foreign';
    END IF;
    SELECT r.tenant INTO v_tenant FROM wfe.runs AS r WHERE r.run_id = v_run;
    IF NOT FOUND THEN
        RETURN 'unknown';           -- its run is gone (retention): nothing waits for it
    END IF;
    IF EXISTS (SELECT 1 FROM wfe.dead_letters AS d
                WHERE d.run_id = v_run AND d.stage = v_stage AND d.attempt = v_attempt
                  AND d.reason = 'broker.redeliveries' AND d.error ->> 'fence' = v_fence::text) THEN
        RETURN 'duplicate';
    END IF;
    SELECT coalesce(sum((x ->> 'count')::int), 0) INTO v_deaths
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_headers -> 'x-death') = 'array'
                                     THEN p_headers -> 'x-death' ELSE '[]' END) AS x
     WHERE x ->> 'reason' = 'rejected';
    v_error := jsonb_build_object(
        'code', 'broker.redeliveries',
        'message', format('RabbitMQ dead-lettered the dispatch of attempt %s after %s rejected deliveries',
                          v_attempt, v_deaths),
        'fence', v_fence, 'message_id', p_message_id, 'x_death', p_headers -> 'x-death');
    PERFORM wfe._event(v_run, v_tenant, v_stage, v_attempt, 'stage.dead_lettered',
                       jsonb_build_object('message_id', p_message_id,
                                          'rejected', v_deaths, 'routing_key', p_routing_key),
                       v_fence);
    -- the gate decides: the current attempt fails (retried or failed per its
    -- policy); one superseded meanwhile is stale, one of an ended run late.
    -- Only a running attempt is reported, and nobody accepted this one: wfe
    -- takes it first, as the holder of its envelope (a duplicate if a worker
    -- had accepted it before rejecting it)
    BEGIN
        PERFORM wfe.accept_task(v_run, v_stage, v_attempt, v_fence, 'wfe.dlq');
    EXCEPTION WHEN object_not_in_prerequisite_state THEN
        NULL;       -- its queue is a poll queue now: the gate below answers for the attempt
    END;
    v_outcome := wfe.fail_task(v_run, v_stage, v_attempt, v_fence, v_error, true);
    -- retries exhausted: the engine wrote its dead letter just now; it is this one
    UPDATE wfe.dead_letters AS d SET reason = 'broker.redeliveries', error = v_error
     WHERE d.run_id = v_run AND d.stage = v_stage AND d.attempt = v_attempt
       AND d.reason = 'retries exhausted' AND d.at = now()
    RETURNING d.dead_letter_id INTO v_dead;
    IF v_dead IS NULL THEN
        -- retried, or superseded: recorded, and closed at once
        INSERT INTO wfe.dead_letters (tenant, run_id, stage, attempt, reason, error,
                                      resolved_at, resolved_by, resolution)
        VALUES (v_tenant, v_run, v_stage, v_attempt, 'broker.redeliveries', v_error, now(), 'wfe',
                CASE WHEN v_outcome = 'accepted' THEN 'retried' ELSE 'superseded' END);
    END IF;
    RETURN v_outcome;
END
$$;

CREATE OR REPLACE FUNCTION wfe._history_make_day(p_day date)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_name text := 'events_p' || to_char(p_day, 'YYYYMMDD');
    v_lo   timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_hi   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass('wfe.' || v_name) IS NOT NULL THEN
        RETURN 0;
    END IF;
    BEGIN
        -- An insert chooses its partition before it locks it: one that chose
        -- the default partition before the ATTACH and locks it after fails
        -- its partition check ("violates partition constraint").  So while
        -- rows of the day may be arriving (yesterday's from transactions
        -- begun before midnight, today's, or days made ahead), inserts wait
        -- at wfe.events for this short transaction and then route afresh.
        -- Older days (rows moved after an upgrade) need no such wait.
        IF p_day >= (now() AT TIME ZONE 'UTC')::date - 1 THEN
            LOCK TABLE wfe.events IN SHARE ROW EXCLUSIVE MODE;
        END IF;
        -- ATTACH takes this lock to check the default partition holds none
        -- of the day's rows: taken first, no row of the day lands there
        -- while they move (inserts of other days go on)
        LOCK TABLE wfe.events_default IN ACCESS EXCLUSIVE MODE;
        -- made apart and attached: CREATE TABLE ... PARTITION OF would lock
        -- wfe.events itself; the CHECK spares ATTACH a scan of the new table
        EXECUTE format('CREATE TABLE wfe.%I (LIKE wfe.events INCLUDING DEFAULTS,'
                       ' CONSTRAINT %I CHECK (at >= %L AND at < %L))',
                       v_name, v_name || '_day', v_lo, v_hi);
        EXECUTE format('WITH moved AS (DELETE FROM wfe.events_default AS e WHERE e.at >= %L AND e.at < %L'
                       ' RETURNING e.*) INSERT INTO wfe.%I SELECT * FROM moved',
                       v_lo, v_hi, v_name);
        EXECUTE format('ALTER TABLE wfe.events ATTACH PARTITION wfe.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;                   -- busy: the next pass tries again
    END;
    RETURN 1;
END
$$;

-- ... and every function comment that changed.
COMMENT ON FUNCTION wfe._caller() IS
'The role acting in this session, SET ROLE included (inside SECURITY DEFINER functions current_user is the owner); inside a handler, its registrant.';
COMMENT ON FUNCTION wfe._identity() IS
'Who wfe records and the four-eyes rule compares: session_user; inside a handler, its registrant.';
COMMENT ON FUNCTION wfe._load_setting(text) IS
'Loads the wfe library (which defines its settings, with their defaults), then returns the setting''s value.';
COMMENT ON FUNCTION wfe._setting(text) IS
'The value of a setting the wfe library defines (wfe.notify, wfe.track_threshold_bytes, ...), its default included: loads the library when the setting is not defined yet.';
COMMENT ON FUNCTION wfe._is_tenant_name(text) IS
'The rule of tenant names: 1 to 63 ASCII letters, digits, "_", "." or "-".';
COMMENT ON FUNCTION wfe._check_tenant_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a tenant name; NULL passes.';
COMMENT ON FUNCTION wfe._is_queue_name(text) IS
'The rule of queue names: a lower-case ASCII letter, then up to 62 lower-case letters, digits, "_", "." or "-".';
COMMENT ON FUNCTION wfe._check_queue_name(text) IS
'Raises 22023 (with the rule as a hint) unless the argument is a queue name; NULL passes.';
COMMENT ON FUNCTION wfe._contracts_json() IS
'All registered contracts, and the workflows a workflow stage may name (NAME: active; NAME@VERSION: not a draft), as the JSON array the compiler takes: [{"ref","kind","queue","handler","input_schema","output_schema"}].';
COMMENT ON FUNCTION wfe._rate_limit_warnings(jsonb) IS
'Adds a ratelimit.unknown warning to a compile result for each stage naming a rate limit that is not configured.';
COMMENT ON FUNCTION wfe._lock(text, text, boolean) IS
'Takes wfe''s transaction lock (space, key), which no login can take: waits (bounded by lock_timeout), or with try only takes it if free; returns whether it was taken.';
COMMENT ON FUNCTION wfe._random_hex(int) IS
'Random lowercase hex digits (at most 32): new trace and span ids.';
COMMENT ON FUNCTION wfe._attempt_span_id(text, text, int) IS
'The span id of an attempt: derived from the run''s span id, the stage and the attempt number.';
COMMENT ON FUNCTION wfe._attempt_traceparent(text, text, text, text, int) IS
'The W3C traceparent of a run''s attempt: the run''s trace id and flags, the attempt''s span id.';
COMMENT ON FUNCTION wfe._stage_clocked(text) IS
'Queued, dispatched or running: a stage''s attempt is live, its queue, execution or heartbeat deadline runs.';
COMMENT ON FUNCTION wfe._stage_handed_out(text) IS
'Dispatched or running: a worker holds the attempt, or its dispatch message was published (it counts against in-flight limits).';
COMMENT ON FUNCTION wfe._stage_under_way(text) IS
'Queued, dispatched, running or retry_scheduled: an attempt of the stage is under way or due.';
COMMENT ON FUNCTION wfe._run_keeps_key(text) IS
'Any run state but failed and cancelled: the run keeps its idempotency key (a failed or cancelled run frees it).';
COMMENT ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb, bigint) IS
'Appends one row to the event log (p_fence: the fence it is about, kept out of the detail).';
COMMENT ON FUNCTION wfe._exchange(text) IS
'The exchange an outbox message of kind dispatch, cancel (wfe.commands) or event (wfe.events) goes to. Internal.';
COMMENT ON FUNCTION wfe._routing_key(text, text, text) IS
'The routing key of a dispatch (run.<queue>.<track>) or a cancel (cancel.<queue>) of a queue. Internal.';
COMMENT ON FUNCTION wfe._ready_key_changed() IS
'Trigger: every backend forgets its cached wfe_task_ready key when this transaction commits.';
COMMENT ON FUNCTION wfe._ready_tag(text) IS
'The wfe_task_ready payload of a queue: lowercase hex HMAC-SHA256 of its name under wfe.ready_key. Internal.';
COMMENT ON FUNCTION wfe._notify_ready(text) IS
'NOTIFY wfe_task_ready with the queue''s tag (wfe._ready_tag; once per transaction and queue), unless wfe.notify is off.';
COMMENT ON FUNCTION wfe._cancel_children(bigint, text, text) IS
'Cancels the live child runs of a parent''s workflow stage whose attempt ended otherwise (the engine calls it under the parent''s lock).';
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit, pause and fairness between tenants (none or tenant; NULL keeps it).';
COMMENT ON FUNCTION wfe.queue_delivery(text) IS
'The delivery mode of a queue: broker, or poll (also for a queue never configured).';
COMMENT ON FUNCTION wfe.ready_tag(text) IS
'The payload a wfe_task_ready notification carries for a poll queue the caller may claim from (a keyed tag: the name is never sent); 42501 for any other queue.';
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt, under lease_ms (renewed by heartbeats) if given; a redelivery answers duplicate.';
COMMENT ON FUNCTION wfe.tick(int) IS
'One round by hand: fires due schedules and timers, times out expired attempts, runs queued in-database actions; returns how many it handled.';
COMMENT ON FUNCTION wfe._map_element_counts(bigint, text, int) IS
'A released map''s elements for wfe.report and wfe.run_mermaid: items, released, and a count per stage state; NULL before its release.';
COMMENT ON FUNCTION wfe.run_timeline(bigint) IS
'One row per stage attempt with its outcome, times, a text waterfall over the run''s life, and the child run a workflow stage''s attempt started; a child run''s first row names its parent run, stage and attempt.';
COMMENT ON FUNCTION wfe.run_mermaid(bigint) IS
'The plan''s Mermaid flowchart with each stage classed by its state in this run (done, failed, running, skipped, cancelled, waiting), the edges the run took drawn bold, a map''s element counts by state and each workflow stage''s latest child run on their nodes, and each workflow stage''s child run by id.';
COMMENT ON FUNCTION wfe._cron_next(text, text, timestamptz) IS
'The first tick of cron in time_zone strictly after `after` (a nonexistent local time: the first instant after the gap; a repeated one: the first); NULL when none; 22023 for a bad expression (naming its field) or zone.';
COMMENT ON FUNCTION wfe._schedule_key(text, timestamptz) IS
'The idempotency key of schedule p_name''s run for instant p_at: schedule:NAME:2026-03-29T01:00:00Z.';
COMMENT ON FUNCTION wfe._schedule(text) IS
'The schedule row, locked; SQLSTATE 42704 when there is none or it is of a tenant the caller does not act for.';
COMMENT ON FUNCTION wfe._schedule_options(wfe.schedule_defs, jsonb) IS
'A schedule with options applied (tenant, time_zone, overlap, catch_up, jitter_ms, priority, start_at, end_at); 22023 naming a bad or unknown one.';
COMMENT ON FUNCTION wfe._schedule_plan(wfe.schedule_defs, timestamptz) IS
'A schedule checked (workflow, context, cron, zone) with its next tick after p_after planned (jitter included).';
COMMENT ON FUNCTION wfe._schedule_tenant_ok(text) IS
'Raises 42501 unless the role acting acts for the tenant (a schedule is made only for a tenant its creator acts for).';
COMMENT ON FUNCTION wfe.create_schedule(text, text, text, jsonb, jsonb) IS
'Creates a schedule: workflow submitted with context on each tick of cron (five fields or @daily ...) as the calling role; options tenant, time_zone, overlap, catch_up, jitter_ms, priority, start_at, end_at.';
COMMENT ON FUNCTION wfe.alter_schedule(text, text, jsonb, jsonb) IS
'Changes a schedule''s cron, context or options (NULL: unchanged; options merge); the calling role becomes its owner; the next tick is planned again.';
COMMENT ON FUNCTION wfe.pause_schedule(text) IS
'Pauses a schedule: no tick fires until wfe.resume_schedule. Idempotent.';
COMMENT ON FUNCTION wfe.resume_schedule(text) IS
'Resumes a paused schedule from its next tick after now (ticks missed while paused are not caught up). Idempotent.';
COMMENT ON FUNCTION wfe.drop_schedule(text) IS
'Drops a schedule; the runs it started are left as they are.';
COMMENT ON FUNCTION wfe._schedule_submit(regrole, text, text, jsonb, text, jsonb) IS
'wfe.submit as owner (its tenant membership, limits and identity apply); NULLs when owner does not (or no longer) act for tenant.';
COMMENT ON FUNCTION wfe._schedule_submit_tick(wfe.schedule_defs, timestamptz) IS
'Submits a schedule''s run for an instant as its owner with key schedule:NAME:<instant>; NULL (schedule paused, schedule.failed) when the owner lost the tenant.';
COMMENT ON FUNCTION wfe._schedule_run_live(bigint) IS
'Whether a schedule''s previous run is still live (running or finalising): what its overlap policy asks.';
COMMENT ON FUNCTION wfe._fire_schedule(wfe.schedule_defs) IS
'Fires a locked schedule''s due ticks by its catch-up and overlap policies, as its owner, and plans its next tick; returns the runs submitted.';
COMMENT ON FUNCTION wfe._fire_schedules(int) IS
'Fires up to p_max due schedules, each in a subtransaction (an error: schedule.failed, its due ticks skipped); returns the runs submitted.';
COMMENT ON FUNCTION wfe.trigger_schedule(text) IS
'Submits one run of a schedule now, outside its cron (as its owner, ignoring overlap); returns the run id.';
COMMENT ON FUNCTION wfe.backfill_schedule(text, timestamptz, timestamptz) IS
'Submits a schedule''s run for every tick from from_time to to_time (at most 1000, ending by now; ignoring overlap); a tick already run is not run again. Returns the runs started.';
COMMENT ON FUNCTION wfe._otlp_attribute(text, anyelement) IS
'One OTLP/JSON KeyValue (intValue for integers, as a string; stringValue otherwise); NULL for a NULL value.';
COMMENT ON FUNCTION wfe._otlp_time(timestamptz) IS 'A time as OTLP/JSON''s timeUnixNano: nanoseconds since 1970 as a decimal string.';
COMMENT ON FUNCTION wfe.run_spans(bigint) IS
'The run as OTLP/JSON resourceSpans: a span for the run and one per attempt (its children), with wfe.redact_keys applied to the attributes.';
COMMENT ON FUNCTION wfe._item_failed(bigint, text, text, text, text, bigint) IS
'An item of a worker round (a timer: p_timer_id) raised: put it off a second for a deadlock, serialization failure or lock timeout, else fail its run (run.engine_error), or record the error and put the item off; logs the run id.';
COMMENT ON FUNCTION wfe._worker_round(int) IS
'Releases what missed admission tries held back and rate-limited attempts whose token is due, fires up to p_max due schedules and timers and times out up to p_max expired attempts; returns how many runs submitted, timers and attempts.';
COMMENT ON FUNCTION wfe._next_due_ms() IS
'How long the background worker may sleep: until the earliest timer, deadline, queued action or schedule tick (NULL: nothing due).';
COMMENT ON FUNCTION wfe._repair() IS
'Repair after a crash: outbox rows left claimed go back to pending; in-database attempts left running are timed out now (retried per policy).  Transitions are single transactions, so nothing else can be half done.';
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their stages and large payloads), old published outbox rows, old unauthenticated callbacks, old schedule events, old run command payloads (wfe.put_payload) and expired result cache entries; makes the coming days'' event partitions and drops those past retention (wfe._history_maintain).';
COMMENT ON FUNCTION wfe._relay_sees(text, text[]) IS
'Whether an external relay acting for p_tenants (wfe.my_tenants(); NULL: every tenant) may claim and acknowledge an outbox row of p_tenant.';
COMMENT ON FUNCTION wfe.outbox_claim(int, text) IS
'External relay: claims up to max pending outbox rows of the tenants the caller acts for (SKIP LOCKED, id order); acknowledge them with wfe.outbox_ack.';
COMMENT ON FUNCTION wfe.outbox_ack(bigint[], text) IS
'External relay: marks the rows it claimed and published as published; returns how many (rows it no longer holds, or of tenants it does not act for, are not counted).';
COMMENT ON FUNCTION wfe.fetch_payload(jsonb) IS
'The input a large-track envelope refers to, for a holder of the attempt the reference names, after checking its SHA-256 against the reference.';
COMMENT ON FUNCTION wfe.configure_tenant(text, int, int, int) IS
'Sets a tenant''s limits: runs in flight (submit refuses more with 53400) and tasks in flight (held queued, released when room appears), NULL is unlimited; and its weight on fair queues (NULL keeps it).';
COMMENT ON FUNCTION wfe.callback(text, text) IS
'A worker''s report signed by its gateway: the gate''s outcome word when authentic; otherwise unauthenticated (recorded in wfe.unauthenticated_callbacks), expired or replayed (recorded as events of the run).';
COMMENT ON FUNCTION wfe._redact(jsonb) IS
'The document with the value of every key listed in wfe.redact_keys, at any depth, replaced by "[redacted]".';
COMMENT ON FUNCTION wfe._redact_trigger() IS
'BEFORE INSERT row trigger: redacts (wfe._redact) the jsonb column named by its argument.';
COMMENT ON FUNCTION wfe.register_signal(text, jsonb) IS
'Registers signal contract ref (name@N) with the JSON schema its payload must satisfy. Idempotent; a registered version is immutable.';
COMMENT ON FUNCTION wfe._check_signal_grant(name, text) IS
'Raises 22004, 22023, 42704 unless role is a real role and ref a registered signal; returns the role.';
COMMENT ON FUNCTION wfe.grant_signal(name, text) IS
'Lets role (and every role with its privileges) send signal ref to the runs of the tenants it acts for. Idempotent.';
COMMENT ON FUNCTION wfe.revoke_signal(name, text) IS
'Takes back a grant_signal. Idempotent.';
COMMENT ON FUNCTION wfe._may_signal(text) IS
'Whether the role acting in this session may send signal ref: granted (wfe.grant_signal), a superuser or wfe_admin.';
COMMENT ON FUNCTION wfe._signal(bigint, text, jsonb, text, name) IS
'A checked signal for a locked run: accepted (a released wait took it), buffered (kept for a wait yet to be released) or late.';
COMMENT ON FUNCTION wfe.signal(bigint, text, jsonb, text) IS
'Sends a signal to a run: accepted (a released wait took it), buffered, duplicate, conflict, late or unknown. 42501 without grant_signal; 22023 for a payload its schema refuses or a signal the run never waits for.';
COMMENT ON FUNCTION wfe.find_run(text, text, text) IS
'The run of workflow submitted with idempotency_key (the business key a caller knows), within the tenants the caller acts for; NULL when none.';
COMMENT ON FUNCTION wfe._rate_buckets_reset(text, boolean) IS
'configure_rate_limit''s part in shared memory: the limit''s buckets forget their held horizon, or are dropped.';
COMMENT ON FUNCTION wfe._rate_buckets_count(text, text) IS
'How many buckets of a rate limit shared memory holds (a tenant''s keyed ones and its overflow bucket; all with NULL); NULL without shared memory.';
COMMENT ON FUNCTION wfe.configure_rate_limit(text, numeric, int) IS
'Creates or changes a token bucket: per_second tokens a second, at most burst (default one second''s, at least 1); per_second NULL drops it.';
COMMENT ON FUNCTION wfe._release_rate_held(int) IS
'Makes up to p_max attempts whose rate-limit token is due ready again, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
COMMENT ON FUNCTION wfe._circuit_event(text, text) IS
'Logs a circuit''s change of state (circuit.opened, circuit.half_open, circuit.closed) with its queue and counts.';
COMMENT ON FUNCTION wfe._half_open_circuits() IS
'Half opens the open circuits whose open_ms has passed, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
COMMENT ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) IS
'Creates or changes a queue''s circuit breaker: it opens at failure_ratio of at least min_calls attempts ended in window_ms, for open_ms; failure_ratio NULL drops it.';
COMMENT ON FUNCTION wfe.reset_circuit(text) IS
'Closes a queue''s circuit now, with an empty window: what it held back may go.';
COMMENT ON FUNCTION wfe._recheck_concurrency() IS
'Releases the held attempts that fit of the keys in wfe.concurrency_recheck (emptying it), waiting for each key''s lock in order; returns how many keys it rechecked.';
COMMENT ON FUNCTION wfe._flow_settings_changed() IS
'Trigger: every backend drops its cached lists of fair queues and queues with a circuit when this transaction commits.';
COMMENT ON FUNCTION wfe.set_priority(bigint, int) IS
'Changes a run''s priority (-1000000 .. 1000000, higher first): its queued work, and what it releases later, is claimed in the new order; event run.priority_set.';
COMMENT ON FUNCTION wfe._operate(bigint, text, text, text, text, text) IS
'An operator''s redrive, skip, fail or redispatch of one stage, through the step core under the run''s lock; 55000 when the core refuses, 53400 when reopening the run would pass its tenant''s max_runs_in_flight.';
COMMENT ON FUNCTION wfe._operator_target(bigint, text, text) IS
'Checks an operator action''s run, stage and reason: 22004, 54000, 22023, and 42704 when there is no such run or it is of a tenant the caller does not act for.';
COMMENT ON FUNCTION wfe.redrive_dead_letters(text, timestamptz, text) IS
'Redrives every stage with an open dead letter on queue since a time, of the tenants the caller acts for; returns how many (stages that can no longer be redriven, or whose runs max_runs_in_flight keeps closed, are passed over).';
COMMENT ON FUNCTION wfe._metrics_count() IS
'Trigger: adds 1 to the counter TG_ARGV[0] of wfe.metrics for the row''s tenant, with the labels the row gives; folds the counter rows every 256th.';
COMMENT ON FUNCTION wfe._submit_via() IS
'How the submit in progress came, for its run.submitted event: {"via": "amqp", "ingress", "message_id", "correlation_id"}, or {} for a SQL call.';
COMMENT ON FUNCTION wfe._ingress_submit_as(regrole, text, text, jsonb, text, jsonb, jsonb) IS
'wfe.submit as role (its tenant membership, limits and identity apply), via recorded in run.submitted; NULLs when role does not act for tenant.';
COMMENT ON FUNCTION wfe.configure_ingress(text, name, jsonb) IS
'Has the background worker consume run commands from wfe.ingress.NAME and submit them as role; role NULL drops the ingress.';
COMMENT ON FUNCTION wfe.put_payload(jsonb) IS
'Stores a large-track run command''s input for the tenants the caller acts for; returns the key its payload_ref names (with sha256 = wfe.payload_sha256(body)).';
COMMENT ON FUNCTION wfe.payload_sha256(jsonb) IS
'The sha256 a payload_ref names for body (wfe.put_payload): hex SHA-256 of its jsonb text.';
COMMENT ON FUNCTION wfe._ingress_count(text, text, text) IS
'Counts one command of an ingress: submitted, duplicate, or rejected with its SQLSTATE as reason.';
COMMENT ON FUNCTION wfe._envelope_error(text) IS
'Raises 22023 naming what is wrong with a run command''s envelope.';
COMMENT ON FUNCTION wfe._envelope_string(jsonb, text, text) IS
'The non-empty string field of a run command''s envelope, or 22023 naming it.';
COMMENT ON FUNCTION wfe._ingress_submit(text, text) IS
'Validates a run command (seed 004''s envelope) of an ingress and submits it as the ingress''s role; raises for a command to reject.';
COMMENT ON FUNCTION wfe._ingress_names() IS
'The ingresses the background worker consumes.';
COMMENT ON FUNCTION wfe._history_make_day(date) IS
'Makes the day partition of wfe.events for p_day (UTC) unless it exists, moving that day''s rows out of the default partition; 1 if made, 0 if it existed or a lock was busy.';
COMMENT ON FUNCTION wfe._history_days() IS
'The day partitions of wfe.events (events_pYYYYMMDD), oldest first, with the time each ends.';
COMMENT ON FUNCTION wfe._history_maintain(timestamptz) IS
'The worker''s pass over wfe.events'' day partitions: makes today''s and the next two days'', moves one day out of the default partition, drops the day partitions that ended before p_cutoff and before the oldest run kept was submitted, and name no run kept.  Returns the partitions made or dropped.';

-- End of the final bodies.
