#!/bin/bash
# run-tap.sh — the TAP tests, test/tap/*.pl, with PostgreSQL::Test::Cluster.
#
#   test/harness/run-tap.sh WORKDIR
#
# Each test starts the clusters it needs from the installed PostgreSQL (the
# extension must be installed).  They run as the server user, because initdb
# refuses root, with their scratch files under WORKDIR.  Every top-level TAP
# assertion counts; a test that dies or breaks its plan counts one failure.
# Optional: with no test/tap/*.pl the suite is skipped.
#
# WFE_TAP_JOBS (default 3) test files run at once, the longest first (as
# test/harness/tap-durations lists them; files it does not list start
# first).  Most of a TAP test's time is spent waiting (servers starting,
# polling), so three at a time take about a third of the time one after
# another would on two cores (2,339 s of test files in 797 s).  Each
# file's result is printed in name order, with its wall time, as soon as it
# and the files before it are done; a failure prints its whole output and
# the end of its server logs.  Concurrent files cannot take each other's
# ports: every port (PostgreSQL's, RabbitMQ's, epmd's, pgbouncer's) comes
# from PostgreSQL::Test::Cluster::get_free_port, which reserves it in the
# port lock directory PG_TEST_PORT_DIR, shared by all files of the run.
# WFE_TAP_ONLY=PATTERN runs the matching tests only (e.g. "01[04]_*").
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Seconds each test file took on a quiet machine: the order to start them in.
DURATIONS="$WFE_HARNESS/tap-durations"

# run_one TEST: prove one test file verbosely into RESULTS/NAME.out, then
# write "STATUS SECONDS" to RESULTS/NAME.done (its presence says it ended).
run_one() {
	local name status=0 testdir start
	name=$(basename "$1" .pl)
	testdir="$WORKDIR/$name"
	mkdir -p "$testdir"
	give_to_server_user "$testdir"
	start=$EPOCHREALTIME
	as_server_user env \
		PATH="$(pg_path bindir):$PATH" \
		PG_REGRESS="$(pgxs_tool pg_regress)" \
		PG_TEST_PORT_DIR="$PORTDIR" \
		TESTDIR="$testdir" \
		prove -v -I "$(pgxs_tool perl)" -I "$WFE_TOP/test/tap" "$1" \
		>"$RESULTS/$name.out" 2>&1 || status=$?
	printf '%s %s\n' "$status" "$(elapsed "$start")" >"$RESULTS/$name.tmp"
	mv "$RESULTS/$name.tmp" "$RESULTS/$name.done"
}

# elapsed START: whole seconds since START (an $EPOCHREALTIME).
elapsed() {
	local now=$EPOCHREALTIME
	# (digits only: the decimal separator follows the locale)
	echo $(((${now//[^0-9]/} - ${1//[^0-9]/}) / 1000000))
}

# show_test_logs TEST: the end of the logs a failed test left behind.
show_test_logs() {
	local log
	for log in "$WORKDIR/$(basename "$1" .pl)"/tmp_check/log/*; do
		banner "$(basename "$log") (last 50 lines)"
		tail -n 50 "$log"
	done
}

# longest_first TEST...: the tests, those test/harness/tap-durations does
# not know first (new tests: assume they are long), then the known ones by
# falling duration.
longest_first() {
	local t name secs
	for t in "$@"; do
		name=$(basename "$t")
		secs=$(awk -v n="$name" '$1 == n { print $2 }' "$DURATIONS" 2>/dev/null || true)
		printf '%s %s\n' "${secs:-999999}" "$t"
	done | sort -k1,1nr -k2,2 | cut -d' ' -f2-
}

# report TEST: print a finished test's result; add it to passed/failed.
report() {
	local t=$1 name status secs p f
	name=$(basename "$t" .pl)
	read -r status secs <"$RESULTS/$name.done"
	read -r p f < <(tap_tally "$RESULTS/$name.out" "$status")
	if [ "$f" -eq 0 ]; then
		say "tap: $name.pl: ok ($p assertions, $secs s)"
	else
		say "tap: $name.pl: FAILED ($f failed, exit status $status, $secs s)"
		sed 's/^/    /' "$RESULTS/$name.out"
		show_test_logs "$t"
	fi
	printf '%s.pl %s\n' "$name" "$secs" >>"$WORKDIR/durations"
	passed=$((passed + p))
	failed=$((failed + f))
}

# stop_jobs: stop the test files still running (on an interrupt, or when
# the harness itself breaks): TERM to each one's process group, so that
# prove and the test get it.  (As before, runuser SIGKILLs its child two
# seconds after a TERM, so a slow teardown can leave a test's servers up.)
stop_jobs() {
	local job
	for job in "${running[@]}"; do
		kill -TERM -- "-${job%%:*}" 2>/dev/null || true
	done
}

main() {
	local tests order jobs next=0 shown=0 still job start
	passed=0 failed=0 running=()
	WORKDIR=$1

	shopt -s nullglob
	tests=("$WFE_TOP"/test/tap/${WFE_TAP_ONLY:-*}.pl)
	if [ "${#tests[@]}" -eq 0 ]; then
		say "tap: no tests in test/tap; skipped"
		summary 0 0
		exit 0
	fi
	jobs=${WFE_TAP_JOBS:-3}
	[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "WFE_TAP_JOBS must be a positive number, not '$jobs'"

	RESULTS="$WORKDIR/results"
	PORTDIR=${PG_TEST_PORT_DIR:-$WORKDIR/portlock}
	mkdir -p "$WORKDIR" "$RESULTS" "$PORTDIR"
	give_to_server_user "$WORKDIR" "$PORTDIR"
	: >"$WORKDIR/durations"
	mapfile -t order < <(longest_first "${tests[@]}")
	say "tap: ${#tests[@]} files, $jobs at a time"
	start=$EPOCHREALTIME

	# Start a file whenever fewer than $jobs run; print results in name
	# order as they come in.  Each file runs in a process group of its own
	# (set -m), which stop_jobs can end as a whole: a background job
	# without job control ignores SIGINT, so ^C would not reach it.
	set -m
	trap stop_jobs EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	while [ "$shown" -lt "${#tests[@]}" ]; do
		while [ "${#running[@]}" -lt "$jobs" ] && [ "$next" -lt "${#order[@]}" ]; do
			run_one "${order[next]}" &
			running+=("$!:$(basename "${order[next]}" .pl)")
			next=$((next + 1))
		done
		while [ "$shown" -lt "${#tests[@]}" ] &&
			[ -e "$RESULTS/$(basename "${tests[shown]}" .pl).done" ]; do
			report "${tests[shown]}"
			shown=$((shown + 1))
		done
		[ "$shown" -lt "${#tests[@]}" ] || break
		wait -n "${running[@]%%:*}" 2>/dev/null || true
		still=()
		for job in "${running[@]}"; do
			if kill -0 "${job%%:*}" 2>/dev/null; then
				still+=("$job")
			elif [ ! -e "$RESULTS/${job#*:}.done" ]; then
				# run_one itself broke: count the test as failed
				echo "run-tap.sh: the harness could not run ${job#*:}" >>"$RESULTS/${job#*:}.out"
				echo "255 0" >"$RESULTS/${job#*:}.done"
			fi
		done
		running=("${still[@]}")
	done
	say "tap: $(elapsed "$start") s in all (durations of this run: $WORKDIR/durations)"
	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
