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

-- The layout (0.3.0): comments in these bodies name the files' new paths.
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
    UPDATE wfe.run_stages AS st
       SET state = 'running', claimed_by = p_by, started_at = now(), heartbeat_at = now()
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

CREATE OR REPLACE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
BEGIN
    IF ack_cancel.run_id IS NULL OR ack_cancel.stage IS NULL OR ack_cancel.attempt IS NULL
       OR ack_cancel.fence IS NULL THEN
        RAISE EXCEPTION 'run_id, stage, attempt and fence must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(ack_cancel.stage, 'stage');
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = ack_cancel.run_id AND st.stage = ack_cancel.stage;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    -- who may call back: the callbacks' rule (src/pg/grants.c)
    IF NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'report for') THEN
        RETURN 'unknown';
    END IF;
    -- the cancelled attempt is the one whose fence the cancel superseded
    -- (stage.cancelled names it; 0.1.0 grew fences by one)
    IF s.attempt <> ack_cancel.attempt OR s.state <> 'cancelled'
       OR NOT EXISTS (SELECT 1 FROM wfe.events AS e
                       WHERE e.run_id = s.run_id AND e.stage = s.stage AND e.attempt = s.attempt
                         AND e.type = 'stage.cancelled'
                         AND coalesce((e.detail ->> 'cancelled_fence')::bigint,
                                      (e.detail ->> 'fence')::bigint - 1) = ack_cancel.fence)
    THEN
        PERFORM wfe._event(s.run_id, s.tenant, s.stage, ack_cancel.attempt, 'callback.stale',
                           jsonb_build_object('callback', 'ack_cancel', 'fence', ack_cancel.fence));
        RETURN 'stale';
    END IF;
    PERFORM wfe._event(s.run_id, s.tenant, s.stage, s.attempt, 'stage.cancel_acknowledged',
                       jsonb_build_object('fence', ack_cancel.fence));
    RETURN 'accepted';
END
$$;



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

CREATE OR REPLACE FUNCTION wfe._dispatch(p_run wfe.runs, p_stage wfe.run_stages)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id    uuid := wfe._message_id(p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch');
    v_text  text := coalesce(p_stage.input, '{}')::text;
    v_bytes int := octet_length(v_text);
    v_track text := 'small';
    v_hash  text;
    v_ref   jsonb;
BEGIN
    IF v_bytes > coalesce(current_setting('wfe.track_threshold_bytes', true)::int, 524288) THEN
        v_track := 'large';
        v_hash := encode(sha256(convert_to(v_text, 'UTF8')), 'hex');
        -- the reference names the attempt: only its holder may fetch it (wfe.fetch_payload)
        v_ref := jsonb_build_object('bucket', 'wfe.payloads', 'key', 'sha256:' || v_hash,
                                    'sha256', v_hash, 'bytes', v_bytes,
                                    'run_id', p_run.run_id, 'stage', p_stage.stage,
                                    'attempt', p_stage.attempt, 'fence', p_stage.fence);
        INSERT INTO wfe.payloads (key, tenant, bytes, body, run_id, stage)
        VALUES ('sha256:' || v_hash, p_run.tenant, v_bytes, coalesce(p_stage.input, '{}'),
                p_run.run_id, p_stage.stage)
        ON CONFLICT (run_id, stage, key) DO NOTHING;
    END IF;
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,
                            message_id, headers, body)
    VALUES (p_run.tenant, p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch',
            'wfe.commands', 'run.' || p_stage.queue || '.' || v_track, v_id,
            jsonb_build_object(
                'x-wfe-run-id', p_run.run_id::text, 'x-wfe-stage', p_stage.stage,
                'x-wfe-attempt', p_stage.attempt::text, 'x-wfe-fence', p_stage.fence::text,
                'x-wfe-digest', p_run.definition_digest, 'x-wfe-contract', p_stage.worker,
                'x-wfe-tenant', p_run.tenant, 'x-wfe-track', v_track,
                -- ISO 8601 in UTC, whatever the releasing session's DateStyle and TimeZone
                'x-wfe-deadline', coalesce(to_char(p_stage.deadline_at AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '')),
            jsonb_build_object(
                'message_id', v_id, 'correlation_id', p_run.run_id::text,
                'workflow_name', p_run.workflow, 'workflow_version', p_run.version,
                'definition_digest', p_run.definition_digest, 'run_id', p_run.run_id,
                'stage', p_stage.stage, 'attempt', p_stage.attempt, 'fence', p_stage.fence,
                'worker', p_stage.worker, 'track', v_track,
                -- what a pushed worker needs to keep the attempt alive
                'heartbeat_ms', p_stage.heartbeat_ms, 'execution_deadline_ms', p_stage.exec_ms,
                'headers', jsonb_build_object('content_type', 'application/json',
                                              'source', 'wfe', 'tenant', p_run.tenant),
                'idempotency_key', p_run.run_id || ':' || p_stage.stage || ':' || p_stage.attempt,
                'deadline_at', p_stage.deadline_at,
                'payload_inline', CASE WHEN v_track = 'small' THEN coalesce(p_stage.input, '{}') END,
                'payload_ref', v_ref,
                'created_at', now()));
    PERFORM wfe._wake(now());               -- the publisher has a message
END
$$;
COMMENT ON FUNCTION wfe._dispatch(wfe.runs, wfe.run_stages) IS
'Writes the dispatch message of a released attempt to the outbox (broker-mode queues), by reference on the large track.';

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
COMMENT ON FUNCTION wfe.outbox_claim(int, text) IS
'External relay: claims up to max pending outbox rows of the tenants the caller acts for (SKIP LOCKED, id order); acknowledge them with wfe.outbox_ack.';

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
COMMENT ON FUNCTION wfe.outbox_ack(bigint[], text) IS
'External relay: marks the rows it claimed and published as published; returns how many (rows it no longer holds, or of tenants it does not act for, are not counted).';

-- The fence a cancel acknowledgement names is the stage.cancelled event's
-- fence column; a dead dispatch's event names its fence there too.
CREATE OR REPLACE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
BEGIN
    IF ack_cancel.run_id IS NULL OR ack_cancel.stage IS NULL OR ack_cancel.attempt IS NULL
       OR ack_cancel.fence IS NULL THEN
        RAISE EXCEPTION 'run_id, stage, attempt and fence must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(ack_cancel.stage, 'stage');
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = ack_cancel.run_id AND st.stage = ack_cancel.stage;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    -- who may call back: the callbacks' rule (src/pg/grants.c)
    IF NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'report for') THEN
        RETURN 'unknown';
    END IF;
    -- the cancelled attempt is the one whose fence the cancel superseded
    -- (stage.cancelled names it in its fence column)
    IF s.attempt <> ack_cancel.attempt OR s.state <> 'cancelled'
       OR NOT EXISTS (SELECT 1 FROM wfe.events AS e
                       WHERE e.run_id = s.run_id AND e.stage = s.stage AND e.attempt = s.attempt
                         AND e.type = 'stage.cancelled' AND e.fence = ack_cancel.fence)
    THEN
        PERFORM wfe._event(s.run_id, s.tenant, s.stage, ack_cancel.attempt, 'callback.stale',
                           jsonb_build_object('callback', 'ack_cancel'), ack_cancel.fence);
        RETURN 'stale';
    END IF;
    PERFORM wfe._event(s.run_id, s.tenant, s.stage, s.attempt, 'stage.cancel_acknowledged',
                       NULL, ack_cancel.fence);
    RETURN 'accepted';
END
$$;
COMMENT ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) IS
'Records a worker''s acknowledgement of a cooperative cancellation request.';

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
COMMENT ON FUNCTION wfe._broker_dead_letter(text, text, jsonb, text) IS
'A dispatch RabbitMQ dead-lettered (wfe.dlq): recorded in wfe.dead_letters (reason broker.redeliveries, the x-death history) and its attempt failed through the gate, per the stage''s retry policy.';

-- Retention removes old unauthenticated callbacks too.
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
        DELETE FROM wfe.events AS e WHERE e.run_id = ANY (v_runs);
        DELETE FROM wfe.outbox AS o WHERE o.run_id = ANY (v_runs) AND o.state = 'published';
        DELETE FROM wfe.runs AS r WHERE r.run_id = ANY (v_runs);     -- cascades to stages, outputs, timers, payloads
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
    -- callbacks about runs that never existed (or are gone)
    DELETE FROM wfe.events AS e
     WHERE e.event_id IN (SELECT e2.event_id FROM wfe.events AS e2
                           WHERE e2.type IN ('callback.unknown', 'callback.unauthenticated', 'callback.expired', 'callback.replayed')
                             AND e2.at < v_cutoff
                             AND NOT EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e2.run_id)
                           LIMIT p_batch);
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._retention(int, int) IS
'Deletes up to p_batch finished runs older than the retention (and their history and large payloads), old published outbox rows, old unauthenticated callbacks and expired result cache entries.';
