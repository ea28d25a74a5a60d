--
-- A map in the run's report and picture (runtime.md "Map elements",
-- dsl.md "Pictures"): wfe.report's map entry carries its elements counted
-- by state, every state present; run_mermaid's map node carries the
-- counts that are not zero, and they move as elements end.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT wfe.register_worker('rt-mr.render@1', 'rt-mr-q');
-- what the worker holds: every task it claimed, until it reports
CREATE TEMP TABLE held AS SELECT * FROM wfe.claim_task('rt-mr-q', 'w1', 1) WITH NO DATA;
-- claim what is queued, then complete (or fail for good) one element it holds
CREATE FUNCTION pg_temp.work(p_run bigint, p_stage text, p_fail boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO held SELECT * FROM wfe.claim_task('rt-mr-q', 'w1', 10);
  RETURN (SELECT CASE WHEN p_fail
                      THEN wfe.fail_task(t.run_id, t.stage, t.attempt, t.fence, '{"code": "boom", "message": "no"}', false)
                      ELSE wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence, jsonb_build_object('lod', t.input -> 'lod'))
                 END
            FROM held AS t WHERE t.run_id = p_run AND t.stage = p_stage
           ORDER BY t.attempt DESC LIMIT 1);
END
$$;
CREATE FUNCTION pg_temp.elements(p_run bigint)
RETURNS jsonb LANGUAGE sql AS $$
  SELECT s -> 'elements' FROM jsonb_array_elements(wfe.report(p_run) -> 'stages') AS s
   WHERE s ->> 'stage' = 'render'
$$;
-- the map node's line of the run's picture
CREATE FUNCTION pg_temp.map_node(p_run bigint)
RETURNS text LANGUAGE sql AS $$
  SELECT l FROM regexp_split_to_table(wfe.run_mermaid(p_run), E'\n') AS l WHERE l LIKE '  s0[/%'
$$;

SELECT wfe.create_definition($yaml$
name: rt-mr
version: "1.0.0"
entry: render
stages:
  - name: render
    type: map
    items: "${context.lods}"
    max_concurrency: 2
    tolerated_failures: 1
    item:
      worker: rt-mr.render@1
      queue: rt-mr-q
      input: { lod: "${item}" }
      retry: { max_attempts: 1 }
    on_success: completed
    on_failure: failed
$yaml$) IS NOT NULL AS created;
SELECT wfe.approve('rt-mr', '1.0.0') IS NOT NULL AS approved;
SELECT wfe.activate('rt-mr', '1.0.0') IS NOT NULL AS activated;

SELECT run_id AS r FROM wfe.submit('rt-mr', '{"lods": ["a", "b", "c", "d", "e"]}') \gset
-- two released (max_concurrency), three waiting
SELECT pg_temp.elements(:r);
SELECT pg_temp.map_node(:r);
-- the map's own entry is one, each element's follows it in index order
SELECT string_agg(s ->> 'stage', ' ' ORDER BY n) AS stages
  FROM jsonb_array_elements(wfe.report(:r) -> 'stages') WITH ORDINALITY AS x(s, n);
SELECT pg_temp.work(:r, 'render[0]');
SELECT pg_temp.work(:r, 'render[1]', true);
-- one completed, one failed (tolerated), two more released
SELECT pg_temp.elements(:r);
SELECT pg_temp.map_node(:r);
SELECT pg_temp.work(:r, 'render[2]');
SELECT pg_temp.work(:r, 'render[3]');
SELECT pg_temp.work(:r, 'render[4]');
SELECT pg_temp.elements(:r);
SELECT pg_temp.map_node(:r);
SELECT wfe.report(:r) ->> 'state' AS state,
       (SELECT s -> 'result' FROM jsonb_array_elements(wfe.report(:r) -> 'stages') AS s
         WHERE s ->> 'stage' = 'render') AS result;
-- no other stage carries an elements entry
SELECT count(*) FILTER (WHERE s ? 'elements') AS with_elements, count(*) AS stages
  FROM jsonb_array_elements(wfe.report(:r) -> 'stages') AS s;

-- A second failure is past tolerated_failures: the map fails, the element
-- under way is cancelled, and the counts say so.
SELECT run_id AS r2 FROM wfe.submit('rt-mr', '{"lods": ["a", "b", "c"]}') \gset
SELECT pg_temp.work(:r2, 'render[0]', true);
SELECT pg_temp.work(:r2, 'render[1]', true);
SELECT pg_temp.elements(:r2);
SELECT pg_temp.map_node(:r2);
SELECT wfe.report(:r2) ->> 'state' AS state;

-- An empty map: no elements, completed at once.
SELECT run_id AS r3 FROM wfe.submit('rt-mr', '{"lods": []}') \gset
SELECT pg_temp.elements(:r3);
SELECT pg_temp.map_node(:r3);
-- a run whose map is not yet released has none (a failed binding here)
SELECT run_id AS r4 FROM wfe.submit('rt-mr', '{"lods": "not a list"}') \gset
SELECT pg_temp.elements(:r4);
SELECT pg_temp.map_node(:r4);

-- The element whose failure failed the map is redriven (operations.md
-- "Recovery"): the run reopens, the map runs again, its released element
-- that the failure cancelled runs again, and the never-released ones wait
-- their turn -- cancelled -> waiting, which the stage trigger refused a
-- worker item's elements until the step fuzzer found it.
SELECT run_id AS r5 FROM wfe.submit('rt-mr', '{"lods": ["a", "b", "c", "d", "e"]}') \gset
SELECT pg_temp.work(:r5, 'render[0]', true);
SELECT pg_temp.work(:r5, 'render[1]', true);
SELECT wfe.report(:r5) ->> 'state' AS state, pg_temp.elements(:r5) AS elements;
SELECT wfe.redrive(:r5, 'render[1]', 'regress');
SELECT wfe.report(:r5) ->> 'state' AS state, pg_temp.elements(:r5) AS elements;
SELECT pg_temp.work(:r5, 'render[1]');
SELECT pg_temp.work(:r5, 'render[2]');
SELECT pg_temp.work(:r5, 'render[3]');
SELECT pg_temp.work(:r5, 'render[4]');
SELECT wfe.report(:r5) ->> 'state' AS state,
       (SELECT s -> 'result' FROM jsonb_array_elements(wfe.report(:r5) -> 'stages') AS s
         WHERE s ->> 'stage' = 'render') AS result;

SET client_min_messages = warning;
DROP EXTENSION wfe CASCADE;
