-- Definition lifecycle: approve, activate (and so retire and roll back), and
-- the reviewer's picture.
--
-- With wfe.four_eyes on, a role may neither approve nor activate a version
-- it created (identities are wfe._identity(), see 00_schema.sql).  The setting
-- is only a safeguard if ordinary roles cannot turn it off for their own
-- session: the library defines it as a superuser-only GUC.

-- Whether the four-eyes rule is in force (wfe.four_eyes, default off).
CREATE FUNCTION wfe._four_eyes()
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NB: load the library first (a no-op once loaded, e.g. preloaded).  Until
    -- it is loaded wfe.four_eyes is a placeholder that any role may SET for
    -- its own session; loading it defines the real, superuser-only setting
    -- and discards such a value with a warning.
    LOAD 'MODULE_PATHNAME';
    RETURN current_setting('wfe.four_eyes')::boolean;
END
$$;

COMMENT ON FUNCTION wfe._four_eyes() IS
'True when wfe.four_eyes is on: the creator of a definition version may not approve or activate it.';
REVOKE ALL ON FUNCTION wfe._four_eyes() FROM PUBLIC;


CREATE FUNCTION wfe.approve(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- The row lock makes a concurrent second approval wait and then see
    -- the approved state.
    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state <> 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is %, not draft', $1, $2, d.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a draft can be approved.';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not approve it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must approve it.';
    END IF;

    UPDATE wfe.definitions AS x
       SET state = 'approved', approved_at = now(), approved_by = wfe._identity()
     WHERE x.definition_id = d.definition_id;
END
$$;

COMMENT ON FUNCTION wfe.approve(text, text) IS
'Approves a draft definition version (draft -> approved). With wfe.four_eyes on, not by the role that created it.';
REVOKE ALL ON FUNCTION wfe.approve(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.approve(text, text) TO wfe_approver;


CREATE FUNCTION wfe.activate(workflow text, version text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d wfe.definitions;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION 'workflow and version must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- NB: lock every version of the workflow, in definition_id order, before
    -- looking at states.  Two activations of the same workflow therefore run
    -- one after the other, and the second sees (READ COMMITTED: in its next
    -- statement's snapshot) the version the first activated; in REPEATABLE
    -- READ or SERIALIZABLE the second fails with a serialization error.
    -- NO KEY UPDATE: submits take a key-share lock on the version they pin
    -- (the runs foreign key), which must not wait for an activation.
    PERFORM FROM wfe.definitions AS x
      WHERE x.workflow = $1
      ORDER BY x.definition_id
        FOR NO KEY UPDATE;

    SELECT * INTO d
      FROM wfe.definitions AS x
     WHERE x.workflow = $1 AND x.version = $2;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow definition "%@%" does not exist', $1, $2
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.state = 'draft' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is draft, not approved', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Approve it first with wfe.approve().';
    ELSIF d.state = 'active' THEN
        RAISE EXCEPTION 'workflow definition "%@%" is already active', $1, $2
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF wfe._four_eyes() AND d.created_by = wfe._identity() THEN
        RAISE EXCEPTION 'role "%" created workflow definition "%@%" and may not activate it',
                wfe._identity(), $1, $2
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'wfe.four_eyes is on: another role must activate it.';
    END IF;

    -- The previous active version stops serving new runs; its runs drain on
    -- their pinned plan.  Retire first: at most one version is active.
    UPDATE wfe.definitions AS x
       SET state = 'retired', retired_at = now()
     WHERE x.workflow = $1 AND x.state = 'active';

    UPDATE wfe.definitions AS x
       SET state = 'active', activated_at = now(), retired_at = NULL
     WHERE x.definition_id = d.definition_id;
END
$$;

COMMENT ON FUNCTION wfe.activate(text, text) IS
'Makes an approved or retired definition version the active one of its workflow; the previously active version is retired for new runs. Activating an earlier version is the rollback.';
REVOKE ALL ON FUNCTION wfe.activate(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.activate(text, text) TO wfe_approver;


CREATE FUNCTION wfe.plan_mermaid(workflow text)
RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wf   text := $1;
    ver  text;
    p    jsonb;
BEGIN
    IF strpos($1, '@') > 0 THEN
        wf := split_part($1, '@', 1);
        ver := substr($1, strpos($1, '@') + 1);
        SELECT x.plan INTO p
          FROM wfe.definitions AS x
         WHERE x.workflow = wf AND x.version = ver;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'workflow definition "%" does not exist', $1
                USING ERRCODE = 'undefined_object';
        END IF;
    ELSE
        SELECT x.plan INTO p
          FROM wfe.definitions AS x
         WHERE x.workflow = wf AND x.state = 'active';
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM wfe.definitions AS x WHERE x.workflow = wf) THEN
                RAISE EXCEPTION 'workflow "%" has no active version', wf
                    USING ERRCODE = 'undefined_object',
                          HINT = format('Name a version: wfe.plan_mermaid(%L).', wf || '@VERSION');
            END IF;
            RAISE EXCEPTION 'workflow "%" does not exist', wf
                USING ERRCODE = 'undefined_object';
        END IF;
    END IF;
    RETURN wfe._plan_mermaid(p);
END
$$;

COMMENT ON FUNCTION wfe.plan_mermaid(text) IS
'Mermaid flowchart of a stored plan: ''name'' (its active version) or ''name@version'' (any state, so drafts can be reviewed).';
REVOKE ALL ON FUNCTION wfe.plan_mermaid(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.plan_mermaid(text) TO wfe_author, wfe_approver, wfe_reader;
