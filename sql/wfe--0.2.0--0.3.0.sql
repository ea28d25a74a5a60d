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

-- One place for what names a message (issue 19): the message id, the
-- exchange and the routing key are computed in C (src/pg/message.c,
-- src/amqp/topology.c); _dispatch and _project_event ask for them.
CREATE OR REPLACE FUNCTION wfe._message_id(p_run_id bigint, p_stage text, p_attempt int, p_fence bigint,
                                p_kind text)
RETURNS uuid
AS 'MODULE_PATHNAME', 'wfe_message_id_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
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
        v_ref := jsonb_build_object('bucket', 'wfe.payloads', 'key', 'sha256:' || v_hash,
                                    'sha256', v_hash, 'bytes', v_bytes);
        INSERT INTO wfe.payloads (key, tenant, bytes, body)
        VALUES ('sha256:' || v_hash, p_run.tenant, v_bytes, coalesce(p_stage.input, '{}'))
        ON CONFLICT (key) DO NOTHING;
    END IF;
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key,
                            message_id, headers, body)
    VALUES (p_run.tenant, p_run.run_id, p_stage.stage, p_stage.attempt, p_stage.fence, 'dispatch',
            wfe._exchange('dispatch'), wfe._routing_key('dispatch', p_stage.queue, v_track), v_id,
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

CREATE OR REPLACE FUNCTION wfe._project_event()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, body)
    VALUES (NEW.tenant, NEW.run_id, NEW.stage, NEW.attempt, 'event', wfe._exchange('event'), NEW.type,
            md5('event:' || NEW.event_id)::uuid,
            jsonb_build_object('event_id', NEW.event_id, 'run_id', NEW.run_id, 'tenant', NEW.tenant,
                               'stage', NEW.stage, 'attempt', NEW.attempt, 'type', NEW.type,
                               'at', NEW.at, 'detail', NEW.detail));
    PERFORM wfe._wake(now());
    RETURN NULL;
END
$$;
