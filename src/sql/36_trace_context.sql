-- Trace context (docs: operations.md "Traces"; W3C Trace Context).  A run
-- keeps a trace id and the id of its own span; each attempt's span id is
-- derived from the run's span, the stage and the attempt number, so the
-- envelope, the claim and wfe.run_spans name the same span without
-- storing it.

-- p_digits random lowercase hex digits (up to 32; from gen_random_uuid,
-- whose version digit is the 13th).
CREATE FUNCTION wfe._random_hex(p_digits int)
RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN right(replace(pg_catalog.gen_random_uuid()::text, '-', ''), p_digits);
COMMENT ON FUNCTION wfe._random_hex(int) IS
'Random lowercase hex digits (at most 32): new trace and span ids.';
REVOKE ALL ON FUNCTION wfe._random_hex(int) FROM PUBLIC;

-- A submitter's traceparent, read as W3C Trace Context says: version 00 is
-- exactly "00-<trace id>-<parent id>-<flags>"; a later version (not ff) may
-- carry more after a "-", which is ignored; ids are lowercase hex and not
-- all zero.  Only the sampled flag is passed on (the others are reserved:
-- a propagator sets them to zero).  Returns {trace id, parent id, flags}.
CREATE FUNCTION wfe._traceparent(p_value jsonb)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text[];
BEGIN
    IF jsonb_typeof(p_value) = 'string' THEN
        m := regexp_match(p_value #>> '{}', '^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$');
    END IF;
    IF m IS NULL OR m[1] = 'ff' OR (m[1] = '00' AND m[5] IS NOT NULL)
       OR m[2] = repeat('0', 32) OR m[3] = repeat('0', 16) THEN
        RAISE EXCEPTION 'option traceparent must be a W3C traceparent, not %', left(p_value::text, 80)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Write "00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>", ids not all zero.';
    END IF;
    RETURN ARRAY[m[2], m[3], CASE WHEN ('x' || m[4])::bit(8) & B'00000001' = B'00000001' THEN '01' ELSE '00' END];
END
$$;
COMMENT ON FUNCTION wfe._traceparent(jsonb) IS
'Reads a W3C traceparent (submit option): {trace id, parent span id, flags}, or 22023 naming the option.';
REVOKE ALL ON FUNCTION wfe._traceparent(jsonb) FROM PUBLIC;

-- The span id of a run's attempt: a child of the run's span.  NB: both
-- bodies are immutable (p_attempt::text: text || int is only stable), so
-- the planner inlines them into the claim; a function it cannot inline
-- is planned again at every claim (docs/benchmarks.md).
CREATE FUNCTION wfe._attempt_span_id(p_run_span text, p_stage text, p_attempt int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN left(md5(p_run_span || ':' || p_stage || ':' || p_attempt::text), 16);
COMMENT ON FUNCTION wfe._attempt_span_id(text, text, int) IS
'The span id of an attempt: derived from the run''s span id, the stage and the attempt number.';
REVOKE ALL ON FUNCTION wfe._attempt_span_id(text, text, int) FROM PUBLIC;

-- The traceparent a worker receives with an attempt (envelope, claim).
CREATE FUNCTION wfe._attempt_traceparent(p_trace_id text, p_run_span text, p_flags text,
                                         p_stage text, p_attempt int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '00-' || p_trace_id || '-' || wfe._attempt_span_id(p_run_span, p_stage, p_attempt) || '-' || p_flags;
COMMENT ON FUNCTION wfe._attempt_traceparent(text, text, text, text, int) IS
'The W3C traceparent of a run''s attempt: the run''s trace id and flags, the attempt''s span id.';
REVOKE ALL ON FUNCTION wfe._attempt_traceparent(text, text, text, text, int) FROM PUBLIC;
