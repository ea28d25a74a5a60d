-- Runs and their durable state (docs: runtime.md).
--
-- Every row carries tenant.  A run's stages are created with the run, all in
-- state waiting, so joins, skips and reports work on rows rather than on
-- memory.  Lock order everywhere: the run row first, then its stage rows.

-- The transition guards (src/pg/transitions.c holds the tables).
CREATE FUNCTION wfe._stage_state_guard()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_stage_state_guard' LANGUAGE C;
COMMENT ON FUNCTION wfe._stage_state_guard() IS 'Trigger: refuses stage state changes not in wfe.stage_transitions()';
REVOKE ALL ON FUNCTION wfe._stage_state_guard() FROM PUBLIC;
CREATE FUNCTION wfe._run_state_guard()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_run_state_guard' LANGUAGE C;
COMMENT ON FUNCTION wfe._run_state_guard() IS 'Trigger: refuses run state changes not in wfe.run_transitions()';
REVOKE ALL ON FUNCTION wfe._run_state_guard() FROM PUBLIC;

CREATE FUNCTION wfe._stage_row_ok(kind text, state text, attempt int, fence bigint,
                                   outcome text, skip_reason text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_stage_row_ok' LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION wfe._stage_row_ok(text, text, int, bigint, text, text) IS
'The CHECK of wfe.run_stages: known kind and state, attempt and fence not negative, outcome and skip_reason NULL or known.';
REVOKE ALL ON FUNCTION wfe._stage_row_ok(text, text, int, bigint, text, text) FROM PUBLIC;

CREATE FUNCTION wfe.stage_transitions(OUT from_state text, OUT to_state text, OUT meaning text)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'wfe_stage_transitions' LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION wfe.stage_transitions() IS 'The legal stage state transitions (any state may also be updated in place)';
REVOKE ALL ON FUNCTION wfe.stage_transitions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.stage_transitions() TO wfe_reader, wfe_operator;
CREATE FUNCTION wfe.run_transitions(OUT from_state text, OUT to_state text, OUT meaning text)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'wfe_run_transitions' LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION wfe.run_transitions() IS 'The legal run state transitions';
REVOKE ALL ON FUNCTION wfe.run_transitions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_transitions() TO wfe_reader, wfe_operator;

-- What the states mean, one definition each, for wfe's own functions (the
-- step core has its own words in src/core/engine/states.h).  Plain SQL
-- without SET, so the planner inlines them into the IN lists they hold, and
-- a query that asks wfe._stage_clocked(st.state) matches the partial
-- indexes below; their bodies are bound at CREATE, so nothing can capture
-- them.  NB: the planner inlines a function only for a role that may
-- execute it, and these, being internal, are executable by nobody but
-- their owner.  So the partial indexes (whose predicates the relcache keeps
-- as the first role to plan against the table loaded them) and the
-- dashboards (security_invoker views, planned as the reader) keep the lists
-- written out, each marked with the helper it must equal.

-- An attempt whose clock runs: queued, dispatched or running.
CREATE FUNCTION wfe._stage_clocked(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('queued', 'dispatched', 'running');
COMMENT ON FUNCTION wfe._stage_clocked(text) IS
'Queued, dispatched or running: a stage''s attempt is live, its queue, execution or heartbeat deadline runs.';
REVOKE ALL ON FUNCTION wfe._stage_clocked(text) FROM PUBLIC;

-- An attempt a worker has, or has been sent: dispatched or running.
CREATE FUNCTION wfe._stage_handed_out(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('dispatched', 'running');
COMMENT ON FUNCTION wfe._stage_handed_out(text) IS
'Dispatched or running: a worker holds the attempt, or its dispatch message was published (it counts against in-flight limits).';
REVOKE ALL ON FUNCTION wfe._stage_handed_out(text) FROM PUBLIC;

-- A stage with work under way: clocked, or waiting for its retry.
CREATE FUNCTION wfe._stage_under_way(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state IN ('queued', 'dispatched', 'running', 'retry_scheduled');
COMMENT ON FUNCTION wfe._stage_under_way(text) IS
'Queued, dispatched, running or retry_scheduled: an attempt of the stage is under way or due.';
REVOKE ALL ON FUNCTION wfe._stage_under_way(text) FROM PUBLIC;

-- A run that keeps its idempotency key: live, or ended completed.
CREATE FUNCTION wfe._run_keeps_key(state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN state NOT IN ('failed', 'cancelled');
COMMENT ON FUNCTION wfe._run_keeps_key(text) IS
'Any run state but failed and cancelled: the run keeps its idempotency key (a failed or cancelled run frees it).';
REVOKE ALL ON FUNCTION wfe._run_keeps_key(text) FROM PUBLIC;

CREATE TABLE wfe.runs (
    run_id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant            text NOT NULL DEFAULT 'default',
    workflow          text NOT NULL,
    version           text NOT NULL,
    -- No foreign key: a run's definition_id is that of the definition row
    -- its insert selects (submit.c), and a definition is never deleted
    -- (definitions_immutable) nor its id changed (definitions_guard).  A key's check would lock
    -- the definition's row FOR KEY SHARE at every submit, and concurrent
    -- submits of one workflow made a MultiXact of it each
    -- (docs/benchmarks.md "A submit that pays less up front").
    definition_id     bigint NOT NULL,
    definition_digest text NOT NULL,
    dsl_version       text NOT NULL,
    compiler_version  text NOT NULL,
    engine_version    text NOT NULL,
    contracts         jsonb NOT NULL,
    context           jsonb NOT NULL,
    execution_context text,
    idempotency_key   text,
    state             text NOT NULL DEFAULT 'running'
                      CONSTRAINT runs_state
                      CHECK (state IN ('running', 'finalising', 'completed', 'failed', 'cancelled')),
    intent            text CONSTRAINT runs_intent CHECK (intent IN ('completed', 'failed', 'cancelled')),
    reason            text,
    priority          int NOT NULL DEFAULT 0,
    not_before        timestamptz,
    deadline_at       timestamptz,
    submitted_at      timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    replay_of         bigint,
    form              text NOT NULL CONSTRAINT runs_form CHECK (form IN ('stages', 'tasks')),
    trace_id          text NOT NULL DEFAULT wfe._random_hex(32),
    span_id           text NOT NULL DEFAULT wfe._random_hex(16),
    trace_parent      text,
    trace_flags       text NOT NULL DEFAULT '01',
    output            jsonb,
    parent_run_id     bigint,
    parent_stage      text,
    parent_attempt    int,
    CONSTRAINT runs_intent_state CHECK (state = 'running' OR intent IS NOT NULL),
    CONSTRAINT runs_parent CHECK ((parent_run_id IS NULL) = (parent_stage IS NULL)
                                  AND (parent_run_id IS NULL) = (parent_attempt IS NULL))
);
COMMENT ON TABLE wfe.runs IS
'Workflow runs, pinned at creation to a definition digest, the DSL/compiler/engine versions and the contract versions.';
GRANT SELECT ON wfe.runs TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.runs.intent IS 'Terminal intent (completed, failed, cancelled) once set; finalisers then run';
COMMENT ON COLUMN wfe.runs.trace_id IS 'W3C trace id of the run: the submitter''s (option traceparent) or a new one';
COMMENT ON COLUMN wfe.runs.span_id IS 'Span id of the run''s span (wfe.run_spans); its attempts'' spans are its children';
COMMENT ON COLUMN wfe.runs.trace_parent IS 'Span id of the submitter''s span (option traceparent), the run span''s parent';
COMMENT ON COLUMN wfe.runs.trace_flags IS 'W3C trace flags passed on with the trace (the sampled bit)';
COMMENT ON COLUMN wfe.runs.output IS 'The run''s output (dsl.md "Run output"), bound when it reached a completed intent; NULL before';
COMMENT ON COLUMN wfe.runs.parent_run_id IS 'A child run (runtime.md "Child runs"): the run whose workflow stage started it; NULL for a submitted run';
COMMENT ON COLUMN wfe.runs.parent_stage IS 'A child run: the parent''s workflow stage that started it';
COMMENT ON COLUMN wfe.runs.parent_attempt IS 'A child run: the attempt of the parent''s stage that started it';
COMMENT ON COLUMN wfe.runs.contracts IS 'Pinned contract versions: {ref: {"kind","queue"}} of every contract the plan uses';

-- An idempotency key names one live or successful run per tenant and
-- workflow; once that run failed or was cancelled the key is free again.
CREATE UNIQUE INDEX runs_idempotency_key
    ON wfe.runs (tenant, workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state NOT IN ('failed', 'cancelled');    -- wfe._run_keeps_key
CREATE INDEX runs_unfinished ON wfe.runs (workflow, state) WHERE finished_at IS NULL;
-- a parent's children: its report, and cancelling them with it
CREATE INDEX runs_parent ON wfe.runs (parent_run_id, parent_stage) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_finished_at ON wfe.runs (finished_at) WHERE finished_at IS NOT NULL;
-- a run's replays (wfe.report)
CREATE INDEX runs_replay_of ON wfe.runs (replay_of) WHERE replay_of IS NOT NULL;
-- runs in flight per tenant: the admission limit and wfe.dashboard_tenants
CREATE INDEX runs_unfinished_tenant ON wfe.runs (tenant) WHERE finished_at IS NULL;

-- No foreign key to wfe.runs: its check is a statement of its own for every
-- row a submit or a map's release inserts, always beside its run row (the
-- submit's one statement, a map under its run's lock).  The stage rows go
-- with their run through wfe.runs_deleted instead (below).
CREATE TABLE wfe.run_stages (
    run_id          bigint NOT NULL,
    stage           text NOT NULL,
    tenant          text NOT NULL,
    ordinal         int NOT NULL,
    kind            text NOT NULL,
    state           text NOT NULL DEFAULT 'waiting',
    attempt         int NOT NULL DEFAULT 0,
    fence           bigint NOT NULL DEFAULT 0,
    queue           text,
    worker          text,
    handler         regprocedure,
    priority        int NOT NULL DEFAULT 0,
    awaits          boolean NOT NULL DEFAULT true,
    branch          text,
    input           jsonb,
    result          jsonb,
    error           jsonb,
    outcome         text,
    skip_reason     text,
    exec_ms         int,
    queue_ms        int,
    heartbeat_ms    int,
    ready_at        timestamptz,
    claimed_by      text,
    started_at      timestamptz,
    heartbeat_at    timestamptz,
    deadline_at     timestamptz,
    finished_at     timestamptz,
    lease_ms        int,
    cache_key       text,
    cache           text CONSTRAINT run_stages_cache
                    CHECK (cache IN ('hit', 'miss', 'waiting', 'coalesced')),
    rate_limit      text,
    rate_key        text,
    held_until      timestamptz,
    element         int CONSTRAINT run_stages_element CHECK (element >= 0),
    concurrency_key text,
    concurrency_max int CONSTRAINT run_stages_concurrency_max CHECK (concurrency_max >= 1),
    fair            boolean NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, stage),
    -- kind in action, worker, decision, fork, join, finaliser; state one of
    -- wfe.stage_transitions()'s; attempt, fence >= 0; outcome NULL,
    -- completed or failed; skip_reason NULL or a skip reason (runtime.md)
    CONSTRAINT run_stages_valid
        CHECK (wfe._stage_row_ok(kind, state, attempt, fence, outcome, skip_reason))
);
COMMENT ON TABLE wfe.run_stages IS
'One row per stage (or task, or finaliser) of each run: state, current attempt and fence, bound input, result.';
-- Fences are capabilities: only the claim and the envelope carry them
-- (operations.md "Security model").  The readers' roles select every column
-- but the ones holding fences: the fence columns, and the outbox's headers
-- and body (a dispatch's envelope).
GRANT SELECT (run_id, stage, tenant, ordinal, kind, state, attempt, queue, worker, handler, priority,
              awaits, branch, input, result, error, outcome, skip_reason, exec_ms, queue_ms,
              heartbeat_ms, ready_at, claimed_by, started_at, heartbeat_at, deadline_at, finished_at,
              lease_ms, cache_key, cache, rate_limit, rate_key, held_until, element)
    ON wfe.run_stages TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.run_stages.attempt IS 'Current attempt, from 1; 0 until released';
COMMENT ON COLUMN wfe.run_stages.lease_ms IS
'The lease_ms the running attempt was claimed with (NULL: none); each heartbeat renews it, within the execution deadline';
COMMENT ON COLUMN wfe.run_stages.fence IS
'Fencing token of the current attempt; grows with every new attempt and every fencing.  Not readable by wfe_reader or wfe_operator: only the claim and the envelope carry fences';
COMMENT ON COLUMN wfe.run_stages.outcome IS 'What the current attempt reported (completed or failed), for duplicate/conflict answers';
COMMENT ON COLUMN wfe.run_stages.branch IS 'The fork branch this stage runs in, for joins';
COMMENT ON COLUMN wfe.run_stages.cache_key IS
'A stage with cache: the result cache key of its bound input (dsl.md "Result cache"); NULL otherwise';
COMMENT ON COLUMN wfe.run_stages.cache IS
'What the result cache did at release: hit, miss, waiting (on the attempt in flight under its key), coalesced (completed from that attempt''s result)';
COMMENT ON COLUMN wfe.run_stages.element IS
'A map element''s 0-based index (its stage is NAME[element], its ordinal the map''s); NULL for every other stage';
-- a map's elements in order: the one final aggregation, the cancellation of those under way
CREATE INDEX run_stages_elements ON wfe.run_stages (run_id, ordinal, element) WHERE element IS NOT NULL;

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

-- One counter row per released map (runtime.md "Map elements"): each
-- element's end updates it, so no step but the map's release and its final
-- aggregation reads or writes every element.
CREATE TABLE wfe.run_maps (
    run_id     bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage      text NOT NULL,
    tenant     text NOT NULL,
    total      int NOT NULL CONSTRAINT run_maps_total CHECK (total >= 0),
    released   int NOT NULL DEFAULT 0,
    completed  int NOT NULL DEFAULT 0,
    failed     int NOT NULL DEFAULT 0,
    held       int NOT NULL DEFAULT 0 CONSTRAINT run_maps_held CHECK (held >= 0),
    PRIMARY KEY (run_id, stage)
);
COMMENT ON TABLE wfe.run_maps IS
'Per released map stage: its elements bound (total), released (in index order, as max_concurrency allows), completed and failed for good';
COMMENT ON COLUMN wfe.run_maps.held IS
'Released elements an operator redrove while max_concurrency was full: waiting for a slot, released as the map''s elements end';
GRANT SELECT ON wfe.run_maps TO wfe_reader, wfe_operator;
-- row-level security like every table that carries a tenant (76_tenant_rls.sql)
ALTER TABLE wfe.run_maps ENABLE ROW LEVEL SECURITY;
ALTER TABLE wfe.run_maps FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON wfe.run_maps FOR SELECT
    USING (coalesce(tenant OPERATOR(pg_catalog.=) ANY ((SELECT wfe.my_tenants())::pg_catalog.text[]), true));
SELECT pg_catalog.pg_extension_config_dump('wfe.run_maps', '');

-- the attempt in flight under a key, and the stages waiting on it
CREATE INDEX run_stages_cache_key ON wfe.run_stages (cache_key) WHERE cache_key IS NOT NULL;

COMMENT ON COLUMN wfe.run_stages.rate_limit IS
'The token bucket (wfe.rate_limits) each attempt takes a token from before it is claimed; NULL: none.';
COMMENT ON COLUMN wfe.run_stages.rate_key IS
'The bound key of a keyed rate limit: the attempt''s bucket is (rate_limit, tenant, rate_key).';
COMMENT ON COLUMN wfe.run_stages.fair IS
'Whether the task''s queue serves tenants fairly (fairness = ''tenant''), set at release and when the queue''s fairness changes: only such tasks have an entry in run_stages_fair.';
GRANT SELECT (fair) ON wfe.run_stages TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.run_stages.held_until IS
'A queued attempt held by its rate limit until then (infinity: its bucket is not configured); NULL: ready.';
-- The held attempts, by when they are due (the worker's timer, wfe._release_rate_held).
CREATE INDEX run_stages_held ON wfe.run_stages (held_until) WHERE held_until IS NOT NULL;

-- Claimers take the highest priority, then oldest, ready task of a queue
-- (an attempt a rate limit holds is not ready: 78_rate_limits.sql).
CREATE INDEX run_stages_ready ON wfe.run_stages (queue, priority DESC, ready_at)
    WHERE state = 'queued' AND held_until IS NULL;
-- A fair queue's claims (fairness => 'tenant', src/pg/fairness.c): the
-- tenants with ready work, one probe each, and each tenant's next tasks.
-- Only the tasks of fair queues (run_stages.fair) have an entry: the
-- others' releases and claims pay nothing for it.
CREATE INDEX run_stages_fair ON wfe.run_stages (queue, tenant, priority DESC, ready_at)
    WHERE state = 'queued' AND held_until IS NULL AND fair;
-- The clocks: queued, dispatched or running attempts with a deadline.
CREATE INDEX run_stages_deadline ON wfe.run_stages (deadline_at)
    WHERE state IN ('queued', 'dispatched', 'running') AND deadline_at IS NOT NULL;    -- wfe._stage_clocked
-- Live tasks per queue (the dashboards, a queue's in-flight count) and
-- per queue and tenant: whether a tenant has tasks queued in a queue is one
-- probe, whatever the backlog (the releases of held tasks, admission.c).
-- The tenant rides in an index every state change writes anyway: no
-- index, no WAL record more per step.
CREATE INDEX run_stages_live ON wfe.run_stages (queue, state, tenant)
    WHERE state IN ('queued', 'dispatched', 'running');     -- wfe._stage_clocked
-- In-database actions waiting for wfe.tick() or the background worker.
CREATE INDEX run_stages_handler ON wfe.run_stages (ready_at)
    WHERE state = 'queued' AND handler IS NOT NULL;

-- AFTER, not BEFORE: a BEFORE ROW UPDATE trigger has the row locked before
-- its update, a WAL record more at every state change (transitions.c).
CREATE TRIGGER run_stages_state_guard
    AFTER UPDATE OF state ON wfe.run_stages
    FOR EACH ROW WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION wfe._stage_state_guard();
CREATE TRIGGER runs_state_guard
    AFTER UPDATE OF state ON wfe.runs
    FOR EACH ROW WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION wfe._run_state_guard();

-- Outputs of the tasks form: write-once per (run, task, key).
CREATE TABLE wfe.outputs (
    run_id     bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    task       text NOT NULL,
    key        text NOT NULL,
    tenant     text NOT NULL,
    value      jsonb NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, task, key)
);
COMMENT ON TABLE wfe.outputs IS 'Task outputs (tasks form), written once per run, task and key';
GRANT SELECT ON wfe.outputs TO wfe_reader, wfe_operator;
CREATE TRIGGER outputs_write_once
    BEFORE UPDATE OR DELETE ON wfe.outputs
    FOR EACH ROW WHEN (pg_trigger_depth() = 0)
    EXECUTE FUNCTION wfe._immutable('task outputs are write-once', 'A task writes each declared output once.');

-- The event log: every accepted transition and every rejected callback.
-- run_id has no foreign key: a callback about an unknown run is recorded too.
-- Partitioned by time (docs/scaling.md "History partitions"): a day per
-- partition, made ahead by the background worker and dropped whole by
-- retention (86_history.sql); the default partition takes what no day
-- partition covers (a database without the worker keeps all its history
-- there), so an insert never fails for want of a partition.  No primary
-- key: event_id is unique, drawn from its identity, and nothing looks an
-- event up by it; a key would have to carry the partition key (event_id,
-- at) and would cost every event an index entry that no query reads (the
-- write path, docs/benchmarks.md).  Readers find a run's events by
-- events_run, retention and the dashboards the rare run-less ones by the
-- partial indexes below and in 69_schedules.sql.
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
-- every column but the fence (see wfe.run_stages)
GRANT SELECT (event_id, run_id, tenant, stage, attempt, type, at, detail)
    ON wfe.events TO wfe_reader, wfe_operator;
CREATE INDEX events_run ON wfe.events (run_id, event_id);
-- callbacks about runs that do not exist (and refused signed callbacks,
-- whose run_id nobody vouches for) belong to no run that retention
-- removes: it finds them by this index (small: such callbacks are rare)
CREATE INDEX events_unknown ON wfe.events (at) WHERE type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed');

-- The transactional outbox: messages for the broker, written in the same
-- transaction as the transition that caused them (published by the
-- background worker or an external relay).
CREATE TABLE wfe.outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text NOT NULL,
    run_id       bigint,
    stage        text,
    attempt      int,
    fence        bigint,
    kind         text NOT NULL CONSTRAINT outbox_kind CHECK (kind IN ('dispatch', 'cancel', 'event')),
    exchange     text NOT NULL,
    routing_key  text NOT NULL,
    message_id   uuid NOT NULL,
    headers      jsonb NOT NULL DEFAULT '{}',
    body         jsonb NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CONSTRAINT outbox_state CHECK (state IN ('pending', 'claimed', 'published')),
    attempts     int NOT NULL DEFAULT 0,
    last_error   text,
    available_at timestamptz NOT NULL DEFAULT now(),
    claimed_by   text,
    claimed_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
COMMENT ON TABLE wfe.outbox IS 'Messages to publish, written in the transaction of the transition that caused them';
-- every column but the fence, the headers and the body (see wfe.run_stages)
GRANT SELECT (id, tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, state,
              attempts, last_error, available_at, claimed_by, claimed_at, created_at, published_at)
    ON wfe.outbox TO wfe_reader, wfe_operator;
CREATE INDEX outbox_pending ON wfe.outbox (available_at, id) WHERE state = 'pending';
CREATE INDEX outbox_claimed ON wfe.outbox (claimed_by) WHERE state = 'claimed';
-- a run's messages: retention, and a resumed queue's undispatched tasks
CREATE INDEX outbox_run ON wfe.outbox (run_id, stage);
-- retention finds expired published rows without reading the whole table
CREATE INDEX outbox_published ON wfe.outbox (published_at) WHERE state = 'published';

-- Timers: retries, delayed starts and run deadlines.  (Queue, execution and
-- heartbeat deadlines live on the stage row, indexed, so a claim writes one
-- row rather than two.)
CREATE TABLE wfe.timers (
    timer_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant   text NOT NULL,
    run_id   bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage    text,
    attempt  int,
    fence    bigint,
    kind     text NOT NULL CONSTRAINT timers_kind CHECK (kind IN ('retry', 'not_before', 'run_deadline', 'cache_ready',
                                                                  'wait_timeout', 'sleep', 'child_ended')),
    due_at   timestamptz NOT NULL,
    fired_at timestamptz
);
COMMENT ON TABLE wfe.timers IS 'Durable timers: retry delays, delayed starts (not_before), run deadlines, a cached stage''s wake-up when the attempt it waited on ended (cache_ready), a wait''s timeout (wait_timeout), a sleep''s end (sleep), a child run''s end for its parent''s workflow stage (child_ended)';
-- every column but the fence (see wfe.run_stages)
GRANT SELECT (timer_id, tenant, run_id, stage, attempt, kind, due_at, fired_at)
    ON wfe.timers TO wfe_reader, wfe_operator;
CREATE INDEX timers_due ON wfe.timers (due_at) WHERE fired_at IS NULL;
CREATE INDEX timers_run ON wfe.timers (run_id);

-- What a worker receives from wfe.claim_task.
CREATE TYPE wfe.task AS (
    run_id            bigint,
    stage             text,
    attempt           int,
    fence             bigint,
    queue             text,
    worker            text,
    input             jsonb,
    payload_ref       jsonb,
    deadline_at       timestamptz,
    heartbeat_ms      int,
    definition_digest text,
    message_id        uuid,
    tenant            text,
    traceparent       text
);
COMMENT ON TYPE wfe.task IS 'A claimed task: identity (run, stage, attempt, fence), what to run, its input and deadline, and the W3C traceparent of its attempt';

-- Stages that exhausted their retries (and, later, broker dead letters).
CREATE TABLE wfe.dead_letters (
    dead_letter_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant         text NOT NULL,
    run_id         bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage          text NOT NULL,
    attempt        int NOT NULL,
    reason         text NOT NULL,
    error          jsonb,
    at             timestamptz NOT NULL DEFAULT now(),
    resolved_at    timestamptz,
    resolved_by    text,
    resolution     text
);
COMMENT ON TABLE wfe.dead_letters IS 'Stages that exhausted their retries, with the last error';
GRANT SELECT ON wfe.dead_letters TO wfe_reader, wfe_operator;
COMMENT ON COLUMN wfe.dead_letters.resolution IS 'How an operator resolved it (redriven, skipped, failed, cancelled, replayed); NULL while open';
CREATE INDEX dead_letters_run ON wfe.dead_letters (run_id);
