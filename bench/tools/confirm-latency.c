/*
 * confirm-latency.c — the broker's own part of "commit -> broker-confirmed"
 * (bench/latency/latency.sh): one persistent, mandatory message at a time,
 * shaped like a wfe dispatch (the same properties, nine string headers, a
 * JSON body of BYTES bytes), published with publisher confirms, and the time
 * from basic.publish to its basic.ack measured on the monotonic clock.
 *
 *   confirm-latency URI EXCHANGE ROUTING_KEY N GAP_MS BYTES
 *
 * Messages go out at random, about one every GAP_MS milliseconds
 * (exponential gaps, at most five times GAP_MS), like the database probe's
 * submits.  Prints one line per message: the milliseconds to its confirm.
 * Exit status: 0 done; 1 an error (connection, nack, return, a confirm not
 * within 30 s); 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#define CHANNEL 1
#define CONFIRM_TIMEOUT_US (30 * 1000000LL)

/* Print an error and exit 1. */
static void
die(const char *fmt,...)
{
	va_list		ap;

	fputs("confirm-latency: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Microseconds on the monotonic clock. */
static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A non-negative integer argument, or exit 2. */
static long
int_arg(const char *s)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0)
	{
		fprintf(stderr, "confirm-latency: \"%s\" is not a non-negative integer\n", s);
		exit(2);
	}
	return v;
}

/* Die unless the last RPC succeeded. */
static void
check_rpc(amqp_connection_state_t conn, const char *what)
{
	amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);

	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		die("%s failed (reply type %d)", what, (int) r.reply_type);
}

/* Wait for the ack of delivery tag `tag`; a nack or return is an error. */
static void
await_ack(amqp_connection_state_t conn, uint64_t tag)
{
	int64_t		deadline = now_us() + CONFIRM_TIMEOUT_US;

	for (;;)
	{
		int64_t		left = deadline - now_us();
		struct timeval tv;
		amqp_frame_t frame;
		int			status;

		if (left <= 0)
			die("no confirm within %lld s", CONFIRM_TIMEOUT_US / 1000000);
		tv.tv_sec = left / 1000000;
		tv.tv_usec = left % 1000000;
		status = amqp_simple_wait_frame_noblock(conn, &frame, &tv);
		if (status == AMQP_STATUS_TIMEOUT)
			continue;
		if (status != AMQP_STATUS_OK)
			die("waiting for a confirm: %s", amqp_error_string2(status));
		if (frame.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (frame.payload.method.id)
		{
			case AMQP_BASIC_ACK_METHOD:
				if (((amqp_basic_ack_t *) frame.payload.method.decoded)->delivery_tag >= tag)
					return;
				break;
			case AMQP_BASIC_NACK_METHOD:
				die("the broker nacked a message");
				break;
			case AMQP_BASIC_RETURN_METHOD:
				die("the broker returned a message as unroutable");
				break;
			case AMQP_CHANNEL_CLOSE_METHOD:
			case AMQP_CONNECTION_CLOSE_METHOD:
				die("the broker closed the channel or connection");
				break;
			default:
				break;
		}
	}
}

int
main(int argc, char **argv)
{
	static const char *const names[] = {"x-wfe-run-id", "x-wfe-stage", "x-wfe-attempt",
		"x-wfe-fence", "x-wfe-digest", "x-wfe-contract", "x-wfe-tenant", "x-wfe-track",
	"x-wfe-deadline"};
	struct amqp_connection_info info;
	struct timeval timeout = {10, 0};
	amqp_connection_state_t conn;
	amqp_socket_t *socket;
	amqp_table_entry_t headers[9];
	amqp_rpc_reply_t r;
	char	   *uri,
			   *body;
	long		n,
				gap_ms,
				bytes;
	int			status;

	if (argc != 7)
	{
		fprintf(stderr, "usage: confirm-latency URI EXCHANGE ROUTING_KEY N GAP_MS BYTES\n");
		return 2;
	}
	n = int_arg(argv[4]);
	gap_ms = int_arg(argv[5]);
	bytes = int_arg(argv[6]);
	if (bytes < 16)
		bytes = 16;

	/* connect, log in, open a channel in confirm mode */
	uri = strdup(argv[1]);
	amqp_default_connection_info(&info);
	if (uri == NULL || amqp_parse_url(uri, &info) != AMQP_STATUS_OK)
		die("\"%s\" is not an amqp:// URI", argv[1]);
	if (info.vhost == NULL || info.vhost[0] == '\0')
		info.vhost = "/";
	conn = amqp_new_connection();
	socket = amqp_tcp_socket_new(conn);
	if (socket == NULL)
		die("cannot create a socket");
	status = amqp_socket_open_noblock(socket, info.host, info.port, &timeout);
	if (status != AMQP_STATUS_OK)
		die("cannot connect to %s:%d: %s", info.host, info.port, amqp_error_string2(status));
	amqp_set_handshake_timeout(conn, &timeout);
	amqp_set_rpc_timeout(conn, &timeout);
	r = amqp_login(conn, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN,
				   info.user, info.password);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		die("login failed");
	amqp_channel_open(conn, CHANNEL);
	check_rpc(conn, "channel.open");
	amqp_confirm_select(conn, CHANNEL);
	check_rpc(conn, "confirm.select");

	/* a dispatch-like message: nine headers, a JSON body of BYTES bytes */
	for (int h = 0; h < 9; h++)
	{
		headers[h].key = amqp_cstring_bytes(names[h]);
		headers[h].value.kind = AMQP_FIELD_KIND_UTF8;
		headers[h].value.value.bytes = amqp_cstring_bytes(h == 4 ? "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" : "latency");
	}
	body = malloc(bytes + 1);
	if (body == NULL)
		die("out of memory");
	memset(body, 'x', bytes);
	memcpy(body, "{\"pad\": \"", 9);
	memcpy(body + bytes - 2, "\"}", 2);
	body[bytes] = '\0';

	srand48((long) now_us());
	for (long i = 1; i <= n; i++)
	{
		amqp_basic_properties_t props;
		char		message_id[48];
		double		gap = -log(1.0 - drand48());
		struct timespec pause;
		int64_t		start;

		if (gap > 5.0)
			gap = 5.0;
		gap *= gap_ms / 1000.0;
		pause.tv_sec = (time_t) gap;
		pause.tv_nsec = (long) ((gap - pause.tv_sec) * 1e9);
		nanosleep(&pause, NULL);

		snprintf(message_id, sizeof(message_id), "00000000-0000-4000-8000-%012ld", i);
		memset(&props, 0, sizeof(props));
		props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
			AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
			AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
		props.content_type = amqp_cstring_bytes("application/json");
		props.delivery_mode = 2;
		props.message_id = amqp_cstring_bytes(message_id);
		props.correlation_id = amqp_cstring_bytes(message_id + 24);
		props.timestamp = (uint64_t) time(NULL);
		props.headers.num_entries = 9;
		props.headers.entries = headers;
		start = now_us();
		status = amqp_basic_publish(conn, CHANNEL, amqp_cstring_bytes(argv[2]),
									amqp_cstring_bytes(argv[3]), 1, 0, &props,
									amqp_cstring_bytes(body));
		if (status != AMQP_STATUS_OK)
			die("publish failed: %s", amqp_error_string2(status));
		await_ack(conn, (uint64_t) i);
		printf("%.3f\n", (now_us() - start) / 1000.0);
	}
	free(body);
	amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
	amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
	free(uri);
	return 0;
}
