#!/bin/bash
# run.sh — end-to-end tests of wfe-worker (src/worker/) against a
# private PostgreSQL cluster and, when rabbitmq-server is installed, a
# private RabbitMQ node.
#
#   test/worker/run.sh [WORKDIR]
#
# The extension must be installed (make install) and build/wfe-worker
# built.  Prints "ok N - ..." / "not ok N - ..." per check and ends with
# "N passed, N failed"; exits non-zero if a check failed.  Everything it
# starts (cluster, RabbitMQ node and its epmd, workers) is stopped on exit.
# WFE_KEEP_WORKDIR=1 keeps the working directory (logs); WFE_WORKER_BIN
# tests another build of the worker (a sanitized one, say).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"
. "$WFE_HARNESS/rabbit.sh"

WORKER="${WFE_WORKER_BIN:-$WFE_TOP/build/wfe-worker}"
TASK="$WFE_TOP/test/worker/task.sh"
WORKDIR=""
OWN_WORKDIR=0
PASSED=0
FAILED=0
CHECK=0
EXEC_LOG=""
BG_PIDS=()

# --- reporting ---------------------------------------------------------------

# check DESCRIPTION CMD...: one numbered check, passing when CMD succeeds.
check() {
	local desc=$1
	shift
	CHECK=$((CHECK + 1))
	if "$@"; then
		PASSED=$((PASSED + 1))
		echo "ok $CHECK - $desc"
	else
		FAILED=$((FAILED + 1))
		echo "not ok $CHECK - $desc"
	fi
}

# eq EXPECTED ACTUAL: string equality, saying what differed.
eq() {
	[ "$1" = "$2" ] && return 0
	printf '#   expected: %s\n#   got:      %s\n' "$1" "$2"
	return 1
}

# --- PostgreSQL --------------------------------------------------------------

# q DB SQL: one value (or rows) from the database, unaligned.
q() {
	"$(pg_path bindir)/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2"
}

# dsn DB [USER]: the conninfo of a database of the test cluster.
dsn() {
	echo "host=$PGHOST port=$PGPORT user=${2:-postgres} dbname=$1"
}

# setup_db DB DELIVERY: a database with the test contracts and workflows;
# queue q_one and q_two in DELIVERY mode.
setup_db() {
	cluster_createdb "$1" >/dev/null
	cluster_psql -d "$1" >/dev/null <<EOF
SELECT wfe.register_worker('wt.one@1', 'q_one');
SELECT wfe.register_worker('wt.first@1', 'q_two');
SELECT wfe.register_worker('wt.second@1', 'q_two');
SELECT wfe.configure_queue('q_one', '$2');
SELECT wfe.configure_queue('q_two', '$2');
SELECT wfe.create_definition(\$y\$
name: wt-one
version: "1.0.0"
entry: one
defaults:
  retry: { max_attempts: 2, initial_ms: 100, multiplier: 1.0, max_ms: 100, jitter: none }
stages:
  - name: one
    type: worker
    queue: q_one
    worker: wt.one@1
    input: { mode: "\${context.mode}", secs: "\${context.secs}" }
    on_success: completed
    on_failure: failed
\$y\$);
SELECT wfe.approve('wt-one', '1.0.0');
SELECT wfe.activate('wt-one', '1.0.0');
SELECT wfe.create_definition(\$y\$
name: wt-hb
version: "1.0.0"
entry: one
stages:
  - name: one
    type: worker
    queue: q_one
    worker: wt.one@1
    heartbeat_ms: 1000
    input: { mode: "\${context.mode}", secs: "\${context.secs}" }
    on_success: completed
    on_failure: failed
\$y\$);
SELECT wfe.approve('wt-hb', '1.0.0');
SELECT wfe.activate('wt-hb', '1.0.0');
SELECT wfe.create_definition(\$y\$
name: wt-deadline
version: "1.0.0"
entry: one
defaults:
  retry: { max_attempts: 1 }
stages:
  - name: one
    type: worker
    queue: q_one
    worker: wt.one@1
    execution_deadline_ms: 1000
    input: { mode: "\${context.mode}", secs: "\${context.secs}" }
    on_success: completed
    on_failure: failed
\$y\$);
SELECT wfe.approve('wt-deadline', '1.0.0');
SELECT wfe.activate('wt-deadline', '1.0.0');
SELECT wfe.create_definition(\$y\$
name: wt-two
version: "1.0.0"
entry: first
stages:
  - name: first
    type: worker
    queue: q_two
    worker: wt.first@1
    input: { mode: "echo", who: "\${context.who}" }
    on_success: second
    on_failure: failed
  - name: second
    type: worker
    queue: q_two
    worker: wt.second@1
    input: { mode: "echo", prev: "\${stages.first.result}" }
    on_success: completed
    on_failure: failed
\$y\$);
SELECT wfe.approve('wt-two', '1.0.0');
SELECT wfe.activate('wt-two', '1.0.0');
EOF
}

# submit DB WORKFLOW CONTEXT: submit a run, print its id.
submit() {
	q "$1" "SELECT run_id FROM wfe.submit('$2', '$3')"
}

# stage_of DB RUN COLUMNS: columns of the run's only (or first) stage.
stage_of() {
	q "$1" "SELECT $3 FROM wfe.run_stages WHERE run_id = $2 ORDER BY stage LIMIT 1"
}

# events_of DB RUN TYPE: how many events of a type a run has.
events_of() {
	q "$1" "SELECT count(*) FROM wfe.events WHERE run_id = $2 AND type = '$3'"
}

# --- the worker --------------------------------------------------------------

# worker LOG ARGS...: run wfe-worker in the foreground (60 s at most).
worker() {
	local log=$1
	shift
	WFE_TEST_LOG="$EXEC_LOG" timeout -s KILL 60 "$WORKER" "$@" >>"$WORKDIR/$log" 2>&1
}

# worker_bg LOG ARGS...: start wfe-worker in the background; sets WPID.
worker_bg() {
	local log=$1
	shift
	WFE_TEST_LOG="$EXEC_LOG" "$WORKER" "$@" >>"$WORKDIR/$log" 2>&1 &
	WPID=$!
	BG_PIDS+=("$WPID")
}

# stop_worker PID: SIGTERM and wait; STOPPED is its exit status.
stop_worker() {
	STOPPED=0
	kill -TERM "$1" 2>/dev/null
	wait "$1" || STOPPED=$?
}


# executions RUN MARK: how many times the command started/ended for a run.
executions() {
	grep -c "^$1 .* $2\$" "$EXEC_LOG" 2>/dev/null || true
}

# --- poll mode ---------------------------------------------------------------

test_usage() {
	local s
	"$WORKER" --help >/dev/null 2>&1
	check "--help exits 0" eq 0 $?
	"$WORKER" --command cat >/dev/null 2>&1
	s=$?
	check "a missing --queue is a usage error (exit 2)" eq 2 "$s"
	"$WORKER" --queue q --command cat --concurrency 0 >/dev/null 2>&1
	s=$?
	check "a bad --concurrency is a usage error (exit 2)" eq 2 "$s"
	"$WORKER" --queue q --command cat --mode push >/dev/null 2>&1
	s=$?
	check "a bad --mode is a usage error (exit 2)" eq 2 "$s"
	# the queue names AMQP queues and routing keys: the server's rule applies
	"$WORKER" --queue 'Bad Queue' --command cat >/dev/null 2>&1
	s=$?
	check "a --queue that is not a queue name is a usage error (exit 2)" eq 2 "$s"
	"$WORKER" --queue "q$(printf 'x%.0s' $(seq 63))" --command cat >/dev/null 2>&1
	s=$?
	check "a --queue of 64 bytes is a usage error (exit 2)" eq 2 "$s"
}

test_poll_basic() {
	local db=wt_poll r1 r2 s fence tp
	r1=$(submit $db wt-two '{"who": "ann"}')
	r2=$(submit $db wt-two '{"who": "bob"}')
	worker poll.log --queue q_two --command "$TASK" --dsn "$(dsn $db)" --once
	s=$?
	check "poll --once exits 0" eq 0 "$s"
	check "both runs completed" eq "completed completed" \
		"$(q $db "SELECT string_agg(state, ' ' ORDER BY run_id) FROM wfe.runs WHERE run_id IN ($r1, $r2)")"
	check "the second stage got the first one's result" eq '{"mode": "echo", "prev": {"who": "ann", "mode": "echo"}}' \
		"$(q $db "SELECT result FROM wfe.run_stages WHERE run_id = $r1 AND stage = 'second'")"

	r1=$(submit $db wt-one '{"mode": "env", "secs": 0}')
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
	# the attempt's real fence (unpredictable: generation 1 in the high half)
	fence=$(q $db "SELECT fence FROM wfe.run_stages WHERE run_id = $r1 AND stage = 'one'")
	check "the attempt's fence is of generation 1" eq 1 "$(q $db "SELECT $fence >> 32")"
	# the attempt's traceparent: the run's trace, the attempt's span
	tp=$(q $db "SELECT wfe._attempt_traceparent(trace_id, span_id, trace_flags, 'one', 1) FROM wfe.runs WHERE run_id = $r1")
	check "the command sees WFE_* variables and TRACEPARENT" eq \
		"{\"run\": \"$r1\", \"fence\": \"$fence\", \"queue\": \"q_one\", \"stage\": \"one\", \"tenant\": \"default\", \"worker\": \"wt.one@1\", \"attempt\": \"1\", \"traceparent\": \"$tp\"}" \
		"$(stage_of $db "$r1" result)"
}

test_poll_outcomes() {
	local db=wt_poll fail bad empty nul err
	fail=$(submit $db wt-one '{"mode": "fail", "secs": 0}')
	bad=$(submit $db wt-one '{"mode": "bad", "secs": 0}')
	empty=$(submit $db wt-one '{"mode": "empty", "secs": 0}')
	nul=$(submit $db wt-one '{"mode": "nul", "secs": 0}')
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once --concurrency 4

	err=$(stage_of $db "$fail" "error->>'code', error->>'exit_status', length(error->>'stderr'), right(error->>'stderr', 20),
		CASE WHEN state IN ('retry_scheduled', 'queued') THEN 'retry' ELSE state END")
	check "exit status 3 fails with command.failed, the last 2 KB of stderr; a retry is scheduled" \
		eq "command.failed|3|2048|last line of stderr
|retry" "$err"
	check "output that is not JSON fails with command.bad_output" eq "command.bad_output" \
		"$(stage_of $db "$bad" "error->>'code'")"
	check "empty output completes with {}" eq "{}|completed" "$(stage_of $db "$empty" "result, state")"
	check "JSON that jsonb refuses fails with command.bad_output" eq "command.bad_output" \
		"$(stage_of $db "$nul" "error->>'code'")"

	# the retry: make it due, fire it, run the second attempt
	q $db "UPDATE wfe.timers SET due_at = now() WHERE run_id = $fail AND fired_at IS NULL" >/dev/null
	q $db "SELECT wfe.tick()" >/dev/null
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
	check "the retried attempt completes" eq '2|{"second": true}|completed' \
		"$(stage_of $db "$fail" "attempt, result, state")"
}

test_poll_wakeup() {
	local db=wt_poll r cpu
	worker_bg poll-bg.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --poll-interval-ms 600000
	sleep 1.5
	r=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	check "a run submitted later is taken at once (LISTEN wfe_task_ready)" \
		wait_for 3 'test "$(stage_of $db "$r" state)" = completed'
	sleep 2
	cpu=$(awk '{print $14 + $15}' "/proc/$WPID/stat")
	check "an idle worker does not spin (CPU ticks: $cpu)" test "$cpu" -le 20
	stop_worker "$WPID"
	check "SIGTERM on an idle worker exits 0" eq 0 "$STOPPED"
}

test_poll_heartbeat_and_cancel() {
	local db=wt_poll r
	r=$(submit $db wt-hb '{"mode": "sleep", "secs": 3}')
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
	check "a 3 s command with heartbeat_ms 1000 completes" eq completed "$(stage_of $db "$r" state)"
	check "it was heartbeaten while it ran" \
		test "$(q $db "SELECT heartbeat_at - started_at >= interval '2 s' FROM wfe.run_stages WHERE run_id = $r")" = t

	r=$(submit $db wt-hb '{"mode": "sleep", "secs": 30}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
	wait_for 5 'test "$(executions "$r" start)" = 1'
	q $db "SELECT wfe.cancel_run($r, 'test')" >/dev/null
	wait "$WPID"
	check "cancelling the run stops the command (heartbeat answered late)" eq "1 0" \
		"$(executions "$r" start) $(executions "$r" end)"
	check "nothing is reported for the cancelled attempt" eq "0 1" \
		"$(q $db "SELECT count(*) FILTER (WHERE type IN ('stage.completed', 'stage.failed')), count(*) FILTER (WHERE type = 'callback.late') FROM wfe.events WHERE run_id = $r" | tr '|' ' ')"

	# past its execution deadline (fired by hand: no background worker here),
	# the attempt is stale and the worker stops its command without waiting
	# for the 30 s heartbeat
	r=$(submit $db wt-deadline '{"mode": "sleep", "secs": 30}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
	wait_for 5 'test "$(executions "$r" start)" = 1'
	sleep 1.2
	q $db "SELECT wfe.tick()" >/dev/null
	wait_for 10 '! kill -0 $WPID 2>/dev/null'
	wait "$WPID"
	check "a command whose attempt timed out is stopped soon after the deadline" eq "timed_out 1 0" \
		"$(stage_of $db "$r" state) $(executions "$r" start) $(executions "$r" end)"
}

test_poll_shutdown() {
	local db=wt_poll r cpu
	r=$(submit $db wt-one '{"mode": "sleep", "secs": 3}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)"
	wait_for 5 'test "$(executions "$r" start)" = 1'
	kill -TERM "$WPID"
	sleep 1.5
	cpu=$(awk '{print $14 + $15}' "/proc/$WPID/stat")
	check "a stopping worker waits for its command without spinning (CPU ticks: $cpu)" test "$cpu" -le 20
	STOPPED=0
	wait "$WPID" || STOPPED=$?
	check "SIGTERM lets a running command finish within the grace period, exit 0" \
		eq "0 completed" "$STOPPED $(stage_of $db "$r" state)"

	r=$(submit $db wt-one '{"mode": "sleep", "secs": 30}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --grace-ms 500
	wait_for 5 'test "$(executions "$r" start)" = 1'
	stop_worker "$WPID"
	check "past the grace period the command is terminated and reported worker.shutdown, exit 0" \
		eq "0 worker.shutdown" "$STOPPED $(stage_of $db "$r" "error->>'code'")"
}

# never a silent stall (issue 26): a huge stdout fails its attempt and the
# worker goes on; a command that ignores SIGTERM is killed, reported, gone
test_poll_stalls() {
	local db=wt_poll huge next stub pid
	huge=$(submit $db wt-one '{"mode": "huge", "secs": 0}')
	next=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once --concurrency 1 \
		--max-output-bytes 1048576
	check "20 MB on stdout past --max-output-bytes fails with command.bad_output" \
		eq "command.bad_output|the command wrote more than 1048576 bytes to stdout (--max-output-bytes)" \
		"$(stage_of $db "$huge" "error->>'code', error->>'message'")"
	check "the worker goes on to the next task" eq completed "$(stage_of $db "$next" state)"

	stub=$(submit $db wt-one '{"mode": "stubborn", "secs": 0}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --grace-ms 300
	wait_for 5 'test -s "$EXEC_LOG.pid.$stub"'
	pid=$(cat "$EXEC_LOG.pid.$stub")
	stop_worker "$WPID"
	check "a command ignoring SIGTERM is killed (SIGKILL) and reported worker.shutdown, exit 0" \
		eq "0 worker.shutdown" "$STOPPED $(stage_of $db "$stub" "error->>'code'")"
	check "the worker said so" grep -q "ignor.*SIGTERM: SIGKILL" "$WORKDIR/poll.log"
	check "nothing of the command is left running" gone "$pid"
}

# gone PID: the process has ended (a zombie left for an init that does not reap counts as ended).
gone() {
	[ ! -e "/proc/$1" ] || [ "$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

test_poll_concurrency() {
	local db=wt_poll start took
	# nothing left over from earlier tests (retries) may compete
	q $db "SELECT count(wfe.cancel_run(run_id)) FROM wfe.runs WHERE state = 'running'" >/dev/null
	for _ in 1 2 3; do submit $db wt-one '{"mode": "sleep", "secs": 2}' >/dev/null; done
	start=$SECONDS
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once --concurrency 3
	took=$((SECONDS - start))
	check "--concurrency 3 runs three 2 s commands at once (${took} s)" test "$took" -le 4

	submit $db wt-one '{"mode": "echo", "secs": 0}' >/dev/null
	submit $db wt-one '{"mode": "echo", "secs": 0}' >/dev/null
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --max-tasks 1
	check "--max-tasks 1 takes one task and exits" eq 1 \
		"$(q $db "SELECT count(*) FROM wfe.run_stages WHERE queue = 'q_one' AND state = 'queued'")"
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --once
}

test_poll_reconnect() {
	local db=wt_poll r r2
	r=$(submit $db wt-one '{"mode": "sleep", "secs": 3}')
	worker_bg poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db)" --heartbeat-ms 500
	wait_for 5 'test "$(executions "$r" start)" = 1'
	cluster_pg_ctl -m fast -w stop >/dev/null
	sleep 4
	cluster_pg_ctl -l "$CLUSTER_DIR/server.log" -w start >/dev/null
	check "an outcome is reported after PostgreSQL comes back" \
		wait_for 15 'test "$(stage_of $db "$r" state 2>/dev/null)" = completed'
	r2=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	check "and new tasks are claimed again" wait_for 10 'test "$(stage_of $db "$r2" state)" = completed'
	stop_worker "$WPID"
}

test_poll_privileges() {
	local db=wt_poll r
	q $db "DO \$\$ BEGIN CREATE ROLE wt_worker LOGIN IN ROLE wfe_worker; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$" >/dev/null
	r=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	# without the queue granted, the claim is refused and the task stays queued
	worker poll-refused.log --queue q_one --command "$TASK" --dsn "$(dsn $db wt_worker)" --once || true
	check "a role not granted the queue cannot claim from it" eq queued "$(stage_of $db "$r" state)"
	q $db "SELECT wfe.grant_queue('wt_worker', 'q_one')" >/dev/null
	worker poll.log --queue q_one --command "$TASK" --dsn "$(dsn $db wt_worker)" --once
	check "a role with only wfe_worker's rights and the queue granted can serve it" eq completed "$(stage_of $db "$r" state)"
}

# --- broker mode -------------------------------------------------------------

# relay DB: publish the pending outbox rows as the wfe publisher would.
relay() {
	local db=$1 id ids=() exchange rk headers body h hs args
	while IFS=$'\t' read -r id exchange rk headers body; do
		args=()
		IFS=$'\x1f' read -r -a hs <<<"$headers"
		for h in "${hs[@]}"; do
			[ "$h" != "-" ] && args+=(-H "$h")
		done
		amqp-publish -u "$(amqp_uri)" -e "$exchange" -r "$rk" -p -C application/json "${args[@]}" -b "$body"
		ids+=("$id")
	done < <("$(pg_path bindir)/psql" -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 -d "$db" -c "
		SELECT o.id, o.exchange, o.routing_key,
		       coalesce((SELECT string_agg(key || ': ' || value, chr(31)) FROM jsonb_each_text(o.headers)), '-'),
		       o.body
		  FROM wfe.outbox_claim(100, 'test-relay') AS o ORDER BY o.id")
	if [ ${#ids[@]} -gt 0 ]; then
		q "$db" "SELECT wfe.outbox_ack('{$(IFS=,; echo "${ids[*]}")}', 'test-relay')" >/dev/null
	fi
}

# queue_counts QUEUE: "ready unacked" of a RabbitMQ queue.
queue_counts() {
	rmqctl list_queues name messages_ready messages_unacknowledged 2>/dev/null |
		awk -v q="$1" '$1 == q {print $2, $3}'
}

# rmq_exposed: the addresses our RabbitMQ node (AMQP, Erlang distribution,
# epmd) listens on that are not loopback; empty when it keeps to loopback.
rmq_exposed() {
	ss -ltnH "( sport = :$RMQ_PORT or sport = :$((RMQ_PORT + 1)) or sport = :$RMQ_EPMD_PORT )" |
		awk '{print $4}' | grep -vE '^(127\.0\.0\.1|\[::1\]):' || true
}

test_broker() {
	local db=wt_broker r body big
	if command -v ss >/dev/null; then
		check "the test's RabbitMQ node listens on loopback only (AMQP, distribution, epmd)" eq "" "$(rmq_exposed)"
	fi
	setup_db $db broker
	EXEC_LOG="$WORKDIR/executions.broker"
	worker_bg broker.log --queue q_one --mode broker --declare --retry-ttl-ms 200 --max-redeliveries 2 \
		--command "$TASK" --dsn "$(dsn $db)" --amqp-uri "$(amqp_uri)/"
	check "broker mode connects and declares the topology" \
		wait_for 10 'test "$(queue_counts wfe.q_one.small)" = "0 0"'

	r=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	relay $db
	check "a dispatch is accepted, run and completed" wait_for 5 'test "$(stage_of $db "$r" state)" = completed'
	check "and its message acknowledged" wait_for 5 'test "$(queue_counts wfe.q_one.small)" = "0 0"'

	body=$(q $db "SELECT body FROM wfe.outbox WHERE run_id = $r AND kind = 'dispatch'")
	amqp-publish -u "$(amqp_uri)" -e wfe.commands -r run.q_one.small -p -b "$body"
	sleep 1
	check "a redelivered dispatch is acknowledged without running again" eq "1 0 0" \
		"$(executions "$r" start) $(queue_counts wfe.q_one.small)"

	amqp-publish -u "$(amqp_uri)" -e wfe.commands -r run.q_one.small -p -b 'not an envelope'
	check "an unusable message goes round the retry queue, then to wfe.dlq" \
		wait_for 10 'test "$(queue_counts wfe.dlq)" = "1 0"'
	check "the worker says so" grep -q "dead-lettered a message from run.q_one.small" "$WORKDIR/broker.log"

	r=$(submit $db wt-one '{"mode": "sleep", "secs": 30}')
	relay $db
	wait_for 5 'test "$(executions "$r" start)" = 1'
	q $db "SELECT wfe.cancel_run($r, 'test')" >/dev/null
	relay $db
	check "a cancellation request stops the command and is acknowledged (ack_cancel)" \
		wait_for 5 'test "$(events_of $db $r stage.cancel_acknowledged)" = 1'
	check "the stopped command did not finish" eq 0 "$(executions "$r" end)"

	# a large-track envelope: the input stored in wfe.payloads for its stage,
	# fetched by a reference that names the attempt (as _dispatch makes it)
	r=$(submit $db wt-one '{"mode": "size", "secs": 0}')
	big=$(q $db "
		WITH o AS (SELECT id, body FROM wfe.outbox WHERE run_id = $r AND kind = 'dispatch'),
		     p AS (INSERT INTO wfe.payloads (key, tenant, bytes, body, run_id, stage)
		           SELECT 'sha256:' || encode(sha256(convert_to((o.body -> 'payload_inline')::text, 'UTF8')), 'hex'),
		                  'default', octet_length((o.body -> 'payload_inline')::text), o.body -> 'payload_inline',
		                  (o.body ->> 'run_id')::bigint, o.body ->> 'stage'
		             FROM o
		           RETURNING key, bytes),
		     m AS (UPDATE wfe.outbox SET state = 'published' FROM o WHERE outbox.id = o.id)
		SELECT jsonb_set(jsonb_set(o.body, '{payload_inline}', 'null'), '{payload_ref}',
		                 jsonb_build_object('bucket', 'wfe.payloads', 'key', p.key,
		                                    'sha256', substr(p.key, 8), 'bytes', p.bytes,
		                                    'run_id', o.body -> 'run_id', 'stage', o.body -> 'stage',
		                                    'attempt', o.body -> 'attempt', 'fence', o.body -> 'fence'))
		       || '{\"track\": \"large\"}'
		  FROM o, p")
	amqp-publish -u "$(amqp_uri)" -e wfe.commands -r run.q_one.large -p -b "$big"
	check "a large-track input is fetched with wfe.fetch_payload" \
		wait_for 5 'test "$(stage_of $db $r "state, result")" = "completed|{\"bytes\": 27}"'

	stop_worker "$WPID"
	check "SIGTERM in broker mode exits 0" eq 0 "$STOPPED"
	r=$(submit $db wt-one '{"mode": "echo", "secs": 0}')
	relay $db
	worker broker.log --queue q_one --mode broker --once --command "$TASK" --dsn "$(dsn $db)" --amqp-uri "$(amqp_uri)/"
	check "broker --once takes what was queued meanwhile, then exits" eq completed "$(stage_of $db "$r" state)"
}

# --- main --------------------------------------------------------------------

cleanup() {
	local pid
	for pid in "${BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	rmq_stop
	cluster_stop
	if [ "$OWN_WORKDIR" = 1 ] && [ "${WFE_KEEP_WORKDIR:-0}" != 1 ]; then
		rm -rf "$WORKDIR"
	elif [ -n "$WORKDIR" ]; then
		say "# logs in $WORKDIR"
	fi
}

main() {
	[ -x "$WORKER" ] || die "$WORKER is not built (make build/wfe-worker)"
	if [ $# -ge 1 ]; then
		WORKDIR=$1
		mkdir -p "$WORKDIR"
	else
		WORKDIR=$(make_workdir)
		OWN_WORKDIR=1
	fi
	trap cleanup EXIT
	cluster_start "$WORKDIR" >/dev/null
	setup_db wt_poll poll
	EXEC_LOG="$WORKDIR/executions.poll"

	test_usage
	test_poll_basic
	test_poll_outcomes
	test_poll_wakeup
	test_poll_heartbeat_and_cancel
	test_poll_shutdown
	test_poll_stalls
	test_poll_concurrency
	test_poll_reconnect
	test_poll_privileges
	if rmq_start; then
		test_broker
	else
		say "# broker mode skipped: cannot start a private RabbitMQ node (rabbitmq-server, amqp-tools)"
	fi

	summary "$PASSED" "$FAILED"
	[ "$FAILED" -eq 0 ]
}

main "$@"
