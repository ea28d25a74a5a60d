#!/bin/bash
# submit-profile.sh OUTDIR — where one 12-stage submit's time and WAL go
# (docs/benchmarks.md "A submit that pays less up front").
#
# A private cluster shaped like `make bench`'s (wfe and pg_stat_statements
# preloaded, defaults otherwise, pg_stat_statements.track = all,
# track_functions = all), the bench schema (bench/sql/setup.sql, the
# 12-stage chain) with 2,000 runs submitted and analysed first (as
# bench/run.sh's submit_prepare), then one after the other, CLIENTS
# clients each (default 4), after 2 s of warm-up:
#   - one-row inserts (bench/pgbench/insert.sql), inserts/s;
#   - submits (bench/pgbench/submit.sql), SECS s.
# Writes into OUTDIR: summary.txt (the two rates, their ratio, WAL records
# and bytes per submit read back with pg_walinspect, statement time and
# nested statements per submit), wal.txt (WAL records per submit by
# resource manager, record type and relation), stmts.txt (statements by
# time per submit), funcs.txt (pg_stat_user_functions).
#
# Environment: PG_CONFIG (the PostgreSQL to use, with wfe installed),
# CLUSTER_FIRST_PORT, SECS (default 15), CLIENTS (default 4), FILLFACTOR
# (set on wfe.run_stages before the runs are submitted).
# The machine is shared: run it under nice, compare runs made back to back.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. bench/profile/profile.sh

OUT=${1:?usage: submit-profile.sh OUTDIR}
SECS=${SECS:-15}
CLIENTS=${CLIENTS:-4}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
profile_cluster 2
[ -z "${FILLFACTOR:-}" ] || Q -c "ALTER TABLE wfe.run_stages SET (fillfactor = $FILLFACTOR)"
Q -c "SELECT count(*) FROM (SELECT wfe.submit('bench-submit', jsonb_build_object('x', i))
                            FROM generate_series(1, 2000) AS i) AS s" >/dev/null
Q -c "VACUUM ANALYZE" -c "CHECKPOINT"

# pgb SCRIPT SECONDS: CLIENTS clients
pgb() {
	timeout $(($2 + 60)) "$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$2" \
		-f "bench/pgbench/$1" wfe_bench >/dev/null 2>&1
}

pgb insert.sql 2
n0=$(Q -c "SELECT count(*) FROM bench_inserts")
pgb insert.sql "$SECS"
n1=$(Q -c "SELECT count(*) FROM bench_inserts")
echo "inserts/s: $(((n1 - n0) / SECS))" | tee -a "$OUT/summary.txt"

count="SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-submit'"
pgb submit.sql 2
Q -c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset()" >/dev/null
s0=$(Q -c "$count")
lsn0=$(Q -c "SELECT pg_current_wal_insert_lsn()")
pgb submit.sql "$SECS"
lsn1=$(Q -c "SELECT pg_current_wal_insert_lsn()")
s1=$(Q -c "$count")
st=$((s1 - s0))
# everything below is read after the measured run, so it is not in the figures
Q -c "SELECT 'submits/s: ' || $st / $SECS || ' (' || $st || ' submits); ratio to inserts '
             || round($st::numeric / $((n1 - n0)), 2)" | tee -a "$OUT/summary.txt"
wal_report "$lsn0" "$lsn1" "$st" submit "$OUT"
Q -c "SELECT 'statement ms/submit: ' || round(sum(total_exec_time)::numeric / $st, 3)
        FROM pg_stat_statements WHERE toplevel AND query LIKE '%wfe.submit%'" | tee -a "$OUT/summary.txt"
Q -c "SELECT 'nested statements/submit: ' || round(sum(calls)::numeric / $st, 2)
        FROM pg_stat_statements WHERE NOT toplevel" | tee -a "$OUT/summary.txt"
Q -c "SELECT round(total_exec_time::numeric / $st, 3) AS ms_submit, round(calls::numeric / $st, 2) AS calls_submit,
             toplevel, left(regexp_replace(query, '\s+', ' ', 'g'), 150)
        FROM pg_stat_statements WHERE calls > 0 ORDER BY toplevel DESC, total_exec_time DESC LIMIT 40" >"$OUT/stmts.txt"
Q -c "SELECT funcname, calls, round(self_time::numeric / $st, 3) FROM pg_stat_user_functions ORDER BY self_time DESC" >"$OUT/funcs.txt"
