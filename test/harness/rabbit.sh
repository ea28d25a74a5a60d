# rabbit.sh — a private RabbitMQ node on loopback for the demo and the
# tests: its own node name, ports, epmd, and files under a work directory,
# so it never touches a system broker.  Source it after lib.sh.

RMQ_DIR=""
RMQ_PORT=""
RMQ_EPMD_PORT=""
# Erlang distribution (the node's and rabbitmqctl's) listens on loopback
# only; ERL_EPMD_ADDRESS does the same for epmd.  Without these the node's
# distribution port and epmd listen on every interface.
RMQ_LOOPBACK='-kernel inet_dist_use_interface {127,0,0,1}'

# free_port FROM: the first port from FROM nothing listens on.
free_port() {
	local port
	for ((port = $1; port < $1 + 200; port++)); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

# rmq_env: the environment of our private node.
rmq_env() {
	export HOME="$RMQ_DIR/home" \
		RABBITMQ_NODENAME="wfe-$$@localhost" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="$RMQ_PORT" \
		RABBITMQ_DIST_PORT="$((RMQ_PORT + 1))" \
		ERL_EPMD_PORT="$RMQ_EPMD_PORT" \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="$RMQ_LOOPBACK" \
		RABBITMQ_CTL_ERL_ARGS="$RMQ_LOOPBACK" \
		RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia" \
		RABBITMQ_LOG_BASE="$RMQ_DIR/log" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins" \
		RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq" \
		RABBITMQ_PID_FILE="$RMQ_DIR/pid"
}

# rmqctl ARGS...: rabbitmqctl on our node.
rmqctl() {
	(rmq_env && /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "$RABBITMQ_NODENAME" "$@")
}

# rmq_start [DIR]: a private RabbitMQ node on loopback, its files under
# DIR/rabbitmq (default $WORKDIR); false if it cannot run.
rmq_start() {
	[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || return 1
	command -v amqp-publish >/dev/null || return 1
	RMQ_DIR="${1:-$WORKDIR}/rabbitmq"
	mkdir -p "$RMQ_DIR/home" "$RMQ_DIR/mnesia" "$RMQ_DIR/log"
	echo '[].' >"$RMQ_DIR/enabled_plugins"
	echo 'loopback_users = none' >"$RMQ_DIR/rabbitmq.conf"
	# RMQ_FIRST_PORT / RMQ_FIRST_EPMD_PORT let parallel checkouts keep apart.
	RMQ_PORT=$(free_port "${RMQ_FIRST_PORT:-25699}") || return 1
	RMQ_EPMD_PORT=$(free_port "${RMQ_FIRST_EPMD_PORT:-24369}") || return 1
	(rmq_env && setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$RMQ_DIR/server.out" 2>&1 &)
	wait_for 60 'rmqctl await_startup >/dev/null 2>&1'
}

# rmq_stop: stop our node and its epmd.
rmq_stop() {
	[ -n "$RMQ_DIR" ] || return 0
	rmqctl stop >/dev/null 2>&1 || true
	(rmq_env && epmd -port "$RMQ_EPMD_PORT" -kill >/dev/null 2>&1) || true
	RMQ_DIR=""
}

# amqp_uri: the URI of our node (guest may log in from loopback).
amqp_uri() {
	echo "amqp://guest:guest@127.0.0.1:$RMQ_PORT"
}

