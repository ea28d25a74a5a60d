/*
 * topology.c — the RabbitMQ topology's names and declarations.  See
 * topology.h; delivery.md ("RabbitMQ topology") is the contract.
 */
#include "topology.h"

#include <stdio.h>
#include <string.h>

static const char *const track_names[WFE_TRACKS] = {"small", "large"};

/* See topology.h. */
const char *
wfe_track_name(wfe_track track)
{
	return track_names[track];
}

/* snprintf into a name buffer; false when it did not fit. */
static bool
name(char *buf, const char *fmt, const char *queue, const char *track)
{
	int			n = snprintf(buf, WFE_TOPOLOGY_NAME_MAX, fmt, queue, track);

	return n >= 0 && n < WFE_TOPOLOGY_NAME_MAX;
}

/* See topology.h. */
bool
wfe_topology_queue(char *buf, const char *queue, wfe_track track)
{
	return name(buf, "wfe.%s.%s", queue, track_names[track]);
}

/* See topology.h. */
bool
wfe_topology_retry_queue(char *buf, const char *queue, wfe_track track)
{
	return name(buf, "wfe.%s.retry.%s", queue, track_names[track]);
}

/* See topology.h. */
bool
wfe_topology_run_key(char *buf, const char *queue, wfe_track track)
{
	return name(buf, "run.%s.%s", queue, track_names[track]);
}

/* See topology.h. */
bool
wfe_topology_retry_key(char *buf, const char *queue, wfe_track track)
{
	return name(buf, "retry.%s.%s", queue, track_names[track]);
}

/* See topology.h. */
bool
wfe_topology_cancel_key(char *buf, const char *queue)
{
	int			n = snprintf(buf, WFE_TOPOLOGY_NAME_MAX, "cancel.%s", queue);

	return n >= 0 && n < WFE_TOPOLOGY_NAME_MAX;
}

/* See topology.h. */
const char *
wfe_topology_exchange(const char *kind)
{
	if (strcmp(kind, "dispatch") == 0 || strcmp(kind, "cancel") == 0)
		return WFE_EXCHANGE_COMMANDS;
	if (strcmp(kind, "event") == 0)
		return WFE_EXCHANGE_EVENTS;
	return NULL;
}

/* See topology.h. */
bool
wfe_topology_routing_key(char *buf, const char *kind, const char *queue, const char *track)
{
	if (strcmp(kind, "cancel") == 0)
		return wfe_topology_cancel_key(buf, queue);
	if (strcmp(kind, "dispatch") != 0 || track == NULL)
		return false;
	for (wfe_track t = 0; t < WFE_TRACKS; t++)
		if (strcmp(track, track_names[t]) == 0)
			return wfe_topology_run_key(buf, queue, t);
	return false;
}

/* See topology.h. */
bool
wfe_topology_queue_of_run_key(const char *key, const char **queue, size_t *len)
{
	/* queue names may hold dots: the track is what follows the last one */
	const char *dot = strrchr(key, '.');

	if (strncmp(key, "run.", 4) != 0 || dot == NULL || dot <= key + 4)
		return false;
	*queue = key + 4;
	*len = (size_t) (dot - *queue);
	return true;
}

/* See topology.h. */
bool
wfe_amqp_reply_error(amqp_rpc_reply_t r, const char *what, char *err, size_t errlen)
{
	switch (r.reply_type)
	{
		case AMQP_RESPONSE_NORMAL:
			snprintf(err, errlen, "%s: ok", what);
			return false;
		case AMQP_RESPONSE_NONE:
			snprintf(err, errlen, "%s: no reply from the broker", what);
			return false;
		case AMQP_RESPONSE_LIBRARY_EXCEPTION:
			snprintf(err, errlen, "%s: %s", what, amqp_error_string2(r.library_error));
			return true;
		case AMQP_RESPONSE_SERVER_EXCEPTION:
			if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
			{
				amqp_connection_close_t *m = r.reply.decoded;

				snprintf(err, errlen, "%s: the broker closed the connection: %u %.*s", what,
						 m->reply_code, (int) m->reply_text.len, (char *) m->reply_text.bytes);
				return true;
			}
			if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
			{
				amqp_channel_close_t *m = r.reply.decoded;

				snprintf(err, errlen, "%s: the broker closed the channel: %u %.*s", what,
						 m->reply_code, (int) m->reply_text.len, (char *) m->reply_text.bytes);
				return false;
			}
			snprintf(err, errlen, "%s: unexpected reply method 0x%08X", what, r.reply.id);
			return false;
	}
	return false;
}

/* See topology.h. */
amqp_table_entry_t
wfe_amqp_string_entry(const char *key, const char *value)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(key);
	e.value.kind = AMQP_FIELD_KIND_UTF8;
	e.value.value.bytes = amqp_cstring_bytes(value);
	return e;
}

static const char *const queue_type_names[] = {"classic", "quorum"};

/* See topology.h. */
const char *
wfe_queue_type_name(wfe_queue_type type)
{
	return queue_type_names[type];
}

/* See topology.h. */
bool
wfe_queue_type_parse(const char *name, wfe_queue_type *type)
{
	for (int i = 0; i <= WFE_QUEUE_QUORUM; i++)
		if (strcmp(name, queue_type_names[i]) == 0)
		{
			*type = (wfe_queue_type) i;
			return true;
		}
	return false;
}

/* See topology.h. */
bool
wfe_topology_type_mismatch(const char *err)
{
	/*
	 * RabbitMQ: "PRECONDITION_FAILED - inequivalent arg 'x-overflow' for queue
	 * ...".  It names the first argument that differs, which need not be
	 * x-queue-type: any of the arguments only wfe's quorum queues carry
	 * says the same.
	 */
	static const char *const quorum_only[] = {"'x-queue-type'", "'x-overflow'", "'x-dead-letter-strategy'"};

	if (strstr(err, "406") == NULL)
		return false;
	for (int i = 0; i < 3; i++)
		if (strstr(err, quorum_only[i]) != NULL)
			return true;
	return false;
}

/* An integer-valued AMQP table entry. */
static amqp_table_entry_t
int_entry(const char *key, int value)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(key);
	e.value.kind = AMQP_FIELD_KIND_I32;
	e.value.value.i32 = value;
	return e;
}

/*
 * Append the arguments every quorum queue of wfe's carries to args (room
 * for three): the type, and at-least-once dead-lettering, which RabbitMQ
 * allows only with overflow reject-publish (without a length limit nothing
 * is ever refused for it).  Classic queues get nothing: 0.2.0 declared them
 * without x-queue-type, and a redeclaration must stay equivalent.
 */
static int
quorum_args(amqp_table_entry_t *args, wfe_queue_type type, bool dead_letters)
{
	int			n = 0;

	if (type != WFE_QUEUE_QUORUM)
		return 0;
	args[n++] = wfe_amqp_string_entry("x-queue-type", "quorum");
	if (dead_letters)
	{
		args[n++] = wfe_amqp_string_entry("x-dead-letter-strategy", "at-least-once");
		args[n++] = wfe_amqp_string_entry("x-overflow", "reject-publish");
	}
	return n;
}

/* Declare a durable topic exchange. */
static bool
declare_exchange(amqp_connection_state_t conn, amqp_channel_t channel, const char *exchange,
				 wfe_topology_check check, char *err, size_t errlen)
{
	amqp_exchange_declare(conn, channel, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"),
						  0, 1, 0, 0, amqp_empty_table);
	return check(exchange, err, errlen);
}

/* Declare a durable queue with arguments and bind it. */
static bool
declare_bound_queue(amqp_connection_state_t conn, amqp_channel_t channel, const char *queue,
					amqp_table_t args, const char *exchange, const char *routing_key,
					wfe_topology_check check, char *err, size_t errlen)
{
	amqp_queue_declare(conn, channel, amqp_cstring_bytes(queue), 0, 1, 0, 0, args);
	if (!check(queue, err, errlen))
		return false;
	amqp_queue_bind(conn, channel, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange),
					amqp_cstring_bytes(routing_key), amqp_empty_table);
	return check(queue, err, errlen);
}

/* See topology.h. */
bool
wfe_topology_declare_base(amqp_connection_state_t conn, amqp_channel_t channel,
						  wfe_queue_type type, wfe_topology_check check,
						  char *err, size_t errlen)
{
	amqp_table_entry_t args[3];
	amqp_table_t table = {quorum_args(args, type, false), args};

	return declare_exchange(conn, channel, WFE_EXCHANGE_COMMANDS, check, err, errlen) &&
		declare_exchange(conn, channel, WFE_EXCHANGE_RETRY, check, err, errlen) &&
		declare_exchange(conn, channel, WFE_EXCHANGE_EVENTS, check, err, errlen) &&
		declare_bound_queue(conn, channel, WFE_QUEUE_DLQ, table,
							WFE_EXCHANGE_COMMANDS, WFE_KEY_DEAD, check, err, errlen);
}

/* See topology.h. */
bool
wfe_topology_declare_queue(amqp_connection_state_t conn, amqp_channel_t channel,
						   const char *queue, wfe_track track, bool retry,
						   const wfe_queue_options *options,
						   wfe_topology_check check, char *err, size_t errlen)
{
	char		main_name[WFE_TOPOLOGY_NAME_MAX],
				retry_name[WFE_TOPOLOGY_NAME_MAX],
				run_key[WFE_TOPOLOGY_NAME_MAX],
				retry_key[WFE_TOPOLOGY_NAME_MAX];
	amqp_table_entry_t args[7];
	amqp_table_t table;
	int			n;

	if (!wfe_topology_queue(main_name, queue, track) ||
		!wfe_topology_retry_queue(retry_name, queue, track) ||
		!wfe_topology_run_key(run_key, queue, track) ||
		!wfe_topology_retry_key(retry_key, queue, track))
	{
		snprintf(err, errlen, "queue name \"%.64s...\" is too long", queue);
		return false;
	}
	table.entries = args;
	if (!retry)
	{
		/* rejected messages dead-letter into the retry queue ... */
		args[0] = wfe_amqp_string_entry("x-dead-letter-exchange", WFE_EXCHANGE_RETRY);
		args[1] = wfe_amqp_string_entry("x-dead-letter-routing-key", retry_key);
		n = 2 + quorum_args(args + 2, options->type, true);
		/* ... and so do messages requeued past the limit (quorum queues count) */
		if (options->type == WFE_QUEUE_QUORUM)
			args[n++] = int_entry("x-delivery-limit", options->delivery_limit);
		table.num_entries = n;
		return declare_bound_queue(conn, channel, main_name, table, WFE_EXCHANGE_COMMANDS,
								   run_key, check, err, errlen);
	}
	/* ... which holds them for the TTL and dead-letters them back */
	args[0] = int_entry("x-message-ttl", options->retry_ttl_ms);
	args[1] = wfe_amqp_string_entry("x-dead-letter-exchange", WFE_EXCHANGE_COMMANDS);
	args[2] = wfe_amqp_string_entry("x-dead-letter-routing-key", run_key);
	table.num_entries = 3 + quorum_args(args + 3, options->type, true);
	return declare_bound_queue(conn, channel, retry_name, table, WFE_EXCHANGE_RETRY,
							   retry_key, check, err, errlen);
}

/* See topology.h. */
bool
wfe_topology_ingress_queue(char *buf, const char *name)
{
	return snprintf(buf, WFE_TOPOLOGY_NAME_MAX, "%s%s", WFE_INGRESS_QUEUE_PREFIX, name) < WFE_TOPOLOGY_NAME_MAX;
}

/* See topology.h. */
bool
wfe_topology_ingress_key(char *buf, const char *name)
{
	return snprintf(buf, WFE_TOPOLOGY_NAME_MAX, "%s%s", WFE_INGRESS_KEY_PREFIX, name) < WFE_TOPOLOGY_NAME_MAX;
}

/* See topology.h. */
bool
wfe_topology_declare_ingress(amqp_connection_state_t conn, amqp_channel_t channel,
							 const char *name, const wfe_queue_options *options,
							 wfe_topology_check check, char *err, size_t errlen)
{
	char		queue[WFE_TOPOLOGY_NAME_MAX],
				key[WFE_TOPOLOGY_NAME_MAX];
	amqp_table_entry_t args[6];
	amqp_table_t table;
	int			n;

	if (!wfe_topology_ingress_queue(queue, name) || !wfe_topology_ingress_key(key, name))
	{
		snprintf(err, errlen, "ingress name \"%.64s...\" is too long", name);
		return false;
	}
	/* a command rejected other than by wfe (delivery limit) lands in wfe.dlq */
	args[0] = wfe_amqp_string_entry("x-dead-letter-exchange", WFE_EXCHANGE_COMMANDS);
	args[1] = wfe_amqp_string_entry("x-dead-letter-routing-key", WFE_KEY_DEAD);
	n = 2 + quorum_args(args + 2, options->type, true);
	if (options->type == WFE_QUEUE_QUORUM)
		args[n++] = int_entry("x-delivery-limit", options->delivery_limit);
	table.num_entries = n;
	table.entries = args;
	return declare_bound_queue(conn, channel, queue, table, WFE_EXCHANGE_COMMANDS, key,
							   check, err, errlen);
}
