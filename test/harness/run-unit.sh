#!/bin/bash
# run-unit.sh — run the C unit tests of the compiler core and count their TAP.
#
#   test/harness/run-unit.sh [PROGRAM...]
#
# By default, one program per test/unit/test_*.c, built by `make unit-tests`
# into build/test/unit/.
#
# Each program prints TAP ("1..N", "ok N - ...", "not ok N - ...") and exits
# non-zero on failure.  A failing program's whole output is shown (sanitizer
# reports included); a passing one gets one line.  Ends with "N passed, N failed".
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sanitizers: report leaks, and print a stack with undefined behaviour.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# test data beside the programs' sources (test/unit/jsonschema-2020)
export WFE_TOP

OUT="" # a test program's output

# default_programs: the program built from each test/unit/test_*.c.
default_programs() {
	local src
	for src in "$WFE_TOP"/test/unit/test_*.c; do
		[ -e "$src" ] && echo "$WFE_TOP/build/test/unit/$(basename "$src" .c)"
	done
	return 0
}

# run_one PROGRAM OUTFILE: run a test program; print its exit status.
run_one() {
	local status=0
	if [ -x "$1" ]; then
		timeout 300 "$1" >"$2" 2>&1 || status=$?
	else
		echo "$1: not built" >"$2"
		status=127
	fi
	echo "$status"
}

main() {
	local programs=("$@") passed=0 failed=0 prog status p f

	if [ "${#programs[@]}" -eq 0 ]; then
		mapfile -t programs < <(default_programs)
	fi
	if [ "${#programs[@]}" -eq 0 ]; then
		say "unit: no tests (test/unit/test_*.c)"
		exit 2
	fi

	OUT=$(mktemp)
	trap 'rm -f "$OUT"' EXIT
	for prog in "${programs[@]}"; do
		status=$(run_one "$prog" "$OUT")
		read -r p f < <(tap_tally "$OUT" "$status")
		if [ "$f" -eq 0 ]; then
			say "unit: $(basename "$prog"): ok ($p assertions)"
			# a program's own summary lines (the conformance counts)
			grep '^# conformance' "$OUT" | sed 's/^# /    /' || true
		else
			say "unit: $(basename "$prog"): FAILED ($f failed, exit status $status)"
			sed 's/^/    /' "$OUT"
		fi
		passed=$((passed + p))
		failed=$((failed + f))
	done
	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
