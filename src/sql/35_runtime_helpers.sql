-- Run-time helpers in C (src/pg/runtime_fn.c over src/core/jsonschema*.c and
-- src/core/engine/bind.c; docs: runtime.md, dsl.md "Inputs and interpolation",
-- "Expressions").  Internal: wfe's own SECURITY DEFINER functions call them
-- when they bind a stage's input, check a context or a result against a
-- schema, and evaluate a decision.  _check_json_schema and _eval_decision
-- depend on their arguments only (the expression limits are the documented
-- defaults), hence IMMUTABLE; _validate and _bind_input also read
-- wfe.schema_format_assertion, hence STABLE.

-- The JSON Schema validator (src/core/jsonschema*.c; docs/dsl.md "Schemas"):
-- draft 2020-12, or draft-07 when "$schema" says so.  _check_json_schema is
-- registration's check: it raises 22023 '<label> at "<pointer>": <what>'
-- for a schema wfe cannot use (an unknown keyword, a remote reference, a
-- pattern that needs backtracking).  _validate is NULL when the value
-- conforms, else the first violation with its instance path and schema
-- keyword ('$.modelId: expected string, got integer (schema
-- #/properties/modelId/type)').
CREATE FUNCTION wfe._check_json_schema(schema jsonb, label text)
RETURNS void
AS 'MODULE_PATHNAME', 'wfe_check_schema_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._check_json_schema(jsonb, text) IS
'Raises 22023 with the JSON pointer of what makes a schema unusable (unknown keyword, remote reference, backtracking pattern, malformed keyword value); returns nothing for a schema wfe accepts. Internal.';
REVOKE ALL ON FUNCTION wfe._check_json_schema(jsonb, text) FROM PUBLIC;

CREATE FUNCTION wfe._validate(schema jsonb, value jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_validate_sql'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._validate(jsonb, jsonb) IS
'JSON Schema (draft 2020-12, or draft-07 by "$schema") check: NULL when value satisfies schema, else the first violation, e.g. "$.modelId: expected string, got integer (schema #/properties/modelId/type)". Internal.';
REVOKE ALL ON FUNCTION wfe._validate(jsonb, jsonb) FROM PUBLIC;


-- Binds a stage's input template over the evaluation root
-- {"context", "stages", "outputs", "run"}.  Not STRICT: input_schema may be
-- NULL (no contract schema); a NULL template or root raises 22004.  Binding
-- problems are answers, not errors.
CREATE FUNCTION wfe._bind_input(template jsonb, root jsonb, input_schema jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_bind_input_sql'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION wfe._bind_input(jsonb, jsonb, jsonb) IS
'Binds ${...} references of an input template over {"context","stages","outputs","run"}: {"ok": true, "input": {...}} or {"ok": false, "code": "binding.missing"|"binding.null"|"binding.type", "error": "..."}; with input_schema, the bound input must satisfy it (binding.type). Never raises for binding problems. Internal.';
REVOKE ALL ON FUNCTION wfe._bind_input(jsonb, jsonb, jsonb) FROM PUBLIC;


-- Evaluates a decision's branches (the plan's [{"when", "next"}, ...]) in
-- order with the default expression limits (4096 bytes, 256 nodes, 10000
-- steps).
CREATE FUNCTION wfe._eval_decision(branches jsonb, root jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_eval_decision_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._eval_decision(jsonb, jsonb) IS
'Evaluates decision branches [{"when": EXPR, "next": STAGE}, ...] in order over {"context","stages","outputs","run"}: {"ok": true, "next": STAGE, "branch": i} for the first true one, or {"ok": false, "code": "expr.eval", "error": "...", "branch": i|null}. Internal.';
REVOKE ALL ON FUNCTION wfe._eval_decision(jsonb, jsonb) FROM PUBLIC;


-- wfe's own transaction locks (src/pg/locks.c): advisory lock tags in a
-- space no SQL function can name, so no login can take, hold or wait for
-- them (docs: operations.md "Security model").  Granted to nobody.
CREATE FUNCTION wfe._lock(space text, key text, try boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_lock_sql' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION wfe._lock(text, text, boolean) IS
'Takes wfe''s transaction lock (space, key), which no login can take: waits (bounded by lock_timeout), or with try only takes it if free; returns whether it was taken.';
REVOKE EXECUTE ON FUNCTION wfe._lock(text, text, boolean) FROM PUBLIC;
