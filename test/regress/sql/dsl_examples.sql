-- The three example workflows (examples/*.yaml, copied verbatim): they
-- compile, their digests are pinned (the CLI must print the same ones, see
-- test/harness/cli_vs_db.sh), and their plans carry every default.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
CREATE TEMP TABLE example (name text PRIMARY KEY, source text);
INSERT INTO example VALUES ('model-ingest', $yaml$# Seed 000's example, as written there (indentation restored), with the
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
INSERT INTO example VALUES ('payment-routing', $yaml$# Seed 004's CEL route rules as a decision stage.
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
INSERT INTO example VALUES ('system-initialization', $yaml$# Seed 002's blueprint in wfe's tasks form: the same tasks, dependencies,
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

-- ok, digest, no diagnostics (contracts layer skipped: NULL registry)
SELECT name, r->'ok' AS ok, r->>'digest' AS digest, jsonb_array_length(r->'diagnostics') AS diagnostics
  FROM example, wfe._compile(source, NULL) AS r
 ORDER BY name;

-- the plan's header
SELECT name, p->>'form' AS form, p->>'entry' AS entry, p->>'dsl_version' AS dsl,
       p->>'compiler_version' AS compiler, p->'contracts' AS contracts
  FROM example, wfe._compile(source, NULL) AS r, LATERAL (SELECT r->'plan') AS x(p)
 ORDER BY name;

-- every stage with its effective settings: defaults made explicit
SELECT e.name AS workflow, s->>'name' AS stage, s->>'type' AS type,
       coalesce(s->>'worker', s->>'action') AS contract, s->>'queue' AS queue,
       s->'retry'->>'max_attempts' AS attempts, s->>'execution_deadline_ms' AS exec_ms,
       coalesce(s->>'on_success', s->'branches'->>0, s->'depends_on'->>0) AS next
  FROM example AS e, wfe._compile(e.source, NULL) AS r,
       jsonb_array_elements(r->'plan'->'stages') WITH ORDINALITY AS x(s, i)
 ORDER BY e.name, i;

-- the canonical plan of payment-routing in full
SELECT jsonb_pretty(wfe._compile(source, NULL)->'plan') FROM example WHERE name = 'payment-routing';

-- Mermaid of model-ingest: the graph of seed 000's flowchart
SELECT wfe._plan_mermaid(wfe._compile(source, NULL)->'plan') FROM example WHERE name = 'model-ingest';

-- the tasks form draws dependencies; non-critical tasks are dashed
SELECT wfe._plan_mermaid(wfe._compile(source, NULL)->'plan') FROM example WHERE name = 'system-initialization';

-- a plan that is not a plan
SELECT wfe._plan_mermaid('{"form": "stages"}');
