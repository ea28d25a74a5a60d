-- Child runs (runtime.md "Child runs"; dsl.md "Stages form: new types"):
-- what the engine (src/pg/child.c) calls when a workflow stage's attempt
-- starts a child run, and when a parent's attempt ends while its child is
-- still under way.  The step core decides both; these only write.

-- A child run is started by the engine in C (wfe_start_child,
-- src/pg/submit.c): the same new-run statement as a submit's, in the
-- parent's tenant and trace, under the parent's lock.

-- The parent's attempt of p_stage ended otherwise than by its child's end
-- (cancelled with the run, timed out, failed by an operator): its live
-- child is cancelled too, and so on down.  Lock order: the parent (held by
-- the caller), then its children -- never the other way round, which is
-- why a child's end reaches its parent through a child_ended timer.
CREATE FUNCTION wfe._cancel_children(p_parent bigint, p_stage text, p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c bigint;
BEGIN
    FOR c IN SELECT x.run_id FROM wfe.runs AS x
              WHERE x.parent_run_id = p_parent AND x.parent_stage = p_stage AND x.intent IS NULL
              ORDER BY x.run_id
    LOOP
        PERFORM wfe._cancel(c, coalesce(p_reason, 'parent attempt ended'));
    END LOOP;
END
$$;
COMMENT ON FUNCTION wfe._cancel_children(bigint, text, text) IS
'Cancels the live child runs of a parent''s workflow stage whose attempt ended otherwise (the engine calls it under the parent''s lock).';
REVOKE ALL ON FUNCTION wfe._cancel_children(bigint, text, text) FROM PUBLIC;
