#!/bin/bash
# bench/fairness/run.sh — what fairness between tenants buys and costs
# (issue 24; operations.md "Fairness between tenants"; quality.md "New in 0.3.0").
#
#   1. The small tenant's queue wait: tenant small submits one run every
#      TRICKLE_MS while CLIENTS pgbench clients claim and complete one task
#      at a time on queue fq for SECS s, (a) on an empty queue ("alone")
#      and (b) beside tenant big's BACKLOG queued runs on the same queue,
#      with fairness => 'tenant'.  p50 and p99 of small's waits (claimed
#      at - ready at); goal: (b)'s p99 <= 2 x (a)'s.  For contrast, (c) the
#      same as (b) without fairness (small's tasks wait behind big's).
#   2. Cost: steps/s of the same claim-and-complete loop over a backlog of
#      COST_BACKLOG runs of four tenants, fairness on against off, ROUNDS
#      times each, alternating; the ratio of the medians (goal >= 0.9).
#
# Against a running server: PGHOST=... PGPORT=... BIN=$(pg_config --bindir) bench/fairness/run.sh
# The database's wfe (FAIR_DB, default bench_fair) is dropped and created again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$(pg_config --bindir)}
PS="$BIN/psql -X -q"
SECS=${SECS:-20}
CLIENTS=${CLIENTS:-4}
BACKLOG=${BACKLOG:-100000}
COST_BACKLOG=${COST_BACKLOG:-40000}
TRICKLE_MS=${TRICKLE_MS:-50}
DB=${FAIR_DB:-bench_fair}
[ -n "$($PS -At -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" postgres)" ] ||
	$PS -c "CREATE DATABASE $DB" postgres
$PS -d "$DB" -c "SET client_min_messages = warning" -c "DROP EXTENSION IF EXISTS wfe CASCADE"
$PS -d "$DB" -c "CREATE EXTENSION wfe"
$PS -d "$DB" -f "$HERE/setup.sql" >/dev/null
reset() {
	$PS -d "$DB" -c "SET client_min_messages = warning" -c "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" \
		-c "TRUNCATE bench_fair_claimable" >/dev/null
}
fairness() { $PS -d "$DB" -c "SELECT wfe.configure_queue('fq', fairness => '$1')" >/dev/null; }
# submit N runs of TENANT
load() {
	$PS -d "$DB" -c "SELECT count(*) FROM (SELECT wfe.submit('bench-fair', '{}', NULL, '{\"tenant\": \"$2\"}')
	                                        FROM generate_series(1, $1)) s" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
}
# small's trickle beside a pgbench run of SECS s (it stops 3 s before the
# run ends, so each of its tasks can be claimed); prints small's wait p50
# p99 (ms), its count and how many were never claimed (counted as waiting
# to the end), then the same p50 p99 from when each task became claimable.
# Two measures: ready (started_at - ready_at: ready_at is the submit's
# transaction start, so this includes the submit itself and its commit,
# whose WAL flush queues behind the claimers' when the server is busy) and
# claimable (started_at - the trickle's clock right after the submit
# committed: the time the task sat in the queue, what fairness decides).
# Both end at started_at, the claim's transaction start, so neither counts
# the claim statement itself; a third, done (finished_at - the same clock:
# the completion, which the client sends as soon as the claim returns),
# does -- a claim that walks the backlog to find the task shows there
# (docs/benchmarks.md "The fair claim's tail").
# The pause between submits is its own transaction: it used to be the
# start of the submit's, so every wait counted the 50 ms pause too.
# Last, what fairness decided, whatever the load: how many of small's
# tasks a claim of another tenant's task passed over (a claim that started
# after the task was claimable), and the most claims that passed over one.
trickle_run() {
	local t0
	t0=$($PS -At -d "$DB" -c "SELECT clock_timestamp()")
	"$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -f "$HERE/step.sql" "$DB" >/dev/null 2>&1 &
	local pg=$!
	$PS -d "$DB" -c "SET statement_timeout = '$((SECS + 30))s'" -c "
DO \$\$
DECLARE
    r bigint;
BEGIN
    WHILE clock_timestamp() < '$t0'::timestamptz + interval '$((SECS - 3)) s' LOOP
        PERFORM pg_sleep($TRICKLE_MS / 1000.0);
        COMMIT;
        SELECT s.run_id INTO r FROM wfe.submit('bench-fair', '{}', NULL, '{\"tenant\": \"small\"}') AS s;
        COMMIT;
        INSERT INTO bench_fair_claimable (run_id, at) VALUES (r, clock_timestamp());
        COMMIT;
    END LOOP;
END
\$\$" >/dev/null
	wait $pg
	$PS -At -d "$DB" -c "
WITH others AS MATERIALIZED (
    SELECT o.started_at FROM wfe.run_stages AS o
     WHERE o.tenant <> 'small' AND o.started_at >= '$t0')
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY w)::numeric, 1) || ' ' ||
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY w)::numeric, 1) || ' ' || count(*) || ' ' ||
       count(*) FILTER (WHERE NOT claimed) || ' ' ||
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY q)::numeric, 1) || ' ' ||
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY q)::numeric, 1) || ' ' ||
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 1) || ' ' ||
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, 1) || ' ' ||
       count(*) FILTER (WHERE passed > 0) || ' ' || coalesce(max(passed), 0)
  FROM (SELECT extract(epoch FROM coalesce(st.started_at, clock_timestamp()) - st.ready_at) * 1000 AS w,
               greatest(0, extract(epoch FROM coalesce(st.started_at, clock_timestamp()) - c.at) * 1000) AS q,
               greatest(0, extract(epoch FROM coalesce(st.finished_at, clock_timestamp()) - c.at) * 1000) AS d,
               st.started_at IS NOT NULL AS claimed,
               (SELECT count(*) FROM others AS o
                 WHERE o.started_at > c.at AND o.started_at < coalesce(st.started_at, clock_timestamp())) AS passed
          FROM wfe.run_stages AS st JOIN bench_fair_claimable AS c ON c.run_id = st.run_id
         WHERE st.tenant = 'small' AND st.ready_at >= '$t0') AS x"
}
reset; fairness tenant
read -r a50 a99 an au aq50 aq99 ad50 ad99 _ _ < <(trickle_run)
echo "alone: small's wait p50 $a50 ms, p99 $a99 ms ($an tasks, $au unclaimed at the end); claimable: p50 $aq50 ms, p99 $aq99 ms; claimable to done: p50 $ad50 ms, p99 $ad99 ms"
reset; fairness tenant; load "$BACKLOG" big
read -r b50 b99 bn bu bq50 bq99 bd50 bd99 bp bpmax < <(trickle_run)
echo "beside $BACKLOG of big's, fair: small's wait p50 $b50 ms, p99 $b99 ms ($bn tasks, $bu unclaimed): p99 $(awk -v a="$b99" -v b="$a99" 'BEGIN { printf "%.2f", a / b }') x alone (goal <= 2); claimable: p50 $bq50 ms, p99 $bq99 ms: p99 $(awk -v a="$bq99" -v b="$aq99" 'BEGIN { printf "%.2f", a / b }') x alone; claimable to done: p50 $bd50 ms, p99 $bd99 ms: p99 $(awk -v a="$bd99" -v b="$ad99" 'BEGIN { printf "%.2f", a / b }') x alone; passed over by a claim of big's: $bp of $bn tasks, at most $bpmax claims"
fairness none
read -r c50 c99 cn cu cq50 cq99 _ _ _ _ < <(trickle_run)
echo "beside big's backlog, not fair: small's wait p50 $c50 ms, p99 $c99 ms ($cn tasks, $cu never claimed: their wait counts to the end); claimable: p50 $cq50 ms, p99 $cq99 ms"

declare -a OFF ON
for round in $(seq "${ROUNDS:-3}"); do
	for mode in none tenant; do
		reset; fairness $mode
		for t in a b c d; do load $((COST_BACKLOG / 4)) "t$t"; done
		before=$($PS -At -d "$DB" -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		"$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -f "$HERE/step.sql" "$DB" >/dev/null 2>&1
		after=$($PS -At -d "$DB" -c "SELECT count(*) FROM wfe.run_stages WHERE state = 'completed'")
		rate=$(((after - before) / SECS))
		if [ $mode = tenant ]; then ON+=("$rate"); else OFF+=("$rate"); fi
		echo "round $round fairness $mode: $rate steps/s"
	done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_off=$(median "${OFF[@]}")
m_on=$(median "${ON[@]}")
echo "cost: median $m_on steps/s with fairness on, $m_off without: ratio $(awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "%.2f", a / b }') (goal >= 0.9)"
