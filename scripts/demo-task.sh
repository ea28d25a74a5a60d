#!/bin/bash
# demo-task.sh — the command wfe-worker runs for every task of the demo.
#
# wfe-worker writes the task's input JSON to stdin, names the contract in
# WFE_WORKER and the attempt in WFE_ATTEMPT, and reads the result JSON from
# stdout (a non-zero exit fails the attempt).  Each contract is scripted so
# the demo shows every route: model ids ending in an even digit are cache
# hits; the finest LOD's render (lod0) fails its first attempt; the payment review fails its first attempt (a retry, with backoff,
# fired by the background worker); the configuration fetch always fails (a
# non-critical task: only its dependents are skipped).
set -euo pipefail

input=$(cat)
sleep 0.2	# a little work, so the timelines show something

case $WFE_WORKER in
	cache.lookup@1)
		case $input in
			*[02468]\"*) echo '{"hit": true}' ;;
			*) echo '{"hit": false}' ;;
		esac ;;
	payment.review@1)
		if [ "$WFE_ATTEMPT" -eq 1 ]; then
			echo "the review desk is busy" >&2
			exit 1
		fi
		echo '{"approved": true}' ;;
	asset.store@1)
		model=$(sed -n 's/.*"modelId": *"\([^"]*\)".*/\1/p' <<<"$input")
		asset=$(sed -n 's/.*"asset": *"\([^"]*\)".*/\1/p' <<<"$input")
		echo "{\"url\": \"s3://assets/$model/$asset.glb\"}" ;;
	lod.render@1)
		# the finest LOD runs out of GPU memory on its first attempt: retried alone
		lod=$(sed -n 's/.*"lod": *"\([^"]*\)".*/\1/p' <<<"$input")
		if [ "$lod" = lod0 ] && [ "$WFE_ATTEMPT" -eq 1 ]; then
			echo "out of GPU memory rendering $lod" >&2
			exit 1
		fi
		echo "{\"lod\": \"$lod\", \"file\": \"$lod.glb\"}" ;;
	config.fetch@1)
		echo "configuration server unreachable" >&2
		exit 1 ;;
	session.restore@1)
		echo '{"user_session": {"user": "ada"}}' ;;
	*)
		echo '{"done": true}' ;;
esac
