#!/bin/bash
# bench/ratelimit/run.sh — the cost of a rate limit far above the load
# (issue 24): steps/s of a 100-stage worker chain (200 runs), pgbench
# -M prepared, CLIENTS clients for SECS s, alternating a queue without any
# rate limit and one whose stages take a token from a bucket of 1,000,000/s,
# ROUNDS times.  Against a running server with wfe installed:
#   PGHOST=... PGPORT=... BIN=$(pg_config --bindir) bench/ratelimit/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$(pg_config --bindir)}
PS="$BIN/psql -X -q"
SECS=${SECS:-20}
$PS -c "DROP DATABASE IF EXISTS bench_rl" postgres
$PS -c "CREATE DATABASE bench_rl" postgres
$PS -d bench_rl -c "CREATE EXTENSION wfe"
$PS -d bench_rl -f "$HERE/setup.sql" >/dev/null
for round in $(seq "${ROUNDS:-3}"); do
	for mode in none rl; do
		$PS -d bench_rl -c "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" -c "DELETE FROM wfe.rate_limits" >/dev/null
		workflow=bench-steps script=$HERE/step-bench.sql
		if [ $mode = rl ]; then
			$PS -d bench_rl -c "SELECT wfe.configure_rate_limit('fast', 1000000, 1000000)" >/dev/null
			workflow=bench-rl script=$HERE/step-benchrl.sql
		fi
		$PS -d bench_rl -c "SELECT count(*) FROM (SELECT wfe.submit('$workflow', jsonb_build_object('x', i))
		                                           FROM generate_series(1, 200) i) s" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
		before=$($PS -At -d bench_rl -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		"$BIN/pgbench" -n -M prepared -c "${CLIENTS:-4}" -j 2 -T "$SECS" -f "$script" bench_rl >/dev/null 2>&1
		after=$($PS -At -d bench_rl -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		echo "round $round $mode: $(((after - before) / SECS)) steps/s ($((after - before)) in $SECS s)"
	done
done
