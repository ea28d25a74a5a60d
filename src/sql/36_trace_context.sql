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

-- A submitter's traceparent is read by the core (wfe_traceparent_read,
-- src/core/engine/submit.c) as W3C Trace Context says.

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
