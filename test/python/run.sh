#!/bin/bash
# run.sh — the Python client's tests (clients/python/tests/, pytest) against
# a private PostgreSQL cluster running wfe's background worker (timers,
# deadlines, the outbox publisher) and a private RabbitMQ node.
#
#   test/python/run.sh [WORKDIR]
#
# The extension must be installed (make install).  The client is installed
# first with `pip install --no-index` into WORKDIR/site (no network), and
# the tests import it from there.  Prints pytest's report, then
# "N passed, N failed" for the harness, and pytest's summary line last;
# exits non-zero if a test failed.  Everything it starts is stopped on exit.
# WFE_KEEP_WORKDIR=1 keeps the working directory (logs); PYTEST_K='EXPR'
# runs the tests pytest's -k EXPR selects.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../harness/lib.sh"
. "$WFE_HARNESS/cluster.sh"
. "$WFE_HARNESS/rabbit.sh"

PYTHON=/usr/bin/python3  # Debian's, with python3-psycopg, python3-pika, python3-pytest
DB=wfe_py
WORKDIR=""
OWN_WORKDIR=0

cleanup() {
	rmq_stop
	cluster_stop
	if [ "$OWN_WORKDIR" = 1 ] && [ "${WFE_KEEP_WORKDIR:-0}" != 1 ]; then
		rm -rf "$WORKDIR"
	elif [ -n "$WORKDIR" ]; then
		say "# logs in $WORKDIR"
	fi
}

# install_client: pip install the client offline; a failure is a failed check.
install_client() {
	"$PYTHON" -m pip install --quiet --no-index --no-deps --no-cache-dir --disable-pip-version-check \
		--target "$WORKDIR/site" "$WFE_TOP/clients/python" >"$WORKDIR/pip.log" 2>&1
}

# write_rmqctl: WORKDIR/rmqctl runs rabbitmqctl on our node (the tests close its connections)
write_rmqctl() {
	{
		echo '#!/bin/bash'
		(rmq_env && declare -px HOME RABBITMQ_NODENAME ERL_EPMD_PORT RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE \
			RABBITMQ_CONFIG_FILE RABBITMQ_ENABLED_PLUGINS_FILE RABBITMQ_PID_FILE RABBITMQ_CTL_ERL_ARGS)
		echo 'exec /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "$RABBITMQ_NODENAME" "$@"'
	} >"$WORKDIR/rmqctl"
	chmod +x "$WORKDIR/rmqctl"
}

main() {
	local amqp="" status summary passed failed
	if [ $# -ge 1 ]; then
		WORKDIR=$1
		mkdir -p "$WORKDIR"
	else
		WORKDIR=$(make_workdir)
		OWN_WORKDIR=1
	fi
	trap cleanup EXIT
	if ! install_client; then
		cat "$WORKDIR/pip.log"
		say "not ok - pip install --no-index ./clients/python"
		summary 0 1
		return 1
	fi
	if rmq_start "$WORKDIR" >/dev/null 2>&1; then
		amqp="$(amqp_uri)/"
		write_rmqctl
	else
		say "# broker mode skipped: cannot start a private RabbitMQ node (rabbitmq-server, amqp-tools)"
	fi
	CLUSTER_EXTRA_CONF="shared_preload_libraries = 'wfe'
wfe.database = '$DB'
wfe.amqp_uri = '$amqp'
wfe.broker_retry_ttl_ms = 300
wfe.broker_max_redeliveries = 2" cluster_start "$WORKDIR" >/dev/null
	cluster_createdb "$DB" >/dev/null
	cluster_psql -d "$DB" -f "$WFE_TOP/examples/contracts.sql" >/dev/null
	wait_for 30 '[ -n "$(cluster_psql -d "$DB" -Atc "SELECT pid FROM wfe.worker_status()")" ]' ||
		die "the wfe background worker did not start"

	# the tests run from the work directory, so that only the installed client is importable
	(cd "$WORKDIR" && PYTHONPATH="$WORKDIR/site" PYTHONDONTWRITEBYTECODE=1 \
		WFE_TEST_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=$DB" WFE_TEST_AMQP="$amqp" WFE_TEST_RMQCTL="${amqp:+$WORKDIR/rmqctl}" \
		WFE_TEST_TOP="$WFE_TOP" WFE_TEST_WORKDIR="$WORKDIR" WFE_TEST_PGBIN="$(pg_path bindir)" \
		WFE_TEST_PGDATA="$CLUSTER_DIR/data" \
		timeout -s KILL 900 "$PYTHON" -m pytest -p no:cacheprovider -v -rfE ${PYTEST_K:+-k "$PYTEST_K"} \
		"$WFE_TOP/clients/python/tests" 2>&1) | tee "$WORKDIR/pytest.log"
	status=${PIPESTATUS[0]}
	summary=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$WORKDIR/pytest.log" | tail -n 1)
	passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")
	failed=$(( $(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary" | grep . || echo 0) +
		$(sed -nE 's/.* ([0-9]+) errors?.*/\1/p' <<<"$summary" | grep . || echo 0) ))
	summary "${passed:-0}" "$failed"
	echo "$summary"
	[ "$status" -eq 0 ]
}

main "$@"
