-- The child-workflow benchmark's schema (bench/children/children.sh), in
-- the bench database, which has wfe.
\set ON_ERROR_STOP on

-- One worker contract on queue bench-children; the workflows:
--   bench-child:  one worker stage (the reusable child);
--   bench-parent: one workflow stage calling bench-child (so a run is the
--     parent's release, a child run, its worker stage, the child's end
--     reaching the parent through a child_ended timer, the parent's end);
--   bench-two:    two worker stages in a line (the same two units of work
--     without a child run: the baseline).
SELECT wfe.register_worker('bench.child@1', 'bench-children');
SELECT wfe.create_definition($y$
name: bench-child
version: "1.0.0"
context_schema: {type: object, properties: {x: {type: integer}}}
entry: work
stages:
  - name: work
    type: worker
    queue: bench-children
    worker: bench.child@1
    input: { x: "${context.x}" }
    on_success: completed
    on_failure: failed
$y$), wfe.approve('bench-child', '1.0.0'), wfe.activate('bench-child', '1.0.0');
SELECT wfe.create_definition($y$
name: bench-parent
version: "1.0.0"
entry: call
stages:
  - name: call
    type: workflow
    workflow: bench-child
    input: { x: "${context.x}" }
    on_success: completed
    on_failure: failed
$y$), wfe.approve('bench-parent', '1.0.0'), wfe.activate('bench-parent', '1.0.0');
SELECT wfe.create_definition($y$
name: bench-two
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: bench-children
    worker: bench.child@1
    input: { x: "${context.x}" }
    on_success: second
    on_failure: failed
  - name: second
    type: worker
    queue: bench-children
    worker: bench.child@1
    input: { x: "${context.x}" }
    on_success: completed
    on_failure: failed
$y$), wfe.approve('bench-two', '1.0.0'), wfe.activate('bench-two', '1.0.0');

-- Work queue bench-children until p_runs runs of p_workflow are completed:
-- claim one task, complete it, commit; when none is queued (a child's end
-- is on its way to the parent through the background worker's timer),
-- sleep a millisecond.  Dies when a run failed.
CREATE PROCEDURE bench_children_drain(p_workflow text, p_runs int)
LANGUAGE plpgsql
AS $$
DECLARE
    t       record;
    v_n     int;
BEGIN
    LOOP
        v_n := 0;
        FOR t IN SELECT * FROM wfe.claim_task('bench-children', 'bench', 1) LOOP
            PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence);
            v_n := v_n + 1;
        END LOOP;
        COMMIT;
        IF v_n = 0 THEN
            EXIT WHEN (SELECT count(*) FROM wfe.runs WHERE workflow = p_workflow AND state = 'completed') >= p_runs;
            IF EXISTS (SELECT FROM wfe.runs WHERE state IN ('failed', 'cancelled')) THEN
                RAISE EXCEPTION 'bench_children_drain: a run of % did not complete', p_workflow;
            END IF;
            PERFORM pg_sleep(0.001);
        END IF;
    END LOOP;
END
$$;
