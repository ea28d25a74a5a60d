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
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# run_one TEST OUTFILE: prove one test file verbosely; print its exit status.
run_one() {
	local status=0 testdir
	testdir="$WORKDIR/$(basename "$1" .pl)"
	mkdir -p "$testdir"
	give_to_server_user "$testdir"
	as_server_user env \
		PATH="$(pg_path bindir):$PATH" \
		PG_REGRESS="$(pgxs_tool pg_regress)" \
		TESTDIR="$testdir" \
		prove -v -I "$(pgxs_tool perl)" -I "$WFE_TOP/test/tap" "$1" \
		>"$2" 2>&1 || status=$?
	echo "$status"
}

# show_test_logs TEST: the end of the logs a failed test left behind.
show_test_logs() {
	local log
	for log in "$WORKDIR/$(basename "$1" .pl)"/tmp_check/log/*; do
		banner "$(basename "$log") (last 50 lines)"
		tail -n 50 "$log"
	done
}

main() {
	local tests passed=0 failed=0 t out status p f
	WORKDIR=$1

	shopt -s nullglob
	# WFE_TAP_ONLY=PATTERN runs the matching tests only (e.g. "01[04]_*")
	tests=("$WFE_TOP"/test/tap/${WFE_TAP_ONLY:-*}.pl)
	if [ "${#tests[@]}" -eq 0 ]; then
		say "tap: no tests in test/tap; skipped"
		summary 0 0
		exit 0
	fi

	mkdir -p "$WORKDIR"
	give_to_server_user "$WORKDIR"
	out="$WORKDIR/prove.out"
	for t in "${tests[@]}"; do
		status=$(run_one "$t" "$out")
		read -r p f < <(tap_tally "$out" "$status")
		if [ "$f" -eq 0 ]; then
			say "tap: $(basename "$t"): ok ($p assertions)"
		else
			say "tap: $(basename "$t"): FAILED ($f failed, exit status $status)"
			sed 's/^/    /' "$out"
			show_test_logs "$t"
		fi
		passed=$((passed + p))
		failed=$((failed + f))
	done
	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
