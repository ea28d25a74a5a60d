#!/bin/bash
# run.sh — throughput of the Python client's poll worker against wfe-worker
# on the same workload (docs/benchmarks.md, "The Python client").
#
#   bench/python/run.sh
#
# Starts a private cluster (no background worker: a one-stage workflow needs
# none), queues BENCH_PY_TASKS runs (default 2000) of a one-stage workflow,
# and times how long each worker takes to drain the queue with --once,
# concurrency BENCH_PY_CONCURRENCY (default 8):
#   wfe-worker --command cat            (a process per task: fork + exec)
#   client, handler running `cat`       (the same work, from Python)
#   client, in-process handler          (batched reports, then one call each)
#   client, async def handlers          (the same `cat`, and in-process)
# Prints one line per worker: tasks, seconds, tasks/s.  Bounded: each drain
# of 2000 tasks takes a few seconds to a minute.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../test/harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"

TASKS=${BENCH_PY_TASKS:-2000}
CONC=${BENCH_PY_CONCURRENCY:-8}
DB=wfe_pybench
WORKDIR=""

cleanup() {
	cluster_stop
	[ -n "$WORKDIR" ] && rm -rf "$WORKDIR"
}

# fill: queue TASKS runs (the claims of the previous drain are gone: each drain starts from the same state)
fill() {
	cluster_psql -d "$DB" -Atc "SELECT count(*) FROM generate_series(1, $TASKS) AS i,
		wfe.submit('bench-py', jsonb_build_object('n', i, 'pad', repeat('x', 100)))" >/dev/null
	cluster_psql -d "$DB" -Atc "CHECKPOINT" >/dev/null
}

# drain NAME CMD...: time CMD until the queue is empty; print the figure
drain() {
	local name=$1 t0 t1 left
	shift
	fill
	t0=$(date +%s.%N)
	"$@" >>"$WORKDIR/workers.log" 2>&1
	t1=$(date +%s.%N)
	left=$(cluster_psql -d "$DB" -Atc "SELECT count(*) FROM wfe.run_stages WHERE state <> 'completed'")
	[ "$left" -eq 0 ] || die "$name left $left tasks undone (see $WORKDIR/workers.log)"
	awk -v n="$name" -v t="$TASKS" -v a="$t0" -v b="$t1" \
		'BEGIN { printf "%-44s %6d tasks %7.2f s %8.0f tasks/s\n", n, t, b - a, t / (b - a) }'
	cluster_psql -d "$DB" -Atc "SET client_min_messages = warning" \
		-c "TRUNCATE wfe.runs, wfe.run_stages, wfe.events, wfe.outbox CASCADE" >/dev/null
}

main() {
	local dsn
	trap cleanup EXIT
	wfe_build all >/dev/null
	WORKDIR=$(make_workdir)
	cluster_start "$WORKDIR" >/dev/null
	cluster_createdb "$DB" >/dev/null
	cluster_psql -d "$DB" >/dev/null <<'SQL'
SELECT wfe.register_worker('bench.work@1', 'bench');
SELECT wfe.create_definition($y$
name: bench-py
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: bench
    worker: bench.work@1
    input: { n: "${context.n}", pad: "${context.pad}" }
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('bench-py', '1.0.0');
SELECT wfe.activate('bench-py', '1.0.0');
SQL
	dsn="host=$PGHOST port=$PGPORT user=postgres dbname=$DB"
	say "$TASKS one-stage runs per drain, concurrency $CONC, $(nproc) CPUs"
	drain "wfe-worker --command cat" \
		"$WFE_TOP/build/wfe-worker" --queue bench --dsn "$dsn" --command cat --concurrency "$CONC" --once
	drain "python client, handler runs cat" env WFE_DSN="$dsn" WORK=command CONCURRENCY="$CONC" \
		PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 "$WFE_TOP/bench/python/worker.py"
	drain "python client, in-process handler" env WFE_DSN="$dsn" WORK=inproc CONCURRENCY="$CONC" \
		PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 "$WFE_TOP/bench/python/worker.py"
	drain "python client, in-process, reports unbatched" env WFE_DSN="$dsn" WORK=inproc BATCH=0 \
		CONCURRENCY="$CONC" PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 "$WFE_TOP/bench/python/worker.py"
	drain "python client, async handler runs cat" env WFE_DSN="$dsn" WORK=command ASYNC=1 CONCURRENCY="$CONC" \
		PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 "$WFE_TOP/bench/python/worker.py"
	drain "python client, async in-process handler" env WFE_DSN="$dsn" WORK=inproc ASYNC=1 CONCURRENCY="$CONC" \
		PYTHONPATH="$WFE_TOP/clients/python" /usr/bin/python3 "$WFE_TOP/bench/python/worker.py"
}

main "$@"
