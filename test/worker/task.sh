#!/bin/sh
# task.sh — the command test/worker/run.sh gives wfe-worker.  It reads the
# task's input, appends a line to $WFE_TEST_LOG (so the tests can count the
# executions), and behaves as the input's "mode" says.
in=$(cat)
field() {
	printf '%s' "$in" | sed -n "s/.*\"$1\": *\"\{0,1\}\([a-z0-9_]*\).*/\1/p"
}
mode=$(field mode)
secs=$(field secs)
[ -n "$WFE_TEST_LOG" ] && echo "$WFE_RUN_ID $WFE_STAGE $WFE_ATTEMPT $mode start" >>"$WFE_TEST_LOG"
case $mode in
	echo) printf '%s\n' "$in" ;;
	empty) ;;
	bad) echo 'not json' ;;
	nul) printf '{"s": "a\\u0000b"}' ;;
	env)
		printf '{"run":"%s","stage":"%s","attempt":"%s","fence":"%s","worker":"%s","tenant":"%s","queue":"%s","traceparent":"%s"}\n' \
			"$WFE_RUN_ID" "$WFE_STAGE" "$WFE_ATTEMPT" "$WFE_FENCE" "$WFE_WORKER" "$WFE_TENANT" "$WFE_QUEUE" "$TRACEPARENT"
		;;
	fail)
		# fails on the first attempt only, with more than 2 KB of stderr
		if [ "$WFE_ATTEMPT" -lt 2 ]; then
			head -c 3000 /dev/zero | tr '\0' x >&2
			echo "last line of stderr" >&2
			exit 3
		fi
		echo '{"second": true}'
		;;
	sleep)
		trap 'echo "terminated" >&2; exit 143' TERM
		i=0
		while [ "$i" -lt "$secs" ]; do sleep 1; i=$((i + 1)); done
		echo "{\"slept\": $secs}"
		;;
	size) printf '{"bytes": %d}\n' "$(printf '%s' "$in" | wc -c)" ;;
	huge) head -c 20000000 /dev/zero | tr '\0' x ;;  # 20 MB on stdout, no end of line
	stubborn)
		# ignores SIGTERM, and so do its children (an ignored signal is inherited)
		trap '' TERM
		[ -n "$WFE_TEST_LOG" ] && echo $$ >"$WFE_TEST_LOG.pid.$WFE_RUN_ID"
		while :; do sleep 1; done
		;;
	*) echo "unknown mode '$mode'" >&2; exit 9 ;;
esac
status=$?
[ -n "$WFE_TEST_LOG" ] && echo "$WFE_RUN_ID $WFE_STAGE $WFE_ATTEMPT $mode end" >>"$WFE_TEST_LOG"
exit $status
