#!/bin/bash
# bench/ratelimit/run.sh — what rate limits cost and how exact they are
# (issue 24; operations.md "Flow control"; quality.md "New in 0.3.0").
#
#   1. Cost: steps/s of a 100-stage worker chain (200 runs), pgbench
#      -M prepared, CLIENTS clients for SECS s, alternating a queue without
#      any rate limit and one whose stages take a token from a bucket of
#      1,000,000/s, ROUNDS times; the ratio of the medians (goal ≥ 0.9).
#   2. Accuracy: ACC_RATE tokens a second (burst ACC_RATE), ample work
#      (ACC_RATE × ACC_SECS × 3 one-stage runs), CLIENTS clients claiming
#      and completing for ACC_SECS s: attempts started ÷ (rate × ACC_SECS +
#      burst) (goal within [0.95, 1.0]).  Held attempts come back through
#      the background worker's timer, so the database must be the one
#      wfe.database names (RL_DB; default bench_rl, created if missing).
#
# Against a running server with wfe preloaded:
#   PGHOST=... PGPORT=... BIN=$(pg_config --bindir) bench/ratelimit/run.sh
# The database's wfe is dropped and created again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$(pg_config --bindir)}
PS="$BIN/psql -X -q"
SECS=${SECS:-20}
CLIENTS=${CLIENTS:-4}
ACC_RATE=${ACC_RATE:-50}
ACC_SECS=${ACC_SECS:-60}
DB=${RL_DB:-bench_rl}
# (not dropped: the background worker of wfe.database stays connected and
# waits for the extension)
[ -n "$($PS -At -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" postgres)" ] ||
	$PS -c "CREATE DATABASE $DB" postgres
$PS -d "$DB" -c "SET client_min_messages = warning" -c "DROP EXTENSION IF EXISTS wfe CASCADE"
$PS -d "$DB" -c "CREATE EXTENSION wfe"
$PS -d "$DB" -f "$HERE/setup.sql" >/dev/null
reset() {
	$PS -d "$DB" -c "SET client_min_messages = warning" -c "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" \
		-c "DELETE FROM wfe.rate_limits" >/dev/null
}
declare -a NONE RL
for round in $(seq "${ROUNDS:-3}"); do
	for mode in none rl; do
		reset
		workflow=bench-steps script=$HERE/step-bench.sql
		if [ $mode = rl ]; then
			$PS -d "$DB" -c "SELECT wfe.configure_rate_limit('fast', 1000000, 1000000)" >/dev/null
			workflow=bench-rl script=$HERE/step-benchrl.sql
		fi
		$PS -d "$DB" -c "SELECT count(*) FROM (SELECT wfe.submit('$workflow', jsonb_build_object('x', i))
		                                        FROM generate_series(1, 200) i) s" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
		before=$($PS -At -d "$DB" -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		"$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -f "$script" "$DB" >/dev/null 2>&1
		after=$($PS -At -d "$DB" -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		rate=$(((after - before) / SECS))
		if [ $mode = rl ]; then RL+=("$rate"); else NONE+=("$rate"); fi
		echo "round $round $mode: $rate steps/s ($((after - before)) in $SECS s)"
	done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_none=$(median "${NONE[@]}")
m_rl=$(median "${RL[@]}")
echo "cost: median $m_rl steps/s with a rate limit far above the load, $m_none without: ratio $(awk -v a="$m_rl" -v b="$m_none" 'BEGIN { printf "%.2f", a / b }') (goal >= 0.9)"

# 2. accuracy
reset
$PS -d "$DB" -c "SELECT wfe.configure_rate_limit('acc', $ACC_RATE, $ACC_RATE)" >/dev/null
$PS -d "$DB" -c "SELECT count(*) FROM (SELECT wfe.submit('bench-acc', '{}') FROM generate_series(1, $((ACC_RATE * ACC_SECS * 3))) i) s" \
	-c "VACUUM ANALYZE" >/dev/null
t0=$($PS -At -d "$DB" -c "SELECT clock_timestamp()")
"$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$ACC_SECS" -f "$HERE/step-acc.sql" "$DB" >/dev/null 2>&1
started=$($PS -At -d "$DB" -c "SELECT count(*) FROM wfe.run_stages
                                 WHERE stage = 'a' AND started_at >= '$t0' AND started_at < '$t0'::timestamptz + interval '$ACC_SECS s'")
bound=$((ACC_RATE * ACC_SECS + ACC_RATE))
echo "accuracy: $started attempts started in $ACC_SECS s at $ACC_RATE/s (burst $ACC_RATE): $(awk -v a="$started" -v b="$bound" 'BEGIN { printf "%.3f", a / b }') of rate x $ACC_SECS + burst = $bound (goal within [0.95, 1.0])"
