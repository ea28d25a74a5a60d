# cache.sh — the result cache benchmarks of docs/benchmarks.md ("Result
# cache"), sourced by bench/run.sh, on the same private cluster:
#
#   1. a cached stage's release -> completed: CACHE_HITS submits of a
#      one-stage workflow whose entry is warm, one at a time (a procedure,
#      bench/cache/setup.sql): the submit statement (the server's time per
#      hit) and submit -> COMMIT returned (the run completed, durable);
#      beside them the same submit of the workflow without `cache:` (the
#      stage is queued) and with a fresh input (a miss);
#   2. steps/s (stages completed per second, hits included) of a
#      CACHE_STAGES-stage linear workflow, CACHE_CLIENTS clients each
#      submitting a run and then working the queue dry, for CACHE_SECONDS:
#      with `cache:` and CACHE_FRESH_PCT percent fresh inputs (the rest one
#      of CACHE_WARM inputs whose entries are warm: a 90% hit ratio by
#      default), against the same workflow without `cache:`.
#
# Environment (defaults in brackets): CACHE_HITS [300], CACHE_STAGES [10],
# CACHE_CLIENTS [4], CACHE_SECONDS [5], CACHE_WARM [50], CACHE_FRESH_PCT [10].
#
# shellcheck shell=bash disable=SC2016

CACHE_HITS=${CACHE_HITS:-300}
CACHE_STAGES=${CACHE_STAGES:-10}
CACHE_CLIENTS=${CACHE_CLIENTS:-4}
CACHE_SECONDS=${CACHE_SECONDS:-5}
CACHE_WARM=${CACHE_WARM:-50}
CACHE_FRESH_PCT=${CACHE_FRESH_PCT:-10}
CACHE_DIR="$BENCH_DIR/cache"

# What the cache runs found.
declare -A CACHE

# cache_stats FIGURE: "N P50 P90 P99 MAX" (ms) of a figure's samples, or "0".
cache_stats() {
	q "SELECT coalesce(count(*) || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(max(ms), 'FM999990.000'), '0')
	     FROM bench_cache_lat WHERE figure = '$1'"
}

# cache_reset: no runs and no entries left from before.
cache_reset() {
	q "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" "TRUNCATE wfe.cache_entries" >/dev/null
}

# cache_steps KEY FLOW FRESH_PCT: steps/s of CACHE_CLIENTS drivers of FLOW,
# and the hit ratio of the stages they completed.
cache_steps() {
	local key=$1 flow=$2 fresh=$3 pids=() p t0 t1 c0 c1 h0 m0 hits misses
	local count_sql="SELECT count(*) FILTER (WHERE cache IN ('hit', 'coalesced')) || ' ' || count(*) FILTER (WHERE cache = 'miss')
	                 FROM wfe.run_stages WHERE state = 'completed'"
	q "VACUUM ANALYZE" >/dev/null
	c0=$(q "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
	read -r h0 m0 < <(q "$count_sql")
	t0=$(date +%s.%N)
	for ((p = 0; p < CACHE_CLIENTS; p++)); do
		q "CALL bench_cache_drive('$flow', $CACHE_WARM, $fresh, $CACHE_SECONDS)" >/dev/null &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || die "cache: a driver of $flow failed"
	done
	t1=$(date +%s.%N)
	c1=$(q "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
	read -r hits misses < <(q "$count_sql")
	hits=$((hits - h0))
	misses=$((misses - m0))
	CACHE[$key]=$(awk -v d=$((c1 - c0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", d / (b - a) }')
	CACHE[$key:steps]=$((c1 - c0))
	CACHE[$key:s]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	CACHE[$key:ratio]=$(awk -v h="$hits" -v m="$misses" 'BEGIN { if (h + m > 0) printf "%.2f", h / (h + m); else print "n/a" }')
	say "$(printf 'cache %-8s %d client(s): %6s steps/s  (%s stages completed in %s s; hit ratio %s)' \
		"$key" "$CACHE_CLIENTS" "${CACHE[$key]}" "${CACHE[$key:steps]}" "${CACHE[$key:s]}" "${CACHE[$key:ratio]}")"
}

# cache_bench: both figures.
cache_bench() {
	local hits
	banner "result cache"
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s" cluster_psql -d "$DB" -q -v stages="$CACHE_STAGES" \
		-f "$CACHE_DIR/setup.sql" >/dev/null
	# 1. a warm entry, then the hits
	cache_reset
	q "SELECT count(*) FROM wfe.submit('bench-cache1', jsonb_build_object('x', 0))" \
		"CALL bench_cache_work()" >/dev/null
	q "VACUUM ANALYZE" >/dev/null
	q "CALL bench_cache_hits($CACHE_HITS)"
	hits=$(q "SELECT count(*) FROM wfe.run_stages WHERE cache = 'hit' AND attempt = 0")
	[ "$hits" -eq "$CACHE_HITS" ] || die "cache: $hits of $CACHE_HITS submits hit the warm entry"
	# 2. steps/s: warm the CACHE_WARM inputs, then the cached and the plain workflow
	cache_reset
	q "SELECT count(*) FROM (SELECT wfe.submit('bench-cache-line', jsonb_build_object('x', i))
	                           FROM generate_series(1, $CACHE_WARM) AS i) AS s" "CALL bench_cache_work()" >/dev/null
	CACHE[warm_entries]=$(q "SELECT count(*) FROM wfe.cache_entries")
	cache_steps cached bench-cache-line "$CACHE_FRESH_PCT"
	cache_reset
	cache_steps plain bench-plain-line 100
	CACHE[gain]=$(ratio "${CACHE[cached]}" "${CACHE[plain]}")
}

# cache_row NAME FIGURE: one markdown row of a latency figure.
cache_row() {
	local n p50 p90 p99 max
	read -r n p50 p90 p99 max <<<"$(cache_stats "$2")"
	printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "${n:-0}" "${p50:-n/a}" "${p90:-n/a}" "${p99:-n/a}" "${max:-n/a}"
}

# cache_results: the markdown of the cache runs.
cache_results() {
	printf -- '- probes: %s submits of a one-stage workflow with a warm entry, one at a time; steps/s: %s clients, %s s per workflow, %s-stage linear workflows, %s warm inputs (%s entries), %s%% fresh inputs\n\n' \
		"$CACHE_HITS" "$CACHE_CLIENTS" "$CACHE_SECONDS" "$CACHE_STAGES" "$CACHE_WARM" "${CACHE[warm_entries]}" "$CACHE_FRESH_PCT"
	printf '| figure | samples | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n'
	cache_row 'cache hit: the submit statement (release → completed in the server)' hit:submit
	cache_row 'cache hit: submit → COMMIT returned (the run completed, durable)' hit:committed
	cache_row 'no cache: the submit statement (the stage queued)' plain:submit
	cache_row 'cache miss: the submit statement (key, lookup, leader query, queued)' miss:submit
	printf '\n| workflow (%s stages, %s clients) | steps/s | stages completed | seconds | hit ratio |\n|---|---:|---:|---:|---:|\n' \
		"$CACHE_STAGES" "$CACHE_CLIENTS"
	printf '| with `cache:`, %s%% fresh inputs | %s | %s | %s | %s |\n' "$CACHE_FRESH_PCT" "${CACHE[cached]}" \
		"${CACHE[cached:steps]}" "${CACHE[cached:s]}" "${CACHE[cached:ratio]}"
	printf '| without `cache:` | %s | %s | %s | %s |\n' "${CACHE[plain]}" "${CACHE[plain:steps]}" "${CACHE[plain:s]}" \
		"${CACHE[plain:ratio]}"
	printf '\nWith the cache ÷ without: %s.\n' "${CACHE[gain]}"
}
