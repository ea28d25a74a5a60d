-- The definition compiler (C, src/core) and its SQL face.

-- Compiles one YAML definition.  contracts is the registry as a JSON array
-- (see wfe._contracts_json()); NULL skips the contracts layer, so the
-- function is not STRICT.  STABLE because it reads the wfe.max_* limits.
-- Never raises for a bad definition: the answer is
-- {"ok", "digest", "plan", "diagnostics"}.
CREATE FUNCTION wfe._compile(source text, contracts jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_compile_sql'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION wfe._compile(text, jsonb) IS
'Compiler core: {"ok","digest","plan","diagnostics"} for a YAML definition, checked against the given contracts (NULL: contracts layer skipped). Use wfe.compile().';
REVOKE ALL ON FUNCTION wfe._compile(text, jsonb) FROM PUBLIC;


-- Mermaid flowchart of a compiled plan.
CREATE FUNCTION wfe._plan_mermaid(plan jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_plan_mermaid_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION wfe._plan_mermaid(jsonb) IS
'Mermaid flowchart of a compiled plan. Use wfe.plan_mermaid().';
REVOKE ALL ON FUNCTION wfe._plan_mermaid(jsonb) FROM PUBLIC;


-- The registry in the compiler's format.  Never NULL: with no contracts
-- registered it is [], which makes every reference contract.unknown.
-- Workflows are in it too, as what a workflow stage may name (dsl.md
-- "Stages form: new types"): NAME for a workflow with an active version,
-- NAME@VERSION for every version that is not a draft, each with its
-- context_schema as the input schema a child's input must satisfy.
-- (PL/pgSQL: wfe.definitions is created after this file.)
CREATE FUNCTION wfe._contracts_json()
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(x.entry ORDER BY x.entry ->> 'ref', x.entry ->> 'kind'), '[]'::jsonb)
      FROM (SELECT jsonb_build_object('ref', c.ref,
                                      'kind', c.kind,
                                      'queue', c.queue,
                                      'handler', c.handler IS NOT NULL,
                                      'input_schema', c.input_schema,
                                      'output_schema', c.output_schema) AS entry
              FROM wfe.contracts AS c
            UNION ALL
            SELECT jsonb_build_object('ref', CASE WHEN v.named THEN d.workflow || '@' || d.version
                                                 ELSE d.workflow END,
                                      'kind', 'workflow',
                                      'input_schema', d.plan -> 'context_schema')
              FROM wfe.definitions AS d
             CROSS JOIN (VALUES (true), (false)) AS v (named)
             WHERE d.state <> 'draft' AND (v.named OR d.state = 'active')) AS x);
END
$$;

COMMENT ON FUNCTION wfe._contracts_json() IS
'All registered contracts, and the workflows a workflow stage may name (NAME: active; NAME@VERSION: not a draft), as the JSON array the compiler takes: [{"ref","kind","queue","handler","input_schema","output_schema"}].';
REVOKE ALL ON FUNCTION wfe._contracts_json() FROM PUBLIC;


-- ratelimit.unknown (dsl.md): a warning, not an error, since buckets are
-- operational and may be configured after the definition; wfe.compile adds
-- one for each stage naming a rate limit that is not configured now.
CREATE FUNCTION wfe._rate_limit_warnings(p_result jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- plpgsql: wfe.rate_limits comes later in the script (78_rate_limits.sql)
    RETURN (SELECT CASE WHEN w.list IS NULL THEN p_result
                ELSE jsonb_set(p_result, '{diagnostics}', (p_result -> 'diagnostics') || w.list) END
      FROM (SELECT jsonb_agg(jsonb_build_object(
                       'code', 'ratelimit.unknown', 'severity', 'warning',
                       'message', format('rate limit "%s" is not configured: its attempts wait until wfe.configure_rate_limit creates it',
                                         s.value -> 'rate_limit' ->> 'name'),
                       'path', format('/%s/%s/rate_limit',
                                      CASE WHEN p_result -> 'plan' ->> 'form' = 'tasks' THEN 'tasks' ELSE 'stages' END,
                                      s.n - 1),
                       'line', NULL, 'column', NULL) ORDER BY s.n) AS list
              FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_result -> 'plan' -> 'stages') = 'array'
                                             THEN p_result -> 'plan' -> 'stages' ELSE '[]' END)
                   WITH ORDINALITY AS s(value, n)
             WHERE s.value -> 'rate_limit' ->> 'name' IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM wfe.rate_limits AS l
                                WHERE l.name = s.value -> 'rate_limit' ->> 'name')) AS w);
END
$$;
COMMENT ON FUNCTION wfe._rate_limit_warnings(jsonb) IS
'Adds a ratelimit.unknown warning to a compile result for each stage naming a rate limit that is not configured.';
REVOKE ALL ON FUNCTION wfe._rate_limit_warnings(jsonb) FROM PUBLIC;

-- SECURITY DEFINER only so that authors need no privilege on wfe.contracts;
-- it writes nothing.
CREATE FUNCTION wfe.compile(source text)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT wfe._rate_limit_warnings(wfe._compile(source, wfe._contracts_json()));
END;

COMMENT ON FUNCTION wfe.compile(text) IS
'Compiles a YAML workflow definition against the registered contracts without storing anything. Returns {"ok": bool, "digest": "sha256:..."|null, "plan": {...}|null, "diagnostics": [{"code","severity","message","path","line","column"}]}; never raises for a bad definition.';
REVOKE ALL ON FUNCTION wfe.compile(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.compile(text) TO wfe_author;
