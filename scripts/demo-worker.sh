#!/bin/bash
# demo-worker.sh — a small poll worker for the demo: claims tasks of one queue
# with wfe.claim_task and reports each with wfe.complete_task / fail_task.
#
#   demo-worker.sh QUEUE WORKER_ID SECONDS   (psql connection from PG* variables)
#
# What each contract "does" is scripted so the demo shows every route: the
# cache answers hit for model ids ending in an even digit, the payment review
# fails its first attempt (to show a retry), the configuration fetch fails
# (a non-critical task: only its dependents are skipped).  The C reference
# worker, wfe-worker, replaces this script when the broker arrives.
set -euo pipefail

queue=$1
worker_id=$2
seconds=${3:-60}
deadline=$((SECONDS + seconds))
trap 'exit 0' TERM

psql_quiet() {
	psql -X -q -At -v ON_ERROR_STOP=1 "$@"
}

# report RUN STAGE ATTEMPT FENCE WORKER INPUT: do the work, then call back.
report() {
	local run=$1 stage=$2 attempt=$3 fence=$4 worker=$5 input=${6//\'/\'\'} call
	case $worker in
		cache.lookup@1)
			call="wfe.complete_task($run, '$stage', $attempt, $fence,
			      jsonb_build_object('hit', right(('$input'::jsonb)->>'modelId', 1) IN ('0','2','4','6','8')))" ;;
		payment.review@1)
			if [ "$attempt" -eq 1 ]; then
				call="wfe.fail_task($run, '$stage', $attempt, $fence, '{\"code\": \"review.busy\"}', true)"
			else
				call="wfe.complete_task($run, '$stage', $attempt, $fence, '{\"approved\": true}')"
			fi ;;
		config.fetch@1)
			call="wfe.fail_task($run, '$stage', $attempt, $fence, '{\"code\": \"config.unreachable\"}', false)" ;;
		session.restore@1)
			call="wfe.complete_task($run, '$stage', $attempt, $fence, '{\"user_session\": {\"user\": \"ada\"}}')" ;;
		*)
			call="wfe.complete_task($run, '$stage', $attempt, $fence, '{\"done\": true}')" ;;
	esac
	printf '%-12s %-22s run %-4s attempt %s: %s\n' "$worker_id" "$stage" "$run" "$attempt" \
		"$(psql_quiet -c "SELECT $call")"
}

while [ $SECONDS -lt $deadline ]; do
	# one transaction claims (and commits); each callback is its own
	tasks=$(psql_quiet -F $'\t' -c \
		"SELECT run_id, stage, attempt, fence, worker, input FROM wfe.claim_task('$queue', '$worker_id', 5)")
	if [ -z "$tasks" ]; then
		sleep 0.2
		continue
	fi
	while IFS=$'\t' read -r run stage attempt fence worker input; do
		report "$run" "$stage" "$attempt" "$fence" "$worker" "$input"
	done <<<"$tasks"
done
