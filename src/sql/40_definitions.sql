-- Workflow definitions and their plan tables.
--
-- A definition version is stored once and never edited: only its lifecycle
-- columns change (draft -> approved -> active -> retired, and retired ->
-- active for a rollback).  Its plan is also spread over wfe.plan_stages and
-- wfe.plan_edges so that it can be queried with plain SQL; those rows never
-- change either.  DROP EXTENSION still works: dropping a table fires none of
-- the triggers below.

CREATE TABLE wfe.definitions (
    definition_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow         text NOT NULL,
    version          text NOT NULL,
    digest           text NOT NULL
                     CONSTRAINT definitions_digest_key UNIQUE
                     CONSTRAINT definitions_digest_format CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    state            text NOT NULL DEFAULT 'draft'
                     CONSTRAINT definitions_state
                     CHECK (state IN ('draft', 'approved', 'active', 'retired')),
    source           text NOT NULL,
    plan             jsonb NOT NULL
                     CONSTRAINT definitions_plan CHECK (jsonb_typeof(plan) = 'object'),
    dsl_version      text NOT NULL,
    compiler_version text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    created_by       name NOT NULL DEFAULT wfe._identity(),
    approved_at      timestamptz,
    approved_by      name,
    activated_at     timestamptz,
    retired_at       timestamptz,
    CONSTRAINT definitions_workflow_version_key UNIQUE (workflow, version),
    CONSTRAINT definitions_approval CHECK (
        (state = 'draft') = (approved_at IS NULL)
        AND (approved_at IS NULL) = (approved_by IS NULL)),
    CONSTRAINT definitions_activation CHECK (
        state NOT IN ('active', 'retired') OR activated_at IS NOT NULL),
    CONSTRAINT definitions_retirement CHECK ((state = 'retired') = (retired_at IS NOT NULL))
);

-- Exactly one version of a workflow serves new runs.
CREATE UNIQUE INDEX definitions_one_active
    ON wfe.definitions (workflow) WHERE state = 'active';

COMMENT ON TABLE wfe.definitions IS
'Workflow definition versions: source, compiled plan and digest (immutable), and lifecycle state draft -> approved -> active -> retired.';
GRANT SELECT ON wfe.definitions TO wfe_admin, wfe_author, wfe_approver, wfe_operator, wfe_reader;
COMMENT ON COLUMN wfe.definitions.workflow IS 'Workflow name (the definition''s name:)';
COMMENT ON COLUMN wfe.definitions.version IS 'Definition version (the definition''s version:)';
COMMENT ON COLUMN wfe.definitions.digest IS 'sha256: + hex SHA-256 of the canonical plan';
COMMENT ON COLUMN wfe.definitions.state IS 'draft, approved, active (serves new runs; one per workflow) or retired';
COMMENT ON COLUMN wfe.definitions.source IS 'YAML source as first created (a later identical-digest source is not stored)';
COMMENT ON COLUMN wfe.definitions.plan IS 'Compiled canonical plan';
COMMENT ON COLUMN wfe.definitions.created_by IS 'Who created the version (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.approved_by IS 'Who approved the version (wfe._identity(): session_user, or a handler''s registrant)';
COMMENT ON COLUMN wfe.definitions.activated_at IS 'Last time the version became active';
COMMENT ON COLUMN wfe.definitions.retired_at IS 'Time the version was retired; NULL unless state is retired';


-- Guards definition rows: only lifecycle columns change, only along legal
-- transitions, and an approval once recorded stays.
CREATE FUNCTION wfe._definitions_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    changed text[];
BEGIN
    SELECT array_agg(o.key ORDER BY o.key)
      INTO changed
      FROM jsonb_each(to_jsonb(OLD)) AS o
      JOIN jsonb_each(to_jsonb(NEW)) AS n ON n.key = o.key
     WHERE o.value IS DISTINCT FROM n.value
       AND o.key NOT IN ('state', 'approved_at', 'approved_by', 'activated_at', 'retired_at');
    IF changed IS NOT NULL THEN
        RAISE EXCEPTION 'cannot change % of workflow definition "%@%": stored definitions are immutable',
                array_to_string(changed, ', '), OLD.workflow, OLD.version
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Create a new version of the workflow definition instead.';
    END IF;

    IF NEW.state <> OLD.state
       AND (OLD.state, NEW.state) NOT IN (('draft', 'approved'), ('approved', 'active'),
                                          ('active', 'retired'), ('retired', 'active'))
    THEN
        RAISE EXCEPTION 'workflow definition "%@%" cannot go from % to %',
                OLD.workflow, OLD.version, OLD.state, NEW.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Definitions go draft -> approved -> active -> retired; a retired version can be activated again.';
    END IF;

    IF OLD.approved_at IS NOT NULL
       AND (NEW.approved_at IS DISTINCT FROM OLD.approved_at
            OR NEW.approved_by IS DISTINCT FROM OLD.approved_by)
    THEN
        RAISE EXCEPTION 'cannot change the approval of workflow definition "%@%"',
                OLD.workflow, OLD.version
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    RETURN NEW;
END
$$;

COMMENT ON FUNCTION wfe._definitions_guard() IS
'Trigger: on wfe.definitions only the lifecycle columns may change, along legal transitions (SQLSTATE 55000).';
REVOKE ALL ON FUNCTION wfe._definitions_guard() FROM PUBLIC;

CREATE TRIGGER definitions_guard
    BEFORE UPDATE ON wfe.definitions
    FOR EACH ROW
    EXECUTE FUNCTION wfe._definitions_guard();

CREATE TRIGGER definitions_immutable
    BEFORE DELETE OR TRUNCATE ON wfe.definitions
    FOR EACH STATEMENT
    EXECUTE FUNCTION wfe._immutable('stored definitions are immutable',
                                    'Retire a version by activating another one.');


CREATE TABLE wfe.plan_stages (
    definition_id bigint NOT NULL REFERENCES wfe.definitions,
    ordinal       int NOT NULL CONSTRAINT plan_stages_ordinal CHECK (ordinal >= 1),
    stage         text NOT NULL,
    type          text NOT NULL
                  CONSTRAINT plan_stages_type
                  CHECK (type IN ('action', 'worker', 'decision', 'fork', 'join', 'finaliser', 'wait', 'sleep',
                                 'workflow', 'map')),
    spec          jsonb NOT NULL,
    PRIMARY KEY (definition_id, stage),
    CONSTRAINT plan_stages_ordinal_key UNIQUE (definition_id, ordinal)
);

COMMENT ON TABLE wfe.plan_stages IS
'One row per stage (tasks form: per task) of a stored plan, then one per finaliser; immutable.';
GRANT SELECT ON wfe.plan_stages TO wfe_admin, wfe_author, wfe_approver, wfe_operator, wfe_reader;
COMMENT ON COLUMN wfe.plan_stages.ordinal IS '1-based position: declared stages or tasks first, then finalisers in declared order';
COMMENT ON COLUMN wfe.plan_stages.stage IS 'Stage name, task id, or finaliser.N';
COMMENT ON COLUMN wfe.plan_stages.type IS 'action, worker, decision, fork, join, wait, sleep, workflow, or finaliser';
COMMENT ON COLUMN wfe.plan_stages.spec IS 'The stage''s object from the compiled plan, every default explicit';

CREATE TABLE wfe.plan_edges (
    definition_id bigint NOT NULL,
    from_stage    text NOT NULL,
    to_stage      text NOT NULL,
    kind          text NOT NULL
                  CONSTRAINT plan_edges_kind
                  CHECK (kind IN ('success', 'failure', 'branch', 'evaluation_error',
                                  'fork', 'join', 'depends_on', 'timeout')),
    ordinal       int NOT NULL CONSTRAINT plan_edges_ordinal CHECK (ordinal >= 1),
    condition     text,
    to_terminal   boolean NOT NULL,
    PRIMARY KEY (definition_id, from_stage, kind, ordinal, to_stage),
    FOREIGN KEY (definition_id, from_stage) REFERENCES wfe.plan_stages (definition_id, stage),
    CONSTRAINT plan_edges_condition CHECK ((kind = 'branch') = (condition IS NOT NULL))
);

CREATE INDEX plan_edges_to_stage ON wfe.plan_edges (definition_id, to_stage);

COMMENT ON TABLE wfe.plan_edges IS
'Edges of a stored plan, one per reference in every edge namespace; immutable.';
GRANT SELECT ON wfe.plan_edges TO wfe_admin, wfe_author, wfe_approver, wfe_operator, wfe_reader;
COMMENT ON COLUMN wfe.plan_edges.kind IS
'success (on_success), failure (on_failure), branch (decision next), evaluation_error (on_evaluation_error), timeout (a wait''s on_timeout), fork (fork -> branch), join (required stage -> join), depends_on (dependency -> task)';
COMMENT ON COLUMN wfe.plan_edges.ordinal IS '1-based position in its list (branches, required, depends_on); 1 for single references';
COMMENT ON COLUMN wfe.plan_edges.condition IS 'The branch''s when expression (branch edges only)';
COMMENT ON COLUMN wfe.plan_edges.to_terminal IS 'to_stage is a terminal outcome (completed, failed, ...) rather than a stage';

CREATE TRIGGER plan_stages_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON wfe.plan_stages
    FOR EACH STATEMENT
    EXECUTE FUNCTION wfe._immutable('stored plans are immutable',
                                    'Create a new version of the workflow definition instead.');

CREATE TRIGGER plan_edges_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON wfe.plan_edges
    FOR EACH STATEMENT
    EXECUTE FUNCTION wfe._immutable('stored plans are immutable',
                                    'Create a new version of the workflow definition instead.');

-- Definitions are user data: pg_dump dumps them.
SELECT pg_catalog.pg_extension_config_dump('wfe.definitions', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.definitions_definition_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.plan_stages', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.plan_edges', '');


-- Spreads a compiled plan over wfe.plan_stages and wfe.plan_edges.
CREATE FUNCTION wfe._store_plan(p_definition_id bigint, p_plan jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO wfe.plan_stages (definition_id, ordinal, stage, type, spec)
    SELECT p_definition_id, s.ordinality, s.value ->> 'name', s.value ->> 'type', s.value
      FROM jsonb_array_elements(p_plan -> 'stages') WITH ORDINALITY AS s
    UNION ALL
    SELECT p_definition_id, jsonb_array_length(p_plan -> 'stages') + f.ordinality,
           f.value ->> 'name', 'finaliser', f.value
      FROM jsonb_array_elements(coalesce(p_plan -> 'finalisers', '[]')) WITH ORDINALITY AS f;

    INSERT INTO wfe.plan_edges (definition_id, from_stage, to_stage, kind, ordinal,
                                condition, to_terminal)
    WITH st AS (
        SELECT s.value AS spec, s.value ->> 'name' AS name, s.value ->> 'type' AS type
          FROM jsonb_array_elements(p_plan -> 'stages') AS s
    ), e (from_stage, to_stage, kind, ordinal, condition) AS (
        SELECT st.name, st.spec ->> 'on_success', 'success', 1::bigint, NULL::text
          FROM st WHERE st.spec ->> 'on_success' IS NOT NULL
        UNION ALL
        SELECT st.name, st.spec ->> 'on_failure', 'failure', 1, NULL
          FROM st WHERE st.spec ->> 'on_failure' IS NOT NULL
        UNION ALL
        SELECT st.name, b.value ->> 'next', 'branch', b.ordinality, b.value ->> 'when'
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'decision'
                                             THEN st.spec -> 'branches' ELSE '[]' END)
                   WITH ORDINALITY AS b
        UNION ALL
        SELECT st.name, st.spec ->> 'on_evaluation_error', 'evaluation_error', 1, NULL
          FROM st WHERE st.spec ->> 'on_evaluation_error' IS NOT NULL
        UNION ALL
        SELECT st.name, st.spec ->> 'on_timeout', 'timeout', 1, NULL
          FROM st WHERE st.spec ->> 'on_timeout' IS NOT NULL
        UNION ALL
        SELECT st.name, b.value #>> '{}', 'fork', b.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'fork'
                                             THEN st.spec -> 'branches' ELSE '[]' END)
                   WITH ORDINALITY AS b
        UNION ALL
        SELECT r.value #>> '{}', st.name, 'join', r.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN st.type = 'join'
                                             THEN st.spec -> 'required' ELSE '[]' END)
                   WITH ORDINALITY AS r
        UNION ALL
        SELECT d.value #>> '{}', st.name, 'depends_on', d.ordinality, NULL
          FROM st, jsonb_array_elements(CASE WHEN jsonb_typeof(st.spec -> 'depends_on') = 'array'
                                             THEN st.spec -> 'depends_on' ELSE '[]' END)
                   WITH ORDINALITY AS d
    )
    SELECT p_definition_id, e.from_stage, e.to_stage, e.kind, e.ordinal, e.condition,
           NOT EXISTS (SELECT FROM st WHERE st.name = e.to_stage)
      FROM e;
END
$$;

COMMENT ON FUNCTION wfe._store_plan(bigint, jsonb) IS
'Fills wfe.plan_stages and wfe.plan_edges from a compiled plan (called by wfe.create_definition).';
REVOKE ALL ON FUNCTION wfe._store_plan(bigint, jsonb) FROM PUBLIC;


CREATE FUNCTION wfe.create_definition(source text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_result jsonb;
    v_plan   jsonb;
    v_digest text;
    n        int;
    new_id   bigint;
    stored   text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'workflow definition source must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    v_result := wfe._compile($1, wfe._contracts_json());
    IF NOT coalesce((v_result ->> 'ok')::boolean, false) THEN
        n := jsonb_array_length(v_result -> 'diagnostics');
        RAISE EXCEPTION 'workflow definition is invalid: % %', n,
                CASE WHEN n = 1 THEN 'diagnostic' ELSE 'diagnostics' END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = (v_result -> 'diagnostics')::text,
                  HINT = 'wfe.compile(source) returns the same diagnostics without raising.';
    END IF;
    v_plan := v_result -> 'plan';
    v_digest := v_result ->> 'digest';

    -- ON CONFLICT waits for a concurrent creator of the same version, so of
    -- two sessions creating it at once exactly one inserts.  No conflict
    -- target: the digest names the workflow and version, so a clash on
    -- either unique key is the same definition, and both keys must arbitrate
    -- (a non-arbiter unique index would raise instead of waiting).
    INSERT INTO wfe.definitions AS d
           (workflow, version, digest, state, source, plan, dsl_version,
            compiler_version, created_at, created_by)
    VALUES (v_plan ->> 'name', v_plan ->> 'version', v_digest, 'draft', $1, v_plan,
            v_plan ->> 'dsl_version', v_plan ->> 'compiler_version', now(), wfe._identity())
    ON CONFLICT DO NOTHING
    RETURNING d.definition_id INTO new_id;

    IF new_id IS NULL THEN
        SELECT d.digest INTO STRICT stored
          FROM wfe.definitions AS d
         WHERE d.workflow = v_plan ->> 'name' AND d.version = v_plan ->> 'version';
        IF stored = v_digest THEN
            RETURN v_digest;    -- the same definition again: nothing to do
        END IF;
        RAISE EXCEPTION 'workflow definition "%@%" already exists with a different digest',
                v_plan ->> 'name', v_plan ->> 'version'
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('The stored version has digest %s; this source compiles to %s.',
                                  stored, v_digest),
                  HINT = 'A stored definition version is immutable: give the changed definition a new version.';
    END IF;

    PERFORM wfe._store_plan(new_id, v_plan);
    RETURN v_digest;
END
$$;

COMMENT ON FUNCTION wfe.create_definition(text) IS
'Compiles a YAML definition and stores it as a new immutable draft version with its plan tables; returns the digest. The same name, version and digest again is a no-op; the same name and version with another digest raises 23505; an invalid definition raises 22023 with the diagnostics as JSON in DETAIL.';
REVOKE ALL ON FUNCTION wfe.create_definition(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.create_definition(text) TO wfe_author;
