/*
 * envelope.h — the bodies of the messages a broker-mode worker receives:
 * dispatch envelopes (delivery.md "Tracks and the envelope") and
 * cancellation requests (routing key cancel.<queue>).
 */
#ifndef WFE_WORKER_ENVELOPE_H
#define WFE_WORKER_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker.h"

/*
 * Parse a dispatch envelope (body[len] must be '\0') into a task.  The
 * input comes from payload_inline (serialised again as JSON text); when
 * payload_ref is set instead, *payload_ref receives its JSON text and the
 * input stays NULL.  false with *err set when the body is not a usable
 * envelope.
 */
extern bool envelope_parse(const char *body, size_t len, Task *task, char **payload_ref,
						   char *err, size_t errlen);

/* A cancellation request: which attempt, and the fence it was sent with. */
typedef struct CancelRequest
{
	int64_t		run_id;
	char	   *stage;
	int			attempt;
	int64_t		fence;
	char	   *reason;
} CancelRequest;

extern bool cancel_parse(const char *body, size_t len, CancelRequest *req, char *err, size_t errlen);
extern void cancel_free(CancelRequest *req);

#endif							/* WFE_WORKER_ENVELOPE_H */
