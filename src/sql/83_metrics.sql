-- Prometheus metrics (docs: operations.md "Monitoring"; spec: operations.md
-- "Metrics and traces").
--
-- wfe.metrics is the Prometheus data model as a view: one row per series.
-- Gauges are read from live work only, through the partial indexes of
-- unfinished runs, live stages, pending outbox rows, unfired timers, open
-- dead letters, attempts held by a rate limit, buffered signals and active
-- schedules, and from the few rows of configuration (circuits, rate
-- limits), so a scrape costs the same at 1M finished runs as at 1,000
-- (docs/benchmarks.md).  Counters cannot be counted from history
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
GRANT SELECT ON wfe.metrics TO wfe_reader, wfe_operator;
