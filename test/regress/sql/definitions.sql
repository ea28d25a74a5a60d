--
-- Definitions: wfe.compile, wfe.create_definition, the lifecycle (approve,
-- activate, retire, roll back), the plan tables and wfe.plan_mermaid.
-- Workflows created here are named defs-* (the examples keep their names
-- and are only created, never approved, so other test files can use them).
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- The contracts of the examples (examples/contracts.sql); registering the
-- same contracts again is a no-op, so this file does not depend on others.
\o /dev/null
SELECT wfe.register_action('cache.lookup@1', queue => 'actions',
  input_schema => '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}',
  output_schema => '{"type":"object","required":["hit"],"properties":{"hit":{"type":"boolean"}}}');
SELECT wfe.register_action('catalogue.publish@2', queue => 'actions',
  input_schema => '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_action('audit.run-terminal@1', queue => 'actions');
SELECT wfe.register_worker('thumbnail.render@3', 'rendering',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_worker('semantic.analyse@4', 'analysis',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_worker('metadata.extract@2', 'metadata',
  '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}');
SELECT wfe.register_worker('storage.verify@1', 'init');
SELECT wfe.register_worker('config.fetch@1', 'init');
SELECT wfe.register_worker('session.restore@1', 'init');
SELECT wfe.register_worker('profile.hydrate@1', 'init');
SELECT wfe.register_worker('payment.review@1', 'payments-review');
SELECT wfe.register_worker('payment.process@1', 'payments');
\o
SELECT wfe.register_action('defs.check@1', queue => 'defs');
SELECT wfe.register_worker('defs.step@1', 'defs',
    '{"type":"object","properties":{"id":{"type":"string"}}}');

-- The example workflows (examples/*.yaml), verbatim.
CREATE TEMP TABLE examples (name text PRIMARY KEY, source text NOT NULL);
INSERT INTO examples VALUES ('model-ingest', $yaml$# Seed 000's example, as written there (indentation restored), with the
# queue_deadline_ms docs/delivery.md recommends for stages a broker may serve.
name: model-ingest
version: "2.3.0"
entry: cache-lookup
stages:
  - name: cache-lookup
    type: action
    action: cache.lookup@1
    input: { modelId: "${context.modelId}" }
    on_success: cache-route
    on_failure: failed
  - name: cache-route
    type: decision
    on_evaluation_error: failed
    branches:
      - when: 'stages["cache-lookup"].result.hit == true'
        next: publish
      - when: "true" # required fallback
        next: render-thumbnail
  - name: render-thumbnail
    type: worker
    queue: rendering
    worker: thumbnail.render@3
    input: { modelId: "${context.modelId}" }
    queue_deadline_ms: 600000
    execution_deadline_ms: 300000
    on_success: derive-fork
    on_failure: failed
  - name: derive-fork
    type: fork
    branches: [semantic-analysis, technical-metadata]
  - name: semantic-analysis
    type: worker
    queue: analysis
    worker: semantic.analyse@4
    input: { modelId: "${context.modelId}" }
    queue_deadline_ms: 600000
    on_success: derive-join
    on_failure: failed
  - name: technical-metadata
    type: worker
    queue: metadata
    worker: metadata.extract@2
    input: { modelId: "${context.modelId}" }
    queue_deadline_ms: 600000
    on_success: derive-join
    on_failure: failed
  - name: derive-join
    type: join
    required: [semantic-analysis, technical-metadata]
    acceptable_terminal_states: [completed]
    on_success: publish
    on_failure: failed
  - name: publish
    type: action
    action: catalogue.publish@2
    input: { modelId: "${context.modelId}" }
    on_success: completed
    on_failure: failed
terminal_policy:
  fork_branch_failure: request-cancellation-and-fence
  late_callbacks: reject-and-record
  finalisers: declared-order
  finaliser_failure_terminal: failed
finalisers: [audit.run-terminal@1]
terminals: [completed, failed]
$yaml$);
INSERT INTO examples VALUES ('payment-routing', $yaml$# Seed 004's CEL route rules as a decision stage.
name: payment-routing
version: "1.0.0"
entry: route
stages:
  - name: route
    type: decision
    on_evaluation_error: failed
    branches:
      - when: "has(payload.amount) && payload.amount > 10000"
        next: high-value
      - when: "true"
        next: standard
  - name: high-value
    type: worker
    queue: payments-review
    worker: payment.review@1
    input: { amount: "${context.amount}", account: "${context.account}" }
    retry: { max_attempts: 5, initial_ms: 500, multiplier: 2.0, max_ms: 30000, jitter: full }
    on_success: completed
    on_failure: failed
  - name: standard
    type: worker
    queue: payments
    worker: payment.process@1
    input: { amount: "${context.amount}", account: "${context.account}" }
    on_success: completed
    on_failure: failed
$yaml$);
INSERT INTO examples VALUES ('system-initialization', $yaml$# Seed 002's blueprint in wfe's tasks form: the same tasks, dependencies,
# criticality and data contracts, with an executor named for each task.
name: system-initialization
version: "1.0.0"
context: foreground_app
tasks:
  - id: verify_storage
    description: "Verifies local disk read/write availability"
    worker: storage.verify@1
    queue: init
    critical: true
    awaits: true

  - id: fetch_configuration
    description: "Downloads global remote runtime configuration"
    worker: config.fetch@1
    queue: init
    depends_on: [verify_storage]
    critical: false
    awaits: true
    produces:
      - key: app_config
        type: ConfigObject

  - id: restore_session
    description: "Attempts to decrypt and restore a previous user session"
    worker: session.restore@1
    queue: init
    depends_on: [verify_storage]
    critical: true
    awaits: true
    produces:
      - key: user_session
        type: SessionObject

  - id: hydrate_user_profile
    description: "Uses the restored session to populate profile data"
    worker: profile.hydrate@1
    queue: init
    depends_on: [restore_session]
    critical: true
    awaits: true
    requires_outputs:
      - producer_task_id: restore_session
        key: user_session
$yaml$);

-- A small workflow of our own, in as many versions as the tests need.
CREATE FUNCTION public.defs_source(workflow text, version text,
                                   deadline_ms int DEFAULT 300000)
RETURNS text LANGUAGE sql IMMUTABLE
RETURN format($yaml$
name: %s
version: "%s"
entry: check
stages:
  - name: check
    type: action
    action: defs.check@1
    on_success: step
    on_failure: failed
  - name: step
    type: worker
    queue: defs
    worker: defs.step@1
    input: { id: "${context.id}" }
    execution_deadline_ms: %s
    on_success: completed
    on_failure: failed
$yaml$, workflow, version, deadline_ms);

-- The lifecycle columns of our workflows' versions.
CREATE TEMP VIEW defs_states AS
SELECT d.workflow, d.version, d.state,
       d.approved_at IS NOT NULL AS approved,
       d.activated_at IS NOT NULL AS activated,
       d.retired_at IS NOT NULL AS retired
  FROM wfe.definitions AS d
 WHERE d.workflow LIKE 'defs-%';

--
-- wfe.compile: never writes, never raises for a bad definition
--
SELECT e.name,
       r -> 'ok' AS ok,
       r ->> 'digest' ~ '^sha256:[0-9a-f]{64}$' AS digest_ok,
       r -> 'diagnostics' AS diagnostics,
       r -> 'plan' ->> 'name' AS plan_name,
       r -> 'plan' ->> 'version' AS plan_version,
       r -> 'plan' ->> 'form' AS form,
       r -> 'plan' -> 'contracts' AS contracts
  FROM examples AS e, wfe.compile(e.source) AS r
 ORDER BY e.name;
-- the same source compiles to the same digest
SELECT count(DISTINCT wfe.compile(e.source) ->> 'digest') FROM examples AS e, generate_series(1, 3);
SELECT wfe.compile(NULL);
SELECT r -> 'ok' AS ok, r -> 'digest' AS digest, r -> 'plan' AS plan,
       jsonb_path_query_array(r, '$.diagnostics[*].code') AS codes
  FROM wfe.compile('name: [unclosed') AS r;
SELECT r -> 'ok' AS ok, jsonb_path_query_array(r, '$.diagnostics[*].code') AS codes,
       jsonb_path_query_array(r, '$.diagnostics[*].path') AS paths
  FROM wfe.compile(replace(public.defs_source('defs-bad', '1.0.0'), 'defs.step@1', 'defs.nope@1')) AS r;
SELECT count(*) FROM wfe.definitions WHERE workflow LIKE 'defs-%';

--
-- wfe.create_definition: the examples
--
SELECT e.name, wfe.create_definition(e.source) = wfe.compile(e.source) ->> 'digest' AS returns_digest
  FROM examples AS e ORDER BY e.name;
SELECT d.workflow, d.version, d.state,
       d.digest = wfe.compile(e.source) ->> 'digest' AS digest_ok,
       d.plan = wfe.compile(e.source) -> 'plan' AS plan_ok,
       d.source = e.source AS source_ok,
       d.dsl_version,
       d.compiler_version = (SELECT extversion FROM pg_extension WHERE extname = 'wfe') AS compiler_version_ok,
       d.created_by = session_user AS created_by_ok,
       d.approved_at IS NULL AND d.approved_by IS NULL AND d.activated_at IS NULL
           AND d.retired_at IS NULL AS lifecycle_empty
  FROM wfe.definitions AS d JOIN examples AS e ON e.name = d.workflow
 ORDER BY d.workflow;

-- Creating the same definition again returns its digest and changes nothing,
-- also when only comments, quoting, key order or white space differ.
CREATE TEMP TABLE before AS
SELECT d.definition_id, d.digest, d.created_at FROM wfe.definitions AS d;
SELECT e.name, wfe.create_definition(e.source) = wfe.compile(e.source) ->> 'digest' AS same_digest
  FROM examples AS e ORDER BY e.name;
SELECT wfe.create_definition(replace(replace(e.source, '# required fallback', '# changed comment'),
                                     'version: "2.3.0"', E'version:   ''2.3.0''   '))
       = wfe.compile(e.source) ->> 'digest' AS same_digest
  FROM examples AS e WHERE e.name = 'model-ingest';
SELECT (SELECT count(*) FROM wfe.definitions) = (SELECT count(*) FROM before) AS no_new_rows,
       (SELECT bool_and(d.source = e.source) FROM wfe.definitions AS d
          JOIN examples AS e ON e.name = d.workflow) AS first_source_kept;

-- The same name and version with another digest is refused, naming both digests.
SELECT wfe.create_definition(public.defs_source('defs-demo', '1.0.0')) IS NOT NULL AS created;
SELECT wfe.create_definition(public.defs_source('defs-demo', '1.0.0', 600000));
\echo :LAST_ERROR_SQLSTATE
DO $$
DECLARE
    detail text;
    stored text := (SELECT digest FROM wfe.definitions WHERE workflow = 'defs-demo' AND version = '1.0.0');
    given text := wfe.compile(public.defs_source('defs-demo', '1.0.0', 600000)) ->> 'digest';
BEGIN
    PERFORM wfe.create_definition(public.defs_source('defs-demo', '1.0.0', 600000));
EXCEPTION WHEN unique_violation THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'detail names the stored and the given digest: %',
        detail = format('The stored version has digest %s; this source compiles to %s.', stored, given)
        AND stored <> given;
END
$$;
SELECT count(*) FROM wfe.definitions WHERE workflow = 'defs-demo';

--
-- Invalid definitions raise 22023 with the diagnostics as JSON in DETAIL
--
SELECT wfe.create_definition('name: [unclosed');
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION pg_temp.create_error(source text)
RETURNS TABLE (sqlstate text, message text, detail_is_compile_diagnostics boolean,
               code text, path text)
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
BEGIN
    PERFORM wfe.create_definition(source);
    RAISE EXCEPTION 'create_definition did not raise';
EXCEPTION WHEN invalid_parameter_value THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN QUERY
        SELECT st, msg, det::jsonb = wfe.compile(source) -> 'diagnostics',
               d ->> 'code', d ->> 'path'
          FROM jsonb_array_elements(det::jsonb) AS d;
END
$$;
-- a contract that is not registered
SELECT * FROM pg_temp.create_error(
    replace(public.defs_source('defs-bad', '1.0.0'), 'defs.step@1', 'defs.nope@1'));
-- a route to a stage that does not exist
SELECT * FROM pg_temp.create_error(
    replace(public.defs_source('defs-bad', '1.0.0'), 'on_success: step', 'on_success: stpe'));
-- a worker on another queue than its contract's
SELECT * FROM pg_temp.create_error(
    replace(public.defs_source('defs-bad', '1.0.0'), 'queue: defs', 'queue: elsewhere'));
SELECT wfe.create_definition(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM wfe.definitions WHERE workflow = 'defs-bad';

--
-- Lifecycle: draft -> approved -> active -> retired, rollback by activation
--
SELECT wfe.create_definition(public.defs_source('defs-demo', v)) IS NOT NULL AS created
  FROM unnest(ARRAY['1.1.0', '2.0.0']) AS v;
SELECT version, state, approved, activated, retired FROM defs_states
 WHERE workflow = 'defs-demo' ORDER BY version;

SELECT wfe.approve('defs-demo', '9.9.9');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.approve('defs-nothing', '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.approve(NULL, '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.activate('defs-demo', NULL);
\echo :LAST_ERROR_SQLSTATE
-- a draft cannot be activated
SELECT wfe.activate('defs-demo', '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.activate('defs-nothing', '1.0.0');
\echo :LAST_ERROR_SQLSTATE

SELECT wfe.approve('defs-demo', '1.0.0');
SELECT wfe.approve('defs-demo', '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT d.approved_by = session_user AS approved_by_ok
  FROM wfe.definitions AS d WHERE d.workflow = 'defs-demo' AND d.version = '1.0.0';
SELECT wfe.activate('defs-demo', '1.0.0');
SELECT wfe.activate('defs-demo', '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.approve('defs-demo', '1.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT version, state, approved, activated, retired FROM defs_states
 WHERE workflow = 'defs-demo' ORDER BY version;

-- activating 1.1.0 retires 1.0.0
SELECT wfe.approve('defs-demo', '1.1.0');
SELECT wfe.activate('defs-demo', '1.1.0');
SELECT version, state, approved, activated, retired FROM defs_states
 WHERE workflow = 'defs-demo' ORDER BY version;

-- rollback: activating the earlier version again retires 1.1.0
SELECT wfe.activate('defs-demo', '1.0.0');
SELECT version, state, approved, activated, retired FROM defs_states
 WHERE workflow = 'defs-demo' ORDER BY version;

-- an approved version stays approved until activated
SELECT wfe.approve('defs-demo', '2.0.0');
SELECT version, state, approved, activated, retired FROM defs_states
 WHERE workflow = 'defs-demo' ORDER BY version;

-- both steps of an activation happen in one transaction
BEGIN;
SELECT wfe.activate('defs-demo', '2.0.0');
SELECT version, state FROM defs_states WHERE workflow = 'defs-demo' ORDER BY version;
ROLLBACK;
SELECT version, state FROM defs_states WHERE workflow = 'defs-demo' ORDER BY version;

--
-- At most one active version, whatever writes the table
--
UPDATE wfe.definitions SET state = 'active', activated_at = now(), retired_at = NULL
 WHERE workflow = 'defs-demo' AND version = '1.1.0';
\echo :LAST_ERROR_SQLSTATE
SELECT workflow, count(*) FROM wfe.definitions
 WHERE state = 'active' AND workflow LIKE 'defs-%' GROUP BY workflow ORDER BY workflow;

--
-- Stored definitions never change; only the lifecycle moves, and only forward
--
UPDATE wfe.definitions SET source = source || '# edited' WHERE workflow = 'defs-demo' AND version = '1.0.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET plan = plan || '{"run_deadline_ms": 1}', digest = 'sha256:' || repeat('0', 64)
 WHERE workflow = 'defs-demo' AND version = '1.0.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET version = '1.0.1' WHERE workflow = 'defs-demo' AND version = '1.0.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET created_by = 'someone' WHERE workflow = 'defs-demo' AND version = '1.0.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET state = 'draft', approved_at = NULL, approved_by = NULL
 WHERE workflow = 'defs-demo' AND version = '1.1.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET state = 'retired', retired_at = now()
 WHERE workflow = 'defs-demo' AND version = '2.0.0';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.definitions SET approved_by = 'someone' WHERE workflow = 'defs-demo' AND version = '2.0.0';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM wfe.definitions WHERE workflow = 'defs-demo' AND version = '2.0.0';
\echo :LAST_ERROR_SQLSTATE
TRUNCATE wfe.definitions CASCADE;
\echo :LAST_ERROR_SQLSTATE
SELECT version, state FROM defs_states WHERE workflow = 'defs-demo' ORDER BY version;

--
-- The plan tables: the plan as rows, queryable with plain SQL
--
-- model-ingest's stages in declared order, then its finaliser
SELECT s.ordinal, s.stage, s.type,
       coalesce(s.spec ->> 'action', s.spec ->> 'worker') AS contract,
       s.spec ->> 'queue' AS queue,
       s.spec -> 'execution_deadline_ms' AS deadline_ms
  FROM wfe.plan_stages AS s
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'model-ingest' AND d.version = '2.3.0'
 ORDER BY s.ordinal;
-- and its edges
SELECT e.from_stage, e.kind, e.ordinal, e.to_stage, e.to_terminal, e.condition
  FROM wfe.plan_edges AS e
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'model-ingest' AND d.version = '2.3.0'
 ORDER BY e.from_stage, e.kind, e.ordinal;
-- where can cache-route go, in which order?
SELECT e.ordinal, e.condition, e.to_stage
  FROM wfe.plan_edges AS e
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'model-ingest' AND d.version = '2.3.0'
   AND e.from_stage = 'cache-route' AND e.kind = 'branch'
 ORDER BY e.ordinal;
-- what does the join wait for?
SELECT e.from_stage AS required
  FROM wfe.plan_edges AS e
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'model-ingest' AND d.version = '2.3.0'
   AND e.to_stage = 'derive-join' AND e.kind = 'join'
 ORDER BY e.ordinal;
-- one row per stage of the plan and per finaliser, holding the plan's stage object
SELECT d.workflow,
       (SELECT count(*) FROM wfe.plan_stages AS s WHERE s.definition_id = d.definition_id)
         = jsonb_array_length(d.plan -> 'stages') + jsonb_array_length(d.plan -> 'finalisers') AS stage_rows_ok,
       (SELECT bool_and(s.spec = d.plan -> 'stages' -> (s.ordinal - 1))
          FROM wfe.plan_stages AS s
         WHERE s.definition_id = d.definition_id AND s.type <> 'finaliser') AS specs_ok
  FROM wfe.definitions AS d JOIN examples AS e ON e.name = d.workflow
 ORDER BY d.workflow;
-- the tasks form: dependencies as edges from the dependency to the task
SELECT s.ordinal, s.stage, s.type, s.spec ->> 'worker' AS worker,
       s.spec -> 'critical' AS critical, s.spec -> 'depends_on' AS depends_on
  FROM wfe.plan_stages AS s
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'system-initialization'
 ORDER BY s.ordinal;
SELECT e.from_stage, e.kind, e.ordinal, e.to_stage, e.to_terminal
  FROM wfe.plan_edges AS e
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'system-initialization'
 ORDER BY e.to_stage, e.ordinal;
-- decisions: the when expressions are on the branch edges
SELECT e.from_stage, e.kind, e.ordinal, e.to_stage, e.to_terminal, e.condition
  FROM wfe.plan_edges AS e
  JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'payment-routing'
 ORDER BY e.from_stage, e.kind, e.ordinal;

-- Nothing ever edits a stored plan.
UPDATE wfe.plan_stages SET spec = spec || '{"queue": "elsewhere"}' WHERE stage = 'render-thumbnail';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM wfe.plan_stages WHERE stage = 'render-thumbnail';
\echo :LAST_ERROR_SQLSTATE
TRUNCATE wfe.plan_stages CASCADE;
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.plan_edges SET to_stage = 'publish' WHERE from_stage = 'cache-route';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM wfe.plan_edges WHERE kind = 'failure';
\echo :LAST_ERROR_SQLSTATE
TRUNCATE wfe.plan_edges;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM wfe.plan_edges AS e JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'model-ingest';

--
-- wfe.plan_mermaid: 'name' is the active version, 'name@version' any version
--
SELECT wfe.plan_mermaid('model-ingest@2.3.0');
SELECT wfe.plan_mermaid('defs-demo@1.1.0') = wfe._plan_mermaid(d.plan) AS is_1_1_0
  FROM wfe.definitions AS d WHERE d.workflow = 'defs-demo' AND d.version = '1.1.0';
SELECT wfe.plan_mermaid('defs-demo') = wfe.plan_mermaid('defs-demo@1.0.0') AS active_is_1_0_0;
SELECT wfe.plan_mermaid('defs-demo@9.9.9');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.create_definition(public.defs_source('defs-drafts', '1.0.0')) IS NOT NULL AS created;
SELECT wfe.plan_mermaid('defs-drafts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.plan_mermaid('defs-nothing');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.plan_mermaid(NULL) IS NULL AS null_in_null_out;

--
-- Roles and the four-eyes rule
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_wfe_alice;
DROP ROLE IF EXISTS regress_wfe_bob;
DROP ROLE IF EXISTS regress_wfe_carol;
RESET client_min_messages;
CREATE ROLE regress_wfe_alice IN ROLE wfe_author, wfe_approver;
CREATE ROLE regress_wfe_bob IN ROLE wfe_approver;
CREATE ROLE regress_wfe_carol IN ROLE wfe_reader;

-- Without four eyes (the default), an author who is also an approver may
-- approve and activate her own definition.
SHOW wfe.four_eyes;
SET SESSION AUTHORIZATION regress_wfe_alice;
SELECT wfe.create_definition(public.defs_source('defs-eyes', '1.0.0')) IS NOT NULL AS created;
SELECT wfe.approve('defs-eyes', '1.0.0');
SELECT wfe.activate('defs-eyes', '1.0.0');
RESET SESSION AUTHORIZATION;

-- With four eyes, she may do neither; another approver may.
SET wfe.four_eyes = on;
SET SESSION AUTHORIZATION regress_wfe_alice;
SELECT wfe.create_definition(public.defs_source('defs-eyes', '1.1.0')) IS NOT NULL AS created;
SELECT wfe.approve('defs-eyes', '1.1.0');
\echo :LAST_ERROR_SQLSTATE
-- SET ROLE does not change who she is
SET ROLE wfe_approver;
SELECT wfe.approve('defs-eyes', '1.1.0');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- nor can she turn the rule off
SET wfe.four_eyes = off;
\echo :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_wfe_bob;
SELECT wfe.approve('defs-eyes', '1.1.0');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_wfe_alice;
SELECT wfe.activate('defs-eyes', '1.1.0');
\echo :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_wfe_bob;
SELECT wfe.activate('defs-eyes', '1.1.0');
RESET SESSION AUTHORIZATION;
RESET wfe.four_eyes;
SELECT d.version, d.state, d.created_by, d.approved_by
  FROM wfe.definitions AS d WHERE d.workflow = 'defs-eyes' ORDER BY d.version;

-- Each role calls only its own functions.
SET SESSION AUTHORIZATION regress_wfe_bob;
SELECT wfe.create_definition(public.defs_source('defs-eyes', '2.0.0'));
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.compile(public.defs_source('defs-eyes', '2.0.0'));
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('defs.bob@1', 'defs');
\echo :LAST_ERROR_SQLSTATE
SELECT left(wfe.plan_mermaid('defs-eyes'), 9) AS mermaid;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_wfe_carol;
SELECT wfe.approve('defs-demo', '2.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.activate('defs-demo', '2.0.0');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._compile('name: x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT left(wfe.plan_mermaid('defs-eyes@1.0.0'), 9) AS mermaid;
-- readers see the plan tables, but cannot write them
SELECT s.stage, s.type FROM wfe.plan_stages AS s JOIN wfe.definitions AS d USING (definition_id)
 WHERE d.workflow = 'defs-eyes' AND d.version = '1.1.0' ORDER BY s.ordinal;
INSERT INTO wfe.definitions (workflow, version, digest, source, plan, dsl_version, compiler_version)
VALUES ('defs-forged', '1.0.0', 'sha256:' || repeat('0', 64), '', '{}', '1', '0');
\echo :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
DROP ROLE regress_wfe_alice;
DROP ROLE regress_wfe_bob;
DROP ROLE regress_wfe_carol;

--
-- DROP EXTENSION still works (immutability triggers do not fire on DROP);
-- the roles stay, they are cluster-wide.
--
DROP VIEW defs_states;
BEGIN;
DROP EXTENSION wfe;
SELECT count(*) FROM pg_class WHERE relnamespace = 'wfe'::regnamespace;
SELECT rolname FROM pg_roles WHERE rolname LIKE 'wfe\_%' ORDER BY rolname;
ROLLBACK;
SELECT count(*) > 0 AS still_installed FROM wfe.definitions;
