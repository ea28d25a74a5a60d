# scale.sh — the scale benchmarks of docs/benchmarks.md, sourced by
# bench/run.sh after the throughput runs and the profile, on the same
# private cluster (wfe and pg_stat_statements preloaded, default settings),
# through the public API, SCALE_CLIENTS pgbench clients:
#
#   1. claim latency, fresh: a one-stage worker workflow (bench-scale, queue
#      bench-scale); SCALE_FRESH_HISTORY finished runs, SCALE_DEPTH queued
#      ones, vacuumed and analysed; then claim and complete
#      (bench/pgbench/claim-step.sql), each completion submitting a new run,
#      so the queue keeps its depth; the claim of every step is timed;
#   2. the same with BENCH_SCALE_BACKLOG runs queued (one burst of submits)
#      instead of SCALE_DEPTH: claim p99 ÷ fresh p99;
#   3. fresh again, then the same with BENCH_SCALE_HISTORY finished runs
#      (loaded by bench_clone_run, bench/scale/setup.sql: copies of a run
#      finished through the API, spread over the retention period):
#      claim p99 ÷ that fresh p99 (goal ≤ 1.5);
#   3b. the dashboard views (operations.md "Dashboards"), read in full,
#      median of DASH_READS reads each, on the fresh database of 3 and at
#      BENCH_SCALE_HISTORY finished runs; then retention at that scale: the
#      oldest day of the history deleted by wfe._retention in batches of
#      RETENTION_BATCH, timed per batch, with the tables' size and dead
#      tuples before and after, and the call that dropped the oldest day
#      partition of wfe.events; the machine's load average beside each;
#   4. seed 003's shape: BENCH_SEED003_RUNS runs of a 12-stage linear worker
#      workflow (bench-seed003) in flight, claimed and completed for
#      BENCH_SEED003_SECONDS (bench/pgbench/seed003-step.sql: a new run for
#      each one that finishes); steps/s over the run and in its first and
#      last tenth, queued tasks and runs in flight at its start and end
#      (goal: 900 steps/s sustained, no backlog growth).
#
# Each figure starts from no runs (TRUNCATE), builds what it needs, and
# settles (VACUUM ANALYZE, CHECKPOINT); each pgbench run is bounded by its
# length and a timeout, each statement by statement_timeout.  The runs are
# removed at the end.
#
# Environment (defaults in brackets):
#   BENCH_SCALE_SECONDS [BENCH_SECONDS]  each measured claim run, after
#                                        WARMUP_SECONDS of warm-up
#   BENCH_SCALE_BACKLOG [20000]   queued runs of 2 (0: leave 2 out)
#   BENCH_SCALE_HISTORY [1000000] finished runs of 3 (0: leave 3 out);
#                                 10000000 for the 10M figures (about 21 GB
#                                 of data, 4 GB of WAL at most while loading;
#                                 the loader's rate is printed, with the load
#                                 average: about 5,000 runs/s on the shared
#                                 2-CPU machine, so 35 minutes at 10M)
#   BENCH_SCALE_LOADERS [2]       sessions copying the history at once
#   BENCH_SCALE_RETENTION_SECONDS [0]  cap of the retention loop of 3b (0:
#                                 none); when it stops the loop before the
#                                 oldest day partition goes, that
#                                 partition's DROP TABLE is timed by itself
#   BENCH_SEED003_RUNS [10000]    runs in flight in 4
#   BENCH_SEED003_SECONDS [600]   length of 4 (0: leave 4 out)
#
# shellcheck shell=bash disable=SC2016

BENCH_SCALE_SECONDS=${BENCH_SCALE_SECONDS:-$BENCH_SECONDS}
BENCH_SCALE_BACKLOG=${BENCH_SCALE_BACKLOG:-20000}
BENCH_SCALE_HISTORY=${BENCH_SCALE_HISTORY:-1000000}
BENCH_SEED003_RUNS=${BENCH_SEED003_RUNS:-10000}
BENCH_SEED003_SECONDS=${BENCH_SEED003_SECONDS:-600}
SCALE_DIR="$BENCH_DIR/scale"
SCALE_CLIENTS=4
SCALE_DEPTH=100           # queued runs of the fresh and history figures, kept
SCALE_FRESH_HISTORY=2000  # finished runs behind the fresh and backlog figures
SCALE_CHUNK=100000        # copies per statement of the history loader
SCALE_LOADERS=${BENCH_SCALE_LOADERS:-2}  # loader sessions at once
SCALE_SUBMITS=2000        # submits per statement when queueing runs
SCALE_GOAL=1.5            # claim p99 at scale ÷ fresh, at most
SEED003_STAGES=12         # seed 003's average workflow
SEED003_GOAL=900          # steps/s, sustained
SCALE_PGOPTIONS="-c statement_timeout=60s"
DASH_VIEWS="dashboard_runs dashboard_queues dashboard_outbox dashboard_stages dashboard_tenants idempotency dashboard_stuck dashboard_cache metrics"
DASH_READS=5              # reads per view; the median is reported
RETENTION_BATCH=1000      # runs per wfe._retention call in the retention figure
RETENTION_SECONDS=${BENCH_SCALE_RETENTION_SECONDS:-0}  # the retention loop's cap (0: none)

# The scale figures, keyed "figure:what".
declare -A SCALE

# loadavg: the machine's load average (1, 5, 15 minutes), printed beside
# each figure: on a shared machine the figures mean little without it.
loadavg() {
	cut -d' ' -f1-3 /proc/loadavg
}

# scale_setup: the two workflows and the sample tables (safe to repeat).
scale_setup() {
	chain bench-scale 1 bench-scale bench.scale@1 >"$WORKDIR/scale.yaml"
	chain bench-seed003 "$SEED003_STAGES" bench-seed003 bench.seed003@1 >"$WORKDIR/seed003.yaml"
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s -c client_min_messages=warning" cluster_psql -d "$DB" -q \
		-v scale="$WORKDIR/scale.yaml" -v seed003="$WORKDIR/seed003.yaml" \
		-f "$SCALE_DIR/setup.sql" >/dev/null
}

# scale_reset: no runs (stages, events, outbox rows, timers) left from before.
scale_reset() {
	q "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" >/dev/null
}

# scale_submit WORKFLOW N: N runs submitted, SCALE_SUBMITS per statement.
scale_submit() {
	local made=0 n
	while [ "$made" -lt "$2" ]; do
		n=$(($2 - made < SCALE_SUBMITS ? $2 - made : SCALE_SUBMITS))
		q "SELECT count(*) FROM (SELECT wfe.submit('$1', jsonb_build_object('x', i))
		                           FROM generate_series(1, $n) AS i) AS s" >/dev/null
		made=$((made + n))
	done
}

# scale_history N KEY: N finished runs of bench-scale, on an empty queue:
# one submitted, claimed and completed through the API, then N - 1 copies
# of it (bench_clone_run), spread over the retention period less an hour
# (the worker's retention pass deletes none of them during the runs), run
# ids and finish times growing together.  Its time goes to SCALE[KEY:*].
scale_history() {
	local n=$1 key=$2 t0 tpl run stage attempt fence span first k rows=0
	[ "$n" -gt 0 ] || return 0
	t0=$(date +%s.%N)
	SCALE[$key:load_la0]=$(loadavg)
	tpl=$(q "SELECT run_id FROM wfe.submit('bench-scale', '{\"x\": 0}')")
	read -r run stage attempt fence <<<"$(q "SELECT run_id || ' ' || stage || ' ' || attempt || ' ' || fence
	                                         FROM wfe.claim_task('bench-scale', 'loader', 1)")"
	[ "${run:-}" = "$tpl" ] || die "history: the template run $tpl was not the one claimed (${run:-none})"
	[ "$(q "SELECT wfe.complete_task($run, '$stage', $attempt, $fence)")" = accepted ] ||
		die "history: the template run's completion was not accepted"
	[ "$(q "SELECT state FROM wfe.runs WHERE run_id = $tpl AND finished_at IS NOT NULL")" = completed ] ||
		die "history: the template run did not finish completed"
	span=$(q "SELECT greatest(setting::int - 3600, setting::int / 2) FROM pg_settings WHERE name = 'wfe.retention'")
	[ -n "$span" ] || span=$((6 * 24 * 3600))
	# the day partitions of the events the copies date back to (the
	# worker makes today's and the next days' only)
	q "SELECT sum(wfe._history_make_day(d::date))
	     FROM generate_series((now() AT TIME ZONE 'UTC')::date - $span / 86400 - 1,
	                          (now() AT TIME ZONE 'UTC')::date, interval '1 day') AS d" >/dev/null
	# a large load: checkpoints spaced out while it runs (put back before
	# anything is measured), and SCALE_LOADERS sessions copying chunks at once
	[ "$n" -le "$SCALE_CHUNK" ] ||
		q "ALTER SYSTEM SET max_wal_size = '4GB'" "ALTER SYSTEM SET checkpoint_timeout = '30min'" \
			"SELECT pg_reload_conf()" >/dev/null
	local out="$WORKDIR/history-rows" jobs=0
	rm -f "$out".*
	for ((first = 1; first < n; first += k)); do
		k=$((n - first < SCALE_CHUNK ? n - first : SCALE_CHUNK))
		q "SELECT bench_clone_run($tpl, $first, $k, $((n - 1)), make_interval(secs => $span))" >"$out.$first" &
		jobs=$((jobs + 1))
		if [ "$jobs" -ge "$SCALE_LOADERS" ]; then
			wait -n || die "history: a loader failed"
			jobs=$((jobs - 1))
		fi
	done
	while [ "$jobs" -gt 0 ]; do
		wait -n || die "history: a loader failed"
		jobs=$((jobs - 1))
	done
	rows=$(cat "$out".* 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
	rm -f "$out".*
	[ "$n" -le "$SCALE_CHUNK" ] ||
		q "ALTER SYSTEM RESET max_wal_size" "ALTER SYSTEM RESET checkpoint_timeout" "SELECT pg_reload_conf()" >/dev/null
	q "SELECT setval(pg_get_serial_sequence('wfe.runs', 'run_id'), (SELECT max(run_id) FROM wfe.runs))" >/dev/null
	SCALE[$key:finished]=$(q "SELECT count(*) FROM wfe.runs WHERE finished_at IS NOT NULL")
	[ "${SCALE[$key:finished]}" -eq "$n" ] || die "history: ${SCALE[$key:finished]} finished runs, not $n"
	SCALE[$key:load_s]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	SCALE[$key:load_rate]=$(awk -v n="$n" -v s="${SCALE[$key:load_s]}" 'BEGIN { printf "%.0f", n / s }')
	SCALE[$key:load_la1]=$(loadavg)
	SCALE[$key:load_rows]=$((rows + $(q "SELECT (SELECT count(*) FROM wfe.run_stages WHERE run_id = $tpl)
	                                           + (SELECT count(*) FROM wfe.events WHERE run_id = $tpl) + 1")))
	SCALE[$key:span_d]=$(awk -v s="$span" 'BEGIN { printf "%.1f", s / 86400 }')
}

# scale_check KEY QUEUE: no callback was rejected (else the benchmark is
# wrong); the tasks still queued go to SCALE[KEY:queued_end].
scale_check() {
	local rejected
	rejected=$(q "SELECT count(*) FROM wfe.events WHERE type LIKE 'callback.%'")
	[ "$rejected" -eq 0 ] || die "$1: $rejected callbacks were rejected; the benchmark is wrong"
	SCALE[$1:queued_end]=$(q "SELECT count(*) FROM wfe.run_stages WHERE queue = '$2' AND state = 'queued'")
}

# claim_run KEY: a warm-up, then a measured run of claim-step.sql on
# bench-scale; the claims' latencies (bench_claim_lat) and the steps'
# (pgbench's log, into bench_step_lat) go to SCALE[KEY:*].
claim_run() {
	local key=$1 n tps lat
	local args=(-D queue=bench-scale -D workflow=bench-scale)
	q "DELETE FROM bench_claim_lat WHERE label IN ('$key', '$key:warmup')" \
		"DELETE FROM bench_step_lat WHERE label = '$key'" >/dev/null
	SCALE[$key:queued]=$(q "SELECT count(*) FROM wfe.run_stages WHERE queue = 'bench-scale' AND state = 'queued'")
	SCALE[$key:la]=$(loadavg)
	pgb "$SCALE_CLIENTS" "$WARMUP_SECONDS" claim-step.sql "$SCALE_PGOPTIONS" "${args[@]}" -D label="$key:warmup" >/dev/null
	rm -f "$WORKDIR/pgbench-$key".*
	read -r n tps lat < <(pgb "$SCALE_CLIENTS" "$BENCH_SCALE_SECONDS" claim-step.sql "$SCALE_PGOPTIONS" \
		"${args[@]}" -D label="$key" --log --log-prefix="$WORKDIR/pgbench-$key")
	# pgbench's log: client, script number, latency (us), ...
	cat "$WORKDIR/pgbench-$key".* | awk -v l="$key" '{ printf "%s\t%.3f\n", l, $3 / 1000 }' |
		q "COPY bench_step_lat (label, ms) FROM STDIN" >/dev/null
	scale_check "$key" bench-scale
	SCALE[$key:rate]=$(awk -v t="$tps" 'BEGIN { printf "%.0f", t }')
	SCALE[$key:scripts]=$n
	read -r "SCALE[$key:n]" "SCALE[$key:empty]" "SCALE[$key:p50]" "SCALE[$key:p99]" "SCALE[$key:max]" \
		"SCALE[$key:exec_p50]" "SCALE[$key:exec_p99]" < <(q "
		SELECT count(*) || ' ' || count(*) FILTER (WHERE tasks = 0)
		       || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY txn_ms), 'FM999990.000')
		       || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY txn_ms), 'FM999990.000')
		       || ' ' || to_char(max(txn_ms), 'FM999990.000')
		       || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY exec_ms), 'FM999990.000')
		       || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY exec_ms), 'FM999990.000')
		  FROM bench_claim_lat WHERE label = '$key'")
	SCALE[$key:step_p99]=$(q "SELECT coalesce(to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'FM999990.000'), 'n/a')
	                            FROM bench_step_lat WHERE label = '$key'")
	[ "${SCALE[$key:empty]:-0}" -eq 0 ] ||
		say "warning: $key: ${SCALE[$key:empty]} claims found the queue empty"
	say "$(printf '%-8s claim p50 %s ms, p99 %s ms, max %s ms (execution p50 %s, p99 %s ms; %s claims); step p99 %s ms; %s steps/s; queued %s -> %s' \
		"$key:" "${SCALE[$key:p50]}" "${SCALE[$key:p99]}" "${SCALE[$key:max]}" "${SCALE[$key:exec_p50]}" \
		"${SCALE[$key:exec_p99]}" "${SCALE[$key:n]}" "${SCALE[$key:step_p99]}" "${SCALE[$key:rate]}" \
		"${SCALE[$key:queued]}" "${SCALE[$key:queued_end]}") (load average ${SCALE[$key:la]})"
}

# scale_fresh KEY: the claim latency on a fresh database: a little
# history, a small queue.
scale_fresh() {
	scale_reset
	scale_history "$SCALE_FRESH_HISTORY" "$1"
	scale_submit bench-scale "$SCALE_DEPTH"
	settle
	dashboard_times "$1"
	claim_run "$1"
}

# scale_backlog: the claim latency with BENCH_SCALE_BACKLOG runs queued
# by a burst of submits, behind the same little history.
scale_backlog() {
	scale_reset
	scale_history "$SCALE_FRESH_HISTORY" backlog
	scale_submit bench-scale "$BENCH_SCALE_BACKLOG"
	settle
	claim_run backlog
}

# scale_finished: the claim latency behind BENCH_SCALE_HISTORY finished
# runs, with a small queue.
scale_finished() {
	scale_reset
	scale_history "$BENCH_SCALE_HISTORY" history
	say "history: ${SCALE[history:finished]} finished runs (${SCALE[history:load_rows]} rows) loaded in ${SCALE[history:load_s]} s (${SCALE[history:load_rate]} runs/s, $SCALE_LOADERS loaders; load average ${SCALE[history:load_la0]} before, ${SCALE[history:load_la1]} after), over ${SCALE[history:span_d]} days; $(q "SELECT pg_size_pretty(pg_database_size(current_database()))")"
	scale_submit bench-scale "$SCALE_DEPTH"
	settle
	dashboard_times history
	claim_run history
	retention_day
}

# dashboard_times KEY: each dashboard view read DASH_READS times; the median
# read time (ms) goes to SCALE[KEY:dash:VIEW].
dashboard_times() {
	local v
	for v in $DASH_VIEWS; do
		SCALE[$1:dash:$v]=$(q "SELECT to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY bench_view_ms('$v')), 'FM999990.00')
		                        FROM generate_series(1, $DASH_READS)")
	done
	SCALE[$1:dash_la]=$(loadavg)
	say "$1: dashboards (load average ${SCALE[$1:dash_la]}) $(for v in $DASH_VIEWS; do printf '%s %s ms, ' "$v" "${SCALE[$1:dash:$v]}"; done)"
}

# retention_day: delete the oldest day of the history (finished runs older
# than its first day's end) with wfe._retention, RETENTION_BATCH runs a
# call, each call a transaction; times, sizes and dead tuples to SCALE[ret:*].
retention_day() {
	local cutoff cutoff_s t0 calls=0 n ms all_ms=() sizes0 sizes1 oldest out
	# the cutoff is a time, not an age: calls that take long (a loaded
	# machine) must not keep finding runs that aged past it meanwhile
	cutoff=$(q "SELECT min(finished_at) + interval '1 day' FROM wfe.runs WHERE finished_at IS NOT NULL")
	cutoff_s="extract(epoch FROM now() - '$cutoff'::timestamptz)::int"
	SCALE[ret:target]=$(q "SELECT count(*) FROM wfe.runs WHERE finished_at < '$cutoff'")
	sizes0=$(q "SELECT pg_total_relation_size('wfe.runs') + pg_total_relation_size('wfe.run_stages') + (SELECT sum(pg_total_relation_size(p.relid)) FROM pg_partition_tree('wfe.events') AS p)")
	# the oldest day partition, which the loop should drop: its size and
	# rows (the planner's count, after settle's ANALYZE), and the call that drops it
	oldest=$(q "SELECT name FROM wfe._history_days() LIMIT 1")
	read -r "SCALE[ret:part_mb]" "SCALE[ret:part_rows]" < <(q "SELECT pg_total_relation_size('wfe.$oldest') / 1048576
	                                                               || ' ' || reltuples::bigint FROM pg_class WHERE oid = 'wfe.$oldest'::regclass")
	SCALE[ret:part]=$oldest
	SCALE[ret:la0]=$(loadavg)
	t0=$(date +%s.%N)
	while :; do
		mapfile -t out < <(q "SELECT n || ' ' || extract(epoch FROM clock_timestamp() - t) * 1000
		                        FROM (SELECT clock_timestamp() AS t) AS s,
		                             LATERAL (SELECT wfe._retention($cutoff_s, $RETENTION_BATCH) AS n) AS r" \
		                     "SELECT to_regclass('wfe.$oldest') IS NULL")
		read -r n ms <<<"${out[0]}"
		if [ -z "${SCALE[ret:drop_ms]:-}" ] && [ "${out[1]}" = t ]; then
			SCALE[ret:drop_ms]=$(printf '%.1f' "$ms")
			SCALE[ret:drop_call]=$((calls + 1))
			SCALE[ret:drop_at_s]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
		fi
		[ "$n" -gt 0 ] || break
		calls=$((calls + 1))
		all_ms+=("$ms")
		if [ "$RETENTION_SECONDS" -gt 0 ] &&
			awk -v a="$t0" -v b="$(date +%s.%N)" -v m="$RETENTION_SECONDS" 'BEGIN { exit !(b - a > m) }'; then
			SCALE[ret:capped]=1
			break
		fi
	done
	SCALE[ret:la1]=$(loadavg)
	SCALE[ret:left]=$(q "SELECT count(*) FROM wfe.runs WHERE finished_at < '$cutoff'")
	SCALE[ret:done]=$((${SCALE[ret:target]} - ${SCALE[ret:left]}))
	SCALE[ret:rate]=$(awk -v n="${SCALE[ret:done]}" -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", n / (b - a) }')
	# capped before the day's runs were all gone: the partition's DROP TABLE
	# timed by itself (what the pass would do once they were; it costs the
	# same whoever its rows name)
	if [ -z "${SCALE[ret:drop_ms]:-}" ]; then
		SCALE[ret:drop_ms]=$(q "SELECT to_char(bench_drop_ms('$oldest'), 'FM999990.0')")
		SCALE[ret:drop_call]="alone"
	fi
	SCALE[ret:s]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	SCALE[ret:calls]=$calls
	read -r "SCALE[ret:p50]" "SCALE[ret:max]" < <(printf '%s
' "${all_ms[@]}" | sort -n |
		awk '{ v[NR] = $1 } END { printf "%.1f %.1f\n", v[int((NR + 1) / 2)], v[NR] }')
	SCALE[ret:dead]=$(q "SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE schemaname = 'wfe' AND (relname IN ('runs', 'run_stages') OR relname LIKE 'events\\_%')")
	sizes1=$(q "SELECT pg_total_relation_size('wfe.runs') + pg_total_relation_size('wfe.run_stages') + (SELECT sum(pg_total_relation_size(p.relid)) FROM pg_partition_tree('wfe.events') AS p)")
	SCALE[ret:mb0]=$((sizes0 / 1048576))
	SCALE[ret:mb1]=$((sizes1 / 1048576))
	settle
	SCALE[ret:mb2]=$(( $(q "SELECT pg_total_relation_size('wfe.runs') + pg_total_relation_size('wfe.run_stages') + (SELECT sum(pg_total_relation_size(p.relid)) FROM pg_partition_tree('wfe.events') AS p)") / 1048576 ))
	say "retention: ${SCALE[ret:target]} runs of the oldest day${SCALE[ret:capped]:+ (loop capped at $RETENTION_SECONDS s: ${SCALE[ret:done]} deleted)}, ${SCALE[ret:rate]} runs/s, in ${SCALE[ret:calls]} calls of $RETENTION_BATCH, ${SCALE[ret:s]} s (call p50 ${SCALE[ret:p50]} ms, max ${SCALE[ret:max]} ms); ${SCALE[ret:left]} left; runs+stages+events ${SCALE[ret:mb0]} MB -> ${SCALE[ret:mb1]} MB (${SCALE[ret:dead]} dead tuples) -> ${SCALE[ret:mb2]} MB after VACUUM"
	say "           the oldest day's partition $oldest (${SCALE[ret:part_mb]} MB, ${SCALE[ret:part_rows]} events) dropped by call ${SCALE[ret:drop_call]:-none} (${SCALE[ret:drop_ms]:-n/a} ms, ${SCALE[ret:drop_at_s]:-n/a} s in); load average ${SCALE[ret:la0]} before, ${SCALE[ret:la1]} after"
}

# seed003_state: "QUEUED IN_FLIGHT EPOCH" of seed 003's runs, now.
seed003_state() {
	q "SELECT (SELECT count(*) FROM wfe.run_stages WHERE queue = 'bench-seed003' AND state = 'queued')
	          || ' ' || (SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-seed003' AND finished_at IS NULL)
	          || ' ' || extract(epoch FROM clock_timestamp())"
}

# seed003: seed 003's shape, BENCH_SEED003_RUNS runs in flight for
# BENCH_SEED003_SECONDS; rates from the stage.completed events' times.
seed003() {
	local t0 t1 slice n tps lat first last all runs
	scale_reset
	scale_submit bench-seed003 "$BENCH_SEED003_RUNS"
	settle
	pgb "$SCALE_CLIENTS" "$WARMUP_SECONDS" seed003-step.sql "$SCALE_PGOPTIONS" >/dev/null
	read -r "SCALE[seed:queued]" "SCALE[seed:flight]" t0 < <(seed003_state)
	read -r n tps lat < <(pgb "$SCALE_CLIENTS" "$BENCH_SEED003_SECONDS" seed003-step.sql "$SCALE_PGOPTIONS")
	read -r "SCALE[seed:queued_end]" "SCALE[seed:flight_end]" t1 < <(seed003_state)
	scale_check seed bench-seed003
	slice=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 10 }')
	read -r first last all runs < <(q "
		SELECT count(*) FILTER (WHERE type = 'stage.completed' AND at < to_timestamp($t0) + make_interval(secs => $slice))
		       || ' ' || count(*) FILTER (WHERE type = 'stage.completed' AND at >= to_timestamp($t1) - make_interval(secs => $slice))
		       || ' ' || count(*) FILTER (WHERE type = 'stage.completed')
		       || ' ' || count(*) FILTER (WHERE type = 'run.completed')
		  FROM wfe.events
		 WHERE type IN ('stage.completed', 'run.completed') AND at >= to_timestamp($t0) AND at < to_timestamp($t1)")
	SCALE[seed:s]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	SCALE[seed:rate]=$(awk -v n="$all" -v s="${SCALE[seed:s]}" 'BEGIN { printf "%.0f", n / s }')
	SCALE[seed:first]=$(awk -v n="$first" -v s="$slice" 'BEGIN { printf "%.0f", n / s }')
	SCALE[seed:last]=$(awk -v n="$last" -v s="$slice" 'BEGIN { printf "%.0f", n / s }')
	SCALE[seed:runs]=$(awk -v n="$runs" -v s="${SCALE[seed:s]}" 'BEGIN { printf "%.1f", n / s }')
	SCALE[seed:steps]=$all
	SCALE[seed:latency]=$lat
	say "seed 003: ${SCALE[seed:rate]} steps/s over ${SCALE[seed:s]} s ($all steps, ${SCALE[seed:runs]} runs finished/s; first tenth ${SCALE[seed:first]}/s, last tenth ${SCALE[seed:last]}/s; pgbench latency $lat ms)"
	say "          queued tasks ${SCALE[seed:queued]} -> ${SCALE[seed:queued_end]}, runs in flight ${SCALE[seed:flight]} -> ${SCALE[seed:flight_end]}"
}

# scale: every scale figure.
scale() {
	banner "scale: claim latency (${BENCH_SCALE_SECONDS} s runs after ${WARMUP_SECONDS} s of warm-up), seed 003's shape (${BENCH_SEED003_SECONDS} s), $SCALE_CLIENTS clients"
	scale_setup
	scale_fresh fresh
	[ "$BENCH_SCALE_BACKLOG" -le 0 ] || scale_backlog
	if [ "$BENCH_SCALE_HISTORY" -gt 0 ]; then
		scale_fresh fresh2
		scale_finished
	fi
	[ "$BENCH_SEED003_SECONDS" -le 0 ] || seed003
	scale_reset
}

# verdict_at_most VALUE GOAL: "yes" or "**no**".
verdict_at_most() {
	awk -v v="$1" -v g="$2" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if (v + 0 <= g) print "yes"; else print "**no**" }'
}

# scale_row NAME KEY: one markdown row of a claim latency run.
scale_row() {
	local k=$2
	[ -n "${SCALE[$k:n]:-}" ] || return 0
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "${SCALE[$k:queued]}" \
		"${SCALE[$k:finished]:-0}" "${SCALE[$k:rate]}" "${SCALE[$k:n]}" "${SCALE[$k:p50]}" "${SCALE[$k:p99]}" \
		"${SCALE[$k:max]}" "${SCALE[$k:exec_p50]}" "${SCALE[$k:exec_p99]}" "${SCALE[$k:step_p99]}"
}

# scale_results: the markdown of the scale figures.
scale_results() {
	local r rx sustained growth
	printf -- '- settings: %s clients, `-M prepared`; claim runs of %s s after %s s of warm-up; fresh: %s finished runs, %s queued (kept); backlog: %s queued (kept); history: %s finished runs; seed 003: %s runs of %s stages in flight for %s s\n' \
		"$SCALE_CLIENTS" "$BENCH_SCALE_SECONDS" "$WARMUP_SECONDS" "$SCALE_FRESH_HISTORY" "$SCALE_DEPTH" \
		"$BENCH_SCALE_BACKLOG" "$BENCH_SCALE_HISTORY" "$BENCH_SEED003_RUNS" "$SEED003_STAGES" "$BENCH_SEED003_SECONDS"
	if [ -n "${SCALE[history:load_s]:-}" ]; then
		printf -- '- history loader: %s finished runs, %s rows (runs, stages, events), in %s s (%s runs/s, %s sessions; load average %s before, %s after), finish times spread over %s days\n' \
			"${SCALE[history:finished]}" "${SCALE[history:load_rows]}" "${SCALE[history:load_s]}" "${SCALE[history:load_rate]}" \
			"$SCALE_LOADERS" "${SCALE[history:load_la0]}" "${SCALE[history:load_la1]}" "${SCALE[history:span_d]}"
	fi
	printf '\nClaim latency, one-stage workflow, each completion submitting a new run (ms; "claim" = the claim transaction, from its statement'"'"'s start to the client'"'"'s next statement; "execution" = the claim statement without its commit; "step" = claim and completion, pgbench'"'"'s log):\n\n'
	printf '| run | queued | finished runs before | steps/s | claims | claim p50 | claim p99 | claim max | execution p50 | execution p99 | step p99 |\n'
	printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
	scale_row fresh fresh
	scale_row "backlog" backlog
	scale_row "fresh (again)" fresh2
	scale_row "history" history
	printf '\n| figure | value | goal | met |\n|---|---:|---|---|\n'
	if [ -n "${SCALE[backlog:n]:-}" ]; then
		r=$(ratio "${SCALE[backlog:p99]}" "${SCALE[fresh:p99]}")
		rx=$(ratio "${SCALE[backlog:exec_p99]}" "${SCALE[fresh:exec_p99]}")
		printf '| claim p99 with %s runs queued ÷ fresh (execution alone) | %s (%s) | | |\n' "$BENCH_SCALE_BACKLOG" "$r" "$rx"
	fi
	if [ -n "${SCALE[history:n]:-}" ]; then
		r=$(ratio "${SCALE[history:p99]}" "${SCALE[fresh2:p99]}")
		rx=$(ratio "${SCALE[history:exec_p99]}" "${SCALE[fresh2:exec_p99]}")
		printf '| claim p99 at %s finished runs ÷ fresh (execution alone) | %s (%s) | ≤ %s | %s |\n' \
			"${SCALE[history:finished]}" "$r" "$rx" "$SCALE_GOAL" "$(verdict_at_most "$r" "$SCALE_GOAL")"
	fi
	if [ -n "${SCALE[history:dash:dashboard_runs]:-}" ]; then
		printf '\nDashboard views, one full read (ms, median of %s reads), %s queued runs, fresh and at %s finished runs:\n\n' \
			"$DASH_READS" "$SCALE_DEPTH" "${SCALE[history:finished]}"
		printf '| view | fresh (%s finished) | at %s finished | ratio |\n|---|---:|---:|---:|\n' \
			"$SCALE_FRESH_HISTORY" "${SCALE[history:finished]}"
		for v in $DASH_VIEWS; do
			printf '| `wfe.%s` | %s | %s | %s |\n' "$v" "${SCALE[fresh2:dash:$v]:-n/a}" "${SCALE[history:dash:$v]}" \
				"$(ratio "${SCALE[history:dash:$v]}" "${SCALE[fresh2:dash:$v]:-0}")"
		done
	fi
	if [ -n "${SCALE[ret:calls]:-}" ]; then
		printf '\nRetention at %s finished runs: the oldest day (%s runs) deleted by `wfe._retention`%s in %s calls of %s runs, %s s, %s runs/s (a call: p50 %s ms, max %s ms; each its own transaction, locking only the runs it deletes; load average %s before, %s after); runs, stages and events %s MB before, %s MB after (%s dead tuples), %s MB after VACUUM. The oldest day partition, %s (%s MB, %s events), dropped %s: %s ms.\n' \
			"${SCALE[history:finished]}" "${SCALE[ret:target]}" \
			"${SCALE[ret:capped]:+ (the loop capped at $RETENTION_SECONDS s: ${SCALE[ret:done]} deleted)}" \
			"${SCALE[ret:calls]}" "$RETENTION_BATCH" "${SCALE[ret:s]}" "${SCALE[ret:rate]}" \
			"${SCALE[ret:p50]}" "${SCALE[ret:max]}" "${SCALE[ret:la0]}" "${SCALE[ret:la1]}" \
			"${SCALE[ret:mb0]}" "${SCALE[ret:mb1]}" "${SCALE[ret:dead]}" "${SCALE[ret:mb2]}" \
			"${SCALE[ret:part]}" "${SCALE[ret:part_mb]}" "${SCALE[ret:part_rows]}" \
			"$([ "${SCALE[ret:drop_call]}" = alone ] && echo 'by a DROP TABLE of its own once the loop stopped (its runs not all deleted)' || echo "by call ${SCALE[ret:drop_call]}, ${SCALE[ret:drop_at_s]} s in (that whole call)")" \
			"${SCALE[ret:drop_ms]}"
	fi
	if [ -n "${SCALE[seed:rate]:-}" ]; then
		sustained=$(awk -v a="${SCALE[seed:rate]}" -v l="${SCALE[seed:last]}" -v g="$SEED003_GOAL" \
			'BEGIN { print (a >= g && l >= g) ? "yes" : "**no**" }')
		growth=$(awk -v a="${SCALE[seed:queued]}" -v b="${SCALE[seed:queued_end]}" \
			'BEGIN { print (b <= a * 1.05) ? "yes" : "**no**" }')
		printf '| seed 003: steps/s with %s runs of %s stages in flight, %s s (first tenth, last tenth) | %s (%s, %s) | ≥ %s, sustained | %s |\n' \
			"${SCALE[seed:flight]}" "$SEED003_STAGES" "${SCALE[seed:s]}" "${SCALE[seed:rate]}" \
			"${SCALE[seed:first]}" "${SCALE[seed:last]}" "$SEED003_GOAL" "$sustained"
		printf '| seed 003: queued tasks at start → end (runs in flight) | %s → %s (%s → %s) | no growth (end ≤ start × 1.05) | %s |\n' \
			"${SCALE[seed:queued]}" "${SCALE[seed:queued_end]}" "${SCALE[seed:flight]}" "${SCALE[seed:flight_end]}" "$growth"
	fi
}
