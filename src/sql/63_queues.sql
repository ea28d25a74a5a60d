-- Queue settings (docs: delivery.md): delivery mode, in-flight limit,
-- pause.  A queue never configured is a poll queue (wfe.claim_task); broker
-- queues get dispatch messages.  wfe_admin configures a queue; pausing and
-- resuming it is also the operator's lever.

CREATE TABLE wfe.queues (
    queue         wfe.queue_name PRIMARY KEY,
    delivery      text NOT NULL DEFAULT 'poll'
                  CONSTRAINT queues_delivery CHECK (delivery IN ('poll', 'broker')),
    max_in_flight int CONSTRAINT queues_max_in_flight CHECK (max_in_flight > 0),
    paused        boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    fairness      text NOT NULL DEFAULT 'none'
                  CONSTRAINT queues_fairness CHECK (fairness IN ('none', 'tenant'))
);
COMMENT ON TABLE wfe.queues IS
'Queue settings: delivery mode (poll or broker), in-flight limit, paused, fairness between tenants.  Unlisted queues are poll queues.';
COMMENT ON COLUMN wfe.queues.fairness IS
'none: claims take the highest priority, then oldest, ready task; tenant: they serve the tenants with ready work by weight (wfe.configure_tenant), within a priority level.';
GRANT SELECT ON wfe.queues TO wfe_reader, wfe_operator, wfe_admin;

CREATE FUNCTION wfe.configure_queue(queue text, delivery text DEFAULT 'poll', max_in_flight int DEFAULT NULL,
                                    paused boolean DEFAULT false, fairness text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_was        text;
    v_was_paused boolean;
    v_was_fair   text;
    c            record;
BEGIN
    IF configure_queue.queue IS NULL OR configure_queue.delivery IS NULL OR configure_queue.paused IS NULL THEN
        RAISE EXCEPTION 'queue, delivery and paused must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._check_queue_name(configure_queue.queue);
    IF configure_queue.delivery NOT IN ('poll', 'broker') THEN
        RAISE EXCEPTION 'delivery must be poll or broker, not "%"', configure_queue.delivery
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.max_in_flight IS NOT NULL AND configure_queue.max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.fairness NOT IN ('none', 'tenant') THEN
        RAISE EXCEPTION 'fairness must be none or tenant, not "%"', configure_queue.fairness
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'tenant: claims serve the tenants with ready work by weight; NULL keeps the queue''s.';
    END IF;
    SELECT q.delivery, q.paused, q.fairness INTO v_was, v_was_paused, v_was_fair
      FROM wfe.queues AS q WHERE q.queue = configure_queue.queue FOR UPDATE;
    -- fairness NULL: the queue keeps what it has (none when new)
    INSERT INTO wfe.queues AS q (queue, delivery, max_in_flight, paused, fairness)
    VALUES (configure_queue.queue, configure_queue.delivery, configure_queue.max_in_flight, configure_queue.paused,
            coalesce(configure_queue.fairness, 'none'))
    ON CONFLICT (queue) DO UPDATE
       SET delivery = excluded.delivery, max_in_flight = excluded.max_in_flight,
           paused = excluded.paused, updated_at = now(),
           fairness = coalesce(configure_queue.fairness, q.fairness);
    -- The tasks waiting follow a change of fairness: run_stages_fair holds
    -- the ready tasks of fair queues only (run_stages.fair, set at release).
    IF coalesce(configure_queue.fairness, v_was_fair, 'none') <> coalesce(v_was_fair, 'none') THEN
        UPDATE wfe.run_stages AS st SET fair = (configure_queue.fairness = 'tenant')
         WHERE st.queue = configure_queue.queue AND st.state IN ('queued', 'dispatched');
    END IF;
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
                PERFORM wfe._operate(c.run_id, c.stage, 'redispatch', NULL, wfe._identity(),
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
COMMENT ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) IS
'Sets a queue''s delivery mode (poll: claim_task; broker: RabbitMQ dispatches), in-flight limit, pause and fairness between tenants (none or tenant; NULL keeps it).';
REVOKE ALL ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_queue(text, text, int, boolean, text) TO wfe_admin;

-- A queue's delivery mode, for the workers that serve it (the clients'
-- mode="auto"): wfe_worker cannot read wfe.queues, and a worker started in
-- the wrong mode would wait for tasks that never come its way.
CREATE FUNCTION wfe.queue_delivery(queue text)
RETURNS text
LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce((SELECT q.delivery FROM wfe.queues AS q WHERE q.queue::text = $1), 'poll');
END;
COMMENT ON FUNCTION wfe.queue_delivery(text) IS
'The delivery mode of a queue: broker, or poll (also for a queue never configured).';
REVOKE ALL ON FUNCTION wfe.queue_delivery(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.queue_delivery(text) TO wfe_worker, wfe_reader, wfe_operator, wfe_admin;

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
REVOKE ALL ON FUNCTION wfe._set_queue_paused(text, boolean) FROM PUBLIC;

CREATE FUNCTION wfe.pause_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(pause_queue.queue, true);
END;
COMMENT ON FUNCTION wfe.pause_queue(text) IS
'Pauses a queue: claim_task returns nothing for it and no dispatch is written; its tasks stay queued.';
REVOKE ALL ON FUNCTION wfe.pause_queue(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.pause_queue(text) TO wfe_admin, wfe_operator;

CREATE FUNCTION wfe.resume_queue(queue text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._set_queue_paused(resume_queue.queue, false);
END;
COMMENT ON FUNCTION wfe.resume_queue(text) IS
'Resumes a paused queue: a broker queue dispatches what waited, a poll queue notifies its pollers.';
REVOKE ALL ON FUNCTION wfe.resume_queue(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.resume_queue(text) TO wfe_admin, wfe_operator;

-- Broker-mode queues, whose topology the publisher declares.
CREATE FUNCTION wfe._broker_queues()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT q.queue FROM wfe.queues AS q WHERE q.delivery = 'broker' ORDER BY q.queue;
END;
COMMENT ON FUNCTION wfe._broker_queues() IS 'Queues in broker delivery mode.';
REVOKE ALL ON FUNCTION wfe._broker_queues() FROM PUBLIC;
