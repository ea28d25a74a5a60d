-- Privileges.  This file runs last, so it covers every function the files
-- before it created: nothing is callable by PUBLIC, and each role gets
-- EXECUTE on its functions only.  Internal functions (named wfe._*) are
-- granted to nobody; they run inside the SECURITY DEFINER ones.

REVOKE ALL ON ALL ROUTINES IN SCHEMA wfe FROM PUBLIC;

GRANT USAGE ON SCHEMA wfe
    TO wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_worker,
       wfe_operator, wfe_reader;

-- wfe_admin: the contract registry.
GRANT EXECUTE ON FUNCTION
    wfe.register_worker(text, text, jsonb, jsonb),
    wfe.register_action(text, regprocedure, text, jsonb, jsonb)
    TO wfe_admin;

-- wfe_author: compile and create definitions.
GRANT EXECUTE ON FUNCTION
    wfe.compile(text),
    wfe.create_definition(text)
    TO wfe_author;

-- wfe_approver: the lifecycle.
GRANT EXECUTE ON FUNCTION
    wfe.approve(text, text),
    wfe.activate(text, text)
    TO wfe_approver;

-- Whoever reviews or reads plans gets the picture.
GRANT EXECUTE ON FUNCTION wfe.plan_mermaid(text)
    TO wfe_author, wfe_approver, wfe_reader;

-- The registry and the plan tables are not tenant data: the roles that work
-- with definitions may read them with plain SQL.  Nobody but the functions
-- above writes them.
GRANT SELECT ON wfe.contracts, wfe.definitions, wfe.plan_stages, wfe.plan_edges
    TO wfe_admin, wfe_author, wfe_approver, wfe_operator, wfe_reader;
