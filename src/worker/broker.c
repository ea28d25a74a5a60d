/*
 * broker.c — the AMQP connection of a broker-mode wfe-worker.
 *
 * Channel 1 consumes the queue's two tracks (wfe.<queue>.small and
 * .large) with manual acknowledgement and a channel-wide prefetch of
 * --concurrency (per consumer with --queue-type quorum).  Channel 2 is in transaction mode and only publishes dead
 * letters, so that a message is acknowledged only after its dead-lettered
 * copy is safely with the broker.  Channel 3 consumes a server-named
 * exclusive queue bound to wfe.commands with cancel.<queue>
 * (auto-acknowledged: a cancellation request concerns whoever runs the
 * attempt, or nobody); it has a channel of its own because RabbitMQ holds
 * back every consumer of a channel whose prefetch limit is reached.
 *
 * Frames are read here, not with amqp_consume_message, because that call
 * waits for a message's content without a deadline.
 */
#include "broker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_tcp_socket.h>
#endif

#include "amqp/nodes.h"
#include "amqp/topology.h"
#include "util.h"
#include "worker.h"

#define CONSUME_CHANNEL 1
#define PUBLISH_CHANNEL 2
#define CANCEL_CHANNEL 3
#define DECLARE_CHANNEL 4		/* --declare: RabbitMQ may close it, nothing else uses it */

/* Deadline of an RPC, or of the rest of a message's content. */
#define AMQP_TIMEOUT_MS 10000

/* Deadline of the TCP connection, and of the login. */
#define AMQP_CONNECT_TIMEOUT_MS 5000

/* AMQP heartbeat interval asked for, in seconds. */
#define AMQP_HEARTBEAT_S 30

static amqp_connection_state_t conn = NULL;
/* --amqp-uri's node connected to (-1: none), and the one to try first next */
static int	node_connected = -1;
static int	node_first = 0;
static char node_addr[128] = "";
static bool broken = false;		/* the socket is unusable: skip the polite close */
static uint64_t generation = 0;
static bool consuming = false;
static char *cancel_queue = NULL;
static Delivery *first = NULL,
		   *last = NULL;

/* A delivery's properties, copied out of librabbitmq's buffers. */
typedef struct Props
{
	amqp_pool_t pool;
	amqp_basic_properties_t p;
} Props;

/* The AMQP timeout as a timeval. */
static struct timeval
timeout_tv(int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	return tv;
}

/* A consumer tag of ours. */
static const char *
consumer_tag(int track)
{
	return track == 0 ? "wfe-worker.small" : "wfe-worker.large";
}

/*
 * Describe a failed RPC in *err; true when it did not fail.  A failed RPC
 * leaves the channel (or the connection) closed, so callers disconnect.
 */
static bool
rpc_ok(amqp_rpc_reply_t r, const char *what, char *err, size_t errlen)
{
	if (r.reply_type == AMQP_RESPONSE_NORMAL)
		return true;
	if (wfe_amqp_reply_error(r, what, err, errlen))
		broken = true;
	return false;
}

/* The last RPC's reply, checked. */
static bool
last_rpc_ok(const char *what, char *err, size_t errlen)
{
	return rpc_ok(amqp_get_rpc_reply(conn), what, err, errlen);
}

/* See broker.h. */
bool
broker_connected(void)
{
	return conn != NULL;
}

/* See broker.h. */
uint64_t
broker_generation(void)
{
	return generation;
}

/* See broker.h. */
int
broker_socket(void)
{
	return conn ? amqp_get_sockfd(conn) : -1;
}

/* See broker.h. */
bool
broker_has_buffered(void)
{
	return conn && (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn));
}

/* See broker.h. */
void
delivery_free(Delivery *d)
{
	if (d == NULL)
		return;
	if (d->props)
	{
		empty_amqp_pool(&((Props *) d->props)->pool);
		free(d->props);
	}
	free(d->routing_key);
	free(d->body);
	free(d);
}

/* See broker.h. */
void
broker_disconnect(void)
{
	Delivery   *d;

	if (conn == NULL)
		return;
	/* the next connection starts with the next node: this one may be gone */
	if (node_connected >= 0)
		node_first = (node_connected + 1) % wfe_amqp_node_count(opts.amqp_uri);
	node_connected = -1;
	if (!broken)
		amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
	conn = NULL;
	broken = false;
	consuming = false;
	free(cancel_queue);
	cancel_queue = NULL;
	/* what was delivered and not acknowledged goes back to its queue */
	while ((d = broker_next_delivery()) != NULL)
		delivery_free(d);
}

/*
 * After a declaration on DECLARE_CHANNEL failed: when RabbitMQ refused it
 * because the queue exists with another type or arguments (it closed the
 * channel with 406), say so once, with what to do, and open the channel
 * again; the existing queue works as it is.  False for any other failure.
 */
static bool
kept_existing(const char *what, char *err, size_t errlen)
{
	static bool reported = false;
	amqp_channel_close_ok_t close_ok;

	if (broken || strstr(err, "closed the channel: 406") == NULL)
		return false;
	if (!reported)
		wlog(LOG_WARNING, "RabbitMQ kept the existing %s: %s; %s", what, err,
			 wfe_topology_type_mismatch(err)
			 ? "a queue's type cannot change: keep --queue-type as the queues are, or migrate them "
			 "as docs/operations.md (\"Moving to quorum queues\") says"
			 : "queue arguments such as --retry-ttl-ms apply only to new queues");
	reported = true;
	if (amqp_send_method(conn, DECLARE_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok) != AMQP_STATUS_OK)
		return false;
	amqp_channel_open(conn, DECLARE_CHANNEL);
	return last_rpc_ok("opening channel 4", err, errlen);
}

/*
 * Declare the topology of delivery.md for our queue (--declare), exactly as
 * the wfe publisher does (topology.c serves both), so that either may
 * declare first; on a channel of its own, which RabbitMQ closes when a
 * queue exists with another type.
 */
static bool
declare_topology(char *err, size_t errlen)
{
	wfe_queue_options options = {
		.type = opts.quorum ? WFE_QUEUE_QUORUM : WFE_QUEUE_CLASSIC,
		.retry_ttl_ms = opts.retry_ttl_ms,
		.delivery_limit = opts.max_redeliveries,
	};

	amqp_channel_open(conn, DECLARE_CHANNEL);
	if (!last_rpc_ok("opening channel 4", err, errlen))
		return false;
	if (!wfe_topology_declare_base(conn, DECLARE_CHANNEL, options.type, last_rpc_ok, err, errlen) &&
		!kept_existing(WFE_QUEUE_DLQ, err, errlen))
		return false;
	for (wfe_track t = 0; t < WFE_TRACKS; t++)
		for (int retry = 0; retry <= 1; retry++)
			if (!wfe_topology_declare_queue(conn, DECLARE_CHANNEL, opts.queue, t, retry,
											&options, last_rpc_ok, err, errlen) &&
				!kept_existing("queues of the queue", err, errlen))
				return false;
	amqp_channel_close(conn, DECLARE_CHANNEL, AMQP_REPLY_SUCCESS);
	return last_rpc_ok("closing channel 4", err, errlen);
}

/* Bind a private queue to cancel.<queue> and consume it. */
static bool
consume_cancellations(char *err, size_t errlen)
{
	amqp_queue_declare_ok_t *ok;
	char		key[WFE_TOPOLOGY_NAME_MAX];

	/* a channel of its own: channel 1's prefetch limit must not hold these back */
	amqp_channel_open(conn, CANCEL_CHANNEL);
	if (!last_rpc_ok("opening channel 3", err, errlen))
		return false;
	ok = amqp_queue_declare(conn, CANCEL_CHANNEL, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
	if (!last_rpc_ok("declaring the cancellation queue", err, errlen))
		return false;
	cancel_queue = xstrndup(ok->queue.bytes, ok->queue.len);
	(void) wfe_topology_cancel_key(key, opts.queue);	/* the name fits: main.c checked it */
	amqp_queue_bind(conn, CANCEL_CHANNEL, amqp_cstring_bytes(cancel_queue),
					amqp_cstring_bytes(WFE_EXCHANGE_COMMANDS), amqp_cstring_bytes(key), amqp_empty_table);
	if (!last_rpc_ok("binding the cancellation queue to wfe.commands", err, errlen))
		return false;
	amqp_basic_consume(conn, CANCEL_CHANNEL, amqp_cstring_bytes(cancel_queue),
					   amqp_cstring_bytes("wfe-worker.cancel"), 0, 1, 1, amqp_empty_table);
	return last_rpc_ok("consuming cancellation requests", err, errlen);
}

/* Connect to one node of --amqp-uri; see broker_connect. */
static bool
connect_node(const char *node_uri, char *err, size_t errlen)
{
	struct amqp_connection_info ci;
	char	   *uri = xstrdup(node_uri);
	struct timeval tv = timeout_tv(AMQP_CONNECT_TIMEOUT_MS);
	struct timeval rpc_tv = timeout_tv(AMQP_TIMEOUT_MS);
	amqp_socket_t *sock;
	amqp_table_entry_t caps_entry,
				props_entries[2];
	amqp_table_t caps,
				props;
	char		name[300];
	int			rc;

	broker_disconnect();
	errno = 0;
	amqp_default_connection_info(&ci);
	if (amqp_parse_url(uri, &ci) != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "--amqp-uri is not a valid amqp:// URI");
		free(uri);
		return false;
	}
	/* amqp://host/ leaves the vhost empty; like most clients, read it as "/" */
	if (ci.vhost == NULL || ci.vhost[0] == '\0')
		ci.vhost = "/";
	if (ci.ssl)
	{
		snprintf(err, errlen, "amqps:// is not supported by wfe-worker; use amqp://");
		free(uri);
		return false;
	}
	conn = amqp_new_connection();
	if (conn == NULL || (sock = amqp_tcp_socket_new(conn)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	amqp_set_handshake_timeout(conn, &tv);
	amqp_set_rpc_timeout(conn, &rpc_tv);
	rc = amqp_socket_open_noblock(sock, ci.host, ci.port, &tv);
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "cannot connect to %s:%d: %s", ci.host, ci.port,
				 rc == AMQP_STATUS_SOCKET_ERROR && errno ? strerror(errno) : amqp_error_string2(rc));
		broken = true;
		goto fail;
	}

	/* name the connection, and ask to be told when the broker cancels a consumer */
	snprintf(name, sizeof(name), "wfe-worker %s (queue %s)", opts.worker_id, opts.queue);
	caps_entry.key = amqp_cstring_bytes("consumer_cancel_notify");
	caps_entry.value.kind = AMQP_FIELD_KIND_BOOLEAN;
	caps_entry.value.value.boolean = 1;
	caps.num_entries = 1;
	caps.entries = &caps_entry;
	props_entries[0] = wfe_amqp_string_entry("connection_name", name);
	props_entries[1].key = amqp_cstring_bytes("capabilities");
	props_entries[1].value.kind = AMQP_FIELD_KIND_TABLE;
	props_entries[1].value.value.table = caps;
	props.num_entries = 2;
	props.entries = props_entries;
	if (!rpc_ok(amqp_login_with_properties(conn, ci.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, AMQP_HEARTBEAT_S,
										   &props, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password),
				"login", err, errlen))
	{
		broken = true;
		goto fail;
	}

	amqp_channel_open(conn, CONSUME_CHANNEL);
	if (!last_rpc_ok("opening channel 1", err, errlen))
		goto fail;
	/*
	 * global: the limit is the channel's, across both tracks.  Quorum queues
	 * refuse consumers on a channel with a global limit: there each track's
	 * consumer has the limit, and what arrives beyond the free slots waits
	 * here, unacknowledged, for a slot (consume.c).
	 */
	amqp_basic_qos(conn, CONSUME_CHANNEL, 0, (uint16_t) opts.concurrency, opts.quorum ? 0 : 1);
	if (!last_rpc_ok("basic.qos", err, errlen))
		goto fail;
	if (opts.declare && !declare_topology(err, errlen))
		goto fail;
	amqp_channel_open(conn, PUBLISH_CHANNEL);
	if (!last_rpc_ok("opening channel 2", err, errlen))
		goto fail;
	amqp_tx_select(conn, PUBLISH_CHANNEL);
	if (!last_rpc_ok("tx.select", err, errlen))
		goto fail;
	if (!consume_cancellations(err, errlen))
		goto fail;
	generation++;
	free(uri);
	return true;

fail:
	free(uri);
	broker_disconnect();
	return false;
}

/*
 * See broker.h.  --amqp-uri may name several nodes of a cluster: the first
 * that answers, starting after the one whose connection dropped, is used.
 */
bool
broker_connect(char *err, size_t errlen)
{
	int			n = wfe_amqp_node_count(opts.amqp_uri);
	size_t		size = strlen(opts.amqp_uri) + 1;
	char	   *uri = xmalloc(size);
	size_t		used = 0;

	broker_disconnect();
	err[0] = '\0';
	for (int k = 0; k < n; k++)
	{
		int			i = (node_first + k) % n;
		char		node_err[512];

		(void) wfe_amqp_node_uri(opts.amqp_uri, i, uri, size);
		wfe_amqp_node_address(uri, node_addr, sizeof(node_addr));
		if (connect_node(uri, node_err, sizeof(node_err)))
		{
			node_connected = i;
			free(uri);
			return true;
		}
		if (n == 1)
			snprintf(err, errlen, "%s", node_err);
		else if (used < errlen)
			used += (size_t) snprintf(err + used, errlen - used, "%s%s: %s", used ? "; " : "",
									  node_addr, node_err);
	}
	free(uri);
	return false;
}

/* See broker.h. */
const char *
broker_node(void)
{
	return conn ? node_addr : "";
}

/* See broker.h. */
bool
broker_set_consuming(bool on, char *err, size_t errlen)
{
	if (conn == NULL || on == consuming)
		return true;
	for (wfe_track t = 0; t < WFE_TRACKS; t++)
	{
		char		queue[WFE_TOPOLOGY_NAME_MAX];

		if (on)
		{
			(void) wfe_topology_queue(queue, opts.queue, t);
			amqp_basic_consume(conn, CONSUME_CHANNEL, amqp_cstring_bytes(queue),
							   amqp_cstring_bytes(consumer_tag(t)), 0, 0, 0, amqp_empty_table);
			if (!last_rpc_ok(queue, err, errlen))
			{
				if (!opts.quorum && strstr(err, "global") != NULL)
					wlog(LOG_WARNING, "%s is a quorum queue: start wfe-worker with --queue-type quorum", queue);
				broker_disconnect();
				return false;
			}
		}
		else
		{
			amqp_basic_cancel(conn, CONSUME_CHANNEL, amqp_cstring_bytes(consumer_tag(t)));
			if (!last_rpc_ok("basic.cancel", err, errlen))
			{
				broker_disconnect();
				return false;
			}
		}
	}
	consuming = on;
	wlog(LOG_INFO, "%s wfe.%s.small and wfe.%s.large", on ? "consuming" : "stopped consuming",
		 opts.queue, opts.queue);
	return true;
}

/* Wait at most until `deadline` for the next frame; false on failure. */
static bool
next_frame(amqp_frame_t *f, int64_t deadline, char *err, size_t errlen)
{
	int64_t		left = deadline - now_ms();
	struct timeval tv = timeout_tv(left > 0 ? (int) left : 0);
	int			rc = amqp_simple_wait_frame_noblock(conn, f, &tv);

	if (rc != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "reading a message: %s", amqp_error_string2(rc));
		broken = true;
		return false;
	}
	return true;
}

/* Copy an amqp_bytes_t into a pool. */
static amqp_bytes_t
pool_bytes(amqp_pool_t *pool, amqp_bytes_t src)
{
	amqp_bytes_t dst;

	amqp_pool_alloc_bytes(pool, src.len, &dst);
	if (dst.bytes == NULL)
	{
		wlog(LOG_ERROR, "out of memory copying a message");
		exit(1);
	}
	if (src.len)
		memcpy(dst.bytes, src.bytes, src.len);
	return dst;
}

/* Copy a message's properties out of the connection's buffers. */
static Props *
clone_props(const amqp_basic_properties_t *src)
{
	Props	   *p = xmalloc(sizeof(Props));
	amqp_flags_t f = src->_flags;

	init_amqp_pool(&p->pool, 4096);
	memset(&p->p, 0, sizeof(p->p));
	p->p._flags = f;
#define COPY_BYTES(flag, field) \
	if (f & (flag)) p->p.field = pool_bytes(&p->pool, src->field)
	COPY_BYTES(AMQP_BASIC_CONTENT_TYPE_FLAG, content_type);
	COPY_BYTES(AMQP_BASIC_CONTENT_ENCODING_FLAG, content_encoding);
	COPY_BYTES(AMQP_BASIC_CORRELATION_ID_FLAG, correlation_id);
	COPY_BYTES(AMQP_BASIC_REPLY_TO_FLAG, reply_to);
	COPY_BYTES(AMQP_BASIC_EXPIRATION_FLAG, expiration);
	COPY_BYTES(AMQP_BASIC_MESSAGE_ID_FLAG, message_id);
	COPY_BYTES(AMQP_BASIC_TYPE_FLAG, type);
	COPY_BYTES(AMQP_BASIC_USER_ID_FLAG, user_id);
	COPY_BYTES(AMQP_BASIC_APP_ID_FLAG, app_id);
	COPY_BYTES(AMQP_BASIC_CLUSTER_ID_FLAG, cluster_id);
#undef COPY_BYTES
	p->p.delivery_mode = src->delivery_mode;
	p->p.priority = src->priority;
	p->p.timestamp = src->timestamp;
	if ((f & AMQP_BASIC_HEADERS_FLAG) &&
		amqp_table_clone(&src->headers, &p->p.headers, &p->pool) != AMQP_STATUS_OK)
		p->p._flags &= ~AMQP_BASIC_HEADERS_FLAG;
	return p;
}

/* An integer field value of any width, or -1 when it is not an integer. */
static long
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
			return (long) v->value.u32;
		case AMQP_FIELD_KIND_I64:
			return (long) v->value.i64;
		case AMQP_FIELD_KIND_U64:
			return (long) v->value.u64;
		default:
			return -1;
	}
}

/* Does an AMQP byte string equal a C string? */
static bool
bytes_eq(amqp_bytes_t b, const char *s)
{
	return b.len == strlen(s) && memcmp(b.bytes, s, b.len) == 0;
}

/*
 * How many times the message went round the retry queue: the largest
 * `count` among its x-death entries (each cycle adds one to the entry of
 * the rejection and to the one of the expiry).
 */
static long
death_count(const amqp_basic_properties_t *p)
{
	long		max = 0;

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
			{
				const amqp_table_entry_t *c = &d->value.table.entries[k];

				if (bytes_eq(c->key, "count") && field_int(&c->value) > max)
					max = field_int(&c->value);
			}
		}
	}
	return max;
}

/*
 * Read the content (header and body frames) of a message whose method
 * frame was just read.  Returns the body (NUL-terminated, malloc'd) and
 * the properties, or NULL with *err set.
 */
static char *
read_content(amqp_channel_t channel, amqp_basic_properties_t **props, size_t *len,
			 char *err, size_t errlen)
{
	int64_t		deadline = now_ms() + AMQP_TIMEOUT_MS;
	amqp_frame_t f;
	size_t		size,
				got = 0;
	char	   *body;

	if (!next_frame(&f, deadline, err, errlen))
		return NULL;
	if (f.frame_type != AMQP_FRAME_HEADER || f.channel != channel)
	{
		snprintf(err, errlen, "protocol error: expected a content header, got frame type %d",
				 f.frame_type);
		broken = true;
		return NULL;
	}
	*props = f.payload.properties.decoded;
	size = (size_t) f.payload.properties.body_size;
	body = xmalloc(size + 1);
	while (got < size)
	{
		if (!next_frame(&f, deadline, err, errlen))
		{
			free(body);
			return NULL;
		}
		if (f.frame_type != AMQP_FRAME_BODY || f.channel != channel ||
			got + f.payload.body_fragment.len > size)
		{
			snprintf(err, errlen, "protocol error: expected a content body, got frame type %d",
					 f.frame_type);
			broken = true;
			free(body);
			return NULL;
		}
		memcpy(body + got, f.payload.body_fragment.bytes, f.payload.body_fragment.len);
		got += f.payload.body_fragment.len;
	}
	body[size] = '\0';
	*len = size;
	return body;
}

/* Append a delivery to the list. */
static void
enqueue(Delivery *d)
{
	d->next = NULL;
	if (last)
		last->next = d;
	else
		first = d;
	last = d;
}

/* Handle a basic.deliver frame: read the message into the list. */
static bool
handle_deliver(amqp_frame_t *f, char *err, size_t errlen)
{
	amqp_basic_deliver_t *m = f->payload.method.decoded;
	Delivery   *d = xmalloc(sizeof(Delivery));
	amqp_basic_properties_t *props;

	memset(d, 0, sizeof(*d));
	d->tag = m->delivery_tag;
	d->generation = generation;
	d->redelivered = m->redelivered;
	d->is_cancel = bytes_eq(m->consumer_tag, "wfe-worker.cancel");
	d->routing_key = xstrndup(m->routing_key.bytes, m->routing_key.len);
	d->body = read_content(f->channel, &props, &d->body_len, err, errlen);
	if (d->body == NULL)
	{
		delivery_free(d);
		return false;
	}
	d->props = clone_props(props);
	d->death_count = death_count(&((Props *) d->props)->p);
	enqueue(d);
	return true;
}

/* Handle one frame read by broker_pump; false when the connection is lost. */
static bool
handle_frame(amqp_frame_t *f, char *err, size_t errlen)
{
	if (f->frame_type != AMQP_FRAME_METHOD)
		return true;			/* stray content: nothing waits for it */
	switch (f->payload.method.id)
	{
		case AMQP_BASIC_DELIVER_METHOD:
			return handle_deliver(f, err, errlen);
		case AMQP_BASIC_RETURN_METHOD:
			{
				amqp_basic_properties_t *props;
				size_t		len;
				char	   *body = read_content(f->channel, &props, &len, err, errlen);

				if (body == NULL)
					return false;
				free(body);
				wlog(LOG_WARNING, "the broker returned a message it could not route");
				return true;
			}
		case AMQP_BASIC_CANCEL_METHOD:
			snprintf(err, errlen, "the broker cancelled a consumer (was the queue deleted?)");
			return false;
		case AMQP_CHANNEL_CLOSE_METHOD:
			{
				amqp_channel_close_t *m = f->payload.method.decoded;

				snprintf(err, errlen, "the broker closed channel %u: %u %.*s", f->channel,
						 m->reply_code, (int) m->reply_text.len, (char *) m->reply_text.bytes);
				return false;
			}
		case AMQP_CONNECTION_CLOSE_METHOD:
			{
				amqp_connection_close_t *m = f->payload.method.decoded;
				amqp_connection_close_ok_t ok;

				snprintf(err, errlen, "the broker closed the connection: %u %.*s",
						 m->reply_code, (int) m->reply_text.len, (char *) m->reply_text.bytes);
				amqp_send_method(conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
				broken = true;
				return false;
			}
		default:
			return true;		/* acks of other channels, flow, ...: nothing to do */
	}
}

/* See broker.h. */
bool
broker_pump(char *err, size_t errlen)
{
	if (conn == NULL)
		return false;
	for (;;)
	{
		struct timeval zero = {0, 0};
		amqp_frame_t f;
		int			rc = amqp_simple_wait_frame_noblock(conn, &f, &zero);

		if (rc == AMQP_STATUS_TIMEOUT)
			break;
		if (rc != AMQP_STATUS_OK)
		{
			snprintf(err, errlen, "%s", amqp_error_string2(rc));
			broken = true;
			broker_disconnect();
			return false;
		}
		if (!handle_frame(&f, err, errlen))
		{
			broker_disconnect();
			return false;
		}
	}
	amqp_maybe_release_buffers(conn);
	return true;
}

/* See broker.h. */
Delivery *
broker_next_delivery(void)
{
	Delivery   *d = first;

	if (d)
	{
		first = d->next;
		if (first == NULL)
			last = NULL;
		d->next = NULL;
	}
	return d;
}

/* See broker.h. */
void
broker_push_front(Delivery *d)
{
	d->next = first;
	first = d;
	if (last == NULL)
		last = d;
}

/* True when an acknowledgement for this generation can still be sent. */
static bool
current(uint64_t gen)
{
	return conn != NULL && gen == generation;
}

/* See broker.h. */
bool
broker_ack(uint64_t gen, uint64_t tag)
{
	int			rc;

	if (!current(gen))
		return false;			/* the broker has put it back already */
	rc = amqp_basic_ack(conn, CONSUME_CHANNEL, tag, 0);
	if (rc != AMQP_STATUS_OK)
	{
		wlog(LOG_WARNING, "cannot acknowledge a message: %s", amqp_error_string2(rc));
		broken = true;
		broker_disconnect();
		return false;
	}
	return true;
}

/* See broker.h. */
bool
broker_reject(uint64_t gen, uint64_t tag, bool requeue)
{
	int			rc;

	if (!current(gen))
		return false;
	rc = amqp_basic_reject(conn, CONSUME_CHANNEL, tag, requeue);
	if (rc != AMQP_STATUS_OK)
	{
		wlog(LOG_WARNING, "cannot reject a message: %s", amqp_error_string2(rc));
		broken = true;
		broker_disconnect();
		return false;
	}
	return true;
}

/* See broker.h. */
bool
broker_dead_letter(Delivery *d, const char *reason, char *err, size_t errlen)
{
	Props	   *src = d->props;
	amqp_basic_properties_t props = src->p;
	amqp_table_entry_t *entries;
	int			n = (props._flags & AMQP_BASIC_HEADERS_FLAG) ? props.headers.num_entries : 0;
	int			rc;
	amqp_bytes_t body = {.len = d->body_len, .bytes = d->body};

	if (!current(d->generation))
	{
		snprintf(err, errlen, "the connection the message came on is gone");
		return false;
	}
	/* the headers as received, plus why it is dead */
	entries = xmalloc(sizeof(amqp_table_entry_t) * (n + 2));
	if (n > 0)
		memcpy(entries, props.headers.entries, sizeof(amqp_table_entry_t) * n);
	entries[n++] = wfe_amqp_string_entry("x-wfe-dead-reason", reason);
	entries[n++] = wfe_amqp_string_entry("x-wfe-dead-by", opts.worker_id);
	props.headers.entries = entries;
	props.headers.num_entries = n;
	props._flags |= AMQP_BASIC_HEADERS_FLAG;

	rc = amqp_basic_publish(conn, PUBLISH_CHANNEL, amqp_cstring_bytes(WFE_EXCHANGE_COMMANDS),
							amqp_cstring_bytes(WFE_KEY_DEAD), 0, 0, &props, body);
	free(entries);
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "publishing a dead letter: %s", amqp_error_string2(rc));
		broken = true;
		broker_disconnect();
		return false;
	}
	amqp_tx_commit(conn, PUBLISH_CHANNEL);
	if (!last_rpc_ok("committing a dead letter", err, errlen))
	{
		broker_disconnect();
		return false;
	}
	return broker_ack(d->generation, d->tag);
}
