# waits.sh — the signals, waits and sleeps benchmarks of docs/benchmarks.md
# ("Signals, waits and sleeps"), sourced by bench/run.sh after the cache
# benchmark, on the same private cluster (bench/waits/setup.sql):
#
#   1. signal -> successor released, in the server: WAITS_SIGNALS runs of
#      bench-wait (a wait, then a worker stage) parked on their wait, then
#      signalled one at a time (bench_signal_probe): the wfe.signal
#      statement (accepted: the wait completed, the worker stage queued, in
#      this transaction) and signal -> COMMIT returned (goal: p99 ≤ 5 ms);
#   2. the claim path with WAITS_PARKED runs parked on waits: scale.sh's
#      claim latency (claim-step.sql, SCALE_CLIENTS clients, a one-stage
#      workflow kept at SCALE_DEPTH queued runs behind SCALE_FRESH_HISTORY
#      finished ones), without any parked run and then with them (their
#      wait_timeout timers live): claim p99 with ÷ without (goal ≤ 1.1);
#   3. sleep due -> completed: WAITS_SLEEPS runs of bench-sleep (one sleep
#      of WAITS_SLEEP_MS) submitted WAITS_SLEEP_SPACING_MS apart; the
#      background worker fires each timer; the sample is the sleep's
#      stage.completed event's time minus its timer's due_at (the timer
#      figure's goal: p99 ≤ 50 ms).
#
# Environment (defaults in brackets): WAITS_SIGNALS [1000], WAITS_PARKED
# [10000], WAITS_SLEEPS [300], WAITS_SLEEP_MS [200], WAITS_SLEEP_SPACING_MS
# [10]; the claim runs take BENCH_SCALE_SECONDS (after WARMUP_SECONDS).
#
# shellcheck shell=bash disable=SC2016

WAITS_SIGNALS=${WAITS_SIGNALS:-1000}
WAITS_PARKED=${WAITS_PARKED:-10000}
WAITS_SLEEPS=${WAITS_SLEEPS:-300}
WAITS_SLEEP_MS=${WAITS_SLEEP_MS:-200}
WAITS_SLEEP_SPACING_MS=${WAITS_SLEEP_SPACING_MS:-10}
WAITS_DIR="$BENCH_DIR/waits"
WAITS_SIGNAL_GOAL=5       # ms, signal -> successor released, p99
WAITS_CLAIM_GOAL=1.1      # claim p99 with parked waits ÷ without, at most
WAITS_SLEEP_GOAL=50       # ms, sleep due -> completed, p99 (the timer figure's)

# What the waits runs found.
declare -A WAITS

# waits_stats FIGURE: "N P50 P90 P99 MAX" (ms) of a figure's samples, or "0".
waits_stats() {
	q "SELECT coalesce(count(*) || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(max(ms), 'FM999990.000'), '0')
	     FROM bench_waits_lat WHERE figure = '$1'"
}

# waits_signals: figure 1.
waits_signals() {
	scale_reset
	scale_submit bench-wait "$WAITS_SIGNALS"
	settle
	q "CALL bench_signal_probe($WAITS_SIGNALS)" >/dev/null
	say "signal -> successor released: $(waits_stats signal:server)  (n p50 p90 p99 max, ms, in the server)"
	say "signal -> COMMIT returned:    $(waits_stats signal:committed)"
}

# waits_claims: figure 2, without and then with the parked runs.
waits_claims() {
	scale_reset
	scale_history "$SCALE_FRESH_HISTORY" waits-without
	scale_submit bench-scale "$SCALE_DEPTH"
	settle
	claim_run waits-without
	scale_reset
	scale_history "$SCALE_FRESH_HISTORY" waits-with
	scale_submit bench-scale "$SCALE_DEPTH"
	scale_submit bench-wait "$WAITS_PARKED"
	settle
	WAITS[parked]=$(q "SELECT count(*) FROM wfe.run_stages WHERE stage = 'approve' AND state = 'running'")
	WAITS[parked_timers]=$(q "SELECT count(*) FROM wfe.timers WHERE kind = 'wait_timeout' AND fired_at IS NULL")
	[ "${WAITS[parked]}" -eq "$WAITS_PARKED" ] || die "waits: ${WAITS[parked]} runs parked, not $WAITS_PARKED"
	claim_run waits-with
	WAITS[parked_end]=$(q "SELECT count(*) FROM wfe.run_stages WHERE stage = 'approve' AND state = 'running'")
	WAITS[claim_ratio]=$(ratio "${SCALE[waits-with:p99]}" "${SCALE[waits-without:p99]}")
	say "claim p99 with ${WAITS[parked]} parked waits ÷ without: ${WAITS[claim_ratio]}"
}

# waits_sleeps: figure 3.
waits_sleeps() {
	local i
	scale_reset
	settle
	q "CALL bench_sleep_submit($WAITS_SLEEPS, $WAITS_SLEEP_SPACING_MS)" >/dev/null
	for ((i = 0; i < 300; i++)); do
		[ "$(q "SELECT count(*) FROM wfe.runs WHERE workflow = 'bench-sleep' AND state = 'completed'")" -lt "$WAITS_SLEEPS" ] ||
			break
		sleep 0.1
	done
	[ "$i" -lt 300 ] || die "waits: the sleeps did not all complete within 30 s"
	q "INSERT INTO bench_waits_lat
	   SELECT 'sleep:completed', extract(epoch FROM e.at - t.due_at) * 1000
	     FROM wfe.timers AS t
	     JOIN wfe.events AS e ON e.run_id = t.run_id AND e.stage = t.stage AND e.type = 'stage.completed'
	    WHERE t.kind = 'sleep'" >/dev/null
	say "sleep due -> completed: $(waits_stats sleep:completed)  (n p50 p90 p99 max, ms)"
}

# waits_bench: the three figures.
waits_bench() {
	banner "signals, waits and sleeps"
	WAITS[load_start]=$(cut -d' ' -f1-3 /proc/loadavg)
	scale_setup
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s" cluster_psql -d "$DB" -q -v sleep_ms="$WAITS_SLEEP_MS" \
		-f "$WAITS_DIR/setup.sql" >/dev/null
	waits_signals
	waits_claims
	waits_sleeps
	WAITS[load_end]=$(cut -d' ' -f1-3 /proc/loadavg)
	scale_reset
}

# waits_meets VALUE GOAL: "yes" when VALUE is at most GOAL, "**no**", or "n/a".
waits_meets() {
	awk -v v="${1:-n/a}" -v g="$2" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if (v + 0 <= g) print "yes"; else print "**no**" }'
}

# waits_row NAME FIGURE: one markdown row of a latency figure.
waits_row() {
	local n p50 p90 p99 max
	read -r n p50 p90 p99 max <<<"$(waits_stats "$2")"
	printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "${n:-0}" "${p50:-n/a}" "${p90:-n/a}" "${p99:-n/a}" "${max:-n/a}"
}

# waits_results: the markdown of the waits runs.
waits_results() {
	local p99
	printf -- '- probes: %s runs signalled one at a time; the claim runs: %s clients, %s s each after %s s of warm-up, %s queued runs behind %s finished, without and with %s runs parked on waits (%s live wait timers); %s sleeps of %s ms submitted %s ms apart; load average (1, 5, 15 min) before these runs: %s, after them: %s\n\n' \
		"$WAITS_SIGNALS" "$SCALE_CLIENTS" "$BENCH_SCALE_SECONDS" "$WARMUP_SECONDS" "$SCALE_DEPTH" "$SCALE_FRESH_HISTORY" \
		"${WAITS[parked]}" "${WAITS[parked_timers]}" "$WAITS_SLEEPS" "$WAITS_SLEEP_MS" "$WAITS_SLEEP_SPACING_MS" "${WAITS[load_start]}" "${WAITS[load_end]}"
	printf '| figure | samples | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n'
	waits_row 'signal → successor released: the `wfe.signal` statement (accepted, the worker stage queued)' signal:server
	waits_row 'signal → COMMIT returned (durable)' signal:committed
	waits_row 'sleep due → completed (the background worker fires the timer)' sleep:completed
	printf '\n| claim latency (%s clients) | claims | p50 ms | p99 ms | max ms | steps/s |\n|---|---:|---:|---:|---:|---:|\n' \
		"$SCALE_CLIENTS"
	printf '| no parked runs | %s | %s | %s | %s | %s |\n' "${SCALE[waits-without:n]}" "${SCALE[waits-without:p50]}" \
		"${SCALE[waits-without:p99]}" "${SCALE[waits-without:max]}" "${SCALE[waits-without:rate]}"
	printf '| %s runs parked on waits | %s | %s | %s | %s | %s |\n' "${WAITS[parked]}" "${SCALE[waits-with:n]}" \
		"${SCALE[waits-with:p50]}" "${SCALE[waits-with:p99]}" "${SCALE[waits-with:max]}" "${SCALE[waits-with:rate]}"
	read -r _ _ _ p99 _ <<<"$(waits_stats signal:server)"
	printf '\nSignal → successor released p99: %s ms (goal ≤ %s ms: %s). ' "$p99" "$WAITS_SIGNAL_GOAL" \
		"$(waits_meets "$p99" "$WAITS_SIGNAL_GOAL")"
	printf 'Claim p99 with the parked runs ÷ without: %s (goal ≤ %s: %s). ' "${WAITS[claim_ratio]}" "$WAITS_CLAIM_GOAL" \
		"$(waits_meets "${WAITS[claim_ratio]}" "$WAITS_CLAIM_GOAL")"
	read -r _ _ _ p99 _ <<<"$(waits_stats sleep:completed)"
	printf 'Sleep due → completed p99: %s ms (goal ≤ %s ms: %s).\n' "$p99" "$WAITS_SLEEP_GOAL" \
		"$(waits_meets "$p99" "$WAITS_SLEEP_GOAL")"
}
