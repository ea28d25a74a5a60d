# maps.sh — the map benchmarks of docs/benchmarks.md ("Maps"), sourced by
# bench/run.sh after the waits benchmark, on the same private cluster
# (bench/maps/setup.sql); or run alone against a database with wfe
# (bench/maps/maps.sh: PG* variables, psql and pgbench on PATH).
#
#   1. per-element cost: a bench-map run of MAPS_SMALL and then of
#      MAPS_LARGE elements, each submitted (its release in the server:
#      every element bound and its row created) and then served by
#      MAPS_CLIENTS pgbench clients claiming and completing one element per
#      two transactions until the last one's completion aggregates; the cost
#      per element is (release + the clients' time) ÷ elements; goal: the
#      large map's ÷ the small map's ≤ 1.2;
#   2. elements/s of the large map against batch-1 steps/s: the same
#      clients and script over bench-map-chain runs (100 worker stages in a
#      line), MAPS_LARGE steps; goal: elements/s ÷ steps/s ≥ 0.8.
#
# Environment (defaults in brackets): MAPS_SMALL [100], MAPS_LARGE [10000],
# MAPS_CLIENTS [2].
#
# shellcheck shell=bash disable=SC2016

MAPS_SMALL=${MAPS_SMALL:-100}
MAPS_LARGE=${MAPS_LARGE:-10000}
MAPS_CLIENTS=${MAPS_CLIENTS:-2}
MAPS_DIR=${MAPS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
MAPS_COST_GOAL=1.2     # per-element cost, large ÷ small, at most
MAPS_RATE_GOAL=0.8     # elements/s ÷ batch-1 steps/s, at least

declare -A MAPS

# maps_q SQL: one statement, unaligned (run.sh's q when sourced).
maps_q() {
	if declare -F q >/dev/null; then q "$@"; else psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; fi
}

# maps_pgbench QUEUE TRANSACTIONS: serve QUEUE with MAPS_CLIENTS clients, TRANSACTIONS
# scripts in all; prints the seconds pgbench measured.
maps_pgbench() {
	local bin=pgbench out per=$(( ($2 + MAPS_CLIENTS - 1) / MAPS_CLIENTS ))
	declare -F pg_path >/dev/null && bin="$(pg_path bindir)/pgbench"
	out=$("$bin" -n -M prepared -c "$MAPS_CLIENTS" -j "$MAPS_CLIENTS" -t "$per" -D queue="$1" \
		-f "$MAPS_DIR/map-step.sql" ${DB:+"$DB"} 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
	awk '/^number of transactions actually processed:/ { split($NF, a, "/"); n = a[1] }
	     /^tps = / { t = $3 }
	     END { printf "%.3f\n", n / t }' <<<"$out"
}

# maps_settle: vacuumed, analysed, checkpointed.
maps_settle() {
	maps_q "VACUUM ANALYZE" >/dev/null
	maps_q "CHECKPOINT" >/dev/null
}

# maps_one N: figure 1 for a map of N elements: MAPS[N:release] ms, MAPS[N:serve] s,
# MAPS[N:cost] ms per element, MAPS[N:rate] elements/s.
maps_one() {
	local n=$1 left
	maps_settle
	MAPS[$n:release]=$(maps_q "SELECT round(bench_map_submit($n)::numeric, 1)")
	MAPS[$n:serve]=$(maps_pgbench bench-map "$n")
	left=$(maps_q "SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-map' AND state <> 'completed'")
	[ "$left" -eq 0 ] || { echo "maps: the $n-element map did not complete" >&2; return 1; }
	MAPS[$n:cost]=$(awk -v r="${MAPS[$n:release]}" -v s="${MAPS[$n:serve]}" -v n="$n" 'BEGIN { printf "%.3f", (r / 1000 + s) * 1000 / n }')
	MAPS[$n:rate]=$(awk -v c="${MAPS[$n:cost]}" 'BEGIN { printf "%.0f", 1000 / c }')
	echo "map of $n elements: release ${MAPS[$n:release]} ms, served in ${MAPS[$n:serve]} s: ${MAPS[$n:cost]} ms per element, ${MAPS[$n:rate]} elements/s"
}

# maps_chain: figure 2's baseline, MAPS_LARGE batch-1 steps of bench-map-chain runs.
maps_chain() {
	local runs=$(( (MAPS_LARGE + 99) / 100 ))
	maps_q "SELECT count(*) FROM generate_series(1, $runs) AS g, LATERAL wfe.submit('bench-map-chain', jsonb_build_object('n', g)) AS s" >/dev/null
	maps_settle
	MAPS[chain:serve]=$(maps_pgbench bench-chain "$MAPS_LARGE")
	MAPS[chain:rate]=$(awk -v s="${MAPS[chain:serve]}" -v n="$MAPS_LARGE" 'BEGIN { printf "%.0f", n / s }')
	echo "batch-1 steps (bench-map-chain): $MAPS_LARGE steps in ${MAPS[chain:serve]} s: ${MAPS[chain:rate]} steps/s"
}

# maps_bench: both figures.
maps_bench() {
	MAPS[load_start]=$(cut -d' ' -f1-3 /proc/loadavg)
	if declare -F cluster_psql >/dev/null; then
		cluster_psql -d "$DB" -q -f "$MAPS_DIR/setup.sql" >/dev/null
	else
		psql -X -q -v ON_ERROR_STOP=1 -f "$MAPS_DIR/setup.sql" >/dev/null
	fi
	maps_one "$MAPS_SMALL"
	maps_one "$MAPS_LARGE"
	maps_chain
	MAPS[cost_ratio]=$(awk -v a="${MAPS[$MAPS_LARGE:cost]}" -v b="${MAPS[$MAPS_SMALL:cost]}" 'BEGIN { printf "%.2f", a / b }')
	MAPS[rate_ratio]=$(awk -v a="${MAPS[$MAPS_LARGE:rate]}" -v b="${MAPS[chain:rate]}" 'BEGIN { printf "%.2f", a / b }')
	MAPS[load_end]=$(cut -d' ' -f1-3 /proc/loadavg)
}

# maps_results: the markdown of the map runs.
maps_results() {
	printf -- '- %s pgbench clients, one element (or step) per two transactions (bench/maps/map-step.sql); load average (1, 5, 15 min) before: %s, after: %s\n\n' \
		"$MAPS_CLIENTS" "${MAPS[load_start]}" "${MAPS[load_end]}"
	printf '| run | units | release ms | served s | ms per unit | units/s |\n|---|---:|---:|---:|---:|---:|\n'
	printf '| map of %s elements | %s | %s | %s | %s | %s |\n' "$MAPS_SMALL" "$MAPS_SMALL" "${MAPS[$MAPS_SMALL:release]}" \
		"${MAPS[$MAPS_SMALL:serve]}" "${MAPS[$MAPS_SMALL:cost]}" "${MAPS[$MAPS_SMALL:rate]}"
	printf '| map of %s elements | %s | %s | %s | %s | %s |\n' "$MAPS_LARGE" "$MAPS_LARGE" "${MAPS[$MAPS_LARGE:release]}" \
		"${MAPS[$MAPS_LARGE:serve]}" "${MAPS[$MAPS_LARGE:cost]}" "${MAPS[$MAPS_LARGE:rate]}"
	printf '| batch-1 steps (100-stage chains) | %s | – | %s | – | %s |\n' "$MAPS_LARGE" "${MAPS[chain:serve]}" "${MAPS[chain:rate]}"
	printf '\nPer-element cost, %s ÷ %s elements: %s (goal ≤ %s: %s). Elements/s ÷ batch-1 steps/s: %s (goal ≥ %s: %s).\n' \
		"$MAPS_LARGE" "$MAPS_SMALL" "${MAPS[cost_ratio]}" "$MAPS_COST_GOAL" \
		"$(awk -v v="${MAPS[cost_ratio]}" -v g="$MAPS_COST_GOAL" 'BEGIN { print (v + 0 <= g) ? "yes" : "**no**" }')" \
		"${MAPS[rate_ratio]}" "$MAPS_RATE_GOAL" \
		"$(awk -v v="${MAPS[rate_ratio]}" -v g="$MAPS_RATE_GOAL" 'BEGIN { print (v + 0 >= g) ? "yes" : "**no**" }')"
}

# Run alone: both figures and their markdown.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	maps_bench
	printf '\n'
	maps_results
fi
