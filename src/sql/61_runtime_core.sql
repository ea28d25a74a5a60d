-- The run engine's SQL side (docs: architecture.md "The engine").
--
-- Transitions are decided by the step core (src/core/engine/step.c) and written
-- by the server layer (src/pg/engine.c); what is left here are the small
-- helpers both the engine and the outbox share, and the SQL faces of the
-- engine's entry points.  Lock order everywhere: the run row first
-- (FOR NO KEY UPDATE), then its stage rows.

-- Append one event.  A fence it is about goes in p_fence, never in the
-- detail: readers see the detail, and a fence is a capability.  PL/pgSQL:
-- called once or more in most transactions (00_schema.sql's rules).
CREATE FUNCTION wfe._event(p_run_id bigint, p_tenant text, p_stage text, p_attempt int,
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
COMMENT ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb, bigint) IS
'Appends one row to the event log (p_fence: the fence it is about, kept out of the detail).';
REVOKE ALL ON FUNCTION wfe._event(bigint, text, text, int, text, jsonb, bigint) FROM PUBLIC;

-- The deterministic identity of a message about one attempt, and where an
-- outbox message goes: the rules are written once, in C (src/pg/message.c,
-- src/amqp/topology.c), which the publisher, the claim and wfe-worker share.
CREATE FUNCTION wfe._message_id(p_run_id bigint, p_stage text, p_attempt int, p_fence bigint,
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

-- The key of the wfe_task_ready payloads (src/pg/ready_tag.c): one row,
-- drawn here from pg_strong_random (gen_random_uuid), readable by no role
-- but the extension's owner.  Not dumped: a restored database draws its own,
-- and workers ask for their tags again when they reconnect.
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

-- Should a release wake poll workers of this queue?
CREATE FUNCTION wfe._notify_ready(p_queue text)
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
COMMENT ON FUNCTION wfe._notify_ready(text) IS
'NOTIFY wfe_task_ready with the queue''s tag (wfe._ready_tag; once per transaction and queue), unless wfe.notify is off.';
REVOKE ALL ON FUNCTION wfe._notify_ready(text) FROM PUBLIC;

-- Queue a dispatch message in the outbox for a broker-mode queue.  An input
-- over wfe.track_threshold_bytes goes on the large track: stored once by its
-- SHA-256 in wfe.payloads, the envelope carrying only a reference.  The
-- envelope is built by the core (src/core/engine/envelope.c) and written by
-- src/pg/dispatch.c, which the engine calls directly; this face serves the
-- release of held work.
CREATE FUNCTION wfe._dispatch(p_run wfe.runs, p_stage wfe.run_stages)
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_dispatch_sql'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._dispatch(wfe.runs, wfe.run_stages) IS
'Writes the dispatch message of a released attempt to the outbox (broker-mode queues), by reference on the large track.';
REVOKE ALL ON FUNCTION wfe._dispatch(wfe.runs, wfe.run_stages) FROM PUBLIC;

-- The engine's entry points that are not callbacks (src/pg/engine.c).  Each
-- locks the run (the callers may already hold it) and moves it on.
CREATE FUNCTION wfe._start_run(run_id bigint)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_start_run' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._start_run(bigint) IS
'Releases a new run''s first stages: the entry (stages form) or every task without dependencies.';
REVOKE ALL ON FUNCTION wfe._start_run(bigint) FROM PUBLIC;

CREATE FUNCTION wfe._timer_fired(run_id bigint, kind text, stage text, attempt int, fence bigint)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_timer_fired' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._timer_fired(bigint, text, text, int, bigint) IS
'A due timer: a retry queues a new attempt with a new fence, a delayed start starts the run, a run deadline fails it.';
REVOKE ALL ON FUNCTION wfe._timer_fired(bigint, text, text, int, bigint) FROM PUBLIC;

CREATE FUNCTION wfe._expire(run_id bigint, stage text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_expire' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._expire(bigint, text) IS
'Times out an attempt past its queue, execution or heartbeat deadline: fenced, then retried or failed per policy.';
REVOKE ALL ON FUNCTION wfe._expire(bigint, text) FROM PUBLIC;

CREATE FUNCTION wfe._action_done(run_id bigint, stage text, result jsonb, error jsonb)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_action_done' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._action_done(bigint, text, jsonb, jsonb) IS
'An in-database action''s attempt ended: its result is checked like a worker''s; an error is retried per policy.';
REVOKE ALL ON FUNCTION wfe._action_done(bigint, text, jsonb, jsonb) FROM PUBLIC;

CREATE FUNCTION wfe._cancel(run_id bigint, reason text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_cancel' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._cancel(bigint, text) IS
'Sets a run''s cancelled intent: in-flight attempts fenced and asked to stop, unstarted stages skipped, finalisers run.';
REVOKE ALL ON FUNCTION wfe._cancel(bigint, text) FROM PUBLIC;

CREATE FUNCTION wfe._engine_error(run_id bigint, stage text, error jsonb)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_engine_error' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._engine_error(bigint, text, jsonb) IS
'An item of a worker round (a firing, an expiry, an action) raised for this run: records run.engine_error and fails the run.';
REVOKE ALL ON FUNCTION wfe._engine_error(bigint, text, jsonb) FROM PUBLIC;
