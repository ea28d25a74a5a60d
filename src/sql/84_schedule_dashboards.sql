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
