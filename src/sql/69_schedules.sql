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
