# triggers.sh — the benchmarks of runs that start themselves
# (docs/benchmarks.md "Schedules and run commands"), sourced by
# bench/run.sh after the waits benchmark, on the same private cluster
# (bench/triggers/setup.sql), whose background worker fires the ticks and
# consumes the commands:
#
#   1. tick due -> run submitted, one tick at a time: TRIG_TICKS schedules
#      whose ticks fall TRIG_TICK_SPACING_MS apart, the worker asleep until
#      each (bench_tick_probe); the sample is the run's submitted_at minus
#      its tick (goal: p99 ≤ 1 s);
#   2. TRIG_SAME_MINUTE schedules due at the same instant
#      (bench_same_minute): when the last run was submitted, after the
#      tick (goal: all within 5 s);
#   3. run commands/s: TRIG_COMMANDS seed 004 envelopes published to
#      wfe.commands (submit.bench) on a private RabbitMQ node, taken by the
#      background worker and submitted as the ingress's role, one
#      transaction and one ack each; the rate from the first run submitted
#      to the last, against TRIG_COMMANDS wfe.submit calls made directly by
#      one session, a transaction each (bench_direct_submits): the ratio.
#
# Environment (defaults in brackets): TRIG_TICKS [100],
# TRIG_TICK_SPACING_MS [200], TRIG_SAME_MINUTE [1000], TRIG_COMMANDS [2000].
# BENCH_SKIP_TRIGGERS=1 (bench/run.sh) leaves all of it out.
#
# shellcheck shell=bash disable=SC2016

TRIG_TICKS=${TRIG_TICKS:-100}
TRIG_TICK_SPACING_MS=${TRIG_TICK_SPACING_MS:-200}
TRIG_SAME_MINUTE=${TRIG_SAME_MINUTE:-1000}
TRIG_COMMANDS=${TRIG_COMMANDS:-2000}
TRIG_DIR="$BENCH_DIR/triggers"
TRIG_TICK_GOAL=1000       # ms, tick due -> run submitted, p99
TRIG_SAME_MINUTE_GOAL=5000  # ms, the last of TRIG_SAME_MINUTE ticks due together

# What the triggers runs found.
declare -A TRIG

# trig_stats WHERE: "N P50 P99 MAX" (ms) of submitted_at - scheduled_for of
# the schedules' runs WHERE picks (a condition on s.schedule), or "0".
trig_stats() {
	q "SELECT coalesce(count(*) || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 'FM999990.0')
	                           || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'FM999990.0')
	                           || ' ' || to_char(max(ms), 'FM999990.0'), '0')
	     FROM (SELECT extract(epoch FROM r.submitted_at - s.scheduled_for) * 1000 AS ms
	             FROM wfe.schedule_runs AS s JOIN wfe.runs AS r USING (run_id)
	            WHERE $1) AS x"
}

# trig_ticks: figure 1.
trig_ticks() {
	scale_reset
	settle
	q "CALL bench_tick_probe($TRIG_TICKS, $TRIG_TICK_SPACING_MS)" >/dev/null
	TRIG[ticks]=$(trig_stats "s.schedule LIKE 'bench-tick-%'")
	say "tick due -> run submitted, one at a time: ${TRIG[ticks]}  (n p50 p99 max, ms)"
}

# trig_same_minute: figure 2.
trig_same_minute() {
	scale_reset
	settle
	q "CALL bench_same_minute($TRIG_SAME_MINUTE)" >/dev/null
	TRIG[same]=$(trig_stats "s.schedule LIKE 'bench-min-%'")
	say "$TRIG_SAME_MINUTE ticks due together -> runs submitted: ${TRIG[same]}  (n p50 p99 last, ms)"
}

# trig_envelopes N: N run commands of bench-ing, one JSON envelope a line.
trig_envelopes() {
	awk -v n="$1" 'BEGIN {
		for (i = 1; i <= n; i++)
			printf "{\"message_id\": \"m-%d\", \"correlation_id\": \"c-%d\", \"workflow_name\": \"bench-ing\", \"track\": \"small\", \"headers\": {\"content_type\": \"application/json\", \"source\": \"bench\", \"tenant\": \"default\"}, \"idempotency_key\": \"amqp-%d\", \"payload_inline\": {\"n\": %d}, \"payload_ref\": null, \"created_at\": \"2026-12-02T00:00:00Z\"}\n", i, i, i, i
	}'
}

# trig_ingress: figure 3, against RabbitMQ (false when it cannot run).
trig_ingress() {
	local i
	worker_reload "ALTER SYSTEM SET wfe.amqp_uri = '$(amqp_uri)/'"
	q "CALL bench_wait('the publisher connecting to RabbitMQ', 'SELECT connected FROM wfe.publisher_lease', 60, 0.05)"
	q "SELECT wfe.configure_ingress('bench', 'bench_ingress')" >/dev/null
	# the worker declares the queue (with its arguments) and binds it: wait for that
	for ((i = 0; i < 300; i++)); do
		rmqctl list_bindings destination_name routing_key 2>/dev/null | grep -q 'submit\.bench' && break
		sleep 0.1
	done
	[ "$i" -lt 300 ] || die "triggers: the worker did not bind wfe.ingress.bench"
	scale_reset
	settle
	trig_envelopes "$TRIG_COMMANDS" | timeout 300 amqp-publish -u "$(amqp_uri)/%2f" -e wfe.commands -r submit.bench \
		-C application/json -p -l || die "triggers: amqp-publish failed"
	q "CALL bench_wait('the run commands submitted',
	                   'SELECT count(*) >= $TRIG_COMMANDS FROM wfe.runs WHERE workflow = ''bench-ing''', 600, 0.1)"
	TRIG[ingress]=$(q "SELECT count(*) || ' ' || round(((count(*) - 1) / extract(epoch FROM max(submitted_at) - min(submitted_at)))::numeric)
	                     FROM wfe.runs WHERE workflow = 'bench-ing'")
	TRIG[dashboard]=$(q "SELECT received || ' received, ' || submitted || ' submitted, ' || duplicates || ' duplicates, '
	                            || rejected || ' rejected' FROM wfe.dashboard_ingress WHERE ingress = 'bench'")
	q "SELECT wfe.configure_ingress('bench', NULL)" >/dev/null
	worker_reload "ALTER SYSTEM RESET wfe.amqp_uri"
	scale_reset
	settle
	q "CALL bench_direct_submits($TRIG_COMMANDS)" >/dev/null
	TRIG[direct]=$(q "SELECT round((n / extract(epoch FROM ended - started))::numeric) FROM bench_trig_direct ORDER BY ended DESC LIMIT 1")
	TRIG[ratio]=$(ratio "${TRIG[ingress]#* }" "${TRIG[direct]}")
	say "run commands over RabbitMQ: ${TRIG[ingress]#* }/s (${TRIG[dashboard]}); wfe.submit directly: ${TRIG[direct]}/s; ratio ${TRIG[ratio]}"
}

# triggers_bench: the three figures.
triggers_bench() {
	banner "schedules and run commands"
	TRIG[load_start]=$(cut -d' ' -f1-3 /proc/loadavg)
	# bench_wait (bench/latency/setup.sql), unless the latency runs made it
	[ "$(q "SELECT count(*) FROM pg_proc WHERE proname = 'bench_wait'")" -gt 0 ] || latency_setup
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s -c client_min_messages=warning" cluster_psql -d "$DB" -q \
		-f "$TRIG_DIR/setup.sql" >/dev/null
	trig_ticks
	trig_same_minute
	if [ -n "${BENCH_SKIP_BROKER:-}" ]; then
		TRIG[broker]="left out (BENCH_SKIP_BROKER)"
	elif ! command -v amqp-publish >/dev/null; then
		TRIG[broker]="left out: amqp-publish (amqp-tools) is not installed"
	elif ! rmq_start "$WORKDIR"; then
		TRIG[broker]="left out: no private RabbitMQ node could be started"
	else
		trig_ingress
		rmq_stop
	fi
	[ -z "${TRIG[broker]:-}" ] || say "run command figures ${TRIG[broker]}"
	TRIG[load_end]=$(cut -d' ' -f1-3 /proc/loadavg)
	q "DELETE FROM wfe.schedule_defs WHERE name LIKE 'bench-%'" >/dev/null
	scale_reset
}

# trig_meets VALUE GOAL: "yes" when VALUE is at most GOAL, "**no**", or "n/a".
trig_meets() {
	awk -v v="${1:-n/a}" -v g="$2" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if (v + 0 <= g) print "yes"; else print "**no**" }'
}

# triggers_results: the markdown of the triggers runs.
triggers_results() {
	local n p50 p99 max rate
	printf -- '- probes: %s schedules with ticks %s ms apart, the worker asleep until each; %s schedules due at one instant; %s run commands published at once to one ingress, against as many `wfe.submit` calls of one session, a transaction each; load average (1, 5, 15 min) before these runs: %s, after them: %s\n\n' \
		"$TRIG_TICKS" "$TRIG_TICK_SPACING_MS" "$TRIG_SAME_MINUTE" "$TRIG_COMMANDS" "${TRIG[load_start]}" "${TRIG[load_end]}"
	printf '| figure | samples | p50 ms | p99 ms | max ms | goal | met |\n|---|---:|---:|---:|---:|---|---|\n'
	read -r n p50 p99 max <<<"${TRIG[ticks]}"
	printf '| tick due → run submitted, one tick at a time | %s | %s | %s | %s | p99 ≤ %s ms | %s |\n' \
		"${n:-0}" "${p50:-n/a}" "${p99:-n/a}" "${max:-n/a}" "$TRIG_TICK_GOAL" "$(trig_meets "${p99:-}" "$TRIG_TICK_GOAL")"
	read -r n p50 p99 max <<<"${TRIG[same]}"
	printf '| %s ticks due at the same instant → runs submitted | %s | %s | %s | %s | all ≤ %s ms | %s |\n' \
		"$TRIG_SAME_MINUTE" "${n:-0}" "${p50:-n/a}" "${p99:-n/a}" "${max:-n/a}" "$TRIG_SAME_MINUTE_GOAL" \
		"$(trig_meets "$([ "${n:-0}" -eq "$TRIG_SAME_MINUTE" ] && echo "${max:-}")" "$TRIG_SAME_MINUTE_GOAL")"
	if [ -n "${TRIG[broker]:-}" ]; then
		printf '\nRun commands over RabbitMQ: %s.\n' "${TRIG[broker]}"
	else
		rate=${TRIG[ingress]#* }
		printf '\n| submits of one session, a transaction each | runs/s |\n|---|---:|\n'
		printf '| run commands over RabbitMQ (the background worker: `basic.get`, submit as the ingress'"'"'s role, commit, ack) | %s |\n' "$rate"
		printf '| `wfe.submit` called directly | %s |\n' "${TRIG[direct]}"
		printf '| ratio | %s |\n\nThe ingress'"'"'s dashboard after the run: %s.\n' "${TRIG[ratio]}" "${TRIG[dashboard]}"
	fi
}
