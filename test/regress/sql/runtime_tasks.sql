--
-- The tasks form at run time (seed 002; runtime.md "Tasks form"): dependency
-- release, a non-critical failure skipping only its dependents
-- (dependency_failed), a critical failure aborting the run (run_aborted,
-- running tasks fenced), context gating (context_gated), missing outputs
-- (missing_input), declared produces checked against results
-- (invalid_result), write-once outputs, and awaits: false.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- One worker contract (and queue) per task, so each can be claimed by name.
SELECT wfe.register_worker('rt-tk.' || t || '@1', 'rt-tk-' || t)
  FROM unnest(ARRAY['verify', 'fetch', 'apply', 'restore', 'hydrate', 'splash', 'prefetch', 'record',
                    'telemetry']) AS t;

-- examples/system-initialization.yaml, renamed, with a dependent of the
-- non-critical task (apply_configuration), a context-gated task and two
-- dependents of it that allow a skipped dependency, and a task the run does
-- not wait for.
SELECT wfe.create_definition($yaml$
name: sysinit-test
version: "1.0.0"
context: foreground_app
tasks:
  - id: verify_storage
    description: "Verifies local disk read/write availability"
    worker: rt-tk.verify@1
    queue: rt-tk-verify
    critical: true
    awaits: true

  - id: fetch_configuration
    description: "Downloads global remote runtime configuration"
    worker: rt-tk.fetch@1
    queue: rt-tk-fetch
    depends_on: [verify_storage]
    critical: false
    awaits: true
    produces:
      - key: app_config
        type: ConfigObject

  - id: apply_configuration
    worker: rt-tk.apply@1
    queue: rt-tk-apply
    depends_on: [fetch_configuration]
    critical: false
    requires_outputs:
      - producer_task_id: fetch_configuration
        key: app_config
    input: { config: "${outputs.fetch_configuration.app_config}" }

  - id: restore_session
    description: "Attempts to decrypt and restore a previous user session"
    worker: rt-tk.restore@1
    queue: rt-tk-restore
    depends_on: [verify_storage]
    critical: true
    awaits: true
    produces:
      - key: user_session
        type: SessionObject

  - id: hydrate_user_profile
    description: "Uses the restored session to populate profile data"
    worker: rt-tk.hydrate@1
    queue: rt-tk-hydrate
    depends_on: [restore_session]
    critical: true
    awaits: true
    requires_outputs:
      - producer_task_id: restore_session
        key: user_session
    input: { session: "${outputs.restore_session.user_session}", run: "${run.workflow}" }

  - id: show_splash
    worker: rt-tk.splash@1
    queue: rt-tk-splash
    contexts: [foreground_app]
    critical: false
    produces:
      - key: splash_id
        type: string

  - id: prefetch_assets
    worker: rt-tk.prefetch@1
    queue: rt-tk-prefetch
    depends_on: [show_splash]
    dependency_policy: allow_skipped
    critical: false

  - id: record_splash
    worker: rt-tk.record@1
    queue: rt-tk-record
    depends_on: [show_splash]
    dependency_policy: allow_skipped
    critical: false
    requires_outputs:
      - producer_task_id: show_splash
        key: splash_id
    input: { splash: "${outputs.show_splash.splash_id}" }

  - id: send_telemetry
    worker: rt-tk.telemetry@1
    queue: rt-tk-telemetry
    depends_on: [verify_storage]
    critical: false
    awaits: false
$yaml$) LIKE 'sha256:%' AS created;
SELECT wfe.approve('sysinit-test', '1.0.0');
SELECT wfe.activate('sysinit-test', '1.0.0');
SELECT stage, type, spec -> 'depends_on' AS depends_on, spec -> 'critical' AS critical,
       spec -> 'awaits' AS awaits, spec -> 'contexts' AS contexts
  FROM wfe.plan_stages
 WHERE definition_id = (SELECT definition_id FROM wfe.definitions WHERE workflow = 'sysinit-test')
 ORDER BY ordinal;

CREATE FUNCTION pg_temp.tasks(p_run bigint)
RETURNS TABLE (task text, state text, attempt int, skip_reason text, error text)
LANGUAGE sql AS $$
SELECT s.stage, s.state, s.attempt, s.skip_reason, s.error ->> 'code'
  FROM wfe.run_stages AS s WHERE s.run_id = p_run ORDER BY s.ordinal
$$;
CREATE FUNCTION pg_temp.run(p_run bigint)
RETURNS TABLE (state text, intent text, reason text, context text)
LANGUAGE sql AS $$
SELECT r.state, r.intent, r.reason, r.execution_context FROM wfe.runs AS r WHERE r.run_id = p_run
$$;
-- Claim the task of a queue ('rt-tk-' || name) and complete it.
CREATE FUNCTION pg_temp.work(p_name text, p_result jsonb DEFAULT '{}')
RETURNS TABLE (task text, input jsonb, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task('rt-tk-' || p_name, 'w-tk') LOOP
        task := t.stage;
        input := t.input;
        outcome := wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, p_result);
        RETURN NEXT;
    END LOOP;
END
$$;
-- Claim it and fail it (not retryable).
CREATE FUNCTION pg_temp.fail(p_name text)
RETURNS TABLE (task text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t wfe.task;
BEGIN
    FOR t IN SELECT * FROM wfe.claim_task('rt-tk-' || p_name, 'w-tk') LOOP
        task := t.stage;
        outcome := wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "init.failed"}', false);
        RETURN NEXT;
    END LOOP;
END
$$;
-- What is ready to claim, per task queue.
CREATE FUNCTION pg_temp.ready()
RETURNS text LANGUAGE sql AS $$
SELECT coalesce(string_agg(s.stage, ' ' ORDER BY s.stage), '(nothing)')
  FROM wfe.run_stages AS s WHERE s.queue LIKE 'rt-tk-%' AND s.state = 'queued'
$$;

--
-- 1. Everything succeeds (the definition's context, foreground_app).
--
SELECT run_id AS ok FROM wfe.submit('sysinit-test') \gset
SELECT * FROM pg_temp.run(:ok);
-- the tasks without dependencies are released
SELECT pg_temp.ready();
SELECT * FROM pg_temp.work('verify');
SELECT pg_temp.ready();
SELECT * FROM pg_temp.work('splash', '{"splash_id": "s-1"}');
SELECT pg_temp.ready();
-- produces is checked: a result without the declared output, or with a
-- value of another type, is an invalid result (and the attempt is retried)
SELECT task.stage, wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence, '{"session": {}}')
  FROM wfe.claim_task('rt-tk-restore', 'w-tk') AS task;
SELECT state, attempt, error FROM wfe.run_stages WHERE run_id = :ok AND stage = 'restore_session';
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE run_id = :ok AND kind = 'retry';
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT task.stage, task.attempt,
       wfe.complete_task(task.run_id, task.stage, task.attempt, task.fence, '{"user_session": "u-1"}')
  FROM wfe.claim_task('rt-tk-restore', 'w-tk') AS task;
SELECT state, attempt, error FROM wfe.run_stages WHERE run_id = :ok AND stage = 'restore_session';
UPDATE wfe.timers SET due_at = now() - interval '1 s' WHERE run_id = :ok AND kind = 'retry' AND fired_at IS NULL;
SELECT wfe.tick() IS NOT NULL AS ticked;
SELECT * FROM pg_temp.work('restore', '{"user_session": {"user": "u-1", "token": "t"}, "extra": 1}');
-- the dependent's input carries the output it declared
SELECT * FROM pg_temp.work('hydrate', '{}');
SELECT * FROM pg_temp.work('fetch', '{"app_config": {"theme": "dark"}}');
SELECT * FROM pg_temp.work('apply');
SELECT * FROM pg_temp.work('prefetch');
SELECT * FROM pg_temp.work('record');
-- every awaited task is done: the run completed, although send_telemetry
-- (awaits: false) is still queued
SELECT * FROM pg_temp.run(:ok);
SELECT * FROM pg_temp.tasks(:ok);
-- outputs: exactly the declared keys, written once
SELECT task, key, value FROM wfe.outputs WHERE run_id = :ok ORDER BY task, key;
SELECT wfe.report(:ok) -> 'outputs' AS outputs;
UPDATE wfe.outputs SET value = '"s-2"' WHERE run_id = :ok AND task = 'show_splash';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM wfe.outputs WHERE run_id = :ok;
\echo :LAST_ERROR_SQLSTATE
-- the task the run did not wait for goes on after the run completed: its
-- report is accepted (and changes nothing else of the finished run)
SELECT * FROM pg_temp.work('telemetry');
SELECT pg_temp.ready();

--
-- 2. A non-critical task fails: only its dependents are skipped
--    (dependency_failed); the rest goes on and the run completes.
--
SELECT run_id AS soft FROM wfe.submit('sysinit-test') \gset
SELECT * FROM pg_temp.work('verify');
SELECT * FROM pg_temp.work('splash', '{"splash_id": "s-2"}');
SELECT * FROM pg_temp.fail('fetch');
SELECT * FROM pg_temp.tasks(:soft);
SELECT pg_temp.ready();
SELECT * FROM pg_temp.work('restore', '{"user_session": {"user": "u-2"}}');
SELECT * FROM pg_temp.work('hydrate');
SELECT * FROM pg_temp.work('prefetch');
SELECT * FROM pg_temp.work('record');
SELECT * FROM pg_temp.run(:soft);
SELECT * FROM pg_temp.tasks(:soft);
SELECT * FROM pg_temp.work('telemetry');

--
-- 3. A critical task fails: the run aborts.  Unstarted tasks are skipped
--    (run_aborted), tasks in flight are fenced and their later callbacks are
--    late, nothing more is dispatched.
--
SELECT run_id AS hard FROM wfe.submit('sysinit-test') \gset
SELECT * FROM pg_temp.work('verify');
SELECT pg_temp.ready();
-- fetch_configuration is running when restore_session fails
SELECT task.stage, task.attempt, task.fence FROM wfe.claim_task('rt-tk-fetch', 'w-tk') AS task \gset fetch_
SELECT * FROM pg_temp.fail('restore');
SELECT * FROM pg_temp.run(:hard);
SELECT * FROM pg_temp.tasks(:hard);
SELECT stage, s.fence >> 32 AS fence_gen, detail -> 'was' AS was, detail -> 'cancel_requested' AS cancel_requested
  FROM wfe.run_stages AS s JOIN wfe.events AS e USING (run_id, stage)
 WHERE run_id = :hard AND e.type = 'stage.cancelled' ORDER BY stage;
SELECT wfe.complete_task(:hard, :'fetch_stage', :fetch_attempt, :fetch_fence, '{"app_config": {}}');
SELECT count(*) AS outputs FROM wfe.outputs WHERE run_id = :hard;
-- nothing of the aborted run can be claimed
SELECT pg_temp.ready();

--
-- 4. Context gating: run in the background_worker context, show_splash
--    (contexts: [foreground_app]) is skipped before anything is resolved or
--    dispatched for it.  prefetch_assets allows a skipped dependency and
--    runs; record_splash also allows it, but the output it requires is
--    missing (missing_input).
--
SELECT run_id AS bg FROM wfe.submit('sysinit-test', '{}', NULL, '{"execution_context": "background_worker"}') \gset
SELECT * FROM pg_temp.run(:bg);
SELECT * FROM pg_temp.tasks(:bg);
SELECT count(*) AS claimable FROM wfe.claim_task('rt-tk-splash', 'w-tk');
SELECT type, stage, detail FROM wfe.events WHERE run_id = :bg AND stage IN ('show_splash', 'record_splash') ORDER BY event_id;
SELECT * FROM pg_temp.work('prefetch');
SELECT * FROM pg_temp.work('verify');
SELECT * FROM pg_temp.work('fetch', '{"app_config": {}}');
SELECT * FROM pg_temp.work('apply');
SELECT * FROM pg_temp.work('restore', '{"user_session": {}}');
SELECT * FROM pg_temp.work('hydrate');
SELECT * FROM pg_temp.run(:bg);
SELECT * FROM pg_temp.tasks(:bg);
SELECT s ->> 'stage' AS task, s ->> 'status' AS status, s ->> 'skip_reason' AS skip_reason
  FROM jsonb_array_elements(wfe.report(:bg) -> 'stages') AS s;
SELECT * FROM pg_temp.work('telemetry');

-- Nothing of this file is left to claim.
SELECT pg_temp.ready();
