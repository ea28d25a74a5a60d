#!/bin/bash
# run-fuzz.sh — run the libFuzzer target over the compiler for a fixed time.
#
#   test/harness/run-fuzz.sh SECONDS CORPUS_DIR ARTIFACT_DIR
#
# The seeds in test/fuzz/corpus are read but never written: libFuzzer adds
# the inputs it finds to the first corpus directory, CORPUS_DIR.  A crash, a
# leak, a timeout (5 s per input) or more than 1 GiB of memory fails the run
# and leaves the input in ARTIFACT_DIR.  Counts as one test.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FUZZER="$WFE_TOP/build/fuzz/fuzz_compile"
SEEDS="$WFE_TOP/test/fuzz/corpus"
DICT="$WFE_TOP/test/fuzz/wfe.dict"

main() {
	local seconds=$1 corpus=$2 artifacts=$3 log status=0

	[ -x "$FUZZER" ] || { say "fuzz: $FUZZER is missing (make fuzz-target)"; exit 2; }
	mkdir -p "$corpus" "$artifacts"
	log="$artifacts/fuzz.log"

	# Step 1: fuzz.  The log is long; keep it aside.
	say "fuzz: $(basename "$FUZZER") for ${seconds}s, seeds from test/fuzz/corpus (log: $log)"
	"$FUZZER" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=5 \
		-dict="$DICT" -artifact_prefix="${artifacts%/}/" -print_final_stats=1 \
		"$corpus" "$SEEDS" >"$log" 2>&1 || status=$?

	# Step 2: report.  On failure show the end of the log: the sanitizer
	# report and the artifact libFuzzer saved.
	if [ "$status" -eq 0 ]; then
		say "fuzz: ok, $(sed -nE 's/^stat::number_of_executed_units: *//p' "$log") inputs," \
			"peak RSS $(sed -nE 's/^stat::peak_rss_mb: *//p' "$log") MB"
		summary 1 0
	else
		say "fuzz: FAILED (exit status $status)"
		tail -n 60 "$log" | sed 's/^/    /'
		summary 0 1
		exit 1
	fi
}

main "$@"
