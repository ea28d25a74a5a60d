#!/bin/bash
# run.sh — what `make bench` runs: every benchmark of docs/benchmarks.md.
#
#   1. compile: bench/compile/run.sh (a 500-stage definition, its own cluster);
#   2. throughput, side by side on one private cluster, one driver (pgbench
#      custom scripts, -M prepared), 4 clients and then 1 client:
#        - one-row INSERT commits/s (bench/pgbench/insert.sql),
#        - the floor: a bare SKIP LOCKED queue, steps/s (floor-step.sql),
#        - wfe steps/s, batch 1 (wfe-step.sql) and batch 10 (wfe-step-batch.sql),
#        - wfe steps/s, batch 10 reported in one wfe.complete_tasks call
#          (wfe-step-batch-call.sql; "n/a" while the engine has no such function),
#        - wfe submits/s of a 12-stage workflow (submit.sql);
#   3. where the time goes: short profiling runs (floor, wfe batch 1, the
#      same with wfe.notify off to price the NOTIFY, submit) with
#      pg_stat_statements tracking nested statements and planning, the
#      sessions' wait events sampled, the claim's plan (auto_explain);
#   4. scale, on the same cluster, 4 clients (claim-step.sql, seed003-step.sql):
#        - the claim's latency (p50, p99) on a one-stage workflow with a small
#          queue (SCALE_DEPTH runs, topped up) after a little history
#          (SCALE_FRESH_HISTORY finished runs): "fresh";
#        - the same with BENCH_SCALE_BACKLOG runs queued by a burst of submits
#          (kept at that depth), and its ratio to fresh;
#        - the same with BENCH_SCALE_HISTORY finished runs, loaded straight
#          into the engine's tables as copies of a run finished through the
#          API (bench_clone_run, bench/scale/setup.sql), and its ratio to a
#          fresh run measured just before;
#        - seed 003's shape: BENCH_SEED003_RUNS runs of a 12-stage workflow in
#          flight (a new run for every one that finishes), steps/s over
#          BENCH_SEED003_SECONDS, in its first and last tenth, and the queued
#          tasks at its start and end;
#   5. latency, on the same cluster (bench/latency/latency.sh): timer due ->
#      fired (idle and under the step load), commit -> worker woken, submit
#      -> in-database action done, outbox drain against a plain confirmed
#      publisher and commit -> broker-confirmed, with a private RabbitMQ;
#   6. the result cache, on the same cluster (bench/cache/cache.sh): a cache
#      hit's submit -> completed time (and the server's time per hit), and
#      the steps/s of a workflow with a 90% hit ratio against the same
#      workflow without `cache:`;
#   7. signals, waits and sleeps, on the same cluster (bench/waits/waits.sh):
#      signal -> successor released (p50, p99), the claim's p99 with
#      10,000 runs parked on waits ÷ without, sleep due -> completed;
#   8. runs that start themselves, on the same cluster
#      (bench/triggers/triggers.sh): tick due -> run submitted (p50, p99),
#      1,000 schedules due at one instant, run commands/s over RabbitMQ ÷
#      wfe.submit called directly.
#   9. maps, on the same cluster (bench/maps/maps.sh): per-element cost of a
#      10,000-element map ÷ a 100-element map, elements/s ÷ batch-1 steps/s.
#  10. child workflows, on the same cluster (bench/children/children.sh):
#      runs/s of a workflow stage calling a one-stage child against a
#      two-stage worker workflow, and their ratio.
#  11. flow control, last (it drops and creates wfe in the bench database):
#      bench/ratelimit/run.sh -- steps/s with a rate limit far above the
#      load ÷ without, and rate-limit accuracy; bench/fairness/run.sh -- a
#      small tenant's p99 queue wait beside another's 100,000-task backlog
#      ÷ alone, and steps/s with fairness on ÷ off.
#
# The tables go to stdout and, between the markers (bench:results,
# bench:profile, bench:scale, bench:latency, bench:cache, bench:waits,
# bench:triggers, bench:maps, bench:children, bench:flow), into
# docs/benchmarks.md.
# Default settings, fsync and synchronous_commit on; wfe.notify stays on.
#
# Environment:
#   BENCH_SECONDS    length of each measured pgbench run (default 20)
#   WARMUP_SECONDS   unmeasured run of the same script before each (default 2)
#   PROFILE_SECONDS  length of each profiling run (default 8)
#   BENCH_CLIENTS    client counts, one row each (default "4 1")
#   BENCH_DOCS       page to update (default docs/benchmarks.md; empty: none)
#   BENCH_SKIP_COMPILE=1  leave out the compile benchmark
#   BENCH_SKIP_JSONSCHEMA=1  leave out the JSON Schema validator's figures
#                         (bench/jsonschema/run.sh, no server; printed only)
#   BENCH_SKIP_THROUGHPUT=1  leave out 2 and 3 (only the scale and latency
#                         sections of the page are then rewritten)
#   BENCH_SKIP_SCALE=1    leave out 4
#   BENCH_SKIP_LATENCY=1  leave out 5
#   BENCH_SKIP_CACHE=1    leave out 6
#   BENCH_SKIP_WAITS=1    leave out 7
#   BENCH_SKIP_TRIGGERS=1 leave out 8
#   BENCH_SKIP_MAPS=1     leave out 9
#   BENCH_SKIP_CHILDREN=1 leave out 10
#   BENCH_SKIP_FLOW=1     leave out 11
#   BENCH_SCALE_SECONDS   length of each measured claim-latency run (default
#                         BENCH_SECONDS; each after WARMUP_SECONDS of warm-up)
#   BENCH_SCALE_BACKLOG   queued runs of the backlog figure (default 20000)
#   BENCH_SCALE_HISTORY   finished runs of the history figure (default 1000000;
#                         10000000 for the ten-million figures: about 20 GB,
#                         an hour to load on the shared machine)
#   BENCH_SCALE_LOADERS   sessions loading that history at once (default 2)
#   BENCH_SCALE_RETENTION_SECONDS  cap of the retention figure's loop (default 0: none)
#   BENCH_SEED003_RUNS    runs in flight in seed 003's shape (default 10000)
#   BENCH_SEED003_SECONDS length of that run (default 600; the goal is
#                         900 steps/s sustained for 10 minutes)
#   and the latency, cache, waits, triggers, maps and children benchmarks'
#   own (bench/latency/latency.sh, bench/cache/cache.sh, bench/waits/waits.sh,
#   bench/triggers/triggers.sh, bench/maps/maps.sh, bench/children/children.sh).
#
# With the defaults the whole run takes about twenty minutes: twelve
# measured runs of 22 s, four profiling runs of 8 s; for scale four runs of
# 22 s, a minute of loading and the ten minutes of seed 003; about two
# minutes of latency probes; set-up.  Every pgbench run and every
# statement is bounded (timeout, statement_timeout); the cluster is stopped
# and removed on any exit.
#
# shellcheck disable=SC2016  # backquotes in single quotes are markdown
set -euo pipefail
# shellcheck source=../test/harness/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../test/harness/lib.sh"
# shellcheck source=../test/harness/cluster.sh
. "$WFE_HARNESS/cluster.sh"
# shellcheck source=../test/harness/rabbit.sh
. "$WFE_HARNESS/rabbit.sh"
# shellcheck source=chain.sh
. "$(dirname "${BASH_SOURCE[0]}")/chain.sh"

BENCH_SECONDS=${BENCH_SECONDS:-20}
WARMUP_SECONDS=${WARMUP_SECONDS:-2}
PROFILE_SECONDS=${PROFILE_SECONDS:-8}
BENCH_CLIENTS=${BENCH_CLIENTS:-"4 1"}
BENCH_DOCS=${BENCH_DOCS-$WFE_TOP/docs/benchmarks.md}

BENCH_DIR="$WFE_TOP/bench"
SCRIPTS="$BENCH_DIR/pgbench"
DB=wfe_bench
STEP_STAGES=200         # the long linear workflow the step benchmark runs
SUBMIT_STAGES=12        # the workflow the submit benchmark starts
FLOOR_DEPTH=1000        # ready jobs in the floor's queue, kept constant
FLOOR_HISTORY=50000     # done jobs before them (see floor_prepare)
SUBMIT_HISTORY=2000     # runs submitted before the submit benchmark
ADMIN_TIMEOUT=300       # seconds, for any one set-up statement
WORKDIR=""
LOAD_START=""
LOAD_END=""

# The figures, keyed "what:clients" (rates per second).
declare -A RATE LATENCY STARVED WAL

# shellcheck source=scale/scale.sh
. "$BENCH_DIR/scale/scale.sh"
# shellcheck source=latency/latency.sh
. "$BENCH_DIR/latency/latency.sh"
# shellcheck source=cache/cache.sh
. "$BENCH_DIR/cache/cache.sh"
# shellcheck source=waits/waits.sh
. "$BENCH_DIR/waits/waits.sh"
# shellcheck source=triggers/triggers.sh
. "$BENCH_DIR/triggers/triggers.sh"
# shellcheck source=maps/maps.sh
. "$BENCH_DIR/maps/maps.sh"
# shellcheck source=children/children.sh
. "$BENCH_DIR/children/children.sh"

# cleanup: the EXIT trap; stop the cluster and remove its directory.
cleanup() {
	local status=$?
	[ -z "${SAMPLER_PID:-}" ] || kill "$SAMPLER_PID" 2>/dev/null || true
	[ -z "${LOAD_PID:-}" ] || kill "$LOAD_PID" 2>/dev/null || true
	if [ "$status" -ne 0 ]; then
		[ -z "$CLUSTER_DIR" ] || [ ! -f "$CLUSTER_DIR/server.log" ] ||
			{ banner "server log (last 30 lines)"; tail -n 30 "$CLUSTER_DIR/server.log"; }
	fi
	cluster_stop
	rmq_stop
	[ -z "$WORKDIR" ] || rm -rf "$WORKDIR"
}

# q SQL...: run statements in the bench database, print tuples only.
q() {
	local args=() s
	for s in "$@"; do args+=(-c "$s"); done
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s -c client_min_messages=warning" timeout $((ADMIN_TIMEOUT + 30)) \
		"$(pg_path bindir)/psql" -X -q -v ON_ERROR_STOP=1 -d "$DB" -At "${args[@]}"
}

# bench_cluster: the private cluster, with pg_stat_statements (and wfe, whose
# background worker is part of the engine) preloaded; nothing else changed.
bench_cluster() {
	WORKDIR=$(make_workdir)
	cluster_start "$WORKDIR"
	cluster_createdb "$DB"      # first: the worker's database must exist
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<EOF

# --- wfe benchmark (bench/run.sh): statistics only, defaults otherwise ---
shared_preload_libraries = 'wfe,pg_stat_statements'
wfe.database = '$DB'
pg_stat_statements.track = none     # the profiling runs turn it on per session
pg_stat_statements.max = 5000
EOF
	cluster_pg_ctl -l "$CLUSTER_DIR/server.log" -m fast -w -t 60 restart >/dev/null ||
		die "the server did not restart with the benchmark's settings"
}

# bench_schema: the floor's tables, the contracts and the two workflows.
bench_schema() {
	chain bench-steps "$STEP_STAGES" bench bench.step@1 >"$WORKDIR/steps.yaml"
	chain bench-submit "$SUBMIT_STAGES" bench-submit bench.submit@1 >"$WORKDIR/submit.yaml"
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s" cluster_psql -d "$DB" -q \
		-v steps="$WORKDIR/steps.yaml" -v submit="$WORKDIR/submit.yaml" \
		-f "$BENCH_DIR/sql/setup.sql" >/dev/null
}

# settle: the same starting line for every measured run: vacuumed, analysed,
# checkpointed (so no checkpoint's full-page writes land in one run only).
settle() {
	q "VACUUM ANALYZE" "CHECKPOINT" >/dev/null
}

# pgb CLIENTS SECONDS SCRIPT [PGOPTIONS [PGBENCH_ARGS...]]: one pgbench run
# (as PGB_USER when set); prints "TRANSACTIONS TPS LATENCY_MS".
pgb() {
	local out
	out=$(PGOPTIONS="${4:-}" PGUSER="${PGB_USER:-$PGUSER}" timeout $(($2 + 120)) "$(pg_path bindir)/pgbench" \
		-n -M prepared -c "$1" -j "$1" -T "$2" "${@:5}" -f "$SCRIPTS/$3" "$DB" 2>&1) ||
		{ printf '%s\n' "$out" >&2; die "pgbench $3 failed"; }
	awk '/^number of transactions actually processed:/ { n = $NF }
	     /^tps = / { t = $3 }
	     /^latency average = / { l = $4 }
	     END { if (n == "" || t == "") exit 1; printf "%s %s %s\n", n, t, l }' <<<"$out" ||
		{ printf '%s\n' "$out" >&2; die "cannot read pgbench's output for $3"; }
}

# measure KEY CLIENTS SCRIPT COUNT_SQL: a warm-up, then a measured run; the
# rate is what COUNT_SQL counts in the database (before and after) over the
# run's time (transactions / tps, the time pgbench measured).
measure() {
	local key=$1 clients=$2 script=$3 count_sql=$4 before after n tps lat wal0 wal1
	local wal_sql="SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes FROM pg_stat_wal"
	pgb "$clients" "$WARMUP_SECONDS" "$script" >/dev/null
	before=$(q "$count_sql")
	wal0=$(q "$wal_sql")
	read -r n tps lat < <(pgb "$clients" "$BENCH_SECONDS" "$script")
	wal1=$(q "$wal_sql")
	after=$(q "$count_sql")
	RATE[$key]=$(awk -v d=$((after - before)) -v n="$n" -v t="$tps" 'BEGIN { printf "%.1f", d * t / n }')
	LATENCY[$key]=$lat
	# the whole cluster's WAL over the run (background worker, autovacuum
	# included), per counted unit: records, full-page images, bytes
	WAL[$key]=$(awk -v a="$wal0" -v b="$wal1" -v d=$((after - before)) 'BEGIN {
		split(a, x, " "); split(b, y, " ");
		if (d > 0) printf "%.1f %.2f %.0f", (y[1] - x[1]) / d, (y[2] - x[2]) / d, (y[3] - x[3]) / d
		else print "n/a n/a n/a" }')
	local wal_records wal_fpi wal_bytes
	read -r wal_records wal_fpi wal_bytes <<<"${WAL[$key]}"
	say "$(printf '%-14s %d client(s): %8s/s  (%d counted in %.1f s; pgbench %s scripts, latency %s ms; WAL per unit: %s records, %s FPI, %s bytes)' \
		"$key" "$clients" "${RATE[$key]}" $((after - before)) "$(awk -v n="$n" -v t="$tps" 'BEGIN { print n / t }')" \
		"$n" "$lat" "$wal_records" "$wal_fpi" "$wal_bytes")"
}

# floor_prepare: a job table with FLOOR_HISTORY done jobs, then FLOOR_DEPTH
# ready ones.  The history is what a queue in service has, and it keeps the
# planner on the partial index: analysed with every row ready, the table
# looks as if its primary key found a ready row at once, and the claim then
# walks the primary key over every job done during the run.
floor_prepare() {
	q "TRUNCATE bench_jobs RESTART IDENTITY" \
		"INSERT INTO bench_jobs (queue, state, payload)
		 SELECT 'bench', 'done', jsonb_build_object('x', i) FROM generate_series(1, $FLOOR_HISTORY) AS i" \
		"INSERT INTO bench_jobs (queue, state, payload)
		 SELECT 'bench', 'ready', jsonb_build_object('x', i) FROM generate_series(1, $FLOOR_DEPTH) AS i" >/dev/null
	settle
}

# wfe_prepare RUNS: no runs left from before, then RUNS runs of the long
# workflow submitted up front (each has one task queued at a time).
wfe_prepare() {
	q "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" \
		"SELECT count(*) FROM (SELECT wfe.submit('bench-steps', jsonb_build_object('x', i))
		                         FROM generate_series(1, $1) AS i) AS s" >/dev/null
	settle
}

# submit_prepare: no runs left from before but SUBMIT_HISTORY submitted
# ones, so that the tables the submit writes are analysed with rows in them
# (analysed empty, they get sequential-scan plans that every submit pays
# for as they grow, the foreign-key checks first).
submit_prepare() {
	q "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" \
		"SELECT count(*) FROM (SELECT wfe.submit('bench-submit', jsonb_build_object('x', i))
		                         FROM generate_series(1, $SUBMIT_HISTORY) AS i) AS s" >/dev/null
	settle
}

# wfe_runs_for BATCH CLIENTS HEADROOM: runs enough that the queue never runs
# dry: HEADROOM times the floor's rate over warm-up and run, in stages of
# STEP_STAGES, and at least four claims' worth per client.
wfe_runs_for() {
	awk -v r="${RATE[floor:$2]}" -v h="$3" -v s=$((WARMUP_SECONDS + BENCH_SECONDS)) \
		-v st="$STEP_STAGES" -v min=$((4 * $1 * $2)) \
		'BEGIN { n = int(r * h * s / st) + 1; if (n < min) n = min; if (n < 50) n = 50; print n }'
}

# wfe_steps KEY CLIENTS SCRIPT BATCH HEADROOM: the wfe step benchmark.
wfe_steps() {
	local key=$1 clients=$2 script=$3 runs queued rejected
	runs=$(wfe_runs_for "$4" "$clients" "$5")
	wfe_prepare "$runs"
	PGB_USER=bench_worker measure "$key:$clients" "$clients" "$script" \
		"SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'"
	queued=$(q "SELECT count(*) FROM wfe.run_stages WHERE queue = 'bench' AND state = 'queued'")
	rejected=$(q "SELECT count(*) FROM wfe.events WHERE type LIKE 'callback.%'")
	[ "$rejected" -eq 0 ] || die "$key: $rejected callbacks were rejected; the benchmark is wrong"
	if [ "$queued" -eq 0 ]; then
		STARVED[$key:$clients]=1
		say "warning: $key with $clients client(s) ran out of queued tasks ($runs runs were not enough)"
	fi
	say "               ($runs runs of $STEP_STAGES stages; $queued tasks still queued at the end)"
}

# throughput CLIENTS: every measured figure for one client count.
throughput() {
	local c=$1
	banner "throughput, $c client(s), ${BENCH_SECONDS} s per run after ${WARMUP_SECONDS} s of warm-up"
	# each ratio's two figures are measured one after the other
	q "TRUNCATE bench_inserts" >/dev/null
	settle
	measure "insert:$c" "$c" insert.sql "SELECT count(*) FROM bench_inserts"
	submit_prepare
	measure "submit:$c" "$c" submit.sql "SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-submit'"
	floor_prepare
	measure "floor:$c" "$c" floor-step.sql "SELECT count(*) FROM bench_jobs WHERE state = 'done'"
	wfe_steps wfe1 "$c" wfe-step.sql 1 2
	wfe_steps wfe10 "$c" wfe-step-batch.sql 10 5
	if has_complete_tasks; then
		wfe_steps wfe10call "$c" wfe-step-batch-call.sql 10 5
	else
		say "wfe10call      $c client(s):      n/a  (the engine has no wfe.complete_tasks(jsonb))"
	fi
}

# has_complete_tasks: true when the engine has the batch report call
# wfe.complete_tasks(reports jsonb).
has_complete_tasks() {
	[ -n "$(q "SELECT 1 FROM pg_proc
	            WHERE pronamespace = 'wfe'::regnamespace AND proname = 'complete_tasks'
	              AND proargtypes[0] = 'jsonb'::regtype AND pronargs - pronargdefaults <= 1")" ]
}

# sampler SECONDS LABEL: in the background, sample the wait events of the
# pgbench sessions every 10 ms into bench_waits.
sampler() {
	PGOPTIONS="-c statement_timeout=$(($1 + 30))s" cluster_psql -d "$DB" -q \
		-v secs="$1" -v label="$2" -f "$BENCH_DIR/sql/sample-waits.sql" >/dev/null &
	SAMPLER_PID=$!
}

# profile_run LABEL SCRIPT COUNT_SQL FILTER [PGOPTIONS]: a short run with
# every statement, nested ones included, tracked, and its wait events
# sampled; its statements (top-level ones matching FILTER, and every nested
# one) go to bench_profile with the steps COUNT_SQL counted.
profile_run() {
	local label=$1 script=$2 count_sql=$3 filter=$4 extra=${5:-} before
	before=$(q "$count_sql")
	q "SELECT pg_stat_statements_reset()" >/dev/null
	sampler "$PROFILE_SECONDS" "$label"
	pgb 4 "$PROFILE_SECONDS" "$script" \
		"-c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on $extra" >/dev/null
	wait "$SAMPLER_PID" || die "the wait-event sampler failed"
	SAMPLER_PID=""
	q "INSERT INTO bench_profile
	   SELECT '$label', ($count_sql) - $before, s.toplevel, s.calls, s.total_exec_time,
	          s.plans, s.total_plan_time,
	          s.shared_blks_hit + s.shared_blks_read, s.wal_records, s.wal_bytes,
	          regexp_replace(s.query, '\s+', ' ', 'g')
	     FROM pg_stat_statements AS s
	    WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	      AND (NOT s.toplevel OR $filter)
	      AND s.query NOT LIKE '%pg_stat_activity%' AND s.query NOT LIKE '%bench_waits%'" >/dev/null
}

# profile: where the time goes, 4 clients.
profile() {
	local runs wfe_count="SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'"
	local wfe_filter="(query LIKE '%claim_task%' OR query LIKE '%complete_task%')"
	banner "where the time goes: ${PROFILE_SECONDS} s runs, 4 clients, pg_stat_statements.track = all"

	# the floor, for comparison, and its claim's plan
	floor_prepare
	profile_run floor floor-step.sql "SELECT count(*) FROM bench_jobs WHERE state = 'done'" \
		"query LIKE '%bench_jobs%'"
	floor_plan >"$WORKDIR/floor-plan.txt"

	# wfe, batch 1; the claim's plan is taken in the state the run left
	runs=$(awk -v r="${RATE[floor:4]:-2000}" -v s="$PROFILE_SECONDS" -v st="$STEP_STAGES" \
		'BEGIN { n = int(2 * r * s / st) + 1; print (n < 50 ? 50 : n) }')
	wfe_prepare "$runs"
	profile_run wfe1 wfe-step.sql "$wfe_count" "$wfe_filter"
	claim_plan >"$WORKDIR/claim-plan.txt"

	# the same with wfe.notify off, only to price the NOTIFY (no figure
	# above is measured so)
	if [ -n "$(q "SELECT 1 FROM pg_settings WHERE name = 'wfe.notify'")" ]; then
		wfe_prepare "$runs"
		profile_run wfe1-nonotify wfe-step.sql "$wfe_count" "$wfe_filter" "-c wfe.notify=off"
	fi

	# submits of the 12-stage workflow
	submit_prepare
	profile_run submit submit.sql "SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-submit'" \
		"query LIKE '%wfe.submit%'"
}

# claim_plan: the plan of the claim statement inside wfe.claim_task, as the
# engine runs it (auto_explain on the nested statements), in a rolled-back
# transaction.  Prints the plan of the statement that starts "WITH picked",
# or, if the engine's claim has changed shape, every plan auto_explain gave.
claim_plan() {
	local all picked
	all=$(PGOPTIONS="-c statement_timeout=60s" cluster_psql -d "$DB" -q 2>&1 <<'SQL'
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;
BEGIN;
SELECT count(*) FROM wfe.claim_task('bench', 'explain', 1);
ROLLBACK;
SQL
	)
	picked=$(awk '/NOTICE:  duration: / { keep = 0; head = $0; sub(/^.*NOTICE:  /, "", head); next }
		/^Query Text: WITH picked/ { keep = 1; print head; next }
		keep == 1 && /^[A-Za-z]/ && /\(cost=/ { keep = 2 }
		keep == 2' <<<"$all")
	if [ -n "$picked" ]; then
		printf '%s\n' "$picked"
	else
		sed -E 's/^.*NOTICE:  //' <<<"$all"
	fi
}

# floor_plan: the floor's claim, EXPLAIN (ANALYZE, BUFFERS), rolled back.
floor_plan() {
	PGOPTIONS="-c statement_timeout=60s" cluster_psql -d "$DB" -At <<'SQL'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
UPDATE bench_jobs AS j SET state = 'running'
 WHERE j.id = (SELECT r.id FROM bench_jobs AS r
                WHERE r.queue = 'bench' AND r.state = 'ready'
                ORDER BY r.id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING j.id, j.payload;
ROLLBACK;
SQL
}

# ratio A B: A / B to two places, or "n/a" (either missing, B not positive).
ratio() {
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a != "" && a != "n/a" && b > 0) printf "%.2f", a / b; else print "n/a" }'
}

# verdict VALUE GOAL: "yes" or "**no**".
verdict() {
	awk -v v="$1" -v g="$2" 'BEGIN { if (v == "n/a") print "n/a"; else if (v + 0 >= g) print "yes"; else print "**no**" }'
}

# fmt_rate KEY: a rate, rounded, marked when the queue ran dry.
fmt_rate() {
	local v=${RATE[$1]:-}
	[ -n "$v" ] || { echo "n/a"; return; }
	printf '%.0f%s' "$v" "${STARVED[$1]:+ (starved)}"
}

# results: the markdown of the measured figures.
results() {
	local c k w first=${BENCH_CLIENTS%% *} r
	printf '| clients | one-row inserts/s | floor steps/s | wfe steps/s, batch 1 | wfe steps/s, batch 10 | wfe steps/s, batch 10, one `complete_tasks` call | submits/s (12 stages) |\n'
	printf '|---:|---:|---:|---:|---:|---:|---:|\n'
	for c in $BENCH_CLIENTS; do
		printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$(fmt_rate "insert:$c")" "$(fmt_rate "floor:$c")" \
			"$(fmt_rate "wfe1:$c")" "$(fmt_rate "wfe10:$c")" "$(fmt_rate "wfe10call:$c")" "$(fmt_rate "submit:$c")"
	done
	printf '\n| figure |'
	for c in $BENCH_CLIENTS; do printf ' %s client(s) |' "$c"; done
	printf ' goal | met (%s clients) |\n|---|' "$first"
	for c in $BENCH_CLIENTS; do printf '%s' '---:|'; done
	printf '%s\n' '---:|---|'
	for r in "wfe steps/s ÷ floor steps/s, batch 1|wfe1|floor|0.8" \
		"wfe steps/s, batch 10 ÷ floor steps/s|wfe10|floor|2" \
		"wfe steps/s, batch 10, one \`complete_tasks\` call ÷ floor steps/s|wfe10call|floor|2" \
		"submits/s ÷ one-row-insert commits/s|submit|insert|0.4"; do
		IFS='|' read -r name num den goal <<<"$r"
		printf '| %s |' "$name"
		for c in $BENCH_CLIENTS; do printf ' %s |' "$(ratio "${RATE[$num:$c]:-}" "${RATE[$den:$c]:-}")"; done
		printf ' ≥ %s | %s |\n' "$goal" \
			"$(verdict "$(ratio "${RATE[$num:$first]:-}" "${RATE[$den:$first]:-}")" "$goal")"
	done
	printf '\nAverage latency per pgbench script (ms; a step script is two transactions, a batch-10 script claims and completes up to 10 tasks):\n\n'
	printf '| clients | insert | floor step | wfe step, batch 1 | wfe script, batch 10 | wfe script, batch 10, one call | submit |\n|---:|---:|---:|---:|---:|---:|---:|\n'
	for c in $BENCH_CLIENTS; do
		printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$c" "${LATENCY[insert:$c]:-n/a}" "${LATENCY[floor:$c]:-n/a}" \
			"${LATENCY[wfe1:$c]:-n/a}" "${LATENCY[wfe10:$c]:-n/a}" "${LATENCY[wfe10call:$c]:-n/a}" "${LATENCY[submit:$c]:-n/a}"
	done
	printf '\nWAL per step (per row, per run), the whole cluster over each measured run: records / full-page images / bytes:\n\n'
	printf '| clients | insert | floor step | wfe step, batch 1 | wfe step, batch 10 | wfe step, batch 10, one call | submit |\n|---:|---|---|---|---|---|---|\n'
	for c in $BENCH_CLIENTS; do
		printf '| %s |' "$c"
		for k in insert floor wfe1 wfe10 wfe10call submit; do
			w=${WAL[$k:$c]:-n/a}
			printf ' %s |' "${w// / \/ }"
		done
		printf '\n'
	done
}

# machine: the markdown of what the figures were measured on.
machine() {
	local s
	printf -- '- date: %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
	printf -- '- command: `make bench` (BENCH_SECONDS=%s, WARMUP_SECONDS=%s, PROFILE_SECONDS=%s, clients %s%s%s%s)\n' \
		"$BENCH_SECONDS" "$WARMUP_SECONDS" "$PROFILE_SECONDS" "$BENCH_CLIENTS" \
		"${BENCH_SKIP_THROUGHPUT:+; BENCH_SKIP_THROUGHPUT=1}" "${BENCH_SKIP_SCALE:+; BENCH_SKIP_SCALE=1}" \
		"${BENCH_SKIP_BROKER:+; BENCH_SKIP_BROKER=1}"
	printf -- '- machine: %s CPUs (`nproc`), %s; %s; %s\n' "$(nproc)" \
		"$(awk '/^MemTotal:/ { printf "%.1f GiB memory", $2 / 1048576 }' /proc/meminfo)" \
		"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" "$(uname -sr)"
	printf -- '- load average (1, 5, 15 min; the benchmark itself keeps about 2 busy) before the measured runs: %s, after them: %s\n' \
		"${LOAD_START:-?}" "${LOAD_END:-?}"
	printf -- '- data directory on: %s\n' "$(df -PT "$CLUSTER_DIR/data" | awk 'NR == 2 { print $2 " (" $1 ")" }')"
	printf -- '- server: %s\n' "$(q 'SELECT version()')"
	printf -- '- wfe: %s (extension version), driver: %s\n' \
		"$(q "SELECT extversion FROM pg_extension WHERE extname = 'wfe'")" "$("$(pg_path bindir)/pgbench" --version)"
	s=$(q "SELECT string_agg(name || ' = ' || setting || coalesce(' ' || unit, ''), ', ' ORDER BY name)
	         FROM pg_settings
	        WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_level', 'wal_sync_method',
	                       'wal_buffers', 'wal_writer_delay', 'commit_delay', 'max_wal_size',
	                       'checkpoint_timeout', 'shared_buffers', 'wal_compression', 'wfe.notify',
	                       'shared_preload_libraries', 'autovacuum')")
	printf -- '- settings (all defaults but the preload): %s\n' "$s"
}

# profile_report: the markdown of the profiling runs.
profile_report() {
	local -x PGOPTIONS="-c statement_timeout=60s"
	cluster_psql -d "$DB" -v secs="$PROFILE_SECONDS" -f "$BENCH_DIR/sql/report.sql"
	printf '\nStatements of a wfe step (batch 1): the two the worker sends, then the nested ones by total time (execution and planning):\n\n'
	cluster_psql -d "$DB" -v label=wfe1 -f "$BENCH_DIR/sql/statements.sql"
	printf '\nStatements of a submit (12 stages), the same way:\n\n'
	cluster_psql -d "$DB" -v label=submit -f "$BENCH_DIR/sql/statements.sql"
	printf '\nThe claim statement inside `wfe.claim_task`, as the engine runs it (auto_explain: ANALYZE, BUFFERS), right after the wfe profiling run, before any vacuum:\n\n```\n'
	cat "$WORKDIR/claim-plan.txt"
	printf '```\n\nThe floor'"'"'s claim, for comparison (EXPLAIN (ANALYZE, BUFFERS), after its profiling run):\n\n```\n'
	cat "$WORKDIR/floor-plan.txt"
	printf '```\n'
}

# splice FILE NAME CONTENT_FILE: replace what lies between the markers
# <!-- bench:NAME:begin --> and <!-- bench:NAME:end --> in FILE.
splice() {
	local file=$1 name=$2 content=$3
	if ! grep -q "^<!-- bench:$name:begin -->" "$file" || ! grep -q "^<!-- bench:$name:end -->" "$file"; then
		say "warning: $file has no bench:$name markers; not updated"
		return 0
	fi
	awk -v name="$name" -v content="$content" '
		$0 == "<!-- bench:" name ":begin -->" { print; while ((getline line < content) > 0) print line; skip = 1; next }
		$0 == "<!-- bench:" name ":end -->" { skip = 0 }
		!skip' "$file" >"$file.tmp" && mv "$file.tmp" "$file"
}

main() {
	local c compile_out

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Step 1: packages, build, install.
	wfe_setup

	# Step 2: the compile benchmark (its own cluster).
	compile_out=""
	if [ -z "${BENCH_SKIP_COMPILE:-}" ]; then
		banner "compile benchmark (bench/compile/run.sh)"
		compile_out=$(timeout 600 "$BENCH_DIR/compile/run.sh" 2>&1) ||
			{ printf '%s\n' "$compile_out"; die "the compile benchmark failed"; }
		compile_out=$(sed -n '/^== compile:/,$p' <<<"$compile_out")
		printf '%s\n' "$compile_out"
	fi

	# The JSON Schema validator's figures (plain C, no server).
	if [ -z "${BENCH_SKIP_JSONSCHEMA:-}" ]; then
		banner "JSON Schema validator (bench/jsonschema/run.sh)"
		"$BENCH_DIR/jsonschema/run.sh" || die "the JSON Schema benchmark failed"
	fi

	# Step 3: the cluster, the schema.
	banner "cluster"
	bench_cluster
	bench_schema

	# Step 4: the measured runs.
	LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
	if [ -z "${BENCH_SKIP_THROUGHPUT:-}" ]; then
		for c in $BENCH_CLIENTS; do
			throughput "$c"
		done
	fi
	LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

	# Step 5: where the time goes.
	[ -n "${BENCH_SKIP_THROUGHPUT:-}" ] || profile

	# Step 6: scale.
	[ -n "${BENCH_SKIP_SCALE:-}" ] || scale

	# Step 7: latency.
	[ -n "${BENCH_SKIP_LATENCY:-}" ] || latency

	# Step 8: the result cache.
	[ -n "${BENCH_SKIP_CACHE:-}" ] || cache_bench

	# Step 9: signals, waits and sleeps.
	[ -n "${BENCH_SKIP_WAITS:-}" ] || waits_bench

	# Step 10: schedules and run commands.
	[ -n "${BENCH_SKIP_TRIGGERS:-}" ] || triggers_bench

	# Step 11: maps.
	if [ -z "${BENCH_SKIP_MAPS:-}" ]; then
		banner "maps"
		maps_bench
	fi

	# Step 12: child workflows.
	[ -n "${BENCH_SKIP_CHILDREN:-}" ] || children_bench

	# Step 13: flow control (last: it drops and creates wfe in $DB).
	if [ -z "${BENCH_SKIP_FLOW:-}" ]; then
		banner "flow control"
		RL_DB=$DB BIN=$(pg_path bindir) SECS=$BENCH_SECONDS "$BENCH_DIR/ratelimit/run.sh" 2>/dev/null |
			grep -v '^NOTICE' | tee "$WORKDIR/flow.txt"
		# fairness between tenants: the small tenant's wait, and the cost
		FAIR_DB=$DB BIN=$(pg_path bindir) SECS=$BENCH_SECONDS "$BENCH_DIR/fairness/run.sh" 2>/dev/null |
			grep -v '^NOTICE' | tee -a "$WORKDIR/flow.txt"
	fi

	# Step 14: the report.
	if [ -z "${BENCH_SKIP_THROUGHPUT:-}" ]; then
		{ machine; printf '\n'; results; } >"$WORKDIR/results.md"
		if [ -n "$compile_out" ]; then
			printf '\nCompile time of a 500-stage definition (goal ≤ 50 ms):\n\n```\n%s\n```\n' \
				"$(sed '1d' <<<"$compile_out")" >>"$WORKDIR/results.md"
		fi
		profile_report >"$WORKDIR/profile.md"
		banner "results"
		cat "$WORKDIR/results.md"
		banner "where the time goes"
		cat "$WORKDIR/profile.md"
	fi
	if [ -z "${BENCH_SKIP_SCALE:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			scale_results
		} >"$WORKDIR/scale.md"
		banner "scale"
		cat "$WORKDIR/scale.md"
	fi
	if [ -z "${BENCH_SKIP_LATENCY:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			latency_results
		} >"$WORKDIR/latency.md"
		banner "latency"
		cat "$WORKDIR/latency.md"
	fi
	if [ -z "${BENCH_SKIP_CACHE:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			cache_results
		} >"$WORKDIR/cache.md"
		banner "result cache"
		cat "$WORKDIR/cache.md"
	fi
	if [ -z "${BENCH_SKIP_WAITS:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			waits_results
		} >"$WORKDIR/waits.md"
		banner "signals, waits and sleeps"
		cat "$WORKDIR/waits.md"
	fi
	if [ -z "${BENCH_SKIP_TRIGGERS:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			triggers_results
		} >"$WORKDIR/triggers.md"
		banner "schedules and run commands"
		cat "$WORKDIR/triggers.md"
	fi
	if [ -z "${BENCH_SKIP_MAPS:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			maps_results
		} >"$WORKDIR/maps.md"
		banner "maps"
		cat "$WORKDIR/maps.md"
	fi
	if [ -z "${BENCH_SKIP_CHILDREN:-}" ]; then
		{
			[ -z "${BENCH_SKIP_THROUGHPUT:-}" ] || { machine; printf '\n'; }
			children_results
		} >"$WORKDIR/children.md"
		banner "child workflows"
		cat "$WORKDIR/children.md"
	fi
	if [ -n "$BENCH_DOCS" ] && [ -f "$BENCH_DOCS" ]; then
		if [ -z "${BENCH_SKIP_THROUGHPUT:-}" ]; then
			splice "$BENCH_DOCS" results "$WORKDIR/results.md"
			splice "$BENCH_DOCS" profile "$WORKDIR/profile.md"
		fi
		[ -n "${BENCH_SKIP_SCALE:-}" ] || splice "$BENCH_DOCS" scale "$WORKDIR/scale.md"
		[ -n "${BENCH_SKIP_LATENCY:-}" ] || splice "$BENCH_DOCS" latency "$WORKDIR/latency.md"
		[ -n "${BENCH_SKIP_CACHE:-}" ] || splice "$BENCH_DOCS" cache "$WORKDIR/cache.md"
		[ -n "${BENCH_SKIP_WAITS:-}" ] || splice "$BENCH_DOCS" waits "$WORKDIR/waits.md"
		[ -n "${BENCH_SKIP_TRIGGERS:-}" ] || splice "$BENCH_DOCS" triggers "$WORKDIR/triggers.md"
		[ -n "${BENCH_SKIP_MAPS:-}" ] || splice "$BENCH_DOCS" maps "$WORKDIR/maps.md"
		[ -n "${BENCH_SKIP_CHILDREN:-}" ] || splice "$BENCH_DOCS" children "$WORKDIR/children.md"
		if [ -z "${BENCH_SKIP_FLOW:-}" ]; then
			{ machine; printf '\n```\n'; cat "$WORKDIR/flow.txt"; printf '```\n'; } >"$WORKDIR/flow.md"
			splice "$BENCH_DOCS" flow "$WORKDIR/flow.md"
		fi
		say "updated $BENCH_DOCS"
	fi
}

# run, unless sourced (to call its functions by hand)
[[ ${BASH_SOURCE[0]} != "$0" ]] || main "$@"
