# children.sh — the child-workflow benchmark of docs/benchmarks.md ("Child
# workflows"), sourced by bench/run.sh after the waits benchmark, on the
# same private cluster (bench/children/setup.sql): the cost of a workflow
# stage against a worker stage.
#
#   CHILDREN_RUNS runs of bench-parent (one workflow stage calling the
#   one-stage bench-child: a parent run, a child run, two releases, the
#   child's end reaching the parent through the background worker's
#   child_ended timer) and then CHILDREN_RUNS runs of bench-two (two worker
#   stages in a line), each submitted in one statement and worked through by
#   one session (bench_children_drain: claim, complete, commit, one task at
#   a time) until every run completed: runs/s from the submit to the last
#   run's end, and their ratio (a parent with a child ÷ a two-stage run).
#
# Environment (defaults in brackets): CHILDREN_RUNS [1000].
#
# shellcheck shell=bash disable=SC2016

CHILDREN_RUNS=${CHILDREN_RUNS:-1000}
CHILDREN_DIR="$BENCH_DIR/children"

# What the children runs found.
declare -A CHILDREN

# children_run WORKFLOW: CHILDREN[WORKFLOW:secs] and CHILDREN[WORKFLOW:rate].
children_run() {
	local t0 t1
	scale_reset
	settle
	t0=$(date +%s.%N)
	q "SELECT count(*) FROM (SELECT wfe.submit('$1', jsonb_build_object('x', i))
	                           FROM generate_series(1, $CHILDREN_RUNS) AS i) AS s" >/dev/null
	q "CALL bench_children_drain('$1', $CHILDREN_RUNS)" >/dev/null
	t1=$(date +%s.%N)
	CHILDREN[$1:secs]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	CHILDREN[$1:rate]=$(awk -v n="$CHILDREN_RUNS" -v s="${CHILDREN[$1:secs]}" 'BEGIN { printf "%.1f", n / s }')
	say "$1: $CHILDREN_RUNS runs in ${CHILDREN[$1:secs]} s: ${CHILDREN[$1:rate]} runs/s"
}

# children_bench: both figures.
children_bench() {
	banner "child workflows"
	CHILDREN[load_start]=$(cut -d' ' -f1-3 /proc/loadavg)
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s -c client_min_messages=warning" cluster_psql -d "$DB" -q \
		-f "$CHILDREN_DIR/setup.sql" >/dev/null
	children_run bench-parent
	children_run bench-two
	CHILDREN[children]=$(q "SELECT count(*) FROM wfe.runs WHERE parent_run_id IS NOT NULL")
	CHILDREN[ratio]=$(ratio "${CHILDREN[bench-parent:rate]}" "${CHILDREN[bench-two:rate]}")
	CHILDREN[load_end]=$(cut -d' ' -f1-3 /proc/loadavg)
	scale_reset
}

# children_results: the markdown of the children runs.
children_results() {
	printf -- '- %s runs of each workflow, submitted in one statement, worked through by one session (claim, complete, commit: one task at a time); load average (1, 5, 15 min) before these runs: %s, after them: %s\n\n' \
		"$CHILDREN_RUNS" "${CHILDREN[load_start]}" "${CHILDREN[load_end]}"
	printf '| workflow | runs | seconds | runs/s |\n|---|---:|---:|---:|\n'
	printf '| a workflow stage calling a one-stage child (bench-parent) | %s | %s | %s |\n' "$CHILDREN_RUNS" \
		"${CHILDREN[bench-parent:secs]}" "${CHILDREN[bench-parent:rate]}"
	printf '| two worker stages (bench-two) | %s | %s | %s |\n' "$CHILDREN_RUNS" \
		"${CHILDREN[bench-two:secs]}" "${CHILDREN[bench-two:rate]}"
	printf '\nA parent with a child ÷ a two-stage run, runs/s: %s.\n' "${CHILDREN[ratio]}"
}
