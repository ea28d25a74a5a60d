-- Who may serve a queue (docs: operations.md "Security model").
--
-- wfe_worker may call the worker functions; which queues a role may claim
-- from, accept on and report for is granted per queue, to a role (a login
-- role, or a group such as wfe_worker itself).  The check is C
-- (src/pg/grants.c), cached per backend; this table's trigger tells every
-- backend to drop its cache when the grants change.

CREATE TABLE wfe.queue_grants (
    queue      wfe.queue_name NOT NULL,
    role       regrole NOT NULL,
    granted_by name NOT NULL DEFAULT wfe._identity(),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, role)
);
COMMENT ON TABLE wfe.queue_grants IS
'Which roles may claim from, accept on and report for each queue (wfe.grant_queue, wfe.revoke_queue); superusers and wfe_admin always may.';
GRANT SELECT ON wfe.queue_grants TO wfe_admin, wfe_operator, wfe_reader;

CREATE FUNCTION wfe._queue_grants_changed()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_queue_grants_changed' LANGUAGE C;
COMMENT ON FUNCTION wfe._queue_grants_changed() IS
'Trigger: every backend drops its cached queue grants when this transaction commits.';
REVOKE ALL ON FUNCTION wfe._queue_grants_changed() FROM PUBLIC;
CREATE TRIGGER queue_grants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wfe.queue_grants
    FOR EACH STATEMENT EXECUTE FUNCTION wfe._queue_grants_changed();

-- The callbacks' rule of who may call back (src/pg/grants.c), for fetch_payload.
CREATE FUNCTION wfe._may_call_back(queue text, tenant text, handler boolean, run_id bigint, stage text, what text)
RETURNS boolean AS 'MODULE_PATHNAME', 'wfe_may_call_back_sql' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION wfe._may_call_back(text, text, boolean, bigint, text, text) IS
'Whether the session''s role may call back about a stage: true if it serves the queue; false (answer unknown) if it neither serves it nor acts for the tenant; else 42501.';
REVOKE ALL ON FUNCTION wfe._may_call_back(text, text, boolean, bigint, text, text) FROM PUBLIC;

-- Check a grant's arguments: a real role (not PUBLIC) and a queue name.
CREATE FUNCTION wfe._check_queue_grant(p_role regrole, p_queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR p_queue IS NULL THEN
        RAISE EXCEPTION 'role and queue must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_role = 0 THEN
        RAISE EXCEPTION 'a queue cannot be granted to PUBLIC'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Grant it to a role, e.g. wfe_worker for every worker, or one login role per worker pool.';
    END IF;
    PERFORM wfe._check_queue_name(p_queue);
END
$$;
COMMENT ON FUNCTION wfe._check_queue_grant(regrole, text) IS
'Raises 22004 or 22023 unless role is a real role and queue a valid queue name.';
REVOKE ALL ON FUNCTION wfe._check_queue_grant(regrole, text) FROM PUBLIC;

CREATE FUNCTION wfe.grant_queue(role regrole, queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_queue_grant(grant_queue.role, grant_queue.queue);
    INSERT INTO wfe.queue_grants (queue, role) VALUES (grant_queue.queue, grant_queue.role)
    ON CONFLICT DO NOTHING;
END
$$;
COMMENT ON FUNCTION wfe.grant_queue(regrole, text) IS
'Lets role (and every role with its privileges) claim from, accept on and report for queue. Idempotent.';
REVOKE ALL ON FUNCTION wfe.grant_queue(regrole, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.grant_queue(regrole, text) TO wfe_admin;

CREATE FUNCTION wfe.revoke_queue(role regrole, queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM wfe._check_queue_grant(revoke_queue.role, revoke_queue.queue);
    DELETE FROM wfe.queue_grants AS g WHERE g.queue = revoke_queue.queue AND g.role = revoke_queue.role;
END
$$;
COMMENT ON FUNCTION wfe.revoke_queue(regrole, text) IS
'Takes back a grant_queue; attempts the role holds can no longer be reported by it. Idempotent.';
REVOKE ALL ON FUNCTION wfe.revoke_queue(regrole, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.revoke_queue(regrole, text) TO wfe_admin;
