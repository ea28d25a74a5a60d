# latency.sh — the latency benchmarks of docs/benchmarks.md, sourced by
# bench/run.sh after its throughput runs, on the same private cluster (wfe
# and pg_stat_statements preloaded, default settings):
#
#   1. timer due -> fired: retry timers made by wfe.fail_task, due 200 ms
#      later on a fixed schedule (LAT_TIMERS of them, one every
#      LAT_TIMER_SPACING_MS), fired by the background worker; fired_at -
#      due_at.  Once idle, once while the wfe step benchmark (batch 1, 4
#      clients) runs; and LAT_TRAPS timers, each with a wakeup
#      LAT_TRAP_BEFORE_MS before it is due (the worker's round then begins
#      before the timer is due and plans after);
#   2. commit -> worker woken: LAT_WAKES submits of a one-action workflow
#      with wfe.poll_interval_ms = 60 s, each while the worker sleeps;
#      worker_status().last_woke - last_wake_requested, and, end to end,
#      commit -> the handler running -> the action seen completed;
#   3. outbox drain: OUTBOX_N dispatch rows written while the publisher is
#      off, then the time until all are published to a private RabbitMQ,
#      against amqp-probe publish-plain (the same number of messages of the
#      same size, the same confirm window, the same exchange and queue),
#      run once before and twice after (the median counts); then the same
#      backlog behind OUTBOX_HISTORY published rows;
#   4. commit -> broker-confirmed: LAT_CONFIRMS single submits to a
#      broker-mode queue at random, about one every LAT_CONFIRM_GAP_MS;
#      published_at (start of the publisher's marking transaction, after
#      the confirms) - the clock right after the submit's COMMIT; the
#      broker's own part (amqp-probe confirm-latency); the same behind
#      OUTBOX_HISTORY published rows, and the retention pass over both.
#
# The probes are procedures in bench/latency/setup.sql.  Every wait is
# bounded.  The settings changed for a measurement (wfe.poll_interval_ms,
# wfe.amqp_uri, wfe.publisher_enabled) are set with ALTER SYSTEM and reset
# afterwards; the worker is made to apply them (worker_reload) before
# anything is measured.
#
# Environment (defaults in brackets):
#   LAT_TIMERS [500], LAT_TIMER_SPACING_MS [20], LAT_TRAPS [20],
#   LAT_TRAP_BEFORE_MS [2], LAT_WAKES [200],
#   OUTBOX_N [20000], LAT_CONFIRMS [300], LAT_CONFIRM_GAP_MS [50],
#   OUTBOX_HISTORY [200000] (0: no history runs)
#   BENCH_SKIP_BROKER=1   leave out 3 and 4 (no RabbitMQ)
#
# shellcheck shell=bash disable=SC2016

LAT_TIMERS=${LAT_TIMERS:-500}
LAT_TIMER_SPACING_MS=${LAT_TIMER_SPACING_MS:-20}
LAT_WAKES=${LAT_WAKES:-200}
LAT_TRAPS=${LAT_TRAPS:-20}
LAT_TRAP_BEFORE_MS=${LAT_TRAP_BEFORE_MS:-2}
OUTBOX_N=${OUTBOX_N:-20000}
LAT_CONFIRMS=${LAT_CONFIRMS:-300}
LAT_CONFIRM_GAP_MS=${LAT_CONFIRM_GAP_MS:-50}
OUTBOX_HISTORY=${OUTBOX_HISTORY:-200000}
LAT_DIR="$BENCH_DIR/latency"
PROBE="$WFE_TOP/build/test/amqp-probe"
BROKER_QUEUE=wfe.bench-broker.small       # where the dispatches of bench-broker go
BROKER_KEY=run.bench-broker.small
LOAD_PID=""

# What the latency runs found, besides the samples in bench_lat.
declare -A LAT

# latency_setup: the probes' schema, the probe tool.
latency_setup() {
	PGOPTIONS="-c statement_timeout=${ADMIN_TIMEOUT}s" cluster_psql -d "$DB" -q \
		-v timer="$LAT_DIR/timer.yaml" -v action="$LAT_DIR/action.yaml" -v broker="$LAT_DIR/broker.yaml" \
		-f "$LAT_DIR/setup.sql" >/dev/null
}

# worker_reload SQL...: run the statements (ALTER SYSTEM ...), reload, and
# wait until the background worker has started two rounds since: the first
# may have begun before the reload reached it; the second begins with the
# new settings.  Each round is asked for with a wakeup.
worker_reload() {
	local r
	q "$@" "SELECT pg_reload_conf()" >/dev/null
	sleep 0.2
	for _ in 1 2; do
		r=$(q "SELECT rounds FROM wfe.worker_status()")
		q "SELECT wfe._wake()" >/dev/null
		q "CALL bench_wait('a round of the background worker', 'SELECT rounds > $r FROM wfe.worker_status()', 30)"
	done
}

# lat_reset: no runs (timers, outbox rows, events) left from before.
lat_reset() {
	q "TRUNCATE wfe.events, wfe.outbox, wfe.runs CASCADE" >/dev/null
}

# stats FIGURE: "N P50 P90 P99 MAX" (ms) of the samples of a figure, or "0".
stats() {
	q "SELECT coalesce(count(*) || ' ' || to_char(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 'FM999990.000')
	                           || ' ' || to_char(max(ms), 'FM999990.000'), '0')
	     FROM bench_lat WHERE figure = '$1'"
}

# step_load SECONDS: in the background, the wfe step benchmark (batch 1,
# 4 clients) on enough runs for SECONDS; LOAD_PID is its process.
step_load() {
	local runs rate=${RATE[wfe1:4]:-2000}
	runs=$(awk -v r="$rate" -v s="$1" -v st="$STEP_STAGES" 'BEGIN { n = int(3 * r * s / st) + 1; print (n < 50 ? 50 : n) }')
	q "SELECT count(*) FROM (SELECT wfe.submit('bench-steps', jsonb_build_object('x', i))
	                           FROM generate_series(1, $runs) AS i) AS s" >/dev/null
	LAT[load_runs]=$runs
	settle
	pgb 4 "$1" wfe-step.sql >"$WORKDIR/load.out" &
	LOAD_PID=$!
}

# timers LABEL [SECONDS_OF_LOAD]: one timer run; samples go to bench_lat as
# "timer:LABEL".
timers() {
	local label=$1 load=${2:-} t0 t1 c0 c1 w0 w1 secs
	lat_reset
	q "SELECT count(*) FROM (SELECT wfe.submit('bench-timer', jsonb_build_object('x', i))
	                           FROM generate_series(1, $LAT_TIMERS) AS i) AS s" >/dev/null
	if [ -n "$load" ]; then
		step_load "$load"
		sleep 1
		c0=$(q "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
	else
		settle
	fi
	w0=$(q "SELECT rounds || ' ' || wakeups FROM wfe.worker_status()")
	t0=$(date +%s.%N)
	q "CALL bench_timer_probe('$label', $LAT_TIMERS, $LAT_TIMER_SPACING_MS)"
	# the last timer is due 200 ms after the last failure
	q "CALL bench_wait('every retry timer firing',
	                   'SELECT NOT EXISTS (SELECT 1 FROM wfe.timers WHERE fired_at IS NULL)', 30, 0.01)"
	t1=$(date +%s.%N)
	w1=$(q "SELECT rounds || ' ' || wakeups FROM wfe.worker_status()")
	if [ -n "$load" ]; then
		c1=$(q "SELECT count(*) FROM wfe.events WHERE type = 'stage.completed'")
		LAT[load_rate]=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", (b - a) / (t1 - t0) }')
		wait "$LOAD_PID" || die "the step load failed"
		LOAD_PID=""
		secs=$(awk -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.1f", t1 - t0 }')
		[ "$(awk -v s="$secs" -v l="$load" 'BEGIN { print (s + 1 < l) }')" = 1 ] ||
			say "warning: the timers took $secs s, longer than the $load s of load"
		[ "$(q "SELECT count(*) FROM wfe.run_stages WHERE queue = 'bench' AND state = 'queued'")" -gt 0 ] ||
			say "warning: the step load ran out of queued tasks"
	fi
	q "INSERT INTO bench_lat
	   SELECT 'timer:$label', extract(epoch FROM t.fired_at - t.due_at) * 1000
	     FROM wfe.timers AS t JOIN bench_lat_timer AS p ON p.run_id = t.run_id AND p.label = '$label'
	    WHERE t.kind = 'retry'" >/dev/null
	LAT[rounds:$label]=$(awk -v a="$w0" -v b="$w1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d rounds, %d wakeups", y[1] - x[1], y[2] - x[2] }')
	say "$(printf 'timer due -> fired, %-5s %s  (n p50 p90 p99 max, ms); worker: %s' \
		"$label:" "$(stats "timer:$label")" "${LAT[rounds:$label]}")${load:+; load ${LAT[load_rate]} steps/s}"
}

# timer_trap: LAT_TRAPS timers, each with a wakeup LAT_TRAP_BEFORE_MS before
# it is due (bench_timer_trap); samples as "timer:trap".
timer_trap() {
	lat_reset
	q "SELECT count(*) FROM (SELECT wfe.submit('bench-timer', jsonb_build_object('x', i))
	                           FROM generate_series(1, $LAT_TRAPS) AS i) AS s" >/dev/null
	settle
	q "CALL bench_timer_trap('trap', $LAT_TRAPS, $LAT_TRAP_BEFORE_MS)"
	q "CALL bench_wait('every retry timer firing',
	                   'SELECT NOT EXISTS (SELECT 1 FROM wfe.timers WHERE fired_at IS NULL)', 30, 0.01)"
	q "INSERT INTO bench_lat
	   SELECT 'timer:trap', extract(epoch FROM t.fired_at - t.due_at) * 1000
	     FROM wfe.timers AS t JOIN bench_lat_timer AS p ON p.run_id = t.run_id AND p.label = 'trap'
	    WHERE t.kind = 'retry'" >/dev/null
	LAT[trap_over]=$(q "SELECT count(*) FROM bench_lat WHERE figure = 'timer:trap' AND ms > 50")
	say "timer due -> fired, woken ${LAT_TRAP_BEFORE_MS} ms before due: $(stats timer:trap)  (n p50 p90 p99 max, ms; ${LAT[trap_over]} over 50 ms)"
}

# wakes: commit -> worker woken, and submit -> action completed.
wakes() {
	lat_reset
	settle
	worker_reload "ALTER SYSTEM SET wfe.poll_interval_ms = '60s'"
	q "CALL bench_wait('the worker sleeping for the long poll interval',
	                   'SELECT sleeping_until > clock_timestamp() + interval ''30 s'' FROM wfe.worker_status()', 30)"
	q "CALL bench_wake_probe($LAT_WAKES)"
	worker_reload "ALTER SYSTEM RESET wfe.poll_interval_ms"
	LAT[wake_bad]=$(q "SELECT count(*) FROM bench_lat_wake WHERE NOT ok")
	q "INSERT INTO bench_lat
	   SELECT f, ms FROM bench_lat_wake AS w,
	          LATERAL (VALUES ('wake', extract(epoch FROM w.woke - w.requested) * 1000),
	                          ('action:handler', extract(epoch FROM w.handler_at - w.committed_at) * 1000),
	                          ('action:seen', extract(epoch FROM w.seen_at - w.committed_at) * 1000)) AS v (f, ms)
	    WHERE w.ok" >/dev/null
	say "commit -> worker woken:        $(stats wake)  (n p50 p90 p99 max, ms; ${LAT[wake_bad]} samples discarded)"
	say "commit -> handler running:     $(stats action:handler)"
	say "commit -> action seen done:    $(stats action:seen)"
}

# probe ARGS...: amqp-probe on our broker.
probe() {
	timeout 300 "$PROBE" "$(amqp_uri)/" "$@"
}

# plain_publish KEY: the plain confirmed publisher, OUTBOX_N messages of
# the outbox's average body size, into an empty queue; its rate goes to LAT.
plain_publish() {
	local out
	probe purge "$BROKER_QUEUE"
	out=$(probe publish-plain wfe.commands "$BROKER_KEY" "$OUTBOX_N" "${LAT[window]}" "${LAT[body]}") ||
		die "amqp-probe publish-plain failed: $out"
	LAT[$1]=$(sed -nE 's/.*: ([0-9]+) msg\/s.*/\1/p' <<<"$out")
	[ -n "${LAT[$1]}" ] || die "cannot read amqp-probe's output: $out"
	say "plain confirmed publisher:     $out"
	probe purge "$BROKER_QUEUE"
}

# publisher_connect: connect the publisher to our broker once (it declares the
# topology), then turn it off.
publisher_connect() {
	worker_reload "ALTER SYSTEM SET wfe.amqp_uri = '$(amqp_uri)/'"
	q "CALL bench_wait('the publisher connecting to RabbitMQ',
	                   'SELECT connected FROM wfe.publisher_lease', 60, 0.05)"
	probe queue-info "$BROKER_QUEUE" >/dev/null || die "the publisher did not declare $BROKER_QUEUE"
}

# backlog: with the publisher off, OUTBOX_N dispatch rows written by as
# many submits (one statement), then the usual vacuum, analyse, checkpoint.
backlog() {
	worker_reload "ALTER SYSTEM SET wfe.publisher_enabled = off"
	q "SELECT count(*) FROM (SELECT wfe.submit('bench-broker', jsonb_build_object('x', i))
	                           FROM generate_series(1, $OUTBOX_N) AS i) AS s" >/dev/null
	settle
	[ "$(q "SELECT count(*) FROM wfe.outbox WHERE state = 'pending'")" -eq "$OUTBOX_N" ] ||
		die "the outbox does not hold $OUTBOX_N pending dispatches"
}

# drain KEY: turn the publisher on and time it until the outbox holds
# nothing unpublished; the worker's statements are tracked meanwhile
# (pg_stat_statements.track = top) to say where the time goes.  Polled every 0.5 s (the
# poll reads the whole outbox); the end is the last published_at.
drain() {
	local key=$1 t0 msgs drain_s claim_s
	worker_reload "ALTER SYSTEM SET pg_stat_statements.track = 'top'"
	q "SELECT pg_stat_statements_reset()" >/dev/null
	t0=$(q "ALTER SYSTEM SET wfe.publisher_enabled = on" "SELECT clock_timestamp()" "SELECT pg_reload_conf()" | sed -n 1p)
	q "CALL bench_wait('the outbox draining',
	                   'SELECT NOT EXISTS (SELECT 1 FROM wfe.outbox WHERE state <> ''published'')', 600, 0.5)"
	read -r drain_s claim_s < <(q "SELECT round(extract(epoch FROM max(published_at) - '$t0')::numeric, 3) || ' ' ||
	                                      round(extract(epoch FROM max(published_at) - min(claimed_at))::numeric, 3)
	                                 FROM wfe.outbox WHERE published_at >= '$t0'")
	# per batch: the claim, the mark, the rest of the worker's statements
	LAT[$key:split]=$(q "SELECT to_char(sum(total_exec_time) FILTER (WHERE query LIKE '%_outbox_claim%') / n, 'FM9990.0') || ' ' ||
	                            to_char(sum(total_exec_time) FILTER (WHERE query LIKE '%_outbox_mark%') / n, 'FM9990.0') || ' ' ||
	                            to_char(sum(total_exec_time) FILTER (WHERE query NOT LIKE '%_outbox_claim%' AND query NOT LIKE '%_outbox_mark%') / n, 'FM9990.0') || ' ' ||
	                            n
	                       FROM pg_stat_statements,
	                            LATERAL (SELECT max(calls) FILTER (WHERE query LIKE '%_outbox_mark%') AS n
	                                       FROM pg_stat_statements) AS b
	                      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	                        AND (query LIKE 'SELECT %wfe.\\_%' OR query LIKE '%pg_extension e%')
	                        AND query NOT LIKE '%bench_%' AND query NOT LIKE '%pg_stat_statements%'
	                      GROUP BY n")
	worker_reload "ALTER SYSTEM RESET pg_stat_statements.track"
	LAT[$key:s]=$drain_s
	LAT[$key:claim_s]=$claim_s
	LAT[$key]=$(awk -v n="$OUTBOX_N" -v s="$drain_s" 'BEGIN { printf "%.0f", n / s }')
	LAT[$key:claim]=$(awk -v n="$OUTBOX_N" -v s="$claim_s" 'BEGIN { printf "%.0f", n / s }')
	msgs=$(probe queue-info "$BROKER_QUEUE")
	say "$(printf '%-30s' "outbox drain, $key:") $OUTBOX_N rows in $drain_s s from the reload: ${LAT[$key]} rows/s (${LAT[$key:claim]} rows/s from the first claim); per batch, ms: claim mark rest batches: ${LAT[$key:split]}; queue: $msgs"
	[ "$msgs" = "messages $OUTBOX_N consumers 0" ] || say "warning: the queue holds $msgs, not $OUTBOX_N"
	probe purge "$BROKER_QUEUE"
}

# history: OUTBOX_HISTORY published rows added before the pending ones, as
# a publisher in service keeps them (wfe.retention, 7 days by default):
# copies of the rows there are, with new message ids.
history() {
	q "INSERT INTO wfe.outbox (tenant, run_id, stage, attempt, fence, kind, exchange, routing_key, message_id,
	                           headers, body, state, attempts, available_at, claimed_by, claimed_at, created_at, published_at)
	   SELECT o.tenant, o.run_id, o.stage, o.attempt, o.fence, o.kind, o.exchange, o.routing_key, gen_random_uuid(),
	          o.headers, o.body, 'published', 1, o.available_at, o.claimed_by, o.claimed_at, o.created_at, o.published_at
	     FROM wfe.outbox AS o,
	          generate_series(1, ceil($OUTBOX_HISTORY::numeric / greatest(1, (SELECT count(*) FROM wfe.outbox)))::int) AS g
	    WHERE o.state = 'published'
	    LIMIT $OUTBOX_HISTORY" >/dev/null
}

# broker_confirms: the broker's own confirm latency for single messages
# like the dispatches, at the same rate (amqp-probe confirm-latency);
# samples as "broker".
broker_confirms() {
	probe confirm-latency wfe.commands "$BROKER_KEY" "$LAT_CONFIRMS" "$LAT_CONFIRM_GAP_MS" "${LAT[body]}" |
		awk '{ printf "broker\t%s\n", $1 }' | q "COPY bench_lat (figure, ms) FROM STDIN" >/dev/null ||
		die "confirm-latency failed"
	say "$(printf '%-30s' "broker alone, publish -> ack:") $(stats broker)  (n p50 p90 p99 max, ms)"
	probe purge "$BROKER_QUEUE"
}

# retention_pass KEY: how long the worker's retention pass takes over the
# outbox as it is (nothing expired: it only looks), second of two calls.
retention_pass() {
	local sql="SELECT wfe._retention((SELECT setting::int FROM pg_settings WHERE name = ''wfe.retention''), (SELECT setting::int FROM pg_settings WHERE name = ''wfe.worker_batch''))"
	q "SELECT bench_time_ms('$sql')" >/dev/null
	LAT[$1:retention]=$(q "SELECT to_char(bench_time_ms('$sql'), 'FM99990.0')")
	LAT[$1:rows]=$(q "SELECT count(*) FROM wfe.outbox")
	say "$(printf '%-30s' "retention pass, $1:") ${LAT[$1:retention]} ms over ${LAT[$1:rows]} outbox rows"
}

# confirms KEY: commit -> broker-confirmed at light load, samples as KEY.
confirms() {
	local key=$1
	settle
	q "TRUNCATE bench_lat_confirm" >/dev/null
	q "CALL bench_confirm_probe($LAT_CONFIRMS, $LAT_CONFIRM_GAP_MS)"
	q "CALL bench_wait('every dispatch being published',
	                   'SELECT NOT EXISTS (SELECT 1 FROM wfe.outbox WHERE state <> ''published'')', 120, 0.05)"
	q "INSERT INTO bench_lat
	   SELECT f, ms FROM bench_lat_confirm AS c JOIN wfe.outbox AS o ON o.run_id = c.run_id AND o.kind = 'dispatch',
	          LATERAL (VALUES ('$key', extract(epoch FROM o.published_at - c.committed_at) * 1000),
	                          ('$key:created', extract(epoch FROM o.published_at - o.created_at) * 1000),
	                          ('$key:claimed', extract(epoch FROM o.claimed_at - c.committed_at) * 1000)) AS v (f, ms)" >/dev/null
	say "$(printf '%-30s' "commit -> confirmed, $key:") $(stats "$key")  (n p50 p90 p99 max, ms)"
	say "$(printf '%-30s' "  created_at -> published_at:") $(stats "$key:created")"
	say "$(printf '%-30s' "  commit -> claimed_at:") $(stats "$key:claimed")"
	probe purge "$BROKER_QUEUE"
}

# broker: the outbox figures, with a private RabbitMQ.
broker() {
	publisher_connect
	lat_reset
	backlog
	LAT[body]=$(q "SELECT round(avg(octet_length(body::text))) FROM wfe.outbox")
	LAT[headers]=$(q "SELECT round(avg(octet_length(headers::text))) FROM wfe.outbox")
	LAT[window]=$(q "SHOW wfe.confirm_window")
	plain_publish plain1
	drain drain
	plain_publish plain2
	plain_publish plain3
	# the median of the three: one run slowed down by the machine's other
	# work does not move it
	LAT[plain]=$(printf '%s\n' "${LAT[plain1]}" "${LAT[plain2]}" "${LAT[plain3]}" | sort -n | sed -n 2p)

	# commit -> confirmed, light load, a fresh outbox; the broker alone
	lat_reset
	broker_confirms
	confirms confirm
	retention_pass confirm

	# the same two with a history of published rows
	if [ "$OUTBOX_HISTORY" -gt 0 ]; then
		worker_reload "ALTER SYSTEM SET wfe.publisher_enabled = off"
		history
		backlog
		drain drain-history
		confirms confirm-history
		retention_pass confirm-history
	fi
	worker_reload "ALTER SYSTEM RESET wfe.amqp_uri" "ALTER SYSTEM RESET wfe.publisher_enabled"
}

# latency: every latency figure.
latency() {
	banner "latency"
	latency_setup
	timers idle
	timers load $(((LAT_TIMERS * LAT_TIMER_SPACING_MS + 999) / 1000 + 4))
	timer_trap
	wakes
	if [ -n "${BENCH_SKIP_BROKER:-}" ]; then
		LAT[broker]="left out (BENCH_SKIP_BROKER)"
	elif ! wfe_build test-tools >/dev/null || [ ! -x "$PROBE" ]; then
		LAT[broker]="left out: build/test/amqp-probe could not be built"
	elif ! rmq_start "$WORKDIR"; then
		LAT[broker]="left out: no private RabbitMQ node could be started"
	else
		broker
		rmq_stop
	fi
	[ -z "${LAT[broker]:-}" ] || say "broker figures ${LAT[broker]}"
}

# lat_row NAME FIGURE [GOAL_MS]: one markdown row of a latency figure.
lat_row() {
	local n p50 p90 p99 max met=""
	read -r n p50 p90 p99 max <<<"$(stats "$2")"
	if [ "${n:-0}" -eq 0 ]; then
		printf '| %s | 0 | n/a | n/a | n/a | n/a | %s | n/a |\n' "$1" "${3:+≤ $3 ms (p99)}"
		return
	fi
	[ -z "${3:-}" ] || met=$(awk -v v="$p99" -v g="$3" 'BEGIN { print (v <= g ? "yes" : "**no**") }')
	printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$n" "$p50" "$p90" "$p99" "$max" \
		"${3:+≤ $3 ms (p99)}" "$met"
}

# drain_row NAME KEY: the rows of one drain.
drain_rows() {
	local claim mark rest batches
	read -r claim mark rest batches <<<"${LAT[$2:split]:-? ? ? ?}"
	printf '| wfe publisher, %s: from `pg_reload_conf()` to the last `published_at` (%s s) | %s | %s |\n' \
		"$1" "${LAT[$2:s]}" "${LAT[$2]}" "$(ratio "${LAT[$2]}" "${LAT[plain]}")"
	printf '| wfe publisher, %s: from its first claim (%s s); per batch of %s: claim %s ms, mark %s ms, rest of the round %s ms (%s batches) | %s | %s |\n' \
		"$1" "${LAT[$2:claim_s]}" "${LAT[batch]}" "$claim" "$mark" "$rest" "$batches" "${LAT[$2:claim]}" \
		"$(ratio "${LAT[$2:claim]}" "${LAT[plain]}")"
}

# latency_results: the markdown of the latency figures.
latency_results() {
	local ratio
	LAT[batch]=$(q "SHOW wfe.publish_batch")
	printf -- '- settings: as above; `wfe.poll_interval_ms` = %s (60 s for the wakeup probe only), `wfe.worker_batch` = %s, `wfe.publish_batch` = %s, `wfe.confirm_window` = %s\n' \
		"$(q "SELECT setting || unit FROM pg_settings WHERE name = 'wfe.poll_interval_ms'")" \
		"$(q "SHOW wfe.worker_batch")" "${LAT[batch]}" "$(q "SHOW wfe.confirm_window")"
	printf -- '- probes: %s retry timers due 200 ms after their failure, one failure every %s ms; %s wakeups; %s dispatch rows drained; %s single submits to a broker queue, one every %s ms on average (exponential gaps)\n' \
		"$LAT_TIMERS" "$LAT_TIMER_SPACING_MS" "$LAT_WAKES" "$OUTBOX_N" "$LAT_CONFIRMS" "$LAT_CONFIRM_GAP_MS"
	printf -- '- load for "under load": the wfe step benchmark, batch 1, 4 clients, %s steps/s while the timers ran (%s runs of %s stages)\n\n' \
		"${LAT[load_rate]:-?}" "${LAT[load_runs]:-?}" "$STEP_STAGES"
	printf '| figure | samples | p50 ms | p90 ms | p99 ms | max ms | goal | met |\n'
	printf '|---|---:|---:|---:|---:|---:|---|---|\n'
	lat_row "timer due → fired (\`fired_at − due_at\`), idle" timer:idle 50
	lat_row "timer due → fired, under load" timer:load 50
	lat_row "timer due → fired, a wakeup $LAT_TRAP_BEFORE_MS ms before it is due" timer:trap 50
	lat_row "commit → worker woken (\`last_woke − last_wake_requested\`)" wake
	lat_row "submit committed → in-database handler running" action:handler
	lat_row "submit committed → action seen completed (1 ms polling)" action:seen
	lat_row "submit committed → broker-confirmed (\`published_at\`), light load" confirm 50
	lat_row "… of which submit committed → claimed by the publisher (\`claimed_at\`)" confirm:claimed
	lat_row "… \`published_at − created_at\` of the same dispatches" confirm:created
	lat_row "RabbitMQ alone: one dispatch-like message, publish → confirm (\`bench/tools/confirm-latency\`)" broker
	if [ "$OUTBOX_HISTORY" -gt 0 ] && [ -z "${LAT[broker]:-}" ]; then
		lat_row "submit committed → broker-confirmed, light load, $OUTBOX_HISTORY published rows in the outbox" confirm-history 50
		lat_row "… of which submit committed → claimed by the publisher" confirm-history:claimed
	fi
	printf '\nThe background worker during the timer runs (%s timers each): idle %s; under load %s.\n' \
		"$LAT_TIMERS" \
		"${LAT[rounds:idle]:-?}" "${LAT[rounds:load]:-?}"
	[ -z "${LAT[confirm:retention]:-}" ] ||
		printf 'One retention pass of the background worker (every 60 s; nothing expired, so it only looks): %s ms over %s outbox rows%s.\n' \
			"${LAT[confirm:retention]}" "${LAT[confirm:rows]}" \
			"${LAT[confirm-history:retention]:+, ${LAT[confirm-history:retention]} ms over ${LAT[confirm-history:rows]} rows}"
	if [ -n "${LAT[broker]:-}" ]; then
		printf '\nOutbox drain: %s.\n' "${LAT[broker]}"
		return
	fi
	printf '\n| outbox drain, %s dispatch rows (JSON body %s bytes, headers %s bytes) | rows/s | ÷ plain |\n|---|---:|---:|\n' \
		"$OUTBOX_N" "${LAT[body]}" "${LAT[headers]}"
	printf '| plain confirmed publisher (`amqp-probe publish-plain`, window %s), before | %s | |\n' "${LAT[window]}" "${LAT[plain1]}"
	printf '| plain confirmed publisher, after (twice) | %s, %s | |\n' "${LAT[plain2]}" "${LAT[plain3]}"
	printf '| plain confirmed publisher, median of the three | %s | |\n' "${LAT[plain]}"
	drain_rows "fresh outbox" drain
	[ -z "${LAT[drain-history]:-}" ] || drain_rows "behind $OUTBOX_HISTORY published rows" drain-history
	ratio=$(ratio "${LAT[drain]}" "${LAT[plain]}")
	printf '\n| figure | value | goal | met |\n|---|---:|---|---|\n'
	printf '| outbox drain ÷ plain confirmed publisher (median of three runs), fresh outbox, from the reload | %s | ≥ 0.7 | %s |\n' \
		"$ratio" "$(verdict "$ratio" 0.7)"
}
