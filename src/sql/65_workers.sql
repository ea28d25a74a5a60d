-- The worker protocol: claim, accept, heartbeat, complete, fail (docs: runtime.md).
--
-- Every callback names (run, stage, attempt, fence) and is answered with one
-- outcome word.  The checks run in a fixed order -- unknown, duplicate or
-- conflict, late, stale, invalid_result, accepted -- and every rejected
-- callback leaves an event row and changes nothing else.  The callbacks are
-- C (src/pg/engine.c): the gate and the transition are the step core's.

CREATE FUNCTION wfe.claim_task(queue text, worker_id text, max_tasks int DEFAULT 1, lease_ms int DEFAULT NULL)
RETURNS SETOF wfe.task
AS 'MODULE_PATHNAME', 'wfe_claim_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.claim_task(text, text, int, int) IS
'Claims up to max_tasks ready tasks of a poll queue (SKIP LOCKED, highest priority then oldest), marks them running with an execution deadline.';
REVOKE ALL ON FUNCTION wfe.claim_task(text, text, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.claim_task(text, text, int, int) TO wfe_worker;

CREATE FUNCTION wfe.ready_tag(queue text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_ready_tag_sql'
LANGUAGE C STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.ready_tag(text) IS
'The payload a wfe_task_ready notification carries for a poll queue the caller may claim from (a keyed tag: the name is never sent); 42501 for any other queue.';
REVOKE ALL ON FUNCTION wfe.ready_tag(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.ready_tag(text) TO wfe_worker;

CREATE FUNCTION wfe.accept_task(run_id bigint, stage text, attempt int, fence bigint, worker_id text,
                                lease_ms int DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_accept_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) IS
'Acceptance handshake for a pushed dispatch: the first call starts the attempt, under lease_ms (renewed by heartbeats) if given; a redelivery answers duplicate.';
REVOKE ALL ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.accept_task(bigint, text, int, bigint, text, int) TO wfe_worker;

CREATE FUNCTION wfe.heartbeat(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_heartbeat'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) IS
'Records that a running attempt is alive, pushing out its heartbeat deadline; late or stale tells the worker to stop.';
REVOKE ALL ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.heartbeat(bigint, text, int, bigint) TO wfe_worker;

CREATE FUNCTION wfe.complete_task(run_id bigint, stage text, attempt int, fence bigint,
                                  result jsonb DEFAULT '{}')
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_complete_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) IS
'Reports an attempt''s result: accepted, duplicate, conflict, stale, late, invalid_result or unknown.';
REVOKE ALL ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.complete_task(bigint, text, int, bigint, jsonb) TO wfe_worker;

CREATE FUNCTION wfe.fail_task(run_id bigint, stage text, attempt int, fence bigint, error jsonb DEFAULT '{}',
                              retryable boolean DEFAULT true)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_fail_task'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) IS
'Reports a failed attempt: retried after a backoff while attempts remain (if retryable), else the stage fails and routes on.';
REVOKE ALL ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.fail_task(bigint, text, int, bigint, jsonb, boolean) TO wfe_worker;

-- Batch reports: many completions in one call and one transaction, each
-- through the same gate as wfe.complete_task.  Runs are locked in run_id
-- (then stage) order whatever the order of the array, so two batches that
-- share runs cannot deadlock; the answers come back in that order.
CREATE FUNCTION wfe.complete_tasks(reports jsonb)
RETURNS TABLE (run_id bigint, stage text, outcome text)
AS 'MODULE_PATHNAME', 'wfe_complete_tasks'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.complete_tasks(jsonb) IS
'Reports many completed attempts in one transaction ([{"run_id","stage","attempt","fence","result"}, ...]); one outcome per report, in run_id order.';
REVOKE ALL ON FUNCTION wfe.complete_tasks(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.complete_tasks(jsonb) TO wfe_worker;

-- A pushed worker acknowledges a cooperative cancellation request: the
-- gate is the core's (src/core/engine/cancel_ack.c), the record
-- src/pg/cancel_ack.c's.  Who may call back is the callbacks' rule.
CREATE FUNCTION wfe.ack_cancel(run_id bigint, stage text, attempt int, fence bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_ack_cancel'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) IS
'Records a worker''s acknowledgement of a cooperative cancellation request.';
REVOKE ALL ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.ack_cancel(bigint, text, int, bigint) TO wfe_worker;
