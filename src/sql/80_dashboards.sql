-- psql dashboards (docs: operations.md "Dashboards"; docs/dashboards.psql
-- opens them all).
--
-- Views any wfe_reader can \watch.  They are security_invoker: they read
-- the tables with the reader's own rights (and, with tenants, its row-level
-- security).  Each reads live work through the partial indexes of
-- unfinished runs and live stages, and history only for the last hour
-- (runs finished in the last hour, by runs_finished_at), so they cost the
-- same at 1M finished runs as at 1,000 (docs/benchmarks.md).  Rows fit a
-- 100-column terminal: durations are short text (wfe.human_ms), shares are
-- block-character bars (wfe.bar).  NB: they run as the reader, who may
-- not execute wfe's internal functions: the state sets are written out
-- here (wfe._stage_clocked, _stage_handed_out, _stage_under_way say what
-- each means), and so is the track threshold's default.

-- A share in [0, 1] as a bar of width cells, eighths included, and its percentage.
CREATE FUNCTION wfe.bar(share double precision, width int DEFAULT 10)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN share IS NOT NULL AND width >= 1 THEN
    (SELECT rpad(repeat('█', e / 8)
                 || CASE WHEN e % 8 > 0 THEN substr('▏▎▍▌▋▊▉', e % 8, 1) ELSE '' END, width, '░')
            || lpad(round(least(greatest(share, 0), 1) * 100)::text, 4) || '%'
       FROM (SELECT floor(least(greatest(share, 0), 1) * width * 8)::int AS e) AS c)
END;
COMMENT ON FUNCTION wfe.bar(double precision, int) IS
'A share in [0, 1] drawn as width block characters (eighths of a cell) followed by its percentage, for the dashboards.';
REVOKE ALL ON FUNCTION wfe.bar(double precision, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.bar(double precision, int) TO wfe_reader, wfe_operator;

-- Milliseconds as short text: 850ms, 12.3s, 4m05s, 2h10m, 3d04h.
CREATE FUNCTION wfe.human_ms(ms double precision)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN ms < 0 THEN '-' ELSE '' END
    || (SELECT CASE
                 WHEN a < 1000 THEN round(a)::text || 'ms'
                 WHEN a < 60000 THEN to_char(a / 1000, 'FM990.0') || 's'
                 WHEN a < 3600000 THEN floor(a / 60000)::text || 'm'
                                       || to_char(floor(a / 1000)::bigint % 60, 'FM00') || 's'
                 WHEN a < 86400000 THEN floor(a / 3600000)::text || 'h'
                                        || to_char(floor(a / 60000)::bigint % 60, 'FM00') || 'm'
                 ELSE floor(a / 86400000)::text || 'd' || to_char(floor(a / 3600000)::bigint % 24, 'FM00') || 'h'
               END
          FROM (SELECT abs(ms) AS a) AS x);
COMMENT ON FUNCTION wfe.human_ms(double precision) IS
'Milliseconds as short text for the dashboards: 850ms, 12.3s, 4m05s, 2h10m, 3d04h.';
REVOKE ALL ON FUNCTION wfe.human_ms(double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.human_ms(double precision) TO wfe_reader, wfe_operator;

-- Runs by workflow, version and state: in flight now, finished in the last hour.
CREATE VIEW wfe.dashboard_runs WITH (security_invoker = true) AS
WITH runs AS (
    -- in flight: their age so far; finished in the last hour: their duration
    SELECT r.workflow, r.version, r.state, r.finished_at IS NOT NULL AS finished,
           coalesce(r.finished_at, now()) - r.submitted_at AS took
      FROM wfe.runs AS r
     WHERE r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour'
), states AS (
    SELECT runs.workflow, runs.version, runs.state, bool_or(runs.finished) AS finished,
           count(*) AS runs,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY runs.took) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY runs.took) AS p95
      FROM runs
     GROUP BY runs.workflow, runs.version, runs.state
)
SELECT s.workflow, s.version, s.state, s.runs,
       wfe.human_ms(extract(epoch FROM s.p50) * 1000) AS p50,
       wfe.human_ms(extract(epoch FROM s.p95) * 1000) AS p95,
       -- finished states: their share of the runs that finished in the last hour
       CASE WHEN s.finished THEN
            wfe.bar(s.runs::double precision
                    / sum(s.runs) FILTER (WHERE s.finished) OVER (PARTITION BY s.workflow, s.version), 10)
       END AS share_1h
  FROM states AS s
 ORDER BY s.workflow, s.version,
          array_position(ARRAY['running', 'finalising', 'completed', 'failed', 'cancelled'], s.state);
COMMENT ON VIEW wfe.dashboard_runs IS
'Runs per workflow, version and state: running and finalising runs now (p50/p95 of their age), runs that finished in the last hour (p50/p95 duration, share of the hour''s finished runs).';
GRANT SELECT ON wfe.dashboard_runs TO wfe_reader, wfe_operator;

-- Queues (and, for broker queues, tracks): what waits, what runs, how fast it starts.
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

-- The outbox and its publisher: one row.
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

-- Stages per workflow over the last hour: how long, how often they fail.
CREATE VIEW wfe.dashboard_stages WITH (security_invoker = true) AS
SELECT r.workflow, st.stage,
       count(*) AS finished,
       wfe.human_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p50,
       wfe.human_ms(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p95,
       wfe.human_ms(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM st.finished_at - st.started_at)) * 1000) AS p99,
       wfe.bar(avg((st.state = 'failed')::int), 6) AS failed,
       wfe.bar(avg((st.state = 'timed_out')::int), 6) AS timed_out,
       round(avg(st.attempt), 2) AS attempts
  FROM wfe.runs AS r
  JOIN wfe.run_stages AS st ON st.run_id = r.run_id
 WHERE (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
   AND st.finished_at >= now() - interval '1 hour' AND st.started_at IS NOT NULL
   AND st.state IN ('completed', 'failed', 'timed_out')
 GROUP BY r.workflow, st.stage
 ORDER BY r.workflow, min(st.ordinal);
COMMENT ON VIEW wfe.dashboard_stages IS
'Per workflow and stage, over attempts that ended in the last hour: count, p50/p95/p99 duration of the last attempt, failed and timed-out shares, attempts per stage.';
GRANT SELECT ON wfe.dashboard_stages TO wfe_reader, wfe_operator;

-- Tenants: in flight against their limits.
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

-- Idempotent submits: how often a key named a run that already existed.
CREATE VIEW wfe.idempotency WITH (security_invoker = true) AS
SELECT r.tenant, r.workflow,
       count(*) AS keyed_runs,
       sum(h.hits) AS hits,
       wfe.bar(sum(h.hits)::double precision / nullif(count(*) + sum(h.hits), 0), 10) AS hit_ratio
  FROM wfe.runs AS r
 CROSS JOIN LATERAL (SELECT count(*) AS hits FROM wfe.events AS e
                      WHERE e.run_id = r.run_id AND e.type = 'run.deduplicated') AS h
 WHERE r.idempotency_key IS NOT NULL
   AND (r.finished_at IS NULL OR r.finished_at >= now() - interval '1 hour')
 GROUP BY r.tenant, r.workflow
 ORDER BY r.tenant, r.workflow;
COMMENT ON VIEW wfe.idempotency IS
'Per tenant and workflow, over keyed runs in flight or finished in the last hour: runs, submits answered with an existing run (hits), hit ratio = hits / all keyed submits.';
GRANT SELECT ON wfe.idempotency TO wfe_reader, wfe_operator;

-- Work that does not move, and why.
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

-- The result cache per tenant and contract: its entries, and what releases
-- of cached stages found in the last hour (dsl.md "Result cache").
CREATE VIEW wfe.dashboard_cache WITH (security_invoker = true) AS
WITH entries AS (
    SELECT e.tenant, e.contract,
           count(*) FILTER (WHERE e.expires_at > now()) AS live,
           count(*) FILTER (WHERE e.expires_at <= now()) AS expired,
           sum(pg_column_size(e.result)) AS bytes
      FROM wfe.cache_entries AS e
     GROUP BY e.tenant, e.contract
), releases AS (
    SELECT st.tenant, st.worker AS contract,
           count(*) FILTER (WHERE st.cache = 'hit') AS hits,
           count(*) FILTER (WHERE st.cache = 'coalesced') AS coalesced,
           count(*) FILTER (WHERE st.cache = 'miss') AS misses,
           count(*) FILTER (WHERE st.cache = 'waiting' AND st.state = 'waiting') AS waiting
      FROM wfe.run_stages AS st
     WHERE st.cache_key IS NOT NULL AND st.ready_at > now() - interval '1 hour'
     GROUP BY st.tenant, st.worker
), both_ AS (
    SELECT coalesce(e.tenant, r.tenant) AS tenant, coalesce(e.contract, r.contract) AS contract,
           coalesce(e.live, 0) AS entries, coalesce(e.expired, 0) AS expired, coalesce(e.bytes, 0) AS bytes,
           coalesce(r.hits, 0) AS hits, coalesce(r.coalesced, 0) AS coalesced,
           coalesce(r.misses, 0) AS misses, coalesce(r.waiting, 0) AS waiting
      FROM entries AS e
      FULL JOIN releases AS r ON r.tenant = e.tenant AND r.contract = e.contract
)
SELECT b.tenant, b.contract, b.entries, b.expired, pg_size_pretty(b.bytes) AS size,
       b.hits, b.coalesced, b.misses, b.waiting,
       round((b.hits + b.coalesced)::numeric / nullif(b.hits + b.coalesced + b.misses, 0), 3) AS hit_ratio,
       wfe.bar((b.hits + b.coalesced)::double precision / nullif(b.hits + b.coalesced + b.misses, 0), 8) AS hit_bar
  FROM both_ AS b
 ORDER BY b.tenant, b.contract;
COMMENT ON VIEW wfe.dashboard_cache IS
'The result cache per tenant and contract: live and expired entries and their size; releases of the last hour that hit, were coalesced onto an attempt in flight, missed, or wait.';
GRANT SELECT ON wfe.dashboard_cache TO wfe_reader, wfe_operator;

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
