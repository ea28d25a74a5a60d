#!/bin/bash
# demo.sh — what `make demo` runs: the example workflows, for real.
#
# Installs what is missing, builds and installs wfe, starts a private
# RabbitMQ node and a private PostgreSQL cluster on loopback (with wfe in
# shared_preload_libraries, so its background worker fires timers and
# publishes the outbox), registers the contracts, creates, approves and
# activates the three example workflows (printing each digest and Mermaid
# picture), and submits a batch of runs.  wfe-worker processes do the work
# of model-ingest's queues, over RabbitMQ (broker mode, acceptance
# handshake) and with wfe.claim_task (metadata, poll mode); a Python worker
# (clients/python, examples/payments_and_init_worker.py) serves the
# payment-routing and system-initialization queues in poll mode.  Two
# runs start themselves (docs/starting-runs.md, examples/starting-runs.sql):
# a schedule's tick, and a run command sent over RabbitMQ by the Python
# producer of docs/starting-runs.md (read from the page).  It ends by
# printing the runs, how each started, a report, timelines and the
# delivery figures, then stops everything.
# Every run starts from nothing: re-running is safe.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../test/harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"
. "$WFE_HARNESS/rabbit.sh"

DB=wfe_demo
WORKDIR=""
WORKER_PIDS=()
BROKER_QUEUES=(actions rendering analysis)
POLL_QUEUES=(metadata)
PYTHON_QUEUES=(payments payments-review init)  # the Python client's worker

# cleanup: the EXIT trap; stop the workers, the cluster and the broker.
cleanup() {
	local pid
	for pid in "${WORKER_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${WORKER_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	cluster_stop
	rmq_stop
	if [ -n "$WORKDIR" ] && [ -z "${WFE_KEEP_WORKDIR:-}" ]; then
		rm -rf "$WORKDIR"
	fi
}

# yaml_top KEY FILE: a top-level scalar of a definition (name, version),
# without quotes or a trailing comment.
yaml_top() {
	sed -nE "s/^$1:[[:space:]]*//p" "$2" | head -n 1 |
		sed -E "s/[[:space:]]+#.*//; s/^[\"']//; s/[\"'][[:space:]]*\$//"
}

# show_definition FILE: create, show, approve and activate one definition.
show_definition() {
	local file=$1 ref
	ref="$(yaml_top name "$file")@$(yaml_top version "$file")"
	banner "$ref (examples/$(basename "$file"))"
	cluster_psql -d "$DB" -At -v file="$file" -v ref="$ref" <<'SQL'
\set src `cat :'file'`
SELECT 'digest: ' || wfe.create_definition(:'src');
SELECT wfe.plan_mermaid(:'ref');
SELECT wfe.approve(split_part(:'ref', '@', 1), split_part(:'ref', '@', 2)) \g /dev/null
SELECT wfe.activate(split_part(:'ref', '@', 1), split_part(:'ref', '@', 2)) \g /dev/null
SQL
}

# wait_for_worker: the background worker started before the demo database
# existed, so it retries its connection every 5 s; wait until it is in.
wait_for_worker() {
	wait_for 30 '[ -n "$(cluster_psql -d "$DB" -Atc "SELECT pid FROM wfe.worker_status()")" ]' ||
		die "the wfe background worker did not start (see the server log)"
	say "background worker: pid $(cluster_psql -d "$DB" -Atc "SELECT pid FROM wfe.worker_status()")"
}

# configure_queues: model-ingest's queues go through RabbitMQ.
configure_queues() {
	local queue
	for queue in "${BROKER_QUEUES[@]}"; do
		cluster_psql -d "$DB" -Atc "SELECT wfe.configure_queue('$queue', 'broker')" >/dev/null
	done
}

# start_worker QUEUE MODE: one wfe-worker in the background, logging to a file.
start_worker() {
	local queue=$1 mode=$2
	"$WFE_TOP/build/wfe-worker" --queue "$queue" --mode "$mode" --concurrency 4 \
		--worker-id "$mode-$queue" --command "$WFE_TOP/scripts/demo-task.sh" \
		--dsn "host=$PGHOST port=$PGPORT user=postgres dbname=$DB" \
		--amqp-uri "$(amqp_uri)/" --declare \
		>>"$WORKDIR/workers.log" 2>&1 &
	WORKER_PIDS+=($!)
}

# start_python_worker: the Python client's example worker for PYTHON_QUEUES
# (Debian's python3-psycopg; the client from the source tree).
start_python_worker() {
	WFE_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=$DB" WFE_WORKER_ID="python-payments-init" \
		PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 \
		"$WFE_TOP/clients/python/examples/payments_and_init_worker.py" >>"$WORKDIR/workers.log" 2>&1 &
	WORKER_PIDS+=($!)
}

# doc_example NAME FILE: the fenced block after "<!-- example: NAME -->" in FILE.
doc_example() {
	awk -v marker="<!-- example: $1 -->" '
		$0 == marker { want = 1; next }
		want == 1 && /^```/ { want = 2; next }
		want == 2 && /^```$/ { exit }
		want == 2 { print }' "$2"
}

# start_runs_setup: a schedule and a RabbitMQ ingress (examples/starting-runs.sql).
start_runs_setup() {
	banner "runs that start themselves (examples/starting-runs.sql)"
	cluster_psql -d "$DB" -q -f "$WFE_TOP/examples/starting-runs.sql" >/dev/null
	cluster_psql -d "$DB" <<'SQL'
\pset footer off
\echo A schedule: the background worker submits a payment-routing run at the tick of every minute.
SELECT name, workflow, cron, time_zone, overlap, next_fire_at FROM wfe.schedules;
\echo An ingress: the background worker takes run commands from this RabbitMQ queue and submits them as role.
SELECT name AS ingress, role, 'wfe.ingress.' || name AS queue, 'submit.' || name AS routing_key,
       options ->> 'workflows' AS may_start
  FROM wfe.ingresses;
SQL
}

# send_run_command: a run command over RabbitMQ, sent by the producer of
# docs/starting-runs.md (read from the page), twice: the second time is a
# retrying producer, answered with the same run.
send_run_command() {
	local producer="$WORKDIR/start_run.py" i
	doc_example producer "$WFE_TOP/docs/starting-runs.md" >"$producer"
	[ -s "$producer" ] || die "docs/starting-runs.md has no producer example"
	# the background worker declares the ingress's queue within a round or two
	for ((i = 0; i < 100; i++)); do
		rmqctl list_queues name 2>/dev/null | grep -qx 'wfe.ingress.payments' && break
		sleep 0.1
	done
	say "sending a run command to RabbitMQ (exchange wfe.commands, key submit.payments):"
	say "  python3 start_run.py --ingress payments --tenant default payment-routing demo-amqp-1 '{\"amount\": 18000, \"account\": \"acc-amqp\"}'"
	/usr/bin/python3 "$producer" --url "$(amqp_uri)/%2f" --ingress payments --tenant default \
		payment-routing demo-amqp-1 '{"amount": 18000, "account": "acc-amqp"}' | sed 's/^/  wfe answered: /'
	say "the same command again (a producer retrying after a timeout): no second run"
	/usr/bin/python3 "$producer" --url "$(amqp_uri)/%2f" --ingress payments --tenant default \
		payment-routing demo-amqp-1 '{"amount": 18000, "account": "acc-amqp"}' | sed 's/^/  wfe answered: /'
}

# wait_for_tick: until the schedule fired once (its first tick is at the
# next minute), then pause it, so that no run starts after the demo's end.
wait_for_tick() {
	say "waiting for the schedule's first tick (the next full minute; the other runs go on meanwhile)"
	wait_for 75 '[ "$(cluster_psql -d "$DB" -Atc "SELECT count(*) FROM wfe.schedule_runs")" -gt 0 ]' ||
		die "the schedule did not fire within 75 s"
	cluster_psql -d "$DB" -Atc "SELECT wfe.pause_schedule('payments-sweep')" >/dev/null
	say "the schedule fired: $(cluster_psql -d "$DB" -Atc "SELECT 'run ' || run_id || ' for the tick of ' || to_char(scheduled_for AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC' FROM wfe.schedule_runs ORDER BY run_id LIMIT 1"); paused now"
}

# submit_runs: a batch that takes every route of the examples.
submit_runs() {
	cluster_psql -d "$DB" -At <<'SQL'
-- model ids ending in an even digit are cache hits (see demo-task.sh)
SELECT count(*) || ' model-ingest runs submitted'
  FROM generate_series(1, 8) AS i,
       wfe.submit('model-ingest', jsonb_build_object('modelId', 'm-' || i), 'demo-m-' || i);
SELECT count(*) || ' payment-routing runs submitted'
  FROM (VALUES (250, 'acc-1'), (25000, 'acc-2')) AS p(amount, account),
       wfe.submit('payment-routing', jsonb_build_object('amount', amount, 'account', account));
SELECT count(*) || ' system-initialization run submitted'
  FROM wfe.submit('system-initialization', '{}', options => '{"execution_context": "foreground_app"}');
-- a reviewer answers before the runs reach their wait: the signals are
-- buffered, and each wait takes its own when released (runtime.md "Signals")
SELECT count(*) || ' model-ingest-review runs submitted'
  FROM (VALUES ('review-1'), ('review-2')) AS m(id),
       wfe.submit('model-ingest-review', jsonb_build_object('modelId', m.id), m.id);
SELECT 'review-1 approved: ' || wfe.signal(wfe.find_run('model-ingest-review', 'review-1'), 'review.approval@1',
                                           '{"approved": true, "reviewer": "ann"}', 'ann-review-1');
-- a map over a model's LODs, then a map of publish-asset child runs, one per LOD
SELECT count(*) || ' model-ingest-lods runs submitted'
  FROM wfe.submit('model-ingest-lods', '{"modelId": "lods-1", "lods": ["lod0", "lod1", "lod2", "lod3"]}', 'lods-1');
SELECT 'review-2 rejected: ' || wfe.signal(wfe.find_run('model-ingest-review', 'review-2'), 'review.approval@1',
                                           '{"approved": false, "reviewer": "bob", "note": "wrong scale"}', 'bob-review-2');
SQL
}

# wait_for_runs: until every run is finished (the background worker fires
# the retry timers; nobody calls wfe.tick()), or 120 s.
wait_for_runs() {
	local deadline=$((SECONDS + 120)) left
	while [ $SECONDS -lt $deadline ]; do
		left=$(cluster_psql -d "$DB" -Atc "SELECT count(*) FROM wfe.runs WHERE finished_at IS NULL")
		if [ "$left" -eq 0 ]; then
			say "all runs finished in $SECONDS s since the demo started"
			return 0
		fi
		sleep 0.5
	done
	tail -n 40 "$WORKDIR/workers.log"
	die "runs still unfinished after 120 s"
}

# show_results: the runs, one report, timelines, the delivery figures.
show_results() {
	cluster_psql -d "$DB" <<'SQL'
\pset footer off
SELECT workflow, version, state, count(*) AS runs
  FROM wfe.runs GROUP BY 1, 2, 3 ORDER BY 1, 3;
\echo Each run: how many of its stages completed or were skipped, and the others by name:
SELECT r.run_id, r.workflow, r.state, count(*) AS stages,
       count(*) FILTER (WHERE s.state = 'completed') AS completed,
       count(*) FILTER (WHERE s.state = 'skipped') AS skipped,
       coalesce(string_agg(s.stage || ' ' || s.state, ', ' ORDER BY s.ordinal)
                FILTER (WHERE s.state NOT IN ('completed', 'skipped')), '') AS others
  FROM wfe.runs AS r JOIN wfe.run_stages AS s USING (run_id)
 GROUP BY r.run_id, r.workflow, r.state ORDER BY r.run_id;
\echo Who did the work (wfe-worker: model-ingest, over RabbitMQ except metadata; the Python client: payments and init):
SELECT coalesce(claimed_by, '-') AS worker, count(*) AS attempts
  FROM wfe.run_stages WHERE attempt > 0 AND claimed_by IS NOT NULL GROUP BY 1 ORDER BY 1;
\echo The outbox, published to RabbitMQ with publisher confirms by the background worker:
SELECT kind, state, count(*) AS messages,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at) * 1000)::numeric, 1)
           AS p50_ms_commit_to_confirmed,
       round(max(extract(epoch FROM published_at - created_at) * 1000)::numeric, 1) AS max_ms
  FROM wfe.outbox GROUP BY 1, 2 ORDER BY 1, 2;
SELECT holder, token, connected FROM wfe.publisher_lease;
\echo The report of a cache-miss model-ingest run (render, fork, join, publish):
SELECT jsonb_pretty(wfe.report(r.run_id) - 'stages') FROM wfe.runs AS r
 WHERE r.workflow = 'model-ingest' AND r.context ->> 'modelId' = 'm-1';
SELECT stage, attempt, outcome, duration_ms, waterfall
  FROM wfe.run_timeline((SELECT r.run_id FROM wfe.runs AS r
                          WHERE r.workflow = 'model-ingest' AND r.context ->> 'modelId' = 'm-1'));
\echo How each run started: the SQL calls above, a tick of the schedule, the RabbitMQ run command:
SELECT CASE WHEN s.run_id IS NOT NULL THEN 'schedule ' || s.schedule
            WHEN e.detail ->> 'via' = 'amqp' THEN 'RabbitMQ, ingress ' || (e.detail ->> 'ingress')
            ELSE 'wfe.submit in SQL' END AS started_by,
       count(*) AS runs, string_agg(DISTINCT r.workflow, ', ') AS workflows,
       string_agg(DISTINCT r.state, ', ') AS states
  FROM wfe.runs AS r
  LEFT JOIN wfe.schedule_runs AS s USING (run_id)
  LEFT JOIN wfe.events AS e ON e.run_id = r.run_id AND e.type = 'run.submitted'
 GROUP BY 1 ORDER BY 1 DESC;
\echo The two runs that started themselves:
SELECT r.run_id, r.workflow, r.state, r.idempotency_key, r.context,
       coalesce('tick ' || to_char(s.scheduled_for AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC',
                'message ' || (e.detail ->> 'message_id')) AS "for"
  FROM wfe.runs AS r
  LEFT JOIN wfe.schedule_runs AS s USING (run_id)
  LEFT JOIN wfe.events AS e ON e.run_id = r.run_id AND e.type = 'run.submitted'
 WHERE s.run_id IS NOT NULL OR e.detail ->> 'via' = 'amqp'
 ORDER BY r.run_id;
SELECT name, state, last_ago, last_run, runs_1h, skipped_1h, failed_1h FROM wfe.dashboard_schedules;
SELECT ingress, role, received, submitted, duplicates, rejected FROM wfe.dashboard_ingress;
\echo Maps and child runs: model-ingest-lods rendered 4 LODs (2 at once; lod0 failed once and was retried alone),
\echo then published each through a publish-asset child run (2 live at once).
\echo The parent run timeline (each element NAME[i] a unit of work; child_run_id: the child an element started):
SELECT stage, attempt, outcome, duration_ms, child_run_id, waterfall
  FROM wfe.run_timeline(wfe.find_run('model-ingest-lods', 'lods-1'));
\echo The child runs, each linked to the element that started it, and its output, which is the result of that element:
SELECT c.parent_stage, c.parent_attempt, c.run_id AS child_run_id, c.workflow || '@' || c.version AS child,
       c.state, c.output
  FROM wfe.runs AS c
 WHERE c.parent_run_id = wfe.find_run('model-ingest-lods', 'lods-1') ORDER BY c.run_id;
\echo The parent output: the published URLs in LOD order (publish-lods result, ordered items and failed):
SELECT r.output AS parent_output, s.result -> 'failed' AS failed_elements
  FROM wfe.runs AS r JOIN wfe.run_stages AS s ON s.run_id = r.run_id AND s.stage = 'publish-lods'
 WHERE r.run_id = wfe.find_run('model-ingest-lods', 'lods-1');
\echo The high-value payment: its first review failed, the background worker fired the retry:
SELECT stage, attempt, outcome, duration_ms, waterfall
  FROM wfe.run_timeline((SELECT r.run_id FROM wfe.runs AS r
                          WHERE r.workflow = 'payment-routing' AND (r.context ->> 'amount')::int > 10000
                          ORDER BY r.run_id LIMIT 1));
SQL
}

main() {
	local file queue

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Step 1: packages, build, install.
	wfe_setup

	# Step 2: RabbitMQ, then PostgreSQL with wfe's background worker.
	WORKDIR=$(make_workdir)
	banner "rabbitmq"
	rmq_start "$WORKDIR" || die "cannot start a private RabbitMQ node (is rabbitmq-server installed?)"
	say "rabbitmq: $(amqp_uri)"
	banner "cluster"
	CLUSTER_EXTRA_CONF="shared_preload_libraries = 'wfe'
wfe.database = '$DB'
wfe.amqp_uri = '$(amqp_uri)/'" cluster_start "$WORKDIR"
	cluster_createdb "$DB"
	wait_for_worker

	# Step 3: contracts, queues, definitions.
	cluster_psql -d "$DB" -f "$WFE_TOP/examples/contracts.sql" >/dev/null
	configure_queues
	# a workflow another one calls as a child is approved first: the
	# compiler checks a caller's workflow stage against the child's version
	show_definition "$WFE_TOP/examples/publish-asset.yaml"
	for file in "$WFE_TOP"/examples/*.yaml; do
		[ "$(basename "$file")" = publish-asset.yaml ] || show_definition "$file"
	done
	start_runs_setup

	# Step 4: workers, then runs.
	banner "runs"
	for queue in "${BROKER_QUEUES[@]}"; do
		start_worker "$queue" broker
	done
	for queue in "${POLL_QUEUES[@]}"; do
		start_worker "$queue" poll
	done
	start_python_worker
	submit_runs
	send_run_command
	wait_for_tick
	wait_for_runs
	show_results

	# Step 5: cleanup (the EXIT trap) stops the workers, the cluster and the broker.
}

main "$@"
