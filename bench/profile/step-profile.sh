#!/bin/bash
# step-profile.sh OUTDIR — where one batch-1 poll step's time and WAL go
# (docs/benchmarks.md "The write path").
#
# A private cluster shaped like `make bench`'s (wfe and pg_stat_statements
# preloaded, defaults otherwise, pg_stat_statements.track = all,
# track_functions = all), the bench schema (bench/sql/setup.sql, the
# 200-stage chain), then one after the other, 4 clients each, after 2 s
# of warm-up:
#   - the floor (bench/pgbench/floor-step.sql), steps/s;
#   - wfe batch 1 (bench/pgbench/wfe-step.sql, as the worker role), SECS s.
# Writes into OUTDIR: summary.txt (steps/s, the ratio, WAL records and
# bytes per step read back with pg_walinspect, nested statements per step,
# the background worker's rounds), wal.txt (WAL records per step by
# resource manager, record type and relation), stmts.txt (statements by
# time per step), funcs.txt (pg_stat_user_functions), hot.txt (updates
# and HOT updates per table).
#
# Environment: PG_CONFIG (the PostgreSQL to use, with wfe installed),
# CLUSTER_FIRST_PORT, SECS (default 15), RUNS (runs submitted, default 150),
# FILLFACTOR (set on wfe.run_stages before the runs are submitted), SCRIPT
# (the wfe run's pgbench script, default wfe-step.sql; wfe-step-batch-call.sql
# for batch 10 in one complete_tasks call), RATE_LIMIT=1 (every stage of
# the chain takes a token of a bucket far above the load, 1,000,000/s: what
# a rate limit costs a step, the cost figure of bench/ratelimit/run.sh),
# PUBLISH_EVENTS (on: every event is also written to the outbox).
# The machine is shared: run it under nice, compare runs made back to back.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. bench/profile/profile.sh

OUT=${1:?usage: step-profile.sh OUTDIR}
SECS=${SECS:-15}
RUNS=${RUNS:-150}
SCRIPT=${SCRIPT:-wfe-step.sql}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
profile_cluster 200 ${RATE_LIMIT:+fast}
[ -z "${RATE_LIMIT:-}" ] || Q -c "SELECT wfe.configure_rate_limit('fast', 1000000, 1000000)" >/dev/null
[ -z "${FILLFACTOR:-}" ] || Q -c "ALTER TABLE wfe.run_stages SET (fillfactor = $FILLFACTOR)"
Q -c "INSERT INTO bench_jobs (queue, state, payload)
      SELECT 'bench', 'done', jsonb_build_object('x', i) FROM generate_series(1, 50000) AS i" \
  -c "INSERT INTO bench_jobs (queue, state, payload)
      SELECT 'bench', 'ready', jsonb_build_object('x', i) FROM generate_series(1, 1000) AS i"
Q -c "SELECT count(*) FROM (SELECT wfe.submit('bench-steps', jsonb_build_object('x', i))
                            FROM generate_series(1, $RUNS) AS i) AS s" >/dev/null
Q -c "VACUUM ANALYZE" -c "CHECKPOINT"

# pgb SCRIPT SECONDS: 4 clients, as PGB_USER when set
pgb() {
	PGUSER=${PGB_USER:-$PGUSER} timeout $(($2 + 60)) "$BIN/pgbench" -n -M prepared -c 4 -j 4 -T "$2" \
		-f "bench/pgbench/$1" wfe_bench >/dev/null 2>&1
}

pgb floor-step.sql 2
n0=$(Q -c "SELECT count(*) FROM bench_jobs WHERE state = 'done'")
pgb floor-step.sql "$SECS"
n1=$(Q -c "SELECT count(*) FROM bench_jobs WHERE state = 'done'")
echo "floor steps/s: $(((n1 - n0) / SECS))" | tee -a "$OUT/summary.txt"

PGB_USER=bench_worker pgb "$SCRIPT" 2
Q -c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset()" >/dev/null
r0=$(Q -c "SELECT rounds FROM wfe.worker_status()")
s0=$(Q -c "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
lsn0=$(Q -c "SELECT pg_current_wal_insert_lsn()")
PGB_USER=bench_worker pgb "$SCRIPT" "$SECS"
lsn1=$(Q -c "SELECT pg_current_wal_insert_lsn()")
s1=$(Q -c "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
r1=$(Q -c "SELECT rounds FROM wfe.worker_status()")
st=$((s1 - s0))
# everything below is read after the measured run, so it is not in the figures
Q -c "SELECT 'wfe ($SCRIPT) steps/s: ' || $st / $SECS || ' (' || $st || ' steps); ratio to the floor '
             || round($st::numeric / $((n1 - n0)), 2)" | tee -a "$OUT/summary.txt"
wal_report "$lsn0" "$lsn1" "$st" step "$OUT"
Q -c "SELECT 'statement ms/step: claim_task ' || round(sum(total_exec_time) FILTER (WHERE query LIKE '%claim_task%')::numeric / $st, 3)
             || ', complete_task ' || round(sum(total_exec_time) FILTER (WHERE query LIKE '%complete_task%')::numeric / $st, 3)
             || ', background worker ' || round(sum(total_exec_time) FILTER (WHERE query LIKE '%wfe.\_%')::numeric / $st, 3)
        FROM pg_stat_statements WHERE toplevel" | tee -a "$OUT/summary.txt"
Q -c "SELECT 'nested statements/step: ' || round(sum(calls)::numeric / $st, 2) FROM pg_stat_statements WHERE NOT toplevel" |
	tee -a "$OUT/summary.txt"
echo "background worker rounds: $((r1 - r0)) in $SECS s" | tee -a "$OUT/summary.txt"
Q -c "SELECT round(total_exec_time::numeric / $st, 3) AS ms_step, round(calls::numeric / $st, 2) AS calls_step, toplevel,
             left(regexp_replace(query, '\s+', ' ', 'g'), 150)
        FROM pg_stat_statements WHERE calls > 0 ORDER BY toplevel DESC, total_exec_time DESC LIMIT 40" >"$OUT/stmts.txt"
Q -c "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE n_tup_upd > 0 ORDER BY n_tup_upd DESC" >"$OUT/hot.txt"
Q -c "SELECT funcname, calls, round(self_time::numeric / $st, 3) FROM pg_stat_user_functions ORDER BY self_time DESC" >"$OUT/funcs.txt"
Q -c "SELECT 'run_stages: ' || pg_relation_size('wfe.run_stages') / 8192 || ' pages, '
             || (SELECT count(*) FROM wfe.run_stages) || ' rows'" | tee -a "$OUT/summary.txt"

# One client's server CPU per step, which the machine's load moves far less
# than steps/s: CPU_STEPS steps in one session (a procedure committing after
# each claim and each completion), the backend's CPU time (utime + stime of
# /proc/PID/stat, in clock ticks) read before and after.
Q -c 'CREATE PROCEDURE public.cpu_steps(n int) LANGUAGE plpgsql AS $p$
      DECLARE t record;
      BEGIN
          FOR i IN 1 .. n LOOP
              SELECT * INTO t FROM wfe.claim_task($$bench$$, $$cpu$$, 1);
              COMMIT;
              EXIT WHEN t.run_id IS NULL;
              PERFORM wfe.complete_task(t.run_id, t.stage, t.attempt, t.fence);
              COMMIT;
          END LOOP;
      END $p$' -c 'GRANT EXECUTE ON PROCEDURE public.cpu_steps(int) TO bench_worker'
CPU_STEPS=${CPU_STEPS:-2000}
c0=$(Q -c "SELECT count(*) FROM wfe.events WHERE type = 'stage.claimed' AND detail ->> 'worker_id' = 'cpu'")
# shellcheck disable=SC2016  # $WFE_PID and $14 are psql's shell's and awk's
printf '%s\n' 'SELECT pg_backend_pid() AS pid \gset' '\setenv WFE_PID :pid' 'CALL public.cpu_steps(10);' \
	'\! awk "{ print \$14 + \$15 }" /proc/$WFE_PID/stat' "CALL public.cpu_steps($CPU_STEPS);" \
	'\! awk "{ print \$14 + \$15 }" /proc/$WFE_PID/stat' >"$WORKDIR/cpu.sql"
PGUSER=bench_worker "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d wfe_bench -At -f "$WORKDIR/cpu.sql" >"$WORKDIR/cpu.txt"
c1=$(Q -c "SELECT count(*) FROM wfe.events WHERE type = 'stage.claimed' AND detail ->> 'worker_id' = 'cpu'")
n=$((c1 - c0 - 10))
hz=$(getconf CLK_TCK)
echo "one client: $n steps, backend CPU ms/step $(awk -v a="$(sed -n 1p "$WORKDIR/cpu.txt")" -v b="$(sed -n 2p "$WORKDIR/cpu.txt")" \
	-v n="$n" -v hz="$hz" 'BEGIN { printf "%.3f", (b - a) * 1000 / hz / n }')" | tee -a "$OUT/summary.txt"
