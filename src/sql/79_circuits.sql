-- Circuit breakers: when a queue stops trying (docs: operations.md "Flow
-- control").  A queue's circuit opens when, in the last window_ms, at least
-- min_calls of its attempts ended and the share that failed or timed out is
-- >= failure_ratio; open, no attempt of the queue is released for open_ms;
-- then exactly one goes (half open): its success closes the circuit, its
-- failure opens it again; the row keeps the probe's task, so that no other
-- attempt's end (one released before the circuit opened) decides.  The decisions are src/core/flow/circuit.c; the
-- claim applies them (src/pg/circuit.c); held work stays queued.  Which
-- queues have a circuit is cached per backend (79_fairness.sql's trigger).

CREATE TABLE wfe.circuits (
    queue         wfe.queue_name PRIMARY KEY,
    failure_ratio double precision NOT NULL
                  CONSTRAINT circuits_failure_ratio CHECK (failure_ratio > 0 AND failure_ratio <= 1),
    min_calls     int NOT NULL CONSTRAINT circuits_min_calls CHECK (min_calls >= 1),
    window_ms     int NOT NULL CONSTRAINT circuits_window_ms CHECK (window_ms >= 1),
    open_ms       int NOT NULL CONSTRAINT circuits_open_ms CHECK (open_ms >= 1),
    state         text NOT NULL DEFAULT 'closed'
                  CONSTRAINT circuits_state CHECK (state IN ('closed', 'open', 'half_open')),
    since         timestamptz NOT NULL DEFAULT now(),
    probe_out     boolean NOT NULL DEFAULT false,
    -- the probe's task while it is out: only its own end decides (src/pg/circuit.c)
    probe_run_id  bigint,
    probe_stage   text,
    win_start     timestamptz NOT NULL DEFAULT now(),
    calls         int NOT NULL DEFAULT 0,
    failures      int NOT NULL DEFAULT 0,
    prev_calls    int NOT NULL DEFAULT 0,
    prev_failures int NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    updated_by    text NOT NULL DEFAULT wfe._identity()
);
COMMENT ON TABLE wfe.circuits IS
'Circuit breakers per queue: configuration, state (closed, open, half_open) since when, and the sliding window''s counts.';
-- every column but the probe's task, which names a run of any tenant
GRANT SELECT (queue, failure_ratio, min_calls, window_ms, open_ms, state, since, probe_out,
              win_start, calls, failures, prev_calls, prev_failures, updated_at, updated_by)
    ON wfe.circuits TO wfe_reader, wfe_operator, wfe_admin;
SELECT pg_catalog.pg_extension_config_dump('wfe.circuits', '');

-- A circuit's change of state, in the event log (no run: tenant 'default').
CREATE FUNCTION wfe._circuit_event(p_queue text, p_type text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._event(NULL, 'default', NULL, NULL, p_type,
                      (SELECT jsonb_build_object('queue', c.queue, 'state', c.state,
                                                 'calls', c.calls, 'failures', c.failures)
                         FROM wfe.circuits AS c WHERE c.queue = p_queue));
END;
COMMENT ON FUNCTION wfe._circuit_event(text, text) IS
'Logs a circuit''s change of state (circuit.opened, circuit.half_open, circuit.closed) with its queue and counts.';
REVOKE ALL ON FUNCTION wfe._circuit_event(text, text) FROM PUBLIC;

CREATE FUNCTION wfe._half_open_circuits()
RETURNS int AS 'MODULE_PATHNAME', 'wfe_half_open_circuits' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._half_open_circuits() IS
'Half opens the open circuits whose open_ms has passed, wakes their pollers, and sets the worker''s timer for the next; returns how many.';
REVOKE ALL ON FUNCTION wfe._half_open_circuits() FROM PUBLIC;

-- An attempt's end is counted where wfe.metrics counts it, in C: the
-- metrics_attempt_ended trigger (83_metrics.sql, src/pg/metrics.c) hands
-- it to the queue's circuit when the queue has one, which each backend
-- knows from a cached list (src/pg/flow_cache.c): a queue without a circuit
-- pays nothing per attempt end or per claim.

CREATE FUNCTION wfe.configure_circuit(queue text, failure_ratio numeric, min_calls int DEFAULT 20,
                                      window_ms int DEFAULT 60000, open_ms int DEFAULT 30000)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF configure_circuit.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(configure_circuit.queue, 'queue');
    IF NOT EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = configure_circuit.queue)
       AND NOT EXISTS (SELECT 1 FROM wfe.contracts AS c WHERE c.queue = configure_circuit.queue) THEN
        RAISE EXCEPTION 'queue "%" is not known', configure_circuit.queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Configure it with wfe.configure_queue, or install a workflow whose stages use it.';
    END IF;
    IF configure_circuit.failure_ratio IS NULL THEN
        -- dropped: what it held back may go
        DELETE FROM wfe.circuits AS c WHERE c.queue = configure_circuit.queue;
        PERFORM wfe._notify_ready(configure_circuit.queue);
        RETURN;
    END IF;
    IF configure_circuit.failure_ratio <= 0 OR configure_circuit.failure_ratio > 1 THEN
        RAISE EXCEPTION 'failure_ratio must be in (0, 1], not %', configure_circuit.failure_ratio
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The share of ended attempts that failed at which the circuit opens; NULL drops the circuit.';
    END IF;
    IF configure_circuit.min_calls IS NULL OR configure_circuit.min_calls < 1 THEN
        RAISE EXCEPTION 'min_calls must be a positive integer, not %', coalesce(configure_circuit.min_calls::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 20.';
    END IF;
    IF configure_circuit.window_ms IS NULL OR configure_circuit.window_ms < 1 THEN
        RAISE EXCEPTION 'window_ms must be a positive integer, not %', coalesce(configure_circuit.window_ms::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 60000 (one minute).';
    END IF;
    IF configure_circuit.open_ms IS NULL OR configure_circuit.open_ms < 1 THEN
        RAISE EXCEPTION 'open_ms must be a positive integer, not %', coalesce(configure_circuit.open_ms::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'The default is 30000 (30 seconds).';
    END IF;
    -- a changed circuit keeps its state and counts
    INSERT INTO wfe.circuits AS c (queue, failure_ratio, min_calls, window_ms, open_ms)
    VALUES (configure_circuit.queue, configure_circuit.failure_ratio, configure_circuit.min_calls,
            configure_circuit.window_ms, configure_circuit.open_ms)
    ON CONFLICT (queue) DO UPDATE
       SET failure_ratio = excluded.failure_ratio, min_calls = excluded.min_calls,
           window_ms = excluded.window_ms, open_ms = excluded.open_ms,
           updated_at = now(), updated_by = wfe._identity();
END
$$;
COMMENT ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) IS
'Creates or changes a queue''s circuit breaker: it opens at failure_ratio of at least min_calls attempts ended in window_ms, for open_ms; failure_ratio NULL drops it.';
REVOKE ALL ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.configure_circuit(text, numeric, int, int, int) TO wfe_admin;

CREATE FUNCTION wfe.reset_circuit(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_state text;
BEGIN
    IF reset_circuit.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM wfe._admit_name(reset_circuit.queue, 'queue');
    SELECT c.state INTO v_state FROM wfe.circuits AS c WHERE c.queue = reset_circuit.queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" has no circuit', reset_circuit.queue
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'wfe.configure_circuit gives a queue one.';
    END IF;
    UPDATE wfe.circuits AS c
       SET state = 'closed', since = now(), probe_out = false, probe_run_id = NULL, probe_stage = NULL,
           win_start = now(),
           calls = 0, failures = 0, prev_calls = 0, prev_failures = 0
     WHERE c.queue = reset_circuit.queue;
    IF v_state <> 'closed' THEN
        PERFORM wfe._circuit_event(reset_circuit.queue, 'circuit.closed');
        PERFORM wfe._notify_ready(reset_circuit.queue);
    END IF;
END
$$;
COMMENT ON FUNCTION wfe.reset_circuit(text) IS
'Closes a queue''s circuit now, with an empty window: what it held back may go.';
REVOKE ALL ON FUNCTION wfe.reset_circuit(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.reset_circuit(text) TO wfe_operator, wfe_admin;
