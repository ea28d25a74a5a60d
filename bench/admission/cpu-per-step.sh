#!/bin/bash
# cpu-per-step.sh — the server CPU time of one poll step (claim_task of one
# task, then complete_task) with and without tenants' task limits
# (docs/benchmarks.md "Tenant task limits").  Against the cluster the PG*
# variables name, with wfe installed; it makes and drops database
# wfe_bench_admission.  CPU time of the backend (/proc/self/stat, read by
# pg_read_file: run it as a superuser) rather than wall time, which a shared
# machine spreads too much.
#
#   bench/admission/cpu-per-step.sh [RUNS [SAMPLES]]
#
# Prints, per case, SAMPLES figures of µs per step, each over 3000 steps of
# RUNS runs of a 20-stage chain (default 1000 runs, 6 samples):
#   unlimited      no tenant has a task limit (the common path)
#   other-limited  another tenant has one (claims peek for limited tenants)
#   self-limited   the runs' own tenant has one it never reaches (every
#                  claim and every end counts the tenant's tasks)
set -euo pipefail
runs=${1:-1000}
samples=${2:-6}
db=wfe_bench_admission
psql=(psql -X -q -v ON_ERROR_STOP=1)
yaml=$(printf 'name: bench-steps\nversion: "1.0.0"\nentry: s1\nstages:\n'
	for i in $(seq 1 20); do
		next=$([ "$i" -lt 20 ] && echo "s$((i + 1))" || echo completed)
		printf '  - name: s%d\n    type: worker\n    queue: bench\n    worker: bench.step@1\n    on_success: %s\n    on_failure: failed\n' "$i" "$next"
	done)

one_case() {
	local label=$1 limits=$2 out=""
	"${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
	"${psql[@]}" -d "$db" -v src="$yaml" >/dev/null <<SQL
CREATE EXTENSION wfe;
SELECT wfe.register_worker('bench.step@1', 'bench');
SELECT wfe.create_definition(:'src');
SELECT wfe.approve('bench-steps', '1.0.0');
SELECT wfe.activate('bench-steps', '1.0.0');
$limits
SELECT count(*) FROM (SELECT wfe.submit('bench-steps', jsonb_build_object('x', i))
                        FROM generate_series(1, $runs) AS i) AS s;
VACUUM ANALYZE;
-- utime + stime of this backend, in clock ticks (fields 14 and 15)
CREATE FUNCTION cpu_ticks() RETURNS bigint LANGUAGE sql AS \$\$
    SELECT f[12]::bigint + f[13]::bigint
      FROM (SELECT string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') AS f) AS s
\$\$;
CREATE FUNCTION steps(n int) RETURNS numeric LANGUAGE plpgsql AS \$\$
DECLARE
    t  wfe.task;
    t0 bigint := cpu_ticks();
BEGIN
    FOR i IN 1 .. n LOOP
        SELECT * INTO t FROM wfe.claim_task('bench', 'w', 1);
        PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence);
    END LOOP;
    RETURN round((cpu_ticks() - t0) * (1e6 / current_setting('wfe_bench.hz')::numeric) / n);
END
\$\$;
SQL
	for _ in $(seq 1 "$samples"); do
		out="$out $("${psql[@]}" -A -t -d "$db" -c "SET wfe_bench.hz = $(getconf CLK_TCK)" -c "SELECT steps(3000)")"
	done
	printf '%-14s µs/step:%s\n' "$label" "$out"
}

one_case unlimited ''
one_case other-limited "SELECT wfe.configure_tenant('other', max_tasks_in_flight => 10);"
one_case self-limited "SELECT wfe.configure_tenant('default', max_tasks_in_flight => 1000000);"
"${psql[@]}" -d postgres -c "DROP DATABASE $db" >/dev/null
