/*
 * broker.c — AMQP for the publisher: one connection, one channel in
 * publisher-confirm mode, idempotent topology declaration, and a confirm
 * reader that tracks delivery tags (acks may come out of order and with
 * "multiple"), nacks and basic.return of unroutable mandatory messages.
 *
 * Every network operation has a deadline, so SIGTERM and postmaster death
 * are noticed within a second or so even when the broker hangs.
 *
 * NB: this file sees json-c, so it must not include PostgreSQL's fmgr
 * prototypes (utils/builtins.h), which declare a function named json_object.
 */
#include "postgres.h"

#include <sys/time.h>
#include <time.h>
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <json-c/json.h>

#include "utils/memutils.h"

#include "broker.h"
#include "nodes.h"
#include "topology.h"

#define CHANNEL 1
#define IO_TIMEOUT_S 5

static amqp_connection_state_t conn = NULL;
static uint64_t last_tag = 0;
static uint64_t connection_serial = 0;	/* bumped by each connection made */

/*
 * RabbitMQ blocks publishing connections during a resource alarm (memory,
 * disk) and says so with connection.blocked when the client advertises the
 * capability.  librabbitmq's socket writes have no deadline, so publishing
 * into a blocked connection could hang the worker: we stop publishing while
 * blocked instead.
 */
static bool blocked = false;

/*
 * The nodes of wfe.amqp_uri: the list last connected with (TopMemoryContext),
 * the node connected to (-1: none), and the node the next connection tries
 * first -- the one after a node whose connection dropped.
 */
static char *node_list = NULL;
static int	node_connected = -1;
static int	node_first = 0;
static char node_addr[128] = "";

/* Reply code of a channel the broker closed in the last RPC, or 0. */
static int	channel_closed_code = 0;

/* Did the last synchronous RPC succeed? */
static bool
rpc_ok(const char *what, char *err, size_t errlen)
{
	amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);

	channel_closed_code = 0;
	if (r.reply_type == AMQP_RESPONSE_NORMAL)
		return true;
	if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
		channel_closed_code = ((amqp_channel_close_t *) r.reply.decoded)->reply_code;
	(void) wfe_amqp_reply_error(r, what, err, errlen);
	return false;
}

/* Open our channel in confirm mode (again, after the broker closed it). */
static bool
open_channel(char *err, size_t errlen)
{
	amqp_channel_open(conn, CHANNEL);
	if (!rpc_ok("channel.open", err, errlen))
		return false;
	amqp_confirm_select(conn, CHANNEL);
	if (!rpc_ok("confirm.select", err, errlen))
		return false;
	last_tag = 0;				/* delivery tags start again on a new channel */
	return true;
}

/* The password: from the URI, or the first line of the password file. */
static bool
read_password(const char *path, char *buf, size_t size, char *err, size_t errlen)
{
	FILE	   *f = fopen(path, "r");
	size_t		len;

	if (f == NULL || fgets(buf, (int) size, f) == NULL)
	{
		snprintf(err, errlen, "cannot read wfe.amqp_password_file \"%s\": %m", path);
		if (f)
			fclose(f);
		return false;
	}
	fclose(f);
	len = strlen(buf);
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		buf[--len] = '\0';
	return true;
}

/* Connect to one node's URI; false with *err set. */
static bool
connect_node(const char *uri, const char *password_file, char *err, size_t errlen)
{
	struct amqp_connection_info info;
	struct timeval timeout = {IO_TIMEOUT_S, 0};
	amqp_socket_t *socket;
	amqp_rpc_reply_t login;
	char	   *copy = pstrdup(uri);
	char		password[256];
	int			status;

	broker_disconnect();
	amqp_default_connection_info(&info);
	if (amqp_parse_url(copy, &info) != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "wfe.amqp_uri is not a valid amqp:// URI");
		pfree(copy);
		return false;
	}
	/* "amqp://host/" names the vhost ""; nobody means that: use "/" */
	if (info.vhost == NULL || info.vhost[0] == '\0')
		info.vhost = "/";
	strlcpy(password, info.password ? info.password : "", sizeof(password));
	if (password_file && password_file[0] &&
		!read_password(password_file, password, sizeof(password), err, errlen))
	{
		pfree(copy);
		return false;
	}

	conn = amqp_new_connection();
	socket = amqp_tcp_socket_new(conn);
	if (socket == NULL)
	{
		snprintf(err, errlen, "cannot create a TCP socket");
		goto fail;
	}
	status = amqp_socket_open_noblock(socket, info.host, info.port, &timeout);
	if (status != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "cannot connect to %s:%d: %s", info.host, info.port,
				 amqp_error_string2(status));
		goto fail;
	}
	amqp_set_handshake_timeout(conn, &timeout);
	amqp_set_rpc_timeout(conn, &timeout);
	{
		/* advertise connection.blocked so a resource alarm is announced */
		amqp_table_entry_t caps[3];
		amqp_table_entry_t props[2];
		amqp_table_t caps_table = {3, caps};
		amqp_table_t props_table = {2, props};

		caps[0].key = amqp_cstring_bytes("connection.blocked");
		caps[1].key = amqp_cstring_bytes("publisher_confirms");
		caps[2].key = amqp_cstring_bytes("authentication_failure_close");
		for (int i = 0; i < 3; i++)
		{
			caps[i].value.kind = AMQP_FIELD_KIND_BOOLEAN;
			caps[i].value.value.boolean = 1;
		}
		props[0].key = amqp_cstring_bytes("capabilities");
		props[0].value.kind = AMQP_FIELD_KIND_TABLE;
		props[0].value.value.table = caps_table;
		props[1] = wfe_amqp_string_entry("product", "wfe publisher");
		login = amqp_login_with_properties(conn, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0,
										   &props_table, AMQP_SASL_METHOD_PLAIN,
										   info.user, password);
	}
	if (login.reply_type != AMQP_RESPONSE_NORMAL)
	{
		(void) wfe_amqp_reply_error(login, "login", err, errlen);
		goto fail;
	}
	if (!open_channel(err, errlen))
		goto fail;
	connection_serial++;
	pfree(copy);
	return true;

fail:
	pfree(copy);
	broker_disconnect();
	return false;
}

/* See broker.h. */
bool
broker_connect(const char *uris, const char *password_file, char *err, size_t errlen)
{
	int			n = wfe_amqp_node_count(uris);
	size_t		size = strlen(uris) + 1;
	char	   *uri = palloc(size);
	char		node_err[256];

	broker_disconnect();
	/* another list: start again from its first node */
	if (node_list == NULL || strcmp(node_list, uris) != 0)
	{
		if (node_list)
			pfree(node_list);
		node_list = MemoryContextStrdup(TopMemoryContext, uris);
		node_first = 0;
	}
	err[0] = '\0';
	for (int k = 0; k < n; k++)
	{
		int			i = (node_first + k) % n;

		(void) wfe_amqp_node_uri(uris, i, uri, size);
		wfe_amqp_node_address(uri, node_addr, sizeof(node_addr));
		if (connect_node(uri, password_file, node_err, sizeof(node_err)))
		{
			node_connected = i;
			pfree(uri);
			return true;
		}
		/* say why each node failed, the first one's reason first */
		if (n == 1)
			strlcpy(err, node_err, errlen);
		else
		{
			size_t		used = strlen(err);

			snprintf(err + used, errlen - used, "%s%s: %s", used ? "; " : "", node_addr, node_err);
		}
	}
	pfree(uri);
	return false;
}

/* See broker.h. */
const char *
broker_node(void)
{
	return conn ? node_addr : "";
}

void
broker_disconnect(void)
{
	if (conn == NULL)
		return;
	/* the next connection starts with the next node (see node_first) */
	if (node_connected >= 0 && node_list)
		node_first = (node_connected + 1) % wfe_amqp_node_count(node_list);
	node_connected = -1;
	/* best effort: the broker may be gone already */
	amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
	conn = NULL;
	blocked = false;
}

bool
broker_is_blocked(void)
{
	return blocked;
}

/* Note connection.blocked / unblocked frames; true if the frame was one. */
static bool
on_blocking_frame(const amqp_frame_t *frame)
{
	if (frame->frame_type != AMQP_FRAME_METHOD)
		return false;
	if (frame->payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD)
	{
		blocked = true;
		return true;
	}
	if (frame->payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD)
	{
		blocked = false;
		return true;
	}
	return false;
}

bool
broker_poll(int timeout_ms, char *err, size_t errlen)
{
	struct timeval start,
				now;

	gettimeofday(&start, NULL);
	for (;;)
	{
		struct timeval slice = {0, 50 * 1000};
		amqp_frame_t frame;
		int			status;

		status = amqp_simple_wait_frame_noblock(conn, &frame, &slice);
		if (status == AMQP_STATUS_OK)
			(void) on_blocking_frame(&frame);	/* stray acks of old windows are ignored */
		else if (status != AMQP_STATUS_TIMEOUT)
		{
			snprintf(err, errlen, "reading from the broker: %s", amqp_error_string2(status));
			return false;
		}
		gettimeofday(&now, NULL);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_usec - start.tv_usec) / 1000 >= timeout_ms ||
			(status == AMQP_STATUS_TIMEOUT && !amqp_data_in_buffer(conn)))
			return true;
	}
}

bool
broker_is_connected(void)
{
	return conn != NULL;
}


/*
 * The broker refused a declaration that disagrees with an existing queue
 * (406 PRECONDITION_FAILED) and closed the channel: acknowledge the close
 * and open the channel again, so one bad queue does not stop publishing.
 */
static bool
recover_channel(void)
{
	amqp_channel_close_ok_t close_ok;
	char		again[256];

	if (channel_closed_code != AMQP_PRECONDITION_FAILED)
		return false;
	if (amqp_send_method(conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok) != AMQP_STATUS_OK ||
		!open_channel(again, sizeof(again)))
		return false;
	return true;
}

/* See broker.h. */
int
broker_declare_base(int queue_type, char *err, size_t errlen)
{
	if (wfe_topology_declare_base(conn, CHANNEL, (wfe_queue_type) queue_type, rpc_ok, err, errlen))
		return 1;
	/* wfe.dlq of another type (or arguments) works as it is */
	return recover_channel() ? -1 : 0;
}

/* See broker.h. */
int
broker_declare_queue(const char *queue, const wfe_queue_options *options, char *err, size_t errlen)
{
	int			result = 1;
	char		this_err[256];

	for (wfe_track t = 0; t < WFE_TRACKS; t++)
		for (int retry = 0; retry <= 1; retry++)
			if (!wfe_topology_declare_queue(conn, CHANNEL, queue, t, retry, options,
											rpc_ok, this_err, sizeof(this_err)))
			{
				/* one queue that disagrees must not stop the others */
				if (!recover_channel())
				{
					strlcpy(err, this_err, errlen);
					return 0;
				}
				/* the first refusal is the one reported */
				if (result == 1)
					strlcpy(err, this_err, errlen);
				result = -1;
			}
	return result;
}

/* See broker.h. */
int
broker_declare_ingress(const char *name, const wfe_queue_options *options, char *err, size_t errlen)
{
	if (wfe_topology_declare_ingress(conn, CHANNEL, name, options, rpc_ok, err, errlen))
		return 1;
	return recover_channel() ? -1 : 0;
}

/* See broker.h. */
uint64_t
broker_connection_serial(void)
{
	return conn ? connection_serial : 0;
}

bool
broker_publish(BrokerMessage *msg, char *err, size_t errlen)
{
	amqp_basic_properties_t props;
	json_object *headers = json_tokener_parse(msg->headers_json ? msg->headers_json : "{}");
	amqp_table_entry_t *entries = NULL;
	int			n = 0,
				status;

	memset(&props, 0, sizeof(props));
	if (headers && json_object_is_type(headers, json_type_object))
	{
		entries = palloc(sizeof(amqp_table_entry_t) * (json_object_object_length(headers) + 1));
		{
			json_object_object_foreach(headers, key, value)
			{
				entries[n++] = wfe_amqp_string_entry(key, json_object_get_string(value) ? json_object_get_string(value) : "");
			}
		}
	}
	props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
		AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
		AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
	props.content_type = amqp_cstring_bytes("application/json");
	props.delivery_mode = 2;	/* persistent */
	props.message_id = amqp_cstring_bytes(msg->message_id);
	props.correlation_id = amqp_cstring_bytes(msg->correlation_id ? msg->correlation_id : "");
	props.timestamp = (uint64_t) time(NULL);
	props.headers.num_entries = n;
	props.headers.entries = entries;

	status = amqp_basic_publish(conn, CHANNEL, amqp_cstring_bytes(msg->exchange),
								amqp_cstring_bytes(msg->routing_key), msg->mandatory, 0,
								&props, amqp_cstring_bytes(msg->body));
	/* the strings the table points into belong to the json object */
	json_object_put(headers);
	if (entries)
		pfree(entries);
	if (status != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "publish failed: %s", amqp_error_string2(status));
		return false;
	}
	msg->tag = ++last_tag;
	msg->status = MSG_SENT;
	return true;
}

/* Settle a confirm for `tag` (and every earlier one when `multiple`). */
static void
settle(BrokerMessage **msgs, int n, uint64_t tag, bool multiple, BrokerStatus status)
{
	for (int i = 0; i < n; i++)
	{
		BrokerMessage *m = msgs[i];

		if (m->status != MSG_SENT && m->status != MSG_RETURNED)
			continue;
		if (m->tag == tag || (multiple && m->tag < tag))
		{
			/* a returned message is acked after its return: it stays returned */
			if (m->status == MSG_SENT || status == MSG_NACKED)
				m->status = status;
			if (m->status == MSG_RETURNED && status == MSG_ACKED)
				m->tag = 0;		/* settled */
		}
	}
}

/* Are any sent messages still waiting for their confirm? */
static bool
unsettled(BrokerMessage **msgs, int n)
{
	for (int i = 0; i < n; i++)
		if (msgs[i]->status == MSG_SENT || (msgs[i]->status == MSG_RETURNED && msgs[i]->tag != 0))
			return true;
	return false;
}

/* A basic.return: read the returned message and mark it by message id. */
static bool
on_return(BrokerMessage **msgs, int n, amqp_channel_t channel, char *err, size_t errlen)
{
	amqp_message_t returned;
	amqp_rpc_reply_t r = amqp_read_message(conn, channel, &returned, 0);

	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		(void) wfe_amqp_reply_error(r, "reading a returned message", err, errlen);
		return false;
	}
	if (returned.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		for (int i = 0; i < n; i++)
			if (msgs[i]->status == MSG_SENT &&
				strlen(msgs[i]->message_id) == returned.properties.message_id.len &&
				memcmp(msgs[i]->message_id, returned.properties.message_id.bytes,
					   returned.properties.message_id.len) == 0)
				msgs[i]->status = MSG_RETURNED;
	amqp_destroy_message(&returned);
	return true;
}

/*
 * After a window RabbitMQ nacked, take the next one on a new channel.
 *
 * A nack says the queue could not take the message.  With wfe's queues
 * (no length limit) that is a quorum queue without a leader, and the
 * channel's route to the queue can outlive the election: RabbitMQ 3.10
 * keeps nacking every publish of a channel opened while the election ran,
 * long after the queue has a leader again, and a new channel publishes at
 * once (TAP 029 caught a publisher nacked for minutes).  So a nack costs
 * a channel.close and a channel.open, done once nothing of the window
 * awaits a confirm (the new channel's delivery tags start again).  False
 * when the connection failed meanwhile.
 */
static bool
reopen_after_nack(BrokerMessage **msgs, int n, char *err, size_t errlen)
{
	int			nacked = 0;
	amqp_rpc_reply_t r;

	for (int i = 0; i < n; i++)
		if (msgs[i]->status == MSG_NACKED)
			nacked++;
	if (nacked == 0 || unsettled(msgs, n))
		return true;
	ereport(LOG,
			(errmsg("wfe publisher: RabbitMQ nacked %d of %d messages; publishing goes on on a new channel",
					nacked, n)));
	r = amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		(void) wfe_amqp_reply_error(r, "channel.close", err, errlen);
		return false;
	}
	return open_channel(err, errlen);
}

bool
broker_await_confirms(BrokerMessage **msgs, int n, int timeout_ms, volatile sig_atomic_t *stop,
					  char *err, size_t errlen)
{
	struct timeval start,
				now;

	gettimeofday(&start, NULL);
	while (unsettled(msgs, n) && !*stop)
	{
		struct timeval slice = {0, 100 * 1000};	/* stay responsive to signals */
		amqp_frame_t frame;
		int			status;
		long		elapsed_ms;

		amqp_maybe_release_buffers(conn);
		status = amqp_simple_wait_frame_noblock(conn, &frame, &slice);
		gettimeofday(&now, NULL);
		elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_usec - start.tv_usec) / 1000;
		if (status == AMQP_STATUS_TIMEOUT)
		{
			if (elapsed_ms >= timeout_ms)
				break;			/* unconfirmed: the caller retries them */
			continue;
		}
		if (status != AMQP_STATUS_OK)
		{
			snprintf(err, errlen, "waiting for confirms: %s", amqp_error_string2(status));
			return false;
		}
		if (on_blocking_frame(&frame))
		{
			if (blocked)
				break;			/* nothing will be confirmed until it is lifted */
			continue;
		}
		if (frame.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (frame.payload.method.id)
		{
			case AMQP_BASIC_ACK_METHOD:
				{
					amqp_basic_ack_t *ack = frame.payload.method.decoded;

					settle(msgs, n, ack->delivery_tag, ack->multiple, MSG_ACKED);
					break;
				}
			case AMQP_BASIC_NACK_METHOD:
				{
					amqp_basic_nack_t *nack = frame.payload.method.decoded;

					settle(msgs, n, nack->delivery_tag, nack->multiple, MSG_NACKED);
					break;
				}
			case AMQP_BASIC_RETURN_METHOD:
				if (!on_return(msgs, n, frame.channel, err, errlen))
					return false;
				break;
			case AMQP_CHANNEL_CLOSE_METHOD:
			case AMQP_CONNECTION_CLOSE_METHOD:
				snprintf(err, errlen, "the broker closed the %s",
						 frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ? "channel" : "connection");
				return false;
			default:
				break;
		}
	}
	return reopen_after_nack(msgs, n, err, errlen);
}

/* ---------------------------------------------------------------------
 * wfe.dlq: the dead dispatches, read back by the background worker
 * --------------------------------------------------------------------- */

static json_object *table_json(const amqp_table_t *t);

/* One AMQP field value as JSON (timestamps as seconds since the epoch). */
static json_object *
field_json(const amqp_field_value_t *v)
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
			return json_object_new_string_len(v->value.bytes.bytes, (int) v->value.bytes.len);
		case AMQP_FIELD_KIND_ARRAY:
			{
				json_object *a = json_object_new_array();

				for (int i = 0; i < v->value.array.num_entries; i++)
					json_object_array_add(a, field_json(&v->value.array.entries[i]));
				return a;
			}
		case AMQP_FIELD_KIND_TABLE:
			return table_json(&v->value.table);
		default:
			return NULL;		/* void, decimal */
	}
}

static json_object *
table_json(const amqp_table_t *t)
{
	json_object *o = json_object_new_object();

	for (int i = 0; i < t->num_entries; i++)
	{
		char		key[256];

		snprintf(key, sizeof(key), "%.*s", (int) t->entries[i].key.len, (char *) t->entries[i].key.bytes);
		json_object_object_add(o, key, field_json(&t->entries[i].value));
	}
	return o;
}

static char *
bytes_dup(amqp_bytes_t b)
{
	return pnstrdup(b.bytes ? (char *) b.bytes : "", b.len);
}

int
broker_dlq_get(BrokerDead *dead, char *err, size_t errlen)
{
	return broker_get(WFE_QUEUE_DLQ, dead, err, errlen);
}

bool
broker_dlq_settle(uint64_t tag, bool ack, char *err, size_t errlen)
{
	return broker_settle(tag, ack, true, err, errlen);
}

int
broker_get(const char *queue, BrokerDead *dead, char *err, size_t errlen)
{
	amqp_rpc_reply_t r;
	amqp_message_t msg;
	json_object *headers;

	memset(dead, 0, sizeof(*dead));
	if (conn == NULL)
	{
		snprintf(err, errlen, "not connected");
		return -1;
	}
	r = amqp_basic_get(conn, CHANNEL, amqp_cstring_bytes(queue), 0);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		char		what[WFE_TOPOLOGY_NAME_MAX + 16];

		snprintf(what, sizeof(what), "basic.get %s", queue);
		(void) wfe_amqp_reply_error(r, what, err, errlen);
		return -1;
	}
	if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
		return 0;
	{
		amqp_basic_get_ok_t *ok = r.reply.decoded;

		dead->tag = ok->delivery_tag;
		dead->redelivered = ok->redelivered;
		dead->routing_key = bytes_dup(ok->routing_key);
	}
	r = amqp_read_message(conn, CHANNEL, &msg, 0);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		(void) wfe_amqp_reply_error(r, "reading a message", err, errlen);
		return -1;
	}
	if (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		dead->message_id = bytes_dup(msg.properties.message_id);
	if (msg.properties._flags & AMQP_BASIC_CORRELATION_ID_FLAG)
		dead->correlation_id = bytes_dup(msg.properties.correlation_id);
	if (msg.properties._flags & AMQP_BASIC_REPLY_TO_FLAG)
		dead->reply_to = bytes_dup(msg.properties.reply_to);
	headers = (msg.properties._flags & AMQP_BASIC_HEADERS_FLAG)
		? table_json(&msg.properties.headers) : json_object_new_object();
	dead->headers_json = pstrdup(json_object_to_json_string_ext(headers, JSON_C_TO_STRING_PLAIN));
	json_object_put(headers);
	dead->body = bytes_dup(msg.body);
	amqp_destroy_message(&msg);
	amqp_maybe_release_buffers(conn);
	return 1;
}

bool
broker_settle(uint64_t tag, bool ack, bool requeue, char *err, size_t errlen)
{
	int			status = ack ? amqp_basic_ack(conn, CHANNEL, tag, 0)
		: amqp_basic_nack(conn, CHANNEL, tag, 0, requeue);

	if (status != AMQP_STATUS_OK)
	{
		snprintf(err, errlen, "%s of a message: %s", ack ? "basic.ack" : "basic.nack",
				 amqp_error_string2(status));
		return false;
	}
	return true;
}
