-- Run-time helpers in C (src/runtime_fn.c over src/core/jsonschema.c and
-- src/core/bind.c; docs: runtime.md, dsl.md "Inputs and interpolation",
-- "Expressions").  Internal: wfe's own SECURITY DEFINER functions call them
-- when they bind a stage's input, check a context or a result against a
-- schema, and evaluate a decision.  All three depend on their arguments
-- only (the expression limits are the documented defaults), hence IMMUTABLE.

-- JSON-Schema subset check: NULL when the value conforms, else the first
-- violation with its JSON path ('$.modelId: expected string, got integer').
-- A schema outside the subset raises 22023.
CREATE FUNCTION wfe._validate(schema jsonb, value jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_validate_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._validate(jsonb, jsonb) IS
'JSON-Schema subset (type, properties, required, items, enum) check: NULL when value satisfies schema, else the first violation, e.g. "$.modelId: expected string, got integer". Internal.';


-- Binds a stage's input template over the evaluation root
-- {"context", "stages", "outputs", "run"}.  Not STRICT: input_schema may be
-- NULL (no contract schema); a NULL template or root raises 22004.  Binding
-- problems are answers, not errors.
CREATE FUNCTION wfe._bind_input(template jsonb, root jsonb, input_schema jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_bind_input_sql'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION wfe._bind_input(jsonb, jsonb, jsonb) IS
'Binds ${...} references of an input template over {"context","stages","outputs","run"}: {"ok": true, "input": {...}} or {"ok": false, "code": "binding.missing"|"binding.null"|"binding.type", "error": "..."}; with input_schema, the bound input must satisfy it (binding.type). Never raises for binding problems. Internal.';


-- Evaluates a decision's branches (the plan's [{"when", "next"}, ...]) in
-- order with the default expression limits (4096 bytes, 256 nodes, 10000
-- steps).
CREATE FUNCTION wfe._eval_decision(branches jsonb, root jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_eval_decision_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._eval_decision(jsonb, jsonb) IS
'Evaluates decision branches [{"when": EXPR, "next": STAGE}, ...] in order over {"context","stages","outputs","run"}: {"ok": true, "next": STAGE, "branch": i} for the first true one, or {"ok": false, "code": "expr.eval", "error": "...", "branch": i|null}. Internal.';


-- Internal helpers: only wfe's SECURITY DEFINER functions (owned by the
-- extension owner) call them.  90_grants.sql revokes everything again; this
-- keeps the file right on its own.
REVOKE EXECUTE ON FUNCTION
    wfe._validate(jsonb, jsonb),
    wfe._bind_input(jsonb, jsonb, jsonb),
    wfe._eval_decision(jsonb, jsonb)
    FROM PUBLIC;
