#!/bin/bash
# run-all.sh — what `make test` runs.
#
#   test/harness/run-all.sh [SUITE...]
#
# Suites, in order: version regress isolation tap unit fuzz cli worker python (default: all);
# also, only when named: deb (builds and uses the Debian packages; several minutes).
# Sets up first (packages, build, install, a private cluster), runs the
# suites, each printing its result as it goes, tears down, and ends with
# exactly one line "N passed, N failed".  Exits non-zero if anything failed
# or could not run.
#
# Environment: TEST_FUZZ_SECONDS (default 20) for the short fuzz run;
# WFE_KEEP_WORKDIR=1 keeps the temporary directory (test outputs, server log);
# WFE_TAP_JOBS (default 3): TAP test files run at once (see run-tap.sh).
# The recap gives each suite's wall time.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
. "$WFE_HARNESS/cluster.sh"

ALL_SUITES=(version regress isolation tap unit fuzz cli worker python)
NAMED_SUITES=(deb)  # run only when named
WORKDIR=""
CURRENT_STEP=""
PASSED=0
FAILED=0
RECAP=()

# record NAME PASSED FAILED [SECONDS]: add a result to the totals and the
# recap (with the suite's wall time, in minutes).
record() {
	local took=""
	[ -z "${4:-}" ] || took=$(printf '  (%d.%d min)' $(($4 / 60)) $(($4 % 60 / 6)))
	PASSED=$((PASSED + $2))
	FAILED=$((FAILED + $3))
	RECAP+=("$(printf '  %-10s %-24s%s' "$1" "$(summary "$2" "$3")" "$took")")
}

# setup_step NAME CMD...: a step the suites rely on.  If it fails, set -e
# ends the run and finish counts the step (CURRENT_STEP) as one failure.
setup_step() {
	CURRENT_STEP=$1
	shift
	banner "$CURRENT_STEP"
	"$@"
	CURRENT_STEP=""
}

# run_suite NAME CMD...: run one suite, show its output, count its last line
# ("N passed, N failed").  A suite that exits non-zero without a failing
# test could not run, which counts as one failure.
run_suite() {
	local name=$1 log status=0 passed=0 failed=0 last start=$SECONDS
	shift
	banner "$name"
	log="$WORKDIR/$name.log"
	"$@" 2>&1 | tee "$log" || status=$?
	# the suite's own "N passed, N failed" line (the last such line: a
	# suite may print where its logs are after it)
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1 || true)
	if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		passed=${BASH_REMATCH[1]}
		failed=${BASH_REMATCH[2]}
	fi
	if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
		say "$name: could not run (exit status $status)"
		failed=1
	fi
	record "$name" "$passed" "$failed" $((SECONDS - start))
}

# version_suite: META.json must carry the version of wfe.control.
version_suite() {
	if wfe_make check-meta; then summary 1 0; else summary 0 1; return 1; fi
}

# run_named_suite NAME: the command behind each suite name.
run_named_suite() {
	case $1 in
		version) run_suite version version_suite ;;
		regress) run_suite regress "$WFE_HARNESS/run-regress.sh" regress "$WORKDIR/regress" ;;
		isolation) run_suite isolation "$WFE_HARNESS/run-regress.sh" isolation "$WORKDIR/isolation" ;;
		tap) run_suite tap "$WFE_HARNESS/run-tap.sh" "$WORKDIR/tap" ;;
		unit) run_suite unit "$WFE_HARNESS/run-unit.sh" ;;
		fuzz) run_suite fuzz "$WFE_HARNESS/run-fuzz.sh" "${TEST_FUZZ_SECONDS:-20}" \
			"$WORKDIR/fuzz/corpus" "$WORKDIR/fuzz" ;;
		cli) run_suite cli "$WFE_HARNESS/cli_vs_db.sh" ;;
		worker) run_suite worker "$WFE_TOP/test/worker/run.sh" "$WORKDIR/worker" ;;
		python) run_suite python "$WFE_TOP/test/python/run.sh" "$WORKDIR/python" ;;
		deb) run_suite deb "$WFE_TOP/test/deb/run.sh" "$WORKDIR/deb" ;;
	esac
}

# needs_cluster SUITE...: true if one of the suites talks to our server.
needs_cluster() {
	local s
	for s in "$@"; do
		case $s in regress | isolation | cli) return 0 ;; esac
	done
	return 1
}

# finish: the EXIT trap.  Stop the server, show its log if it crashed,
# remove the temporary directory, and print the totals last.
finish() {
	local status=$?
	cluster_stop
	cluster_crash_report
	if [ -n "$WORKDIR" ]; then
		if [ -n "${WFE_KEEP_WORKDIR:-}" ]; then
			say "kept $WORKDIR"
		else
			rm -rf "$WORKDIR"
		fi
	fi
	if [ -n "$CURRENT_STEP" ]; then
		say "$CURRENT_STEP: FAILED, so no suite could run"
		record "$CURRENT_STEP" 0 1
	elif [ "$status" -ne 0 ]; then
		say "the run was interrupted or broke (exit status $status)"
		record harness 0 1
	fi
	banner "results"
	printf '%s\n' "${RECAP[@]}"
	printf '  %-10s %-24s  (%d.%d min)\n' "all" "" $((SECONDS / 60)) $((SECONDS % 60 / 6))
	summary "$PASSED" "$FAILED"
	[ "$FAILED" -eq 0 ] && exit 0
	exit 1
}

main() {
	local suites=("$@") s

	# Step 0: which suites; check the names before doing anything.
	[ "${#suites[@]}" -gt 0 ] || suites=("${ALL_SUITES[@]}")
	for s in "${suites[@]}"; do
		[[ " ${ALL_SUITES[*]} ${NAMED_SUITES[*]} " == *" $s "* ]] ||
			die "unknown suite '$s' (${ALL_SUITES[*]} ${NAMED_SUITES[*]})"
	done
	trap finish EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	WORKDIR=$(make_workdir)

	# Step 1: install the Debian packages that are missing.
	setup_step packages "$WFE_HARNESS/deps.sh"

	# Step 2: build everything: the extension, wfe-compile, the unit tests,
	# the fuzz target and the TAP tests' amqp-probe.
	setup_step build wfe_build all unit-tests fuzz-target test-tools

	# Step 3: install the extension and wfe-compile (root on Debian).
	setup_step install wfe_install

	# Step 4: a private cluster, for the suites that need one.
	if needs_cluster "${suites[@]}"; then
		setup_step cluster cluster_start "$WORKDIR"
	fi

	# Step 5: the suites; a failing suite does not stop the others.
	for s in "${suites[@]}"; do
		run_named_suite "$s"
	done

	# Step 6: finish (the EXIT trap) stops the cluster and prints the totals.
}

main "$@"
