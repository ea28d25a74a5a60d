-- The outbox's consumers: the background worker's publisher (src/bgw/publisher.c),
-- external relays, large-payload tracks, queue settings, cancellation
-- acknowledgements and the event projection (docs: delivery.md).

-- Inputs over wfe.track_threshold_bytes, stored once per stage by their
-- SHA-256.  A payload belongs to the stage that dispatched it: fetched only
-- by a holder of that stage's attempt (wfe.fetch_payload), and deleted with
-- its run (retention).
CREATE TABLE wfe.payloads (
    key        text NOT NULL CONSTRAINT payloads_key CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    tenant     text NOT NULL,
    bytes      int NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    run_id     bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage      text NOT NULL,
    CONSTRAINT payloads_pkey PRIMARY KEY (run_id, stage, key)
);
COMMENT ON TABLE wfe.payloads IS
'Large inputs (the large track) of the stages that dispatched them, under sha256:<hex> of their JSON text; deleted with their runs';

-- One publisher per database: whoever holds the lease publishes; its token
-- grows with every new holder and is checked when rows are marked, so a
-- publisher that lost the lease (a zombie incarnation) cannot mark anything.
CREATE TABLE wfe.publisher_lease (
    singleton    boolean PRIMARY KEY DEFAULT true CONSTRAINT publisher_lease_singleton CHECK (singleton),
    holder       text,
    token        bigint NOT NULL DEFAULT 0,
    heartbeat_at timestamptz,
    connected    boolean NOT NULL DEFAULT false,
    last_error   text
);
INSERT INTO wfe.publisher_lease DEFAULT VALUES;
COMMENT ON TABLE wfe.publisher_lease IS 'The publisher lease: holder, monotonic fencing token, liveness, broker connection state';

-- Take or renew the lease: a new holder gets a new token.
CREATE FUNCTION wfe._publisher_lease(p_holder text, p_connected boolean, p_error text)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.publisher_lease AS l
       SET token = CASE WHEN l.holder IS DISTINCT FROM p_holder THEN l.token + 1 ELSE l.token END,
           holder = p_holder, heartbeat_at = now(), connected = p_connected, last_error = p_error
     WHERE l.holder IS NULL OR l.holder = p_holder
        OR l.heartbeat_at < now() - interval '30 seconds'
        -- a holder whose process is gone (a restarted worker) is replaced at once
        OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a
                        WHERE a.pid::text = substring(l.holder FROM '[0-9]+$')
                          AND a.backend_type = 'wfe worker')
    RETURNING l.token;
END;
COMMENT ON FUNCTION wfe._publisher_lease(text, boolean, text) IS
'Takes or renews the publisher lease; returns its fencing token, or NULL while another live publisher holds it.';

-- Claim a batch for the lease holder.  p_held: the rows the publisher still
-- holds (it claims the next batch while earlier ones are in flight or not
-- yet marked); any other row it claimed is left over from a batch whose
-- mark failed.
CREATE FUNCTION wfe._outbox_claim(p_holder text, p_token bigint, p_max int, p_held bigint[])
RETURNS TABLE (id bigint, kind text, exchange text, routing_key text, message_id uuid,
               run_id bigint, created_at timestamptz, headers text, body text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token) THEN
        RETURN;
    END IF;
    -- rows this publisher claimed and no longer holds (their mark failed)
    -- are pending again, and picked again below
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by = p_holder AND o.id <> ALL (p_held);
    -- NB: pick along the pending index and update by primary key, so the
    -- claim costs the same however much published history the table holds
    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT o.id FROM wfe.outbox AS o
         WHERE o.state = 'pending' AND o.available_at <= now()
         ORDER BY o.available_at, o.id LIMIT p_max
           FOR UPDATE SKIP LOCKED
    )
    UPDATE wfe.outbox AS o
       SET state = 'claimed', claimed_by = p_holder, claimed_at = now(), attempts = o.attempts + 1
     WHERE o.id = ANY (ARRAY(SELECT picked.id FROM picked))
    RETURNING o.id, o.kind, o.exchange, o.routing_key, o.message_id, o.run_id, o.created_at,
              o.headers::text, o.body::text;
END
$$;
COMMENT ON FUNCTION wfe._outbox_claim(text, bigint, int, bigint[]) IS
'Publisher: claims up to p_max pending outbox rows (SKIP LOCKED, id order) while holding the lease; rows it claimed earlier and no longer holds (not in p_held) go back to pending first.';

-- The broker has these messages now: the rows p_by holds claimed among
-- p_ids become published, and the attempts of the dispatches among them
-- become dispatched if they still are queued at the same attempt and fence
-- (accept_task will start them).  One statement: the stages are found from
-- what the outbox UPDATE returns, by primary key; nothing is read twice,
-- and the published rows already in the outbox are never looked at.  (Only
-- stage rows are locked here, never the run: no lock-order cycle with
-- callbacks, which lock the run, then the stage.)  Returns the rows marked.
CREATE FUNCTION wfe._mark_published(p_ids bigint[], p_by text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    WITH published AS (
        UPDATE wfe.outbox AS o
           SET state = 'published', published_at = now(), last_error = NULL
          FROM unnest(p_ids) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_by
        RETURNING o.kind, o.run_id, o.stage, o.attempt, o.fence
    ), dispatched AS (
        UPDATE wfe.run_stages AS st
           SET state = 'dispatched'
          FROM published AS o
         WHERE o.kind = 'dispatch' AND st.run_id = o.run_id AND st.stage = o.stage
           AND st.attempt = o.attempt AND st.fence = o.fence AND st.state = 'queued'
    )
    SELECT count(*) INTO n FROM published;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._mark_published(bigint[], text) IS
'Marks the confirmed rows p_by holds claimed published, and moves the attempts of their dispatches from queued to dispatched.';

-- Record what the broker confirmed, and what it did not.
CREATE FUNCTION wfe._outbox_mark(p_holder text, p_token bigint, p_published bigint[],
                                 p_failed bigint[], p_error text, p_unroutable bigint[])
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    -- fenced: a publisher that lost the lease marks nothing (its rows are
    -- claimed by a dead holder and go back to pending on repair)
    PERFORM 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token FOR SHARE;
    IF NOT FOUND THEN
        RAISE WARNING 'wfe publisher % lost its lease (token %): nothing marked', p_holder, p_token;
        RETURN 0;
    END IF;
    n := wfe._mark_published(p_published, p_holder);
    -- not confirmed: pending again after an exponential backoff
    IF cardinality(p_failed) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL, last_error = p_error,
               available_at = now() + make_interval(secs => least(60, 0.1 * power(2, least(o.attempts, 10))))
          FROM unnest(p_failed) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
    END IF;
    IF cardinality(p_unroutable) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL,
               last_error = 'unroutable: no queue is bound for ' || o.exchange || ' ' || o.routing_key,
               available_at = now() + make_interval(secs => least(300, power(2, least(o.attempts, 8))))
          FROM unnest(p_unroutable) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
        RAISE WARNING 'wfe publisher: % outbox rows were unroutable and stay pending (ids %)',
              cardinality(p_unroutable), p_unroutable;
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._outbox_mark(text, bigint, bigint[], bigint[], text, bigint[]) IS
'Publisher: marks exactly the confirmed rows published; nacked, timed-out and unroutable rows go back to pending with a backoff.';

-- Broker-mode queues, whose topology the publisher declares.
CREATE FUNCTION wfe._broker_queues()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT q.queue FROM wfe.queues AS q WHERE q.delivery = 'broker' ORDER BY q.queue;
END;
COMMENT ON FUNCTION wfe._broker_queues() IS 'Queues in broker delivery mode.';

-- External relays (no preload): claim and acknowledge outbox rows.
--
-- A relay is a role like any other: it sees and acknowledges the outbox rows
-- of the tenants it acts for (wfe.my_tenants(): the tenants it is mapped
-- to, every tenant for a superuser or wfe_admin), and no other.  This is
-- that rule, for outbox_claim and outbox_ack both; p_tenants is
-- wfe.my_tenants(), read once per call.
CREATE FUNCTION wfe._relay_sees(p_tenant text, p_tenants text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN p_tenants IS NULL OR p_tenant OPERATOR(pg_catalog.=) ANY (p_tenants);
COMMENT ON FUNCTION wfe._relay_sees(text, text[]) IS
'Whether an external relay acting for p_tenants (wfe.my_tenants(); NULL: every tenant) may claim and acknowledge an outbox row of p_tenant.';

CREATE FUNCTION wfe.outbox_claim(max int, relay text)
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

CREATE FUNCTION wfe.outbox_ack(ids bigint[], relay text)
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

-- A large-track envelope's input.  The reference names the attempt that
-- dispatched it (_dispatch), and only a caller who holds that attempt --
-- who may serve its queue and knows its fence, while it is queued,
-- dispatched or running -- gets the payload: a hash guessed from a
-- document is no way into another queue's or tenant's inputs.  Whatever
-- the caller cannot show is answered as a payload that does not exist.
CREATE FUNCTION wfe.fetch_payload(ref jsonb)
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

CREATE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
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

CREATE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF configure_queue.queue !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'queue name "%" is not valid', configure_queue.queue
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Queue names match ^[a-z][a-z0-9_.-]{0,62}$.';
    END IF;
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT q.delivery, q.paused INTO v_was, v_was_paused
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused)
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now();
    -- Tasks waiting in the old mode follow the queue into the new one: to
    -- broker (or resumed as broker), queued attempts get their dispatch
    -- message; to poll, dispatched attempts become claimable (a broker worker
    -- that still accepts one is answered duplicate once a poll worker has it).
    -- A paused queue keeps everything as it is until it is resumed.
    IF configure_queue.paused THEN
        NULL;                       -- paused: what waits stays queued
    ELSIF configure_queue.delivery = 'broker'
          AND (coalesce(v_was, 'poll') = 'poll' OR coalesce(v_was_paused, false)) THEN
        -- Every queued attempt without a dispatch message still to publish
        -- is re-dispatched through the engine: a new fence, a new message.
        -- (One whose earlier message was published -- broker, then poll,
        -- then broker again -- would otherwise wait for a message that is
        -- gone.)  No stage row is locked here: the engine locks the run,
        -- then the stage, and one that moved on meanwhile is passed over.
        FOR c IN SELECT st.run_id, st.stage FROM wfe.run_stages AS st
                  WHERE st.queue = configure_queue.queue AND st.state = 'queued' AND st.handler IS NULL
                    AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o
                                     WHERE o.run_id = st.run_id AND o.stage = st.stage
                                       AND o.attempt = st.attempt AND o.fence = st.fence
                                       AND o.kind = 'dispatch' AND o.state <> 'published')
                  ORDER BY st.run_id, st.stage
        LOOP
            BEGIN
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, session_user,
                                     format('queue %s switched to broker delivery', configure_queue.queue));
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                NULL;
            END;
        END LOOP;
    ELSIF configure_queue.delivery = 'poll' AND (v_was = 'broker' OR coalesce(v_was_paused, false)) THEN
        UPDATE wfe.run_stages AS st SET state = 'queued'
         WHERE st.queue = configure_queue.queue AND st.state = 'dispatched';
        PERFORM wfe._notify_ready(configure_queue.queue);     -- resumed or switched: wake the pollers
    ELSIF configure_queue.delivery = 'broker' THEN
        -- the same mode, maybe a raised or lifted max_in_flight: what fits now goes
        PERFORM wfe._release_held(configure_queue.queue, NULL);
    ELSE
        PERFORM wfe._notify_ready(configure_queue.queue);     -- the same for pollers
    END IF;
    PERFORM wfe._wake(now());      -- the publisher declares a new broker queue's topology
END
$$;
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit and pause.';

-- Pause or resume a queue and keep its other settings: the operator's lever
-- (configure_queue, which sets the mode and the limit too, is wfe_admin's).
-- Resuming does what configure_queue does on a resume: dispatch or notify.
CREATE FUNCTION wfe._set_queue_paused(p_queue text, p_paused boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
BEGIN
    SELECT s.delivery, s.max_in_flight INTO q
      FROM wfe.queues AS s WHERE s.queue = p_queue FOR UPDATE;
    PERFORM wfe.configure_queue(p_queue, coalesce(q.delivery, 'poll'), q.max_in_flight, p_paused);
END
$$;
COMMENT ON FUNCTION wfe._set_queue_paused(text, boolean) IS
'Sets only a queue''s paused flag (an unconfigured queue becomes a configured poll queue).';

CREATE FUNCTION wfe.pause_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(pause_queue.queue, true);
END;
COMMENT ON FUNCTION wfe.pause_queue(text) IS
'Pauses a queue: claim_task returns nothing for it and no dispatch is written; its tasks stay queued.';

CREATE FUNCTION wfe.resume_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(resume_queue.queue, false);
END;
COMMENT ON FUNCTION wfe.resume_queue(text) IS
'Resumes a paused queue: a broker queue dispatches what waited, a poll queue notifies its pollers.';

-- The event log's projection on wfe.events, while wfe.publish_events is on.
CREATE FUNCTION wfe._project_event()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, body)
    VALUES (NEW.tenant, NEW.run_id, NEW.stage, NEW.attempt, 'event', 'wfe.events', NEW.type,
            md5('event:' || NEW.event_id)::uuid,
            jsonb_build_object('event_id', NEW.event_id, 'run_id', NEW.run_id, 'tenant', NEW.tenant,
                               'stage', NEW.stage, 'attempt', NEW.attempt, 'type', NEW.type,
                               'at', NEW.at, 'detail', NEW.detail));
    PERFORM wfe._wake(now());
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION wfe._project_event() IS 'Trigger: copies an event row to the outbox for the wfe.events exchange.';
CREATE TRIGGER events_projection
    AFTER INSERT ON wfe.events
    FOR EACH ROW WHEN (current_setting('wfe.publish_events', true) = 'on')
    EXECUTE FUNCTION wfe._project_event();
