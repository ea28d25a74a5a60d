/*
 * topology.h — the RabbitMQ topology of delivery.md ("RabbitMQ topology"),
 * written once: the exchange, queue and routing-key names and how each is
 * declared (kind, flags and argument types), so that the publisher, the
 * server's SQL (through wfe._routing_key) and wfe-worker agree, and either
 * side may declare first.
 *
 * With them, the little AMQP both clients need alike: a reply described
 * in words, a string table entry.  No PostgreSQL headers: wfe-worker links
 * this file too.
 */
#ifndef WFE_TOPOLOGY_H
#define WFE_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#else
#include <amqp.h>
#endif

/* The exchanges (durable topic exchanges). */
#define WFE_EXCHANGE_COMMANDS	"wfe.commands"	/* dispatches, cancellations, dead letters */
#define WFE_EXCHANGE_RETRY		"wfe.retry"	/* rejected dispatches, on their way back */
#define WFE_EXCHANGE_EVENTS		"wfe.events"	/* the event log's projection */

/* The dead dispatches: wfe.dlq, bound to wfe.commands with key "dead". */
#define WFE_QUEUE_DLQ			"wfe.dlq"
#define WFE_KEY_DEAD			"dead"

/*
 * Run commands (delivery.md "Run commands from RabbitMQ"): ingress NAME's
 * durable queue wfe.ingress.NAME, bound to wfe.commands with key
 * submit.NAME.  Commands wfe rejects are copied to wfe.dlq by the consumer
 * (with x-wfe-error headers); the queue dead-letters there too.
 */
#define WFE_INGRESS_QUEUE_PREFIX	"wfe.ingress."
#define WFE_INGRESS_KEY_PREFIX		"submit."

/* A wfe queue has one AMQP queue (and one retry queue) per track. */
typedef enum wfe_track
{
	WFE_TRACK_SMALL,			/* input inline */
	WFE_TRACK_LARGE,			/* input by reference (wfe.payloads) */
	WFE_TRACKS
} wfe_track;

/* "small" or "large". */
extern const char *wfe_track_name(wfe_track track);

/* Room for any name below: a wfe queue name has at most 63 bytes. */
#define WFE_TOPOLOGY_NAME_MAX	160

/*
 * The names of one wfe queue's topology, written into buf (size
 * WFE_TOPOLOGY_NAME_MAX); each returns false when the queue name is too long
 * to fit.  Main queue wfe.<queue>.<track>, bound to wfe.commands with key
 * run.<queue>.<track>; retry queue wfe.<queue>.retry.<track>, bound to
 * wfe.retry with key retry.<queue>.<track>; cancellations on wfe.commands
 * with key cancel.<queue>.
 */
extern bool wfe_topology_queue(char *buf, const char *queue, wfe_track track);
extern bool wfe_topology_retry_queue(char *buf, const char *queue, wfe_track track);
extern bool wfe_topology_run_key(char *buf, const char *queue, wfe_track track);
extern bool wfe_topology_retry_key(char *buf, const char *queue, wfe_track track);
extern bool wfe_topology_cancel_key(char *buf, const char *queue);

/*
 * Where an outbox message of a kind goes: the exchange of kind "dispatch",
 * "cancel" or "event" (NULL for another kind); the routing key of a
 * "dispatch" (run.<queue>.<track>, track "small" or "large") or a "cancel"
 * (cancel.<queue>, track ignored) into buf, false for another kind or track.
 * The outbox rows are written in SQL, which asks through wfe._exchange and
 * wfe._routing_key (src/pg/message.c); an event's key is its type.
 */
extern const char *wfe_topology_exchange(const char *kind);
extern bool wfe_topology_routing_key(char *buf, const char *kind, const char *queue,
									 const char *track);

/*
 * The wfe queue a dispatch's routing key (run.<queue>.<track>) names: its
 * start in *queue and its length; false when key is not a dispatch key.
 */
extern bool wfe_topology_queue_of_run_key(const char *key, const char **queue, size_t *len);

/*
 * Describe an RPC reply that is not AMQP_RESPONSE_NORMAL in *err, prefixed
 * with `what`; true when the connection is unusable afterwards (a library
 * error, or the broker closed the connection), false when only the channel
 * is (or nothing is).
 */
extern bool wfe_amqp_reply_error(amqp_rpc_reply_t r, const char *what, char *err, size_t errlen);

/* A string-valued AMQP table entry (arguments, headers, client properties). */
extern amqp_table_entry_t wfe_amqp_string_entry(const char *key, const char *value);

/*
 * How the caller checks the last synchronous RPC on its connection: true
 * when it succeeded, else false with *err describing it (`what` names the
 * object).  The publisher and wfe-worker each keep their own connection
 * state, so each passes its own.
 */
typedef bool (*wfe_topology_check) (const char *what, char *err, size_t errlen);

/*
 * How wfe's queues are declared (wfe.amqp_queue_type): classic queues, as
 * 0.2.0 declared them (no x-queue-type argument), or quorum queues, which
 * RabbitMQ replicates across a cluster.
 */
typedef enum wfe_queue_type
{
	WFE_QUEUE_CLASSIC,
	WFE_QUEUE_QUORUM
} wfe_queue_type;

/* "classic" or "quorum". */
extern const char *wfe_queue_type_name(wfe_queue_type type);

/* The type named by "classic" or "quorum"; false for anything else. */
extern bool wfe_queue_type_parse(const char *name, wfe_queue_type *type);

/* The settings a wfe queue's AMQP queues are declared with. */
typedef struct wfe_queue_options
{
	wfe_queue_type type;
	int			retry_ttl_ms;	/* the retry queues' x-message-ttl */
	int			delivery_limit; /* quorum: x-delivery-limit of the main queues */
} wfe_queue_options;

/*
 * Did the broker refuse a declaration because the queue exists with
 * another type?  `err` is what the check callback wrote for the refusal
 * (RabbitMQ names the first argument that differs, x-queue-type or
 * another one only quorum queues carry).
 */
extern bool wfe_topology_type_mismatch(const char *err);

/*
 * Declare the three exchanges and wfe.dlq (of the given type); false at the
 * first refused RPC.
 */
extern bool wfe_topology_declare_base(amqp_connection_state_t conn, amqp_channel_t channel,
									  wfe_queue_type type, wfe_topology_check check,
									  char *err, size_t errlen);

/*
 * Declare and bind one of a wfe queue's AMQP queues: the main queue of a
 * track (retry false), whose rejected messages dead-letter into the retry
 * queue, or the retry queue (retry true), which holds them for
 * options->retry_ttl_ms and dead-letters them back.  Quorum queues
 * dead-letter at least once, and a main queue's message requeued more than
 * options->delivery_limit times (its consumers' connections dropped while
 * they held it) dead-letters into the retry queue too.  False at the first
 * refused RPC (RabbitMQ closes the channel when an existing queue has other
 * arguments or another type).
 */
extern bool wfe_topology_declare_queue(amqp_connection_state_t conn, amqp_channel_t channel,
									   const char *queue, wfe_track track, bool retry,
									   const wfe_queue_options *options,
									   wfe_topology_check check, char *err, size_t errlen);

/*
 * The names of ingress NAME's queue and binding key into buf (size
 * WFE_TOPOLOGY_NAME_MAX); false when the name is too long.
 */
extern bool wfe_topology_ingress_queue(char *buf, const char *name);
extern bool wfe_topology_ingress_key(char *buf, const char *name);

/*
 * Declare and bind ingress NAME's queue (of options->type; quorum queues
 * dead-letter a command requeued more than options->delivery_limit times
 * into wfe.dlq); false at the first refused RPC.
 */
extern bool wfe_topology_declare_ingress(amqp_connection_state_t conn, amqp_channel_t channel,
										 const char *name, const wfe_queue_options *options,
										 wfe_topology_check check, char *err, size_t errlen);

#endif							/* WFE_TOPOLOGY_H */
