-- A run as OpenTelemetry spans (docs: operations.md "Traces"): OTLP/JSON
-- (the protobuf JSON mapping of TracesData: lowerCamelCase fields, trace
-- and span ids as lowercase hex, 64-bit integers and nanosecond times as
-- decimal strings, enums as numbers), so a collector's OTLP/HTTP receiver
-- takes it as it is.

-- One OTLP attribute: {"key", "value": {"stringValue" | "intValue"}}; NULL
-- values are left out by the caller (jsonb_strip_nulls would not do: an
-- attribute is an array element).
CREATE FUNCTION wfe._otlp_attribute(p_key text, p_value anyelement)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN p_value IS NOT NULL THEN
            jsonb_build_object('key', p_key, 'value',
                               CASE WHEN pg_typeof(p_value) IN ('bigint'::regtype, 'integer'::regtype)
                                    THEN jsonb_build_object('intValue', p_value::text)
                                    ELSE jsonb_build_object('stringValue', p_value::text) END) END
$$;
COMMENT ON FUNCTION wfe._otlp_attribute(text, anyelement) IS
'One OTLP/JSON KeyValue (intValue for integers, as a string; stringValue otherwise); NULL for a NULL value.';
REVOKE ALL ON FUNCTION wfe._otlp_attribute(text, anyelement) FROM PUBLIC;

-- Nanoseconds since the epoch, as OTLP/JSON writes a fixed64: a string.
CREATE FUNCTION wfe._otlp_time(p_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (extract(epoch FROM p_at) * 1000000000)::bigint::text;
COMMENT ON FUNCTION wfe._otlp_time(timestamptz) IS 'A time as OTLP/JSON''s timeUnixNano: nanoseconds since 1970 as a decimal string.';
REVOKE ALL ON FUNCTION wfe._otlp_time(timestamptz) FROM PUBLIC;

CREATE FUNCTION wfe.run_spans(run_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r       wfe.runs := wfe._run(run_spans.run_id);
    v_run   jsonb;
    v_tries jsonb;
BEGIN
    -- the run: SPAN_KIND_INTERNAL (1); status OK (1) when completed, ERROR (2)
    -- when failed or cancelled, UNSET (0) while it runs
    v_run := jsonb_strip_nulls(jsonb_build_object(
        'traceId', r.trace_id, 'spanId', r.span_id, 'parentSpanId', r.trace_parent,
        'name', 'wfe.run ' || r.workflow, 'kind', 1,
        'startTimeUnixNano', wfe._otlp_time(r.submitted_at),
        'endTimeUnixNano', wfe._otlp_time(coalesce(r.finished_at, now())),
        'attributes', jsonb_path_query_array(jsonb_build_array(
            wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.workflow', r.workflow),
            wfe._otlp_attribute('wfe.version', r.version), wfe._otlp_attribute('wfe.tenant', r.tenant),
            wfe._otlp_attribute('wfe.definition_digest', r.definition_digest),
            wfe._otlp_attribute('wfe.state', r.state), wfe._otlp_attribute('wfe.reason', r.reason)),
            '$[*] ? (@ != null)'),
        'status', jsonb_strip_nulls(jsonb_build_object(
            'code', CASE r.state WHEN 'completed' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 2 ELSE 0 END,
            'message', CASE WHEN r.state IN ('failed', 'cancelled') THEN coalesce(r.reason, r.state) END))));
    -- one span per attempt, as wfe.run_timeline finds them and their outcome
    -- (attempt 0, the result cache's bookkeeping, is no attempt; a parked
    -- wait or sleep has no finished_at yet: it ends now, as the run does):
    -- SPAN_KIND_PRODUCER (4), the work handed to a worker, whose own spans
    -- are children of this one (the envelope's and the claim's traceparent)
    SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'traceId', r.trace_id, 'spanId', wfe._attempt_span_id(r.span_id, t.stage, t.attempt),
               'parentSpanId', r.span_id,
               'name', 'wfe.attempt ' || t.stage, 'kind', 4,
               'startTimeUnixNano', wfe._otlp_time(t.started_at), 'endTimeUnixNano', wfe._otlp_time(coalesce(t.finished_at, now())),
               'attributes', jsonb_path_query_array(jsonb_build_array(
                   wfe._otlp_attribute('wfe.run_id', r.run_id), wfe._otlp_attribute('wfe.stage', t.stage),
                   wfe._otlp_attribute('wfe.attempt', t.attempt), wfe._otlp_attribute('wfe.queue', s.queue),
                   wfe._otlp_attribute('wfe.outcome', t.outcome),
                   wfe._otlp_attribute('wfe.child_run_id', t.child_run_id),
                   -- the stage keeps its last error whole; an earlier attempt's is its event's code
                   wfe._otlp_attribute('wfe.error', CASE
                       WHEN x.failed AND t.attempt = s.attempt AND s.error IS NOT NULL
                           THEN wfe._redact(s.error) #>> '{}'
                       WHEN x.failed
                           THEN wfe._redact(jsonb_build_object('error',
                                    (SELECT e.detail -> 'error' FROM wfe.events AS e
                                      WHERE e.run_id = r.run_id AND e.stage = t.stage AND e.attempt = t.attempt
                                        AND e.detail ? 'error'
                                      ORDER BY e.event_id DESC LIMIT 1))) #>> '{error}' END)),
                   '$[*] ? (@ != null)'),
               'status', jsonb_strip_nulls(jsonb_build_object(
                   'code', CASE WHEN t.outcome = 'completed' THEN 1 WHEN x.failed THEN 2 ELSE 0 END,
                   'message', CASE WHEN x.failed THEN t.outcome END))))
             ORDER BY t.n), '[]')
      INTO v_tries
      FROM wfe.run_timeline(r.run_id) WITH ORDINALITY AS t(stage, attempt, outcome, started_at, finished_at,
                                                          duration_ms, waterfall, child_run_id, n)
      JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = t.stage
      CROSS JOIN LATERAL (SELECT t.outcome IN ('failed', 'timed_out', 'retry_scheduled') AS failed) AS x
     WHERE t.attempt >= 1
       -- a child run's first row is its parent's attempt, no attempt of its own
       AND NOT (t.n = 1 AND r.parent_run_id IS NOT NULL);
    RETURN jsonb_build_object('resourceSpans', jsonb_build_array(jsonb_build_object(
        'resource', jsonb_build_object('attributes', jsonb_build_array(
            wfe._otlp_attribute('service.name', 'wfe'::text),
            wfe._otlp_attribute('service.version', r.engine_version))),
        'scopeSpans', jsonb_build_array(jsonb_build_object(
            'scope', jsonb_build_object('name', 'wfe', 'version', r.engine_version),
            'spans', jsonb_build_array(v_run) || v_tries)))));
END
$$;
COMMENT ON FUNCTION wfe.run_spans(bigint) IS
'The run as OTLP/JSON resourceSpans: a span for the run and one per attempt (its children), with wfe.redact_keys applied to the attributes.';
REVOKE ALL ON FUNCTION wfe.run_spans(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.run_spans(bigint) TO wfe_submitter, wfe_operator, wfe_reader;
