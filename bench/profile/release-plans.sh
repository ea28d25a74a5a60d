#!/bin/bash
# release-plans.sh OUTDIR — what a release of held broker tasks reads beside
# a big held backlog (docs/benchmarks.md "Releases without scans").
#
# A private cluster (defaults), wfe, and BACKLOG runs (default 20,000) of a
# one-stage workflow on each of two queues, half of each tenant lim's
# (max_tasks_in_flight 3), half tenant free's: fs-b, a broker queue with
# max_in_flight 5 (five dispatched, the rest held; the queue is paused
# while they are submitted), and fs-p, a poll queue.  Then, with
# auto_explain (ANALYZE, BUFFERS, nested statements), three releases
# (wfe._release_held, as configure_queue, configure_tenant and the end of
# a task call it): fs-b's limit raised by one (the queue's side), lim's
# raised by one (the tenant's side), and both raised by one with the
# release a task of lim on fs-b ending makes (both sides).  Writes OUTDIR/plans.txt
# (every plan) and prints, per release, each statement that read more than
# 100 shared buffers, with its buffers and time, and the release's total.
# Each release is made twice in its session: the first call also plans
# the server layer's prepared statements (a few thousand catalog buffers),
# the second is what every later release costs.
#
# Environment: PG_CONFIG (the PostgreSQL to use, with wfe installed),
# CLUSTER_FIRST_PORT, BACKLOG.  Compare two builds one after the other.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. test/harness/lib.sh
. test/harness/cluster.sh

OUT=${1:?usage: release-plans.sh OUTDIR}
BACKLOG=${BACKLOG:-20000}
BIN=$(pg_path bindir)
WORKDIR=$(make_workdir)
trap 'cluster_stop; rm -rf "$WORKDIR"' EXIT
mkdir -p "$OUT"
cluster_start "$WORKDIR"
Q() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"; }

Q -c "CREATE EXTENSION wfe"
for q in fs-b fs-p; do
	Q -c "SELECT wfe.register_worker('$q.w@1', '$q')" -c "SELECT wfe.create_definition(\$y\$
name: $q
version: \"1.0.0\"
entry: a
stages:
  - { name: a, type: worker, queue: $q, worker: $q.w@1, on_success: completed, on_failure: failed }
\$y\$)" -c "SELECT wfe.approve('$q', '1.0.0')" -c "SELECT wfe.activate('$q', '1.0.0')" >/dev/null
done
Q -c "SELECT wfe.configure_queue('fs-b', 'broker', 5, paused => true)" \
  -c "SELECT wfe.configure_tenant('lim', max_tasks_in_flight => 3)" >/dev/null
for q in fs-b fs-p; do
	Q -c "SELECT count(*) FROM generate_series(1, $BACKLOG) AS i,
	             LATERAL wfe.submit('$q', jsonb_build_object('v', i), NULL,
	                                jsonb_build_object('tenant', CASE WHEN i % 2 = 0 THEN 'lim' ELSE 'free' END)) AS s
	       WHERE s.accepted" >/dev/null
done
# resumed: every held task is dispatched through the gates, five go
Q -c "SELECT wfe.resume_queue('fs-b')" -c "VACUUM ANALYZE" >/dev/null

# release NAME SQL: SQL run with auto_explain; its plans appended to plans.txt
release() {
	local err
	err=$("$BIN/psql" -X -q -v ON_ERROR_STOP=1 -At 2>&1 >/dev/null <<SQL
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = off;
SET auto_explain.log_format = json;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;
$2
$2
SQL
)
	printf '== %s\n%s\n' "$1" "$err" >>"$OUT/plans.txt"
	echo "== $1"
	printf '%s\n' "$err" | perl -MJSON::PP -0777 -ne '
		while (/NOTICE:\s+duration: ([0-9.]+) ms\s+plan:\n(\{.*?\n\})(?:\n|\z)/sg) {
			my ($ms, $j) = ($1, decode_json($2));
			my $buffers = $j->{Plan}{"Shared Hit Blocks"} + $j->{Plan}{"Shared Read Blocks"};
			(my $text = $j->{"Query Text"}) =~ s/\s+/ /g;
			$text =~ s/^ //;
			if ($text =~ /^SELECT count\(\*\) FROM wfe\._release_held/) {
				printf "  %6d buffers %8.2f ms  the release (%s)\n", $buffers, $ms, $text;
			} elsif ($buffers > 100) {
				printf "  %6d buffers %8.2f ms    %s\n", $buffers, $ms, substr($text, 0, 100);
			}
		}'
}
release "the queue's side: fs-b's max_in_flight raised by one (as configure_queue)" \
	"UPDATE wfe.queues SET max_in_flight = max_in_flight + 1 WHERE queue = 'fs-b';
	 SELECT count(*) FROM wfe._release_held('fs-b', NULL);"
release "the tenant's side: lim's max_tasks_in_flight raised by one (as configure_tenant)" \
	"UPDATE wfe.tenant_limits SET max_tasks_in_flight = max_tasks_in_flight + 1 WHERE tenant = 'lim';
	 SELECT count(*) FROM wfe._release_held(NULL, 'lim');"
release "both sides: a task of lim on fs-b ended (lim one slot short, room in fs-b)" \
	"UPDATE wfe.tenant_limits SET max_tasks_in_flight = max_tasks_in_flight + 1 WHERE tenant = 'lim';
	 UPDATE wfe.queues SET max_in_flight = max_in_flight + 1 WHERE queue = 'fs-b';
	 SELECT count(*) FROM wfe._release_held('fs-b', 'lim');"
