/*
 * amqp-probe.c — a small AMQP 0-9-1 client (librabbitmq) for wfe's TAP
 * tests and benchmarks: it looks at what the outbox publisher put on
 * RabbitMQ, plays the consumers the tests need, and is a plain confirmed
 * publisher to compare the publisher with.
 *
 *   amqp-probe URI consume QUEUE N TIMEOUT_S
 *       Consume (and ack) up to N messages within TIMEOUT_S seconds; print
 *       one JSON line per message: properties, headers, routing key,
 *       exchange, redelivered, x-death count and the body (parsed JSON).
 *   amqp-probe URI count-ids QUEUE IDLE_S [list]
 *       Consume (and ack) until the queue has been idle for IDLE_S seconds;
 *       print "total N distinct M" (by message_id), preceded with "list" by
 *       one line "id MESSAGE_ID" per message, in the order they arrived.
 *   amqp-probe URI reject QUEUE N TIMEOUT_S
 *       Consume N messages and reject each without requeueing (print them).
 *   amqp-probe URI reject-to-dlq QUEUE MAX N TIMEOUT_S
 *       The consumer rule of delivery.md: a message whose x-death count is
 *       past MAX is published to wfe.commands with routing key "dead" (with
 *       a confirm) and then acked; any other is rejected without requeue.
 *       Stops after N dead-lettered messages; prints each delivery with
 *       "action": "reject" or "dead".
 *   amqp-probe URI queue-info QUEUE          "messages N consumers M"
 *   amqp-probe URI declare-queue QUEUE       a durable queue, no arguments
 *   amqp-probe URI bind QUEUE EXCHANGE ROUTING_KEY
 *   amqp-probe URI delete-queue QUEUE
 *   amqp-probe URI purge QUEUE
 *   amqp-probe URI publish-plain EXCHANGE ROUTING_KEY N [WINDOW [BYTES]]
 *   amqp-probe URI confirm-latency EXCHANGE ROUTING_KEY N GAP_MS BYTES
 *       Publish N persistent, mandatory messages shaped like wfe's
 *       dispatches (same properties and header count, a BYTES-long JSON
 *       body, default 512) with publisher confirms, WINDOW (default 200) at
 *       a time, waiting for a window's confirms before the next one, as
 *       wfe's publisher does; print the rate.
 *
 * Exit status: 0 done; 1 an error (connection, broker, protocol); 2 usage;
 * 3 fewer messages than asked for arrived in time; 4 queue-info of a queue
 * that does not exist.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <math.h>
#include <time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <json-c/json.h>

#define CONSUME_CHANNEL 1
#define PUBLISH_CHANNEL 2
#define IO_TIMEOUT_S 10
#define CONFIRM_TIMEOUT_MS 30000

static const char *progname = "amqp-probe";

/* Print an error and exit 1. */
static void
die(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Print the usage text and exit 2. */
static void
usage(void)
{
	fprintf(stderr,
			"usage: %s URI consume QUEUE N TIMEOUT_S\n"
			"       %s URI count-ids QUEUE IDLE_S [list]\n"
			"       %s URI reject QUEUE N TIMEOUT_S\n"
			"       %s URI reject-to-dlq QUEUE MAX N TIMEOUT_S\n"
			"       %s URI queue-info|declare-queue|delete-queue|purge QUEUE\n"
			"       %s URI bind QUEUE EXCHANGE ROUTING_KEY\n"
			"       %s URI publish-plain EXCHANGE ROUTING_KEY N [WINDOW [BYTES]]\n"
			"       %s URI confirm-latency EXCHANGE ROUTING_KEY N GAP_MS BYTES\n",
			progname, progname, progname, progname, progname, progname, progname, progname);
	exit(2);
}

/* A non-negative integer argument, or a usage error. */
static long
int_arg(const char *s)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0)
	{
		fprintf(stderr, "%s: \"%s\" is not a non-negative integer\n", progname, s);
		usage();
	}
	return v;
}

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Describe a failed RPC reply into buf. */
static const char *
describe_reply(amqp_rpc_reply_t r, char *buf, size_t len)
{
	switch (r.reply_type)
	{
		case AMQP_RESPONSE_NORMAL:
			snprintf(buf, len, "ok");
			break;
		case AMQP_RESPONSE_NONE:
			snprintf(buf, len, "no reply");
			break;
		case AMQP_RESPONSE_LIBRARY_EXCEPTION:
			snprintf(buf, len, "%s", amqp_error_string2(r.library_error));
			break;
		case AMQP_RESPONSE_SERVER_EXCEPTION:
			if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
			{
				amqp_connection_close_t *m = r.reply.decoded;

				snprintf(buf, len, "connection closed by the broker: %d %.*s", m->reply_code,
						 (int) m->reply_text.len, (char *) m->reply_text.bytes);
			}
			else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
			{
				amqp_channel_close_t *m = r.reply.decoded;

				snprintf(buf, len, "channel closed by the broker: %d %.*s", m->reply_code,
						 (int) m->reply_text.len, (char *) m->reply_text.bytes);
			}
			else
				snprintf(buf, len, "broker error (method 0x%08x)", r.reply.id);
			break;
	}
	return buf;
}

/* Exit 1 unless the last synchronous RPC on conn succeeded. */
static void
check_rpc(amqp_connection_state_t conn, const char *what)
{
	amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
	char		buf[512];

	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		die("%s: %s", what, describe_reply(r, buf, sizeof(buf)));
}

/*
 * Connect to URI (amqp://user:pass@host:port/vhost; an empty vhost means
 * "/"), log in and open the consuming channel and, in confirm mode, the
 * publishing channel.
 */
static amqp_connection_state_t
connect_to(const char *uri)
{
	struct amqp_connection_info info;
	struct timeval timeout = {IO_TIMEOUT_S, 0};
	amqp_connection_state_t conn;
	amqp_socket_t *socket;
	amqp_rpc_reply_t r;
	char	   *copy = strdup(uri);
	char		buf[512];
	int			status;

	amqp_default_connection_info(&info);
	if (copy == NULL || amqp_parse_url(copy, &info) != AMQP_STATUS_OK)
		die("\"%s\" is not an amqp:// URI", uri);
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
		die("login: %s", describe_reply(r, buf, sizeof(buf)));
	amqp_channel_open(conn, CONSUME_CHANNEL);
	check_rpc(conn, "channel.open");
	amqp_channel_open(conn, PUBLISH_CHANNEL);
	check_rpc(conn, "channel.open");
	amqp_confirm_select(conn, PUBLISH_CHANNEL);
	check_rpc(conn, "confirm.select");
	free(copy);
	return conn;
}

/* Close the connection politely (best effort). */
static void
disconnect(amqp_connection_state_t conn)
{
	amqp_channel_close(conn, PUBLISH_CHANNEL, AMQP_REPLY_SUCCESS);
	amqp_channel_close(conn, CONSUME_CHANNEL, AMQP_REPLY_SUCCESS);
	amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
}

/* An AMQP byte string as a new JSON string. */
static json_object *
json_bytes(amqp_bytes_t b)
{
	return json_object_new_string_len(b.bytes ? (const char *) b.bytes : "", (int) b.len);
}

static json_object *json_table(const amqp_table_t *t);

/* An AMQP field value as JSON (tables and arrays recursively). */
static json_object *
json_field(const amqp_field_value_t *v)
{
	switch (v->kind)
	{
		case AMQP_FIELD_KIND_BOOLEAN:
			return json_object_new_boolean(v->value.boolean);
		case AMQP_FIELD_KIND_I8:
			return json_object_new_int64(v->value.i8);
		case AMQP_FIELD_KIND_U8:
			return json_object_new_int64(v->value.u8);
		case AMQP_FIELD_KIND_I16:
			return json_object_new_int64(v->value.i16);
		case AMQP_FIELD_KIND_U16:
			return json_object_new_int64(v->value.u16);
		case AMQP_FIELD_KIND_I32:
			return json_object_new_int64(v->value.i32);
		case AMQP_FIELD_KIND_U32:
			return json_object_new_int64(v->value.u32);
		case AMQP_FIELD_KIND_I64:
			return json_object_new_int64(v->value.i64);
		case AMQP_FIELD_KIND_U64:
		case AMQP_FIELD_KIND_TIMESTAMP:
			return json_object_new_int64((int64_t) v->value.u64);
		case AMQP_FIELD_KIND_F32:
			return json_object_new_double(v->value.f32);
		case AMQP_FIELD_KIND_F64:
			return json_object_new_double(v->value.f64);
		case AMQP_FIELD_KIND_UTF8:
		case AMQP_FIELD_KIND_BYTES:
			return json_bytes(v->value.bytes);
		case AMQP_FIELD_KIND_TABLE:
			return json_table(&v->value.table);
		case AMQP_FIELD_KIND_ARRAY:
			{
				json_object *a = json_object_new_array();

				for (int i = 0; i < v->value.array.num_entries; i++)
					json_object_array_add(a, json_field(&v->value.array.entries[i]));
				return a;
			}
		case AMQP_FIELD_KIND_DECIMAL:
			{
				char		buf[64];

				snprintf(buf, sizeof(buf), "%ue-%u", v->value.decimal.value,
						 (unsigned) v->value.decimal.decimals);
				return json_object_new_string(buf);
			}
		case AMQP_FIELD_KIND_VOID:
		default:
			return NULL;
	}
}

/* An AMQP table as a JSON object. */
static json_object *
json_table(const amqp_table_t *t)
{
	json_object *o = json_object_new_object();

	for (int i = 0; i < t->num_entries; i++)
	{
		char	   *key = strndup((const char *) t->entries[i].key.bytes, t->entries[i].key.len);

		json_object_object_add(o, key, json_field(&t->entries[i].value));
		free(key);
	}
	return o;
}

/* Does an AMQP byte string equal a C string? */
static bool
bytes_eq(amqp_bytes_t b, const char *s)
{
	return b.len == strlen(s) && memcmp(b.bytes, s, b.len) == 0;
}

/* An integer field's value (0 for other kinds). */
static int64_t
field_int(const amqp_field_value_t *v)
{
	switch (v->kind)
	{
		case AMQP_FIELD_KIND_I8:
			return v->value.i8;
		case AMQP_FIELD_KIND_U8:
			return v->value.u8;
		case AMQP_FIELD_KIND_I16:
			return v->value.i16;
		case AMQP_FIELD_KIND_U16:
			return v->value.u16;
		case AMQP_FIELD_KIND_I32:
			return v->value.i32;
		case AMQP_FIELD_KIND_U32:
			return v->value.u32;
		case AMQP_FIELD_KIND_I64:
			return v->value.i64;
		case AMQP_FIELD_KIND_U64:
			return (int64_t) v->value.u64;
		default:
			return 0;
	}
}

/*
 * How many times a message went round a retry queue: the largest "count"
 * of its x-death entries (a rejection and an expiry per cycle, each entry
 * counting its own), as wfe-worker reads it.
 */
static int64_t
death_count(const amqp_basic_properties_t *p)
{
	int64_t		max = 0;

	if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
		return 0;
	for (int i = 0; i < p->headers.num_entries; i++)
	{
		const amqp_table_entry_t *e = &p->headers.entries[i];

		if (!bytes_eq(e->key, "x-death") || e->value.kind != AMQP_FIELD_KIND_ARRAY)
			continue;
		for (int j = 0; j < e->value.value.array.num_entries; j++)
		{
			const amqp_field_value_t *d = &e->value.value.array.entries[j];

			if (d->kind != AMQP_FIELD_KIND_TABLE)
				continue;
			for (int k = 0; k < d->value.table.num_entries; k++)
				if (bytes_eq(d->value.table.entries[k].key, "count") &&
					field_int(&d->value.table.entries[k].value) > max)
					max = field_int(&d->value.table.entries[k].value);
		}
	}
	return max;
}

/* Print a delivery as one JSON line (with an "action" when given). */
static void
print_envelope(const amqp_envelope_t *env, const char *action)
{
	const amqp_basic_properties_t *p = &env->message.properties;
	json_object *o = json_object_new_object();
	json_object *props = json_object_new_object();
	json_object *body = NULL;
	json_tokener *tok = json_tokener_new();

	if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		json_object_object_add(props, "message_id", json_bytes(p->message_id));
	if (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
		json_object_object_add(props, "correlation_id", json_bytes(p->correlation_id));
	if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
		json_object_object_add(props, "content_type", json_bytes(p->content_type));
	if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG)
		json_object_object_add(props, "delivery_mode", json_object_new_int(p->delivery_mode));
	if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
		json_object_object_add(props, "timestamp", json_object_new_int64((int64_t) p->timestamp));
	json_object_object_add(o, "properties", props);
	json_object_object_add(o, "headers", (p->_flags & AMQP_BASIC_HEADERS_FLAG)
						   ? json_table(&p->headers) : json_object_new_object());
	json_object_object_add(o, "death_count", json_object_new_int64(death_count(p)));
	json_object_object_add(o, "exchange", json_bytes(env->exchange));
	json_object_object_add(o, "routing_key", json_bytes(env->routing_key));
	json_object_object_add(o, "redelivered", json_object_new_boolean(env->redelivered));
	if (action)
		json_object_object_add(o, "action", json_object_new_string(action));

	/* the body: parsed JSON, or a string when it is not JSON */
	if (tok != NULL)
	{
		body = json_tokener_parse_ex(tok, (const char *) env->message.body.bytes,
									 (int) env->message.body.len);
		if (json_tokener_get_error(tok) != json_tokener_success)
		{
			json_object_put(body);
			body = NULL;
		}
		json_tokener_free(tok);
	}
	json_object_object_add(o, "body_is_json", json_object_new_boolean(body != NULL));
	json_object_object_add(o, "body", body ? body : json_bytes(env->message.body));

	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
												  JSON_C_TO_STRING_NOSLASHESCAPE));
	fflush(stdout);
	json_object_put(o);
}

/* The tag of our consumer (one per run of the program). */
static char consumer_tag[256];

/* Subscribe to QUEUE on the consuming channel with the given prefetch. */
static void
start_consuming(amqp_connection_state_t conn, const char *queue, int prefetch)
{
	amqp_basic_consume_ok_t *ok;

	amqp_basic_qos(conn, CONSUME_CHANNEL, 0, (uint16_t) prefetch, 0);
	check_rpc(conn, "basic.qos");
	ok = amqp_basic_consume(conn, CONSUME_CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes,
							0, 0, 0, amqp_empty_table);
	check_rpc(conn, queue);
	snprintf(consumer_tag, sizeof(consumer_tag), "%.*s", (int) ok->consumer_tag.len,
			 (char *) ok->consumer_tag.bytes);
}

/*
 * Stop consuming.  Called with prefetch 1 while the last wanted delivery is
 * still unsettled, so that nothing more is delivered, and then put back
 * (marked redelivered) when the connection closes.
 */
static void
stop_consuming(amqp_connection_state_t conn)
{
	amqp_basic_cancel(conn, CONSUME_CHANNEL, amqp_cstring_bytes(consumer_tag));
	check_rpc(conn, "basic.cancel");
}

/*
 * Wait at most timeout_ms for the next delivery into *env: true if one
 * arrived, false on timeout.  Other frames (stray confirms) are skipped; a
 * closed channel or connection is an error.
 */
static bool
next_delivery(amqp_connection_state_t conn, amqp_envelope_t *env, int64_t timeout_ms)
{
	int64_t		deadline = now_ms() + timeout_ms;
	char		buf[512];

	for (;;)
	{
		int64_t		left = deadline - now_ms();
		struct timeval tv;
		amqp_rpc_reply_t r;
		amqp_frame_t frame;

		if (left <= 0)
			return false;
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		amqp_maybe_release_buffers(conn);
		r = amqp_consume_message(conn, env, &tv, 0);
		if (r.reply_type == AMQP_RESPONSE_NORMAL)
			return true;
		if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
			r.library_error == AMQP_STATUS_TIMEOUT)
			return false;
		if (r.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION ||
			r.library_error != AMQP_STATUS_UNEXPECTED_STATE)
			die("consuming: %s", describe_reply(r, buf, sizeof(buf)));
		/* something else than a delivery came: look at it */
		if (amqp_simple_wait_frame(conn, &frame) != AMQP_STATUS_OK)
			die("consuming: the connection failed");
		if (frame.frame_type == AMQP_FRAME_METHOD &&
			(frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
			 frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD))
			die("consuming: the broker closed the %s",
				frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ? "channel" : "connection");
	}
}

/* Acknowledge a delivery. */
static void
ack(amqp_connection_state_t conn, const amqp_envelope_t *env)
{
	if (amqp_basic_ack(conn, CONSUME_CHANNEL, env->delivery_tag, 0) != AMQP_STATUS_OK)
		die("basic.ack failed");
}

/* Reject a delivery without requeueing it (it dead-letters, if set up). */
static void
reject(amqp_connection_state_t conn, const amqp_envelope_t *env)
{
	if (amqp_basic_reject(conn, CONSUME_CHANNEL, env->delivery_tag, 0) != AMQP_STATUS_OK)
		die("basic.reject failed");
}

/*
 * Wait for the publisher confirms of delivery tags up to `last` on the
 * publishing channel (acks may cover several with "multiple").  A nack or
 * a basic.return (unroutable) is an error.
 */
static void
await_confirms(amqp_connection_state_t conn, uint64_t last)
{
	int64_t		deadline = now_ms() + CONFIRM_TIMEOUT_MS;
	uint64_t	confirmed = 0;

	while (confirmed < last)
	{
		int64_t		left = deadline - now_ms();
		struct timeval tv;
		amqp_frame_t frame;
		int			status;

		if (left <= 0)
			die("no confirm for %" PRIu64 " messages within %d ms", last - confirmed,
				CONFIRM_TIMEOUT_MS);
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		status = amqp_simple_wait_frame_noblock(conn, &frame, &tv);
		if (status == AMQP_STATUS_TIMEOUT)
			continue;
		if (status != AMQP_STATUS_OK)
			die("waiting for confirms: %s", amqp_error_string2(status));
		if (frame.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (frame.payload.method.id)
		{
			case AMQP_BASIC_ACK_METHOD:
				{
					amqp_basic_ack_t *a = frame.payload.method.decoded;

					/* acks of one channel are in order; "multiple" covers all before */
					if (a->delivery_tag > confirmed)
						confirmed = a->delivery_tag;
					break;
				}
			case AMQP_BASIC_NACK_METHOD:
				die("the broker nacked a message");
				break;
			case AMQP_BASIC_RETURN_METHOD:
				die("the broker returned a message as unroutable");
				break;
			case AMQP_CHANNEL_CLOSE_METHOD:
			case AMQP_CONNECTION_CLOSE_METHOD:
				die("the broker closed the %s while confirming",
					frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ? "channel" : "connection");
				break;
			default:
				break;
		}
	}
}

/* consume QUEUE N TIMEOUT_S: print and ack up to N messages. */
static int
cmd_consume(amqp_connection_state_t conn, const char *queue, long n, long timeout_s)
{
	int64_t		deadline = now_ms() + timeout_s * 1000;
	long		got = 0;

	/* one at a time, so nothing beyond N is delivered and put back */
	start_consuming(conn, queue, 1);
	while (got < n)
	{
		amqp_envelope_t env;

		if (!next_delivery(conn, &env, deadline - now_ms()))
			break;
		print_envelope(&env, NULL);
		if (got + 1 == n)
			stop_consuming(conn);
		ack(conn, &env);
		amqp_destroy_envelope(&env);
		got++;
	}
	if (got < n)
	{
		fprintf(stderr, "%s: %ld of %ld messages from %s within %ld s\n", progname, got, n, queue,
				timeout_s);
		return 3;
	}
	return 0;
}

/* qsort comparator for C strings. */
static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* count-ids QUEUE IDLE_S [list]: drain the queue, count by message_id. */
static int
cmd_count_ids(amqp_connection_state_t conn, const char *queue, long idle_s, bool list)
{
	char	  **ids = NULL;
	size_t		n = 0,
				cap = 0,
				distinct = 0;

	start_consuming(conn, queue, 200);
	for (;;)
	{
		amqp_envelope_t env;
		const amqp_basic_properties_t *p = &env.message.properties;

		if (!next_delivery(conn, &env, idle_s * 1000))
			break;
		if (n == cap)
		{
			cap = cap ? cap * 2 : 1024;
			ids = realloc(ids, cap * sizeof(char *));
			if (ids == NULL)
				die("out of memory");
		}
		ids[n++] = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
			? strndup((const char *) p->message_id.bytes, p->message_id.len)
			: strdup("");
		if (ids[n - 1] == NULL)
			die("out of memory");
		if (list)
			printf("id %s\n", ids[n - 1][0] ? ids[n - 1] : "-");
		ack(conn, &env);
		amqp_destroy_envelope(&env);
	}
	if (n > 0)
		qsort(ids, n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < n;)
	{
		size_t		j = i;

		while (j < n && strcmp(ids[j], ids[i]) == 0)
			j++;
		distinct++;
		i = j;
	}
	printf("total %zu distinct %zu\n", n, distinct);
	for (size_t i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	return 0;
}

/* reject QUEUE N TIMEOUT_S: reject N messages without requeueing. */
static int
cmd_reject(amqp_connection_state_t conn, const char *queue, long n, long timeout_s)
{
	int64_t		deadline = now_ms() + timeout_s * 1000;
	long		got = 0;

	start_consuming(conn, queue, 1);
	while (got < n)
	{
		amqp_envelope_t env;

		if (!next_delivery(conn, &env, deadline - now_ms()))
			break;
		print_envelope(&env, "reject");
		if (got + 1 == n)
			stop_consuming(conn);
		reject(conn, &env);
		amqp_destroy_envelope(&env);
		got++;
	}
	if (got < n)
	{
		fprintf(stderr, "%s: rejected %ld of %ld messages from %s within %ld s\n", progname, got, n,
				queue, timeout_s);
		return 3;
	}
	return 0;
}

/*
 * Publish a copy of a delivery (same properties and headers, same body) to
 * wfe.commands with routing key "dead", mandatory, and wait for its confirm.
 */
static void
publish_dead_letter(amqp_connection_state_t conn, const amqp_envelope_t *env, uint64_t *tag)
{
	int			status;

	status = amqp_basic_publish(conn, PUBLISH_CHANNEL, amqp_cstring_bytes("wfe.commands"),
								amqp_cstring_bytes("dead"), 1, 0, &env->message.properties,
								env->message.body);
	if (status != AMQP_STATUS_OK)
		die("publishing a dead letter: %s", amqp_error_string2(status));
	await_confirms(conn, ++*tag);
}

/* reject-to-dlq QUEUE MAX N TIMEOUT_S: the consumer rule for poison messages. */
static int
cmd_reject_to_dlq(amqp_connection_state_t conn, const char *queue, long max, long n,
				  long timeout_s)
{
	int64_t		deadline = now_ms() + timeout_s * 1000;
	uint64_t	tag = 0;
	long		dead = 0;

	/* one unacknowledged delivery at a time: no delivery races a confirm */
	start_consuming(conn, queue, 1);
	while (dead < n)
	{
		amqp_envelope_t env;

		if (!next_delivery(conn, &env, deadline - now_ms()))
			break;
		if (death_count(&env.message.properties) > max)
		{
			print_envelope(&env, "dead");
			publish_dead_letter(conn, &env, &tag);
			if (dead + 1 == n)
				stop_consuming(conn);
			ack(conn, &env);
			dead++;
		}
		else
		{
			print_envelope(&env, "reject");
			reject(conn, &env);
		}
		amqp_destroy_envelope(&env);
	}
	if (dead < n)
	{
		fprintf(stderr, "%s: dead-lettered %ld of %ld messages from %s within %ld s\n", progname,
				dead, n, queue, timeout_s);
		return 3;
	}
	return 0;
}

/* queue-info QUEUE: message and consumer counts (passive declare). */
static int
cmd_queue_info(amqp_connection_state_t conn, const char *queue)
{
	amqp_queue_declare_ok_t *ok;
	amqp_rpc_reply_t r;
	char		buf[512];

	ok = amqp_queue_declare(conn, CONSUME_CHANNEL, amqp_cstring_bytes(queue), 1, 0, 0, 0,
							amqp_empty_table);
	r = amqp_get_rpc_reply(conn);
	if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
		((amqp_channel_close_t *) r.reply.decoded)->reply_code == AMQP_NOT_FOUND)
	{
		printf("no queue %s\n", queue);
		return 4;
	}
	if (r.reply_type != AMQP_RESPONSE_NORMAL || ok == NULL)
		die("%s: %s", queue, describe_reply(r, buf, sizeof(buf)));
	printf("messages %u consumers %u\n", ok->message_count, ok->consumer_count);
	return 0;
}

/* A JSON body of about `bytes` bytes for message i. */
static char *
plain_body(long i, long bytes)
{
	char		head[64];
	int			hlen = snprintf(head, sizeof(head), "{\"i\":%ld,\"pad\":\"", i);
	long		pad = bytes - hlen - 2;
	char	   *body;

	if (pad < 0)
		pad = 0;
	body = malloc(hlen + pad + 3);
	if (body == NULL)
		die("out of memory");
	memcpy(body, head, hlen);
	memset(body + hlen, 'x', pad);
	strcpy(body + hlen + pad, "\"}");
	return body;
}

/* Headers of the same number and about the same size as a dispatch's. */
static void
dispatch_headers(amqp_table_entry_t headers[9], const char *value)
{
	static const char *const names[] = {"x-wfe-run-id", "x-wfe-stage", "x-wfe-attempt",
		"x-wfe-fence", "x-wfe-digest", "x-wfe-contract", "x-wfe-tenant", "x-wfe-track",
	"x-wfe-deadline"};

	for (int h = 0; h < 9; h++)
	{
		headers[h].key = amqp_cstring_bytes(names[h]);
		headers[h].value.kind = AMQP_FIELD_KIND_UTF8;
		headers[h].value.value.bytes = amqp_cstring_bytes(h == 4 ? "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" : value);
	}
}

/* Publish message i like a wfe dispatch: persistent, mandatory, with headers. */
static void
publish_dispatch_like(amqp_connection_state_t conn, const char *exchange, const char *routing_key,
					  long i, amqp_table_entry_t headers[9], const char *body)
{
	amqp_basic_properties_t props;
	char		message_id[40],
				correlation_id[24];
	int			status;

	snprintf(message_id, sizeof(message_id), "00000000-0000-4000-8000-%012ld", i);
	snprintf(correlation_id, sizeof(correlation_id), "%ld", i);
	memset(&props, 0, sizeof(props));
	props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
		AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
		AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
	props.content_type = amqp_cstring_bytes("application/json");
	props.delivery_mode = 2;
	props.message_id = amqp_cstring_bytes(message_id);
	props.correlation_id = amqp_cstring_bytes(correlation_id);
	props.timestamp = (uint64_t) time(NULL);
	props.headers.num_entries = 9;
	props.headers.entries = headers;
	status = amqp_basic_publish(conn, PUBLISH_CHANNEL, amqp_cstring_bytes(exchange),
								amqp_cstring_bytes(routing_key), 1, 0, &props,
								amqp_cstring_bytes(body));
	if (status != AMQP_STATUS_OK)
		die("publish failed: %s", amqp_error_string2(status));
}

/* publish-plain EXCHANGE ROUTING_KEY N WINDOW BYTES: a plain confirmed publisher. */
static int
cmd_publish_plain(amqp_connection_state_t conn, const char *exchange, const char *routing_key,
				  long n, long window, long bytes)
{
	amqp_table_entry_t headers[9];
	uint64_t	tag = 0;
	int64_t		start = now_ms(),
				elapsed;

	dispatch_headers(headers, "plain");
	for (long sent = 0; sent < n;)
	{
		long		end = sent + window < n ? sent + window : n;

		for (; sent < end; sent++)
		{
			char	   *body = plain_body(sent, bytes);

			publish_dispatch_like(conn, exchange, routing_key, sent, headers, body);
			free(body);
			tag++;
		}
		await_confirms(conn, tag);
	}
	elapsed = now_ms() - start;
	printf("published %ld messages in %.3f s: %.0f msg/s (window %ld, body %ld bytes)\n", n,
		   elapsed / 1000.0, elapsed > 0 ? n * 1000.0 / elapsed : 0.0, window, bytes);
	return 0;
}

/*
 * confirm-latency EXCHANGE ROUTING_KEY N GAP_MS BYTES: the broker's own part
 * of "commit -> broker-confirmed": one dispatch-like message at a time, about
 * one every GAP_MS ms (exponential gaps, at most five times GAP_MS), and the
 * milliseconds from basic.publish to its ack, one line per message.
 */
static int
cmd_confirm_latency(amqp_connection_state_t conn, const char *exchange, const char *routing_key,
					long n, long gap_ms, long bytes)
{
	amqp_table_entry_t headers[9];
	char	   *body = plain_body(0, bytes);

	dispatch_headers(headers, "latency");
	srand48((long) now_ms());
	for (long i = 1; i <= n; i++)
	{
		double		gap = -log(1.0 - drand48());
		struct timespec pause,
					t0,
					t1;

		gap = (gap > 5.0 ? 5.0 : gap) * gap_ms / 1000.0;
		pause.tv_sec = (time_t) gap;
		pause.tv_nsec = (long) ((gap - pause.tv_sec) * 1e9);
		nanosleep(&pause, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		publish_dispatch_like(conn, exchange, routing_key, i, headers, body);
		await_confirms(conn, (uint64_t) i);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%.3f\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	}
	free(body);
	return 0;
}

/* Dispatch the subcommand. */
int
main(int argc, char **argv)
{
	amqp_connection_state_t conn;
	const char *cmd;
	int			rc = 0;

	if (argc < 4)
		usage();
	cmd = argv[2];
	/* check the arguments before connecting */
	if ((strcmp(cmd, "consume") == 0 || strcmp(cmd, "reject") == 0) && argc == 6)
		(void) (int_arg(argv[4]) + int_arg(argv[5]));
	else if (strcmp(cmd, "count-ids") == 0 && (argc == 5 || (argc == 6 && strcmp(argv[5], "list") == 0)))
		(void) int_arg(argv[4]);
	else if (strcmp(cmd, "reject-to-dlq") == 0 && argc == 7)
		(void) (int_arg(argv[4]) + int_arg(argv[5]) + int_arg(argv[6]));
	else if ((strcmp(cmd, "queue-info") == 0 || strcmp(cmd, "declare-queue") == 0 ||
			  strcmp(cmd, "delete-queue") == 0 || strcmp(cmd, "purge") == 0) && argc == 4)
		;
	else if (strcmp(cmd, "bind") == 0 && argc == 6)
		;
	else if (strcmp(cmd, "publish-plain") == 0 && argc >= 6 && argc <= 8)
		(void) int_arg(argv[5]);
	else if (strcmp(cmd, "confirm-latency") == 0 && argc == 8)
		(void) (int_arg(argv[5]) + int_arg(argv[6]) + int_arg(argv[7]));
	else
		usage();

	conn = connect_to(argv[1]);
	if (strcmp(cmd, "consume") == 0)
		rc = cmd_consume(conn, argv[3], int_arg(argv[4]), int_arg(argv[5]));
	else if (strcmp(cmd, "count-ids") == 0)
		rc = cmd_count_ids(conn, argv[3], int_arg(argv[4]), argc == 6);
	else if (strcmp(cmd, "reject") == 0)
		rc = cmd_reject(conn, argv[3], int_arg(argv[4]), int_arg(argv[5]));
	else if (strcmp(cmd, "reject-to-dlq") == 0)
		rc = cmd_reject_to_dlq(conn, argv[3], int_arg(argv[4]), int_arg(argv[5]),
							   int_arg(argv[6]));
	else if (strcmp(cmd, "queue-info") == 0)
		rc = cmd_queue_info(conn, argv[3]);
	else if (strcmp(cmd, "declare-queue") == 0)
	{
		amqp_queue_declare(conn, CONSUME_CHANNEL, amqp_cstring_bytes(argv[3]), 0, 1, 0, 0,
						   amqp_empty_table);
		check_rpc(conn, argv[3]);
	}
	else if (strcmp(cmd, "bind") == 0)
	{
		amqp_queue_bind(conn, CONSUME_CHANNEL, amqp_cstring_bytes(argv[3]),
						amqp_cstring_bytes(argv[4]), amqp_cstring_bytes(argv[5]), amqp_empty_table);
		check_rpc(conn, argv[3]);
	}
	else if (strcmp(cmd, "delete-queue") == 0)
	{
		amqp_queue_delete(conn, CONSUME_CHANNEL, amqp_cstring_bytes(argv[3]), 0, 0);
		check_rpc(conn, argv[3]);
	}
	else if (strcmp(cmd, "purge") == 0)
	{
		amqp_queue_purge(conn, CONSUME_CHANNEL, amqp_cstring_bytes(argv[3]));
		check_rpc(conn, argv[3]);
	}
	else if (strcmp(cmd, "publish-plain") == 0)
	{
		long		window = argc > 6 ? int_arg(argv[6]) : 200;
		long		bytes = argc > 7 ? int_arg(argv[7]) : 512;

		if (window < 1)
			usage();
		rc = cmd_publish_plain(conn, argv[3], argv[4], int_arg(argv[5]), window, bytes);
	}
	else if (strcmp(cmd, "confirm-latency") == 0)
		rc = cmd_confirm_latency(conn, argv[3], argv[4], int_arg(argv[5]), int_arg(argv[6]),
								 int_arg(argv[7]));
	if (rc == 4)
	{
		/* the broker closed the channel of the failed passive declare */
		amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
		amqp_destroy_connection(conn);
	}
	else
		disconnect(conn);
	return rc;
}
