#!/bin/bash
# ceiling.sh — the ceiling of one primary (docs/scaling.md "The ceiling of
# one primary"): seed 003's step (bench/pgbench/seed003-step.sql: claim one
# task of a 12-stage linear workflow, then complete it; a new run for each
# one that finishes) at 1, 2, 4 and 8 pgbench clients, on a server that
# has wfe, and for each: steps/s, step latency, and what the server
# spent it on — CPU (the machine's busy share, from /proc/stat: on a
# shared machine, everyone's), WAL (bytes and fsyncs a second,
# pg_current_wal_lsn and pg_stat_wal) and waits (pg_stat_activity sampled
# every 0.1 s: the share of samples of active wfe sessions on CPU or
# waiting on a heavyweight Lock, an LWLock or IO, and the two wait events
# seen most).
#
#   PGHOST=... PGPORT=... PGDATABASE=... bench/scale/ceiling.sh [CLIENTS...]
#
# Environment: CEILING_SECONDS [20] each run; CEILING_RUNS [2000] runs in
# flight.  Prints a markdown table.  The database's runs are left; run it
# on a scratch database.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scripts="$here/../pgbench"
secs=${CEILING_SECONDS:-20}
runs=${CEILING_RUNS:-2000}
clients=("${@:-1 2 4 8}")
read -r -a clients <<<"${clients[*]}"
q() { psql -XAtq -v ON_ERROR_STOP=1 -c "$1"; }

# the 12-stage linear workflow of seed 003's shape (as bench/run.sh's chain)
yaml=$(mktemp)
trap 'rm -f "$yaml"' EXIT
{
	printf 'name: bench-seed003\nversion: "1.0.0"\nentry: s001\nstages:\n'
	for i in $(seq 1 12); do
		next=$([ "$i" -lt 12 ] && printf 's%03d' $((i + 1)) || printf 'completed')
		printf '  - name: s%03d\n    type: worker\n    queue: bench-seed003\n    worker: bench.seed003@1\n' "$i"
		printf '    input: { x: "${context.x}" }\n    on_success: %s\n    on_failure: failed\n' "$next"
	done
} >"$yaml"
if [ "$(q "SELECT count(*) FROM wfe.definitions WHERE workflow = 'bench-seed003' AND state = 'active'")" = 0 ]; then
	q "SELECT wfe.register_worker('bench.seed003@1', 'bench-seed003')" >/dev/null
	psql -XAtq -v ON_ERROR_STOP=1 <<SQL >/dev/null
SELECT wfe.create_definition(\$y\$$(cat "$yaml")\$y\$);
SQL
	q "SELECT wfe.approve('bench-seed003', '1.0.0')" >/dev/null
	q "SELECT wfe.activate('bench-seed003', '1.0.0')" >/dev/null
fi
have=$(q "SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-seed003' AND finished_at IS NULL")
[ "$have" -ge "$runs" ] ||
	q "SELECT count(*) FROM generate_series(1, $runs - $have) AS i, LATERAL wfe.submit('bench-seed003', jsonb_build_object('x', i))" >/dev/null
q "VACUUM ANALYZE" >/dev/null 2>&1 || true
q "CHECKPOINT" >/dev/null

cpu() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
printf '| clients | steps/s | step latency (ms) | machine CPU busy | WAL MB/s | WAL fsyncs/s | on CPU | waiting on Lock | LWLock | IO | most waited on |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
for c in "${clients[@]}"; do
	pgbench -n -M prepared -c "$c" -j "$c" -T 3 -f "$scripts/seed003-step.sql" >/dev/null 2>&1   # warm-up
	read -r lsn0 sync0 <<<"$(q "SELECT pg_current_wal_lsn() || ' ' || wal_sync FROM pg_stat_wal")"
	read -r busy0 all0 <<<"$(cpu)"
	samples=$(mktemp)
	( end=$((SECONDS + secs)); while [ $SECONDS -lt $end ]; do
		q "SELECT coalesce(wait_event_type || ' ' || wait_event, 'CPU -') FROM pg_stat_activity
		    WHERE state = 'active' AND query LIKE '%wfe.%' AND pid <> pg_backend_pid()" >>"$samples" 2>/dev/null || true
		sleep 0.1
	done ) &
	sampler=$!
	out=$(pgbench -n -M prepared -c "$c" -j "$c" -T "$secs" -f "$scripts/seed003-step.sql" 2>&1)
	wait "$sampler" || true
	read -r busy1 all1 <<<"$(cpu)"
	read -r wal sync1 <<<"$(q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0') || ' ' || wal_sync FROM pg_stat_wal")"
	tps=$(awk '/^tps = / { printf "%.0f", $3 }' <<<"$out")
	lat=$(awk '/^latency average = / { print $4 }' <<<"$out")
	hz=$(getconf CLK_TCK)
	awk -v c="$c" -v tps="$tps" -v lat="$lat" -v b="$((busy1 - busy0))" -v a="$((all1 - all0))" \
		-v s="$secs" -v wal="$wal" -v sy="$((sync1 - sync0))" '
		{ n++; w[$1]++; if ($1 != "CPU") e[$1 ":" $2]++ }
		END { top = ""; for (k in e) if (top == "" || e[k] > e[top]) top = k
		      second = ""; for (k in e) if (k != top && (second == "" || e[k] > e[second])) second = k
		      printf "| %d | %d | %s | %.0f %% | %.2f | %.0f | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %s %.0f %%, %s %.0f %% |\n",
		        c, tps, lat, 100 * b / a, wal / s / 1048576, sy / s,
		        100 * w["CPU"] / n, 100 * w["Lock"] / n, 100 * w["LWLock"] / n, 100 * w["IO"] / n,
		        top, 100 * e[top] / n, second, 100 * e[second] / n }' "$samples"
	rm -f "$samples"
done
