#!/bin/bash
# demo.sh — what `make demo` runs: the example workflows on a private cluster.
#
# Installs what is missing, builds and installs wfe, starts a throwaway
# cluster, registers the example contracts, creates a definition from each
# examples/*.yaml and prints its digest and Mermaid picture, approves and
# activates them, submits a batch of runs, lets poll workers
# (scripts/demo-worker.sh, one per queue) do the work while wfe.tick() fires
# the retry timers, prints the runs, one report and one timeline, then stops
# the cluster and removes it.  Every run starts from nothing: re-running is safe.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../test/harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"

DB=wfe_demo
WORKDIR=""
WORKER_PIDS=()
QUEUES=(actions rendering analysis metadata payments payments-review init)

# cleanup: the EXIT trap; stop the workers and the cluster, remove the directory.
cleanup() {
	local pid
	for pid in "${WORKER_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${WORKER_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	cluster_stop
	[ -z "$WORKDIR" ] || rm -rf "$WORKDIR"
}

# yaml_top KEY FILE: a top-level scalar of a definition (name, version),
# without quotes or a trailing comment.
yaml_top() {
	sed -nE "s/^$1:[[:space:]]*//p" "$2" | head -n 1 |
		sed -E "s/[[:space:]]+#.*//; s/^[\"']//; s/[\"'][[:space:]]*\$//"
}

# show_definition FILE: create the definition, print its digest and picture.
show_definition() {
	local file=$1 ref
	ref="$(yaml_top name "$file")@$(yaml_top version "$file")"
	banner "$ref (examples/$(basename "$file"))"
	cluster_psql -d "$DB" -At -v file="$file" -v ref="$ref" <<'SQL'
\set src `cat :'file'`
SELECT 'digest: ' || wfe.create_definition(:'src');
SELECT wfe.plan_mermaid(:'ref');
SELECT wfe.approve(split_part(:'ref', '@', 1), split_part(:'ref', '@', 2));
SELECT wfe.activate(split_part(:'ref', '@', 1), split_part(:'ref', '@', 2));
SQL
}

# submit_runs: a batch that takes every route of the examples.
submit_runs() {
	cluster_psql -d "$DB" -At <<'SQL'
-- model ids ending in an even digit are cache hits (see demo-worker.sh)
SELECT count(*) || ' model-ingest runs submitted'
  FROM generate_series(1, 6) AS i,
       wfe.submit('model-ingest', jsonb_build_object('modelId', 'm-' || i), 'demo-m-' || i);
SELECT count(*) || ' payment-routing runs submitted'
  FROM (VALUES (250, 'acc-1'), (25000, 'acc-2')) AS p(amount, account),
       wfe.submit('payment-routing', jsonb_build_object('amount', amount, 'account', account));
SELECT count(*) || ' system-initialization runs submitted'
  FROM wfe.submit('system-initialization', '{}', options => '{"execution_context": "foreground_app"}');
SQL
}

# start_workers: one poll worker per queue, in the background.
start_workers() {
	local queue
	for queue in "${QUEUES[@]}"; do
		PGDATABASE=$DB "$WFE_TOP/scripts/demo-worker.sh" "$queue" "worker-$queue" 90 &
		WORKER_PIDS+=($!)
	done
}

# wait_for_runs: tick (retry timers) until every run is finished, or 60 s.
wait_for_runs() {
	local left deadline=$((SECONDS + 60))
	while [ $SECONDS -lt $deadline ]; do
		left=$(cluster_psql -d "$DB" -At -c "SELECT wfe.tick()" \
			-c "SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL" | tail -n 1)
		[ "$left" -eq 0 ] && return 0
		sleep 0.3
	done
	die "runs still unfinished after 60 s"
}

# show_results: every run, then the report and timeline of one.
show_results() {
	cluster_psql -d "$DB" <<'SQL'
SELECT workflow, version, state, count(*) AS runs
  FROM wfe.runs GROUP BY 1, 2, 3 ORDER BY 1, 3;
SELECT r.run_id, r.workflow, r.state,
       string_agg(s.stage || '=' || s.state || coalesce('(' || s.skip_reason || ')', ''), ' '
                  ORDER BY s.ordinal) AS stages
  FROM wfe.runs AS r JOIN wfe.run_stages AS s USING (run_id)
 GROUP BY r.run_id, r.workflow, r.state ORDER BY r.run_id;
\echo
\echo The report of a cache-miss model-ingest run (render, fork, join, publish):
SELECT jsonb_pretty(wfe.report(r.run_id) - 'stages') FROM wfe.runs AS r
 WHERE r.workflow = 'model-ingest' AND r.context ->> 'modelId' = 'm-1';
SELECT * FROM wfe.run_timeline((SELECT r.run_id FROM wfe.runs AS r
                                 WHERE r.workflow = 'model-ingest' AND r.context ->> 'modelId' = 'm-1'));
\echo The timeline of the high-value payment, retried after a failed first attempt:
SELECT stage, attempt, outcome, duration_ms, waterfall
  FROM wfe.run_timeline((SELECT r.run_id FROM wfe.runs AS r
                          WHERE r.workflow = 'payment-routing' AND (r.context ->> 'amount')::int > 10000));
SQL
}

main() {
	local file

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Step 1: packages, build, install.
	wfe_setup

	# Step 2: a private cluster with a database that has the extension.
	banner "cluster"
	WORKDIR=$(make_workdir)
	cluster_start "$WORKDIR"
	cluster_createdb "$DB"

	# Step 3: the worker and action contracts the examples name.
	cluster_psql -d "$DB" -f "$WFE_TOP/examples/contracts.sql" >/dev/null

	# Step 4: each example becomes a definition; show what was stored.
	for file in "$WFE_TOP"/examples/*.yaml; do
		show_definition "$file"
	done

	# Step 5: runs, done by poll workers; wfe.tick() fires the retry timers.
	banner "runs"
	submit_runs
	start_workers
	wait_for_runs
	show_results

	# Step 6: cleanup (the EXIT trap) stops the workers and the cluster.
}

main "$@"
