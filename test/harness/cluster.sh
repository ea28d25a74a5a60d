# cluster.sh — a throwaway PostgreSQL cluster for the tests, the demo and the
# shellcheck shell=bash
# benchmarks.  Source lib.sh first, then:
#
#     cluster_start WORKDIR     # initdb + start under WORKDIR/pg
#     ...                       # PGHOST, PGPORT, PGUSER, PGDATABASE are exported
#     cluster_stop              # safe to call twice, or before any start
#
# The server listens on 127.0.0.1 and on a socket in a directory only its
# owner (and root) can enter; only that socket is trusted.

CLUSTER_DIR=""
CLUSTER_FIRST_PORT=${CLUSTER_FIRST_PORT:-54329}

# cluster_free_port: print the first port from CLUSTER_FIRST_PORT on that
# nothing on 127.0.0.1 answers.
cluster_free_port() {
	local port
	for ((port = CLUSTER_FIRST_PORT; port < CLUSTER_FIRST_PORT + 100; port++)); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	die "no free port in $CLUSTER_FIRST_PORT..$((port - 1))"
}

# cluster_pg_ctl ARGS...: pg_ctl on our data directory, as the server user.
cluster_pg_ctl() {
	as_server_user "$(pg_path bindir)/pg_ctl" -D "$CLUSTER_DIR/data" "$@"
}

# cluster_write_conf PORT: the settings of a private, durable test server.
cluster_write_conf() {
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<EOF

# --- wfe test cluster (test/harness/cluster.sh) ---
listen_addresses = '127.0.0.1'
port = $1
unix_socket_directories = '$CLUSTER_DIR/socket'
unix_socket_permissions = 0700
fsync = on
synchronous_commit = on
lc_messages = 'C'
log_line_prefix = '%m [%p] %q%a '
EOF
	# what a caller adds: the demo preloads wfe for its background worker
	if [ -n "${CLUSTER_EXTRA_CONF:-}" ]; then
		printf '%s\n' "$CLUSTER_EXTRA_CONF" >>"$CLUSTER_DIR/data/postgresql.conf"
	fi
}

# cluster_start WORKDIR: create and start a cluster under WORKDIR/pg.
cluster_start() {
	local port
	CLUSTER_DIR="$1/pg"
	mkdir -m 700 "$CLUSTER_DIR" "$CLUSTER_DIR/socket"
	give_to_server_user "$CLUSTER_DIR"
	port=$(cluster_free_port)

	# Step 1: initdb.  Only the socket is trusted; TCP wants a password, and
	# none is set.  A throwaway cluster skips initdb's final sync; the server
	# itself runs with fsync on.
	as_server_user "$(pg_path bindir)/initdb" -D "$CLUSTER_DIR/data" \
		--username=postgres --auth-local=trust --auth-host=scram-sha-256 \
		--encoding=UTF8 --no-locale --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 ||
		{ cat "$CLUSTER_DIR/initdb.log"; die "initdb failed"; }

	# Step 2: our settings, appended so that they win.
	cluster_write_conf "$port"

	# Step 3: start it and wait until it accepts connections.
	cluster_pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null ||
		{ cat "$CLUSTER_DIR/server.log"; die "the server did not start"; }

	export PGHOST="$CLUSTER_DIR/socket" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
	say "cluster: PostgreSQL $(pg_path version | sed 's/^PostgreSQL //') on port $port, socket $PGHOST"
}

# cluster_stop: stop the server if it runs (fast, then immediate).
cluster_stop() {
	[ -n "$CLUSTER_DIR" ] && [ -f "$CLUSTER_DIR/data/postmaster.pid" ] || return 0
	cluster_pg_ctl -m fast -w -t 60 stop >/dev/null 2>&1 ||
		cluster_pg_ctl -m immediate -w stop >/dev/null 2>&1 || true
}

# cluster_crash_report: if a server process crashed, show the end of the
# server log, which says why (the tests' own errors are not worth showing).
cluster_crash_report() {
	local log="$CLUSTER_DIR/server.log"
	[ -n "$CLUSTER_DIR" ] && [ -f "$log" ] || return 0
	grep -qE 'PANIC:|TRAP:|server process \(PID [0-9]+\) (was terminated|exited with exit code)' "$log" || return 0
	banner "server log: a server process crashed (last 60 lines)"
	tail -n 60 "$log"
}

# cluster_psql ARGS...: psql on the cluster, quiet and strict.
cluster_psql() {
	"$(pg_path bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# cluster_createdb NAME: (re)create a database and the extension in it.
cluster_createdb() {
	cluster_psql -d postgres -c 'SET client_min_messages = warning' \
		-c "DROP DATABASE IF EXISTS \"$1\"" -c "CREATE DATABASE \"$1\""
	cluster_psql -d "$1" -c 'CREATE EXTENSION wfe'
}
