-- The map benchmarks' workflows (bench/maps/maps.sh): bench-map, one map
-- over context.items (no max_concurrency: every element queued at release),
-- and bench-map-chain, 100 worker stages in a line (batch-1 steps).
SELECT wfe.register_worker('bench.map@1', 'bench-map');
SELECT wfe.register_worker('bench.chain@1', 'bench-chain');
SELECT wfe.create_definition($y$
name: bench-map
version: "1.0.0"
entry: each
stages:
  - name: each
    type: map
    items: "${context.items}"
    item:
      worker: bench.map@1
      queue: bench-map
      input: { n: "${item}", i: "${item_index}" }
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('bench-map', '1.0.0');
SELECT wfe.activate('bench-map', '1.0.0');
SELECT wfe.create_definition(
  'name: bench-map-chain' || chr(10) || 'version: "1.0.0"' || chr(10) || 'entry: s1' || chr(10) || 'stages:' || chr(10) ||
  string_agg(format('  - name: s%s' || chr(10) || '    type: worker' || chr(10) || '    worker: bench.chain@1' || chr(10) ||
                    '    queue: bench-chain' || chr(10) || '    input: { n: "${context.n}" }' || chr(10) ||
                    '    on_success: %s' || chr(10) || '    on_failure: failed' || chr(10),
                    g, CASE WHEN g = 100 THEN 'completed' ELSE 's' || (g + 1) END), '' ORDER BY g))
  FROM generate_series(1, 100) AS g;
SELECT wfe.approve('bench-map-chain', '1.0.0');
SELECT wfe.activate('bench-map-chain', '1.0.0');

-- Submit a bench-map run of n elements: the release (bind every element,
-- create its row) in the server, in ms.
CREATE FUNCTION bench_map_submit(n int) RETURNS double precision LANGUAGE plpgsql AS $f$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM wfe.submit('bench-map', jsonb_build_object('items', (SELECT jsonb_agg(g) FROM generate_series(1, n) AS g)));
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END
$f$;
