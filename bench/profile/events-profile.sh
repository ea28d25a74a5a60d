#!/bin/bash
# events-profile.sh OUTDIR — what writing an event row costs with
# wfe.publish_events off and on (docs/delivery.md "Event projection").
#
# The cluster of profile.sh, then one backend inserts EVENTS rows into
# wfe.events (default 20,000), 100 a statement (about what a few steps
# write), first with the setting off, then on, then off and on again.
# For each pass: the backend's CPU time (utime + stime of /proc/PID/stat)
# in microseconds per event, and WAL records per event (pg_walinspect, up
# to the flush position after the pass's last commit).
# Writes OUTDIR/summary.txt.
#
# Environment: PG_CONFIG (the PostgreSQL to use, with wfe installed),
# CLUSTER_FIRST_PORT, EVENTS.  The machine is shared: run it under nice,
# compare builds run back to back.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. bench/profile/profile.sh

OUT=${1:?usage: events-profile.sh OUTDIR}
EVENTS=${EVENTS:-20000}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
profile_cluster 2

# pass SETTING: EVENTS events, 100 a statement, with wfe.publish_events = SETTING
# shellcheck disable=SC2016  # $WFE_PID and $14 are psql's shell's and awk's
pass() {
	printf '%s\n' "SET wfe.publish_events = $1;" \
		"SELECT pg_current_wal_insert_lsn() AS lsn0 \\gset" \
		'\! awk "{ print \$14 + \$15 }" /proc/$WFE_PID/stat' \
		"SELECT count(*) FROM (SELECT 1 FROM generate_series(1, $EVENTS / 100) AS b,
		        LATERAL (SELECT public.write_events(b)) AS w) AS s \\gset" \
		'\! awk "{ print \$14 + \$15 }" /proc/$WFE_PID/stat' \
		"SELECT pg_current_wal_flush_lsn() AS lsn1 \\gset" \
		"SELECT count(*) AS records FROM pg_get_wal_records_info(:'lsn0', :'lsn1') \\gset" \
		"\\echo wal :records"
}
# a statement of 100 event rows of a step's shape (write_events is SQL: not inlined, one statement a call)
Q -c "CREATE FUNCTION public.write_events(b int) RETURNS void LANGUAGE sql VOLATILE AS \$\$
      INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
      SELECT b * 100 + i, 'default', 'work', 1, 'stage.completed', '{\"worker_id\": \"w\"}'
        FROM generate_series(1, 100) AS i \$\$"
{
	printf '%s\n' 'SELECT pg_backend_pid() AS pid \gset' '\setenv WFE_PID :pid'
	pass off
	pass on
	pass off
	pass on
} >"$WORKDIR/events.sql"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d wfe_bench -At -f "$WORKDIR/events.sql" >"$WORKDIR/events.txt"
hz=$(getconf CLK_TCK)
# events.txt: per pass, CPU ticks before, after, then "wal N"
awk -v hz="$hz" -v n="$EVENTS" '
	/^wal / { k++; printf "pass %d (publish_events %s): backend CPU us/event %.2f, WAL records/event %.2f\n",
	          k, (k % 2 ? "off" : "on"), (t[2] - t[1]) * 1e6 / hz / n, $2 / n; m = 0; next }
	{ t[++m] = $1 }' "$WORKDIR/events.txt" | tee -a "$OUT/summary.txt"
Q -c "SELECT 'outbox event rows: ' || count(*) FROM wfe.outbox WHERE kind = 'event'" | tee -a "$OUT/summary.txt"
