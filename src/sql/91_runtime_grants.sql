-- Privileges of the runtime (after 90_grants.sql revoked everything from PUBLIC).

GRANT EXECUTE ON FUNCTION
    wfe.submit(text, jsonb, text, jsonb),
    wfe.cancel_run(bigint, text),
    wfe.report(bigint),
    wfe.run_timeline(bigint),
    wfe.run_mermaid(bigint)
    TO wfe_submitter;

GRANT EXECUTE ON FUNCTION
    wfe.claim_task(text, text, int, int),
    wfe.accept_task(bigint, text, int, bigint, text),
    wfe.heartbeat(bigint, text, int, bigint),
    wfe.complete_task(bigint, text, int, bigint, jsonb),
    wfe.fail_task(bigint, text, int, bigint, jsonb, boolean),
    wfe.complete_tasks(jsonb)
    TO wfe_worker;

GRANT EXECUTE ON FUNCTION
    wfe.tick(int),
    wfe.cancel_run(bigint, text),
    wfe.report(bigint),
    wfe.run_timeline(bigint)
    TO wfe_operator;

GRANT EXECUTE ON FUNCTION
    wfe.report(bigint),
    wfe.run_timeline(bigint),
    wfe.run_mermaid(bigint),
    wfe.stage_transitions(),
    wfe.run_transitions()
    TO wfe_reader, wfe_operator;

GRANT SELECT ON wfe.runs, wfe.outputs, wfe.dead_letters, wfe.queues
    TO wfe_reader, wfe_operator;
-- Fences are capabilities: only the claim and the envelope carry them
-- (operations.md "Security model").  The readers' roles may select every
-- column of these tables but the ones holding fences: the fence columns,
-- and the outbox's headers and body (a dispatch's envelope).
GRANT SELECT (run_id, stage, tenant, ordinal, kind, state, attempt, queue, worker, handler, priority,
              awaits, branch, input, result, error, outcome, skip_reason, exec_ms, queue_ms,
              heartbeat_ms, ready_at, claimed_by, started_at, heartbeat_at, deadline_at, finished_at,
              lease_ms, cache_key, cache)
    ON wfe.run_stages TO wfe_reader, wfe_operator;
GRANT SELECT (event_id, run_id, tenant, stage, attempt, type, at, detail)
    ON wfe.events TO wfe_reader, wfe_operator;
GRANT SELECT (timer_id, tenant, run_id, stage, attempt, kind, due_at, fired_at)
    ON wfe.timers TO wfe_reader, wfe_operator;
GRANT SELECT (id, tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, state,
              attempts, last_error, available_at, claimed_by, claimed_at, created_at, published_at)
    ON wfe.outbox TO wfe_reader, wfe_operator;
-- Unauthenticated signed callbacks are nobody's tenant's: the operators see them.
GRANT SELECT ON wfe.unauthenticated_callbacks TO wfe_admin, wfe_operator;

GRANT EXECUTE ON FUNCTION
    wfe.fetch_payload(jsonb),
    wfe.ack_cancel(bigint, text, int, bigint)
    TO wfe_worker;

GRANT EXECUTE ON FUNCTION
    wfe.configure_queue(text, text, int, boolean),
    wfe.grant_queue(regrole, text),
    wfe.revoke_queue(regrole, text)
    TO wfe_admin;
GRANT SELECT ON wfe.queue_grants TO wfe_admin, wfe_operator, wfe_reader;
-- wfe_admin sets the queues' modes and limits, so it may read them.
GRANT SELECT ON wfe.queues TO wfe_admin;

-- Pausing and resuming a queue is the operator's (spec operations.md
-- "Roles"); configure_queue, which also sets the mode and the limit, is not.
GRANT EXECUTE ON FUNCTION
    wfe.pause_queue(text),
    wfe.resume_queue(text)
    TO wfe_admin, wfe_operator;

GRANT EXECUTE ON FUNCTION
    wfe.outbox_claim(int, text),
    wfe.outbox_ack(bigint[], text)
    TO wfe_admin, wfe_operator;

GRANT EXECUTE ON FUNCTION wfe.worker_status() TO wfe_reader, wfe_operator;

-- Tenants: wfe_admin maps roles to them; every wfe role may ask which
-- tenants it acts for (the row-level security policies ask it too).
GRANT EXECUTE ON FUNCTION
    wfe.add_tenant_member(regrole, text),
    wfe.remove_tenant_member(regrole, text)
    TO wfe_admin;
GRANT EXECUTE ON FUNCTION wfe.my_tenants()
    TO wfe_admin, wfe_author, wfe_approver, wfe_submitter, wfe_worker, wfe_operator, wfe_reader;
GRANT SELECT ON wfe.tenant_members TO wfe_admin;

-- The dashboards (70_dashboards.sql): security_invoker views over the tables
-- above, the publisher's health and the tenant limits, and their two helpers.
GRANT SELECT ON wfe.dashboard_runs, wfe.dashboard_queues, wfe.dashboard_outbox, wfe.dashboard_stages,
                wfe.dashboard_tenants, wfe.idempotency, wfe.dashboard_stuck,
                wfe.publisher_lease, wfe.tenant_limits, wfe.dashboard_cache, wfe.cache_entries
    TO wfe_reader, wfe_operator;
GRANT EXECUTE ON FUNCTION wfe.bar(double precision, int), wfe.human_ms(double precision)
    TO wfe_reader, wfe_operator;

GRANT EXECUTE ON FUNCTION wfe.configure_tenant(text, int, int) TO wfe_admin;

-- Recovery (71_recovery.sql): the operator's actions.
GRANT EXECUTE ON FUNCTION
    wfe.redrive(bigint, text, text),
    wfe.skip_stage(bigint, text, jsonb, text),
    wfe.fail_stage(bigint, text, text),
    wfe.redispatch(bigint, text, text),
    wfe.replay(bigint, text),
    wfe.redrive_dead_letters(text, timestamptz, text),
    wfe.cache_invalidate(text, text, text)
    TO wfe_operator;

-- Signed callbacks: the gateway's login is a wfe_worker; the keys are
-- wfe_admin's alone (operations.md "Signed callbacks").
GRANT EXECUTE ON FUNCTION wfe.callback(text, text) TO wfe_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON wfe.callback_keys TO wfe_admin;
