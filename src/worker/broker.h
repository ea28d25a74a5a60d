/*
 * broker.h — wfe-worker's side of AMQP 0-9-1 (librabbitmq): one
 * connection; channel 1 consumes the queue's two tracks with manual
 * acknowledgement, channel 2 publishes dead letters in transaction mode,
 * channel 3 consumes an exclusive queue bound to cancel.<queue>.
 *
 * Nothing here waits without a deadline: frames are read with a zero
 * timeout when the socket is readable, and RPCs time out after 10 s.
 */
#ifndef WFE_WORKER_BROKER_H
#define WFE_WORKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One message received. */
typedef struct Delivery
{
	uint64_t	tag;			/* delivery tag on channel 1 */
	uint64_t	generation;		/* which connection it came on */
	bool		is_cancel;		/* a cancellation request (auto-acknowledged) */
	bool		redelivered;
	char	   *routing_key;
	char	   *body;			/* NUL-terminated */
	size_t		body_len;
	long		death_count;	/* retry cycles, from the x-death header */
	void	   *props;			/* the message properties (broker.c's own) */
	struct Delivery *next;
} Delivery;

extern bool broker_connected(void);

/*
 * Connect to the first node of --amqp-uri that answers, log in, open the
 * channels, (declare,) consume cancellations.
 */
extern bool broker_connect(char *err, size_t errlen);
/* host:port of the node connected to ("" when not connected). */
extern const char *broker_node(void);
extern void broker_disconnect(void);

/* Changes with every connection; acknowledgements name it. */
extern uint64_t broker_generation(void);

extern int	broker_socket(void);

/* True when frames are already buffered: poll must not wait. */
extern bool broker_has_buffered(void);

/* Start or stop consuming wfe.<queue>.small and .large. */
extern bool broker_set_consuming(bool on, char *err, size_t errlen);

/*
 * Read every frame available now (and send a heartbeat when one is due);
 * messages go to the delivery list.  false when the connection was lost.
 */
extern bool broker_pump(char *err, size_t errlen);

extern Delivery *broker_next_delivery(void);
extern void broker_push_front(Delivery *d);
extern void delivery_free(Delivery *d);

/* Acknowledge or reject a delivery of the given connection generation. */
extern bool broker_ack(uint64_t generation, uint64_t tag);
extern bool broker_reject(uint64_t generation, uint64_t tag, bool requeue);

/*
 * Publish the message to wfe.commands with routing key `dead` (committed
 * in a transaction), then acknowledge it.
 */
extern bool broker_dead_letter(Delivery *d, const char *reason, char *err, size_t errlen);

#endif							/* WFE_WORKER_BROKER_H */
