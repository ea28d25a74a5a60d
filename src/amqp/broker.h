/*
 * broker.h — the publisher's side of AMQP 0-9-1 (librabbitmq): connect,
 * declare topology, publish with confirms.  No PostgreSQL state in here;
 * publisher.c decides what to send and records what was confirmed.
 */
#ifndef WFE_BROKER_H
#define WFE_BROKER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum BrokerStatus
{
	MSG_UNSENT,
	MSG_SENT,					/* published, waiting for its confirm */
	MSG_ACKED,					/* confirmed by the broker */
	MSG_NACKED,					/* refused by the broker */
	MSG_RETURNED				/* mandatory and unroutable (then acked) */
} BrokerStatus;

typedef struct BrokerMessage
{
	int64_t		id;				/* outbox row */
	const char *exchange;
	const char *routing_key;
	const char *message_id;
	const char *correlation_id;
	const char *headers_json;	/* {"name": "string value", ...} */
	const char *body;
	bool		mandatory;		/* dispatches must reach a queue */
	uint64_t	tag;			/* delivery tag once sent */
	BrokerStatus status;
} BrokerMessage;

/*
 * Connect to the first node of a comma-separated list of amqp:// URIs that
 * answers (starting after the node whose connection dropped last), log in,
 * open a channel in confirm mode; false with *err saying why each failed.
 */
extern bool broker_connect(const char *uris, const char *password_file, char *err, size_t errlen);
/* host:port of the node connected to ("" when not connected). */
extern const char *broker_node(void);
extern void broker_disconnect(void);
extern bool broker_is_connected(void);

/* Is RabbitMQ blocking our publishing (a resource alarm)? */
extern bool broker_is_blocked(void);

/* Read what the broker sent (blocked/unblocked) for up to timeout_ms. */
extern bool broker_poll(int timeout_ms, char *err, size_t errlen);

/*
 * Declare the exchanges and wfe.dlq (queue_type: a wfe_queue_type), or the
 * queues of one wfe queue: 1 done; -1 an existing queue has another type or
 * other arguments (e.g. another TTL) and was left as it is, *err says which;
 * 0 the connection failed.
 */
extern int	broker_declare_base(int queue_type, char *err, size_t errlen);
struct wfe_queue_options;
extern int	broker_declare_queue(const char *queue, const struct wfe_queue_options *options,
								 char *err, size_t errlen);

/*
 * Declare and bind ingress NAME's queue: 1 done, -1 it exists with other
 * arguments or another type (kept as it is, *err says how), 0 the
 * connection failed.
 */
extern int	broker_declare_ingress(const char *name, const struct wfe_queue_options *options,
								   char *err, size_t errlen);

/* Serial number of the connection (0: none); a new one for each connect. */
extern uint64_t broker_connection_serial(void);

/* Publish one message; false (connection lost) with *err set. */
extern bool broker_publish(BrokerMessage *msg, char *err, size_t errlen);

/*
 * Read confirms (acks, nacks, returns) for the sent messages (a window: an
 * array of n pointers) until each is settled, timeout_ms passes, or *stop
 * becomes true.  A window with a nack is followed by a new channel (the
 * old one's route to a quorum queue can be stale).  Returns false when the
 * connection failed (the caller disconnects).
 */
extern bool broker_await_confirms(BrokerMessage **msgs, int n, int timeout_ms,
								  volatile sig_atomic_t *stop, char *err, size_t errlen);

/* A message taken from a queue, not acknowledged yet (strings palloc'd). */
typedef struct BrokerDead
{
	uint64_t	tag;			/* delivery tag, for broker_settle */
	bool		redelivered;
	char	   *message_id;		/* NULL when the message has none */
	char	   *correlation_id; /* NULL when the message has none */
	char	   *reply_to;		/* NULL when the message has none */
	char	   *routing_key;
	char	   *headers_json;	/* every header as JSON: x-wfe-*, x-death, ... */
	char	   *body;
} BrokerDead;

/*
 * Take the next message of wfe.dlq without acknowledging it: 1 taken, 0 the
 * queue is empty, -1 the connection failed (*err says why).  Call it with no
 * publish confirms outstanding.
 */
extern int	broker_dlq_get(BrokerDead *dead, char *err, size_t errlen);
/* Acknowledge it (done with it), or give it back to wfe.dlq (requeue). */
extern bool broker_dlq_settle(uint64_t tag, bool ack, char *err, size_t errlen);

/*
 * The same for any queue (the ingress queues): take the next message
 * without acknowledging it (1, 0 empty, -1 connection failed); then ack it,
 * or nack it with or without requeue.
 */
extern int	broker_get(const char *queue, BrokerDead *msg, char *err, size_t errlen);
extern bool broker_settle(uint64_t tag, bool ack, bool requeue, char *err, size_t errlen);

#endif							/* WFE_BROKER_H */
