#!/bin/bash
# run-fuzz.sh — run the libFuzzer targets for a fixed time, shared between them.
#
#   test/harness/run-fuzz.sh SECONDS CORPUS_DIR ARTIFACT_DIR
#
# Five targets: fuzz_compile (the compiler, the rest of SECONDS), fuzz_step
# (the step core, 1/5), fuzz_expr (CEL expressions, 1/5), fuzz_schema
# (the JSON Schema validator and the regex engine, 1/5) and fuzz_flow (the
# flow controls, 1/10).  The seeds in test/fuzz/corpus (YAML),
# test/fuzz/corpus-step (event sequences), test/fuzz/corpus-expr
# (expressions), test/fuzz/corpus-schema ("SCHEMA\0VALUE", a pattern's
# first line) and test/fuzz/corpus-flow (event sequences) are read but
# never written: libFuzzer adds the inputs it finds to the first corpus
# directory, CORPUS_DIR for fuzz_compile, CORPUS_DIR-step, -expr, -schema
# and -flow for the others.  A crash, a leak, a broken invariant, a timeout
# (5 s per input) or more than 1 GiB of memory fails the run and leaves the
# input in ARTIFACT_DIR (prefixed step-, expr-, schema- and flow- for the
# last four).
# Counts as one test per target.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# run_target NAME SECONDS CORPUS SEEDS ARTIFACT_PREFIX LOG [LIBFUZZER_OPTION...]:
# fuzz one target; report it; return non-zero if it failed.
run_target() {
	local name=$1 seconds=$2 corpus=$3 seeds=$4 prefix=$5 log=$6 status=0
	local fuzzer="$WFE_TOP/build/fuzz/$name"
	shift 6

	mkdir -p "$corpus"
	# Step 1: fuzz.  The log is long; keep it aside.
	say "fuzz: $name for ${seconds}s, seeds from ${seeds#"$WFE_TOP"/} (log: $log)"
	"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=5 \
		-artifact_prefix="$prefix" -print_final_stats=1 "$@" \
		"$corpus" "$seeds" >"$log" 2>&1 || status=$?

	# Step 2: report.  On failure show the end of the log: the sanitizer
	# report and the artifact libFuzzer saved.
	if [ "$status" -eq 0 ]; then
		say "fuzz: $name: ok, $(sed -nE 's/^stat::number_of_executed_units: *//p' "$log") inputs," \
			"peak RSS $(sed -nE 's/^stat::peak_rss_mb: *//p' "$log") MB"
		return 0
	fi
	say "fuzz: $name: FAILED (exit status $status)"
	tail -n 60 "$log" | sed 's/^/    /'
	return 1
}

main() {
	local seconds=$1 corpus=${2%/} artifacts=${3%/} step_seconds compile_seconds
	local passed=0 failed=0 name expr_seconds schema_seconds flow_seconds

	for name in fuzz_compile fuzz_step fuzz_expr fuzz_schema fuzz_flow; do
		[ -x "$WFE_TOP/build/fuzz/$name" ] || { say "fuzz: build/fuzz/$name is missing (make fuzz-target)"; exit 2; }
	done
	mkdir -p "$artifacts"
	step_seconds=$((seconds / 5))
	[ "$step_seconds" -ge 1 ] || step_seconds=1
	expr_seconds=$((seconds / 5))
	[ "$expr_seconds" -ge 1 ] || expr_seconds=1
	schema_seconds=$((seconds / 5))
	[ "$schema_seconds" -ge 1 ] || schema_seconds=1
	flow_seconds=$((seconds / 10))
	[ "$flow_seconds" -ge 1 ] || flow_seconds=1
	compile_seconds=$((seconds - step_seconds - expr_seconds - schema_seconds - flow_seconds))
	[ "$compile_seconds" -ge 1 ] || compile_seconds=1

	if run_target fuzz_compile "$compile_seconds" "$corpus" "$WFE_TOP/test/fuzz/corpus" \
		"$artifacts/" "$artifacts/fuzz.log" -dict="$WFE_TOP/test/fuzz/wfe.dict"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	if run_target fuzz_step "$step_seconds" "$corpus-step" "$WFE_TOP/test/fuzz/corpus-step" \
		"$artifacts/step-" "$artifacts/fuzz-step.log"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	if run_target fuzz_expr "$expr_seconds" "$corpus-expr" "$WFE_TOP/test/fuzz/corpus-expr" \
		"$artifacts/expr-" "$artifacts/fuzz-expr.log" -dict="$WFE_TOP/test/fuzz/cel.dict"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	if run_target fuzz_schema "$schema_seconds" "$corpus-schema" "$WFE_TOP/test/fuzz/corpus-schema" \
		"$artifacts/schema-" "$artifacts/fuzz-schema.log"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	if run_target fuzz_flow "$flow_seconds" "$corpus-flow" "$WFE_TOP/test/fuzz/corpus-flow" \
		"$artifacts/flow-" "$artifacts/fuzz-flow.log"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	summary "$passed" "$failed"
	[ "$failed" -eq 0 ]
}

main "$@"
