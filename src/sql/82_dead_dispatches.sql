-- Dead dispatches: what RabbitMQ dead-lettered into wfe.dlq, read back by
-- the background worker's publisher (src/bgw/publisher.c, wfe.consume_dlq), so
-- that no run waits forever on a message that died in the broker
-- (docs: delivery.md "Pre-acceptance retries and wfe.dlq").

-- Record one dead dispatch and fail its attempt through the engine's gate
-- (wfe.fail_task, retryable: the stage's retry policy or failure route).
-- Returns what became of it: the gate's outcome word, 'duplicate' for a
-- message already recorded (redelivered after a crash before its ack), or
-- 'foreign' / 'unknown' for a message that names no wfe attempt / no run; 'ingress' for a
-- run command an ingress rejected.
CREATE FUNCTION wfe._broker_dead_letter(p_message_id text, p_routing_key text, p_headers jsonb, p_body text)
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
    -- a run command an ingress rejected: logged and counted when it was
    -- (src/bgw/ingress.c), no attempt waits for it
    IF p_headers ? 'x-wfe-ingress' THEN
        RETURN 'ingress';
    END IF;
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
REVOKE ALL ON FUNCTION wfe._broker_dead_letter(text, text, jsonb, text) FROM PUBLIC;
