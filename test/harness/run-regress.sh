#!/bin/bash
# run-regress.sh — pg_regress or pg_isolation_regress against the running
# test cluster (PGHOST, PGPORT and PGUSER come from cluster.sh).
#
#   test/harness/run-regress.sh regress OUTDIR     test/regress/sql/NAME.sql
#                                                  vs test/regress/expected/NAME.out
#   test/harness/run-regress.sh isolation OUTDIR   test/isolation/specs/NAME.spec
#                                                  vs test/isolation/expected/NAME.out
#
# Counts one result per test, prints regression.diffs when a test fails, and
# ends with "N passed, N failed".  Isolation specs are optional: with none the
# suite is skipped; pg_regress tests are required.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# regress_tests: the pg_regress tests (the Makefile's REGRESS).
regress_tests() {
	local f
	for f in "$WFE_TOP"/test/regress/sql/*.sql; do
		[ -e "$f" ] && basename "$f" .sql
	done
	return 0
}

# isolation_tests: the isolation specs.
isolation_tests() {
	local f
	for f in "$WFE_TOP"/test/isolation/specs/*.spec; do
		[ -e "$f" ] && basename "$f" .spec
	done
	return 0
}

# tally_results LOG: count pg_regress's "test NAME ... ok|FAILED" lines.
tally_results() {
	local passed failed
	passed=$(grep -cE '^(test| ) +[^ ]+ +\.\.\. +ok ' "$1" || true)
	failed=$(grep -E '^(test| ) +[^ ]+ +\.\.\. ' "$1" | grep -cvE '\.\.\. +ok ' || true)
	echo "$passed $failed"
}

# expected_file KIND TEST: where a test's expected output must be.
expected_file() {
	case $1 in
		regress) echo "$WFE_TOP/test/regress/expected/$2.out" ;;
		isolation) echo "$WFE_TOP/test/isolation/expected/$2.out" ;;
	esac
}

main() {
	local kind=$1 outdir=$2 driver inputdir dbname log status t expected f unrun passed failed
	local -a tests runnable=()

	# Step 1: which driver, which tests.
	case $kind in
		regress)
			driver=$(pgxs_tool pg_regress)
			inputdir=$WFE_TOP/test/regress
			dbname=wfe_regress
			mapfile -t tests < <(regress_tests)
			if [ "${#tests[@]}" -eq 0 ]; then
				say "regress: no tests in test/regress/sql/"
				exit 2
			fi
			;;
		isolation)
			driver=$(pgxs_tool pg_isolation_regress)
			inputdir=$WFE_TOP/test/isolation
			dbname=wfe_isolation
			mapfile -t tests < <(isolation_tests)
			if [ "${#tests[@]}" -eq 0 ]; then
				say "isolation: no specs in test/isolation/specs; skipped"
				summary 0 0
				exit 0
			fi
			;;
		*)
			die "usage: run-regress.sh regress|isolation OUTDIR"
			;;
	esac

	# Step 2: a test without its expected output fails here: the driver
	# would stop at it and skip the rest.
	failed=0
	for t in "${tests[@]}"; do
		expected=$(expected_file "$kind" "$t")
		if [ -f "$expected" ]; then
			runnable+=("$t")
		else
			say "test $t ... FAILED (no ${expected#"$WFE_TOP"/})"
			failed=$((failed + 1))
		fi
	done

	# Step 3: run the driver.  It creates the database afresh; the tests
	# share it, so each one says CREATE EXTENSION IF NOT EXISTS wfe itself.
	# The output directory belongs to the server user, in case a test makes
	# the server write there.
	mkdir -p "$outdir"
	give_to_server_user "$outdir"
	log="$outdir/driver.log"
	: >"$log"
	status=0
	if [ "${#runnable[@]}" -gt 0 ]; then
		"$driver" --bindir="$(pg_path bindir)" \
			--host="$PGHOST" --port="$PGPORT" --user="$PGUSER" \
			--inputdir="$inputdir" --outputdir="$outdir" --dbname="$dbname" \
			"${runnable[@]}" 2>&1 | tee "$log" || status=$?
	fi

	# Step 4: count, and explain failures with the diffs.  Tests the driver
	# never reached count as failed.
	read -r passed f < <(tally_results "$log")
	failed=$((failed + f))
	unrun=$((${#runnable[@]} - passed - f))
	if [ "$unrun" -gt 0 ]; then
		say "$kind: $(basename "$driver") stopped (exit status $status) with $unrun tests not run"
		failed=$((failed + unrun))
	fi
	if [ -s "$outdir/regression.diffs" ]; then
		banner "$kind: regression.diffs"
		cat "$outdir/regression.diffs"
	fi
	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
