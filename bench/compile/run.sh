#!/bin/bash
# run.sh — what `make bench` runs: the time to compile a 500-stage definition,
# with wfe-compile (one process per run) and with wfe.compile() inside the
# server (timed there, so the client round trip is left out).  Prints the
# best and the median of RUNS runs (default 20) in ms; the goal in
# docs/benchmarks.md is 50 ms.  Timings are reported, never asserted.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../test/harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"

RUNS=${RUNS:-20}
BLOCKS=50 # of 10 stages each
DB=wfe_bench
WORKDIR=""

# cleanup: the EXIT trap; stop the cluster and remove its directory.
cleanup() {
	cluster_stop
	[ -z "$WORKDIR" ] || rm -rf "$WORKDIR"
}

# worker_stage NAME NEXT [INPUT]: a worker stage in the benchmark's shape.
worker_stage() {
	# shellcheck disable=SC2016 # ${context.id} is for wfe, not for the shell
	local input=${3:-'{ id: "${context.id}" }'}
	cat <<EOF
  - name: $1
    type: worker
    queue: q
    worker: w.run@1
    input: $input
    on_success: $2
    on_failure: failed
EOF
}

# block N NEXT: ten stages: a worker, a decision between two workers, a fork
# of three workers and their join, then a worker that hands over to NEXT.
block() {
	local b=$1 next=$2
	worker_stage "$b-start" "$b-route"
	cat <<EOF
  - name: $b-route
    type: decision
    on_evaluation_error: failed
    branches:
      - when: 'has(context.tier) && context.tier == "gold"'
        next: $b-high
      - when: "true"
        next: $b-low
EOF
	worker_stage "$b-high" "$b-fork"
	worker_stage "$b-low" "$b-fork"
	cat <<EOF
  - name: $b-fork
    type: fork
    branches: [$b-x, $b-y, $b-z]
EOF
	worker_stage "$b-x" "$b-join"
	worker_stage "$b-y" "$b-join"
	worker_stage "$b-z" "$b-join"
	cat <<EOF
  - name: $b-join
    type: join
    required: [$b-x, $b-y, $b-z]
    on_success: $b-end
    on_failure: failed
EOF
	worker_stage "$b-end" "$next" "{ id: \"\${context.id}\", x: '\${stages[\"$b-x\"].result}' }"
}

# definition: a valid stages-form definition of BLOCKS * 10 stages.
definition() {
	local i next
	printf 'name: bench-compile\nversion: "1.0.0"\nentry: b01-start\nstages:\n'
	for ((i = 1; i <= BLOCKS; i++)); do
		next=completed
		[ "$i" -eq "$BLOCKS" ] || next=$(printf 'b%02d-start' $((i + 1)))
		block "$(printf 'b%02d' "$i")" "$next"
	done
}

# cli_times FILE: RUNS wall-clock times of `wfe-compile --digest FILE`, in ms.
cli_times() {
	local i t0 t1
	for ((i = 0; i < RUNS; i++)); do
		t0=$(date +%s%N)
		"$(pg_path bindir)/wfe-compile" --digest "$1" >/dev/null
		t1=$(date +%s%N)
		awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.3f\n", ns / 1e6 }'
	done
}

# db_times FILE: RUNS times of wfe.compile() in one session, in ms, taken
# with clock_timestamp() around each call inside the server.
db_times() {
	cluster_psql -d "$DB" -At -v file="$1" -v runs="$RUNS" <<'SQL'
\set src `cat :'file'`
CREATE TEMP TABLE bench_src AS SELECT :'src'::text AS src;
CREATE TEMP TABLE bench_ms (ms float8);
SET wfe_bench.runs = :'runs';
DO $$
DECLARE
	src text := (SELECT b.src FROM bench_src b);
	t0 timestamptz;
BEGIN
	FOR i IN 1 .. current_setting('wfe_bench.runs')::int LOOP
		t0 := clock_timestamp();
		PERFORM wfe.compile(src);
		INSERT INTO bench_ms
			VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
	END LOOP;
END
$$;
SELECT round(ms::numeric, 3) FROM bench_ms;
SQL
}

# best_median: read times (ms), one a line; print "BEST MEDIAN".
best_median() {
	sort -g | awk '{ t[NR] = $1 }
		END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
		      printf "%.2f %.2f\n", t[1], m }'
}

# check_definition FILE: both compilers must accept the definition with the
# same digest, or the timings would measure a rejection.
check_definition() {
	local cli db
	cli=$("$(pg_path bindir)/wfe-compile" --digest "$1") ||
		die "wfe-compile rejects the benchmark definition: $("$(pg_path bindir)/wfe-compile" "$1" 2>&1 | head -n 5)"
	db=$(cluster_psql -d "$DB" -At -v file="$1" <<'SQL'
\set src `cat :'file'`
SELECT CASE WHEN (r ->> 'ok')::boolean THEN r ->> 'digest' ELSE r ->> 'diagnostics' END
  FROM (SELECT wfe.compile(:'src') AS r) AS c;
SQL
	)
	[ "$cli" = "$db" ] || die "wfe-compile says $cli, wfe.compile() says $db"
	say "both compilers accept it: $cli"
}

main() {
	local file cli_best cli_median db_best db_median

	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Step 1: packages, build, install.
	wfe_setup

	# Step 2: a private cluster, and the definition to compile.
	banner "cluster"
	WORKDIR=$(make_workdir)
	cluster_start "$WORKDIR"
	cluster_createdb "$DB"
	cluster_psql -d "$DB" -c "SELECT wfe.register_worker('w.run@1', 'q')" >/dev/null
	file="$WORKDIR/bench-compile.yaml"
	definition >"$file"
	check_definition "$file"

	# Step 3: time both compilers.
	banner "compile: $((BLOCKS * 10)) stages, $(wc -c <"$file") bytes, $RUNS runs each"
	read -r cli_best cli_median < <(cli_times "$file" | best_median)
	read -r db_best db_median < <(db_times "$file" | best_median)

	# Step 4: the table.
	printf '%-42s %10s %10s\n' "" "best ms" "median ms"
	printf '%-42s %10s %10s\n' "wfe-compile --digest (a process per run)" "$cli_best" "$cli_median"
	printf '%-42s %10s %10s\n' "wfe.compile() inside the server" "$db_best" "$db_median"
	say "goal: 50 ms"
}

main "$@"
