/*
 * names.h — the shape of a queue name, written once for C: the compiler's
 * admission checks it in definitions and contracts, and wfe-worker checks
 * --queue before it names AMQP queues after it.  (The SQL side checks the
 * same pattern in its own place, src/sql.)
 */
#ifndef WFE_NAMES_H
#define WFE_NAMES_H

#include <stdbool.h>

/* A queue name, as messages spell it. */
#define WFE_QUEUE_NAME_PATTERN "^[a-z][a-z0-9_.-]{0,62}$"

/* Does s match WFE_QUEUE_NAME_PATTERN? */
extern bool wfe_queue_name_valid(const char *s);

#endif							/* WFE_NAMES_H */
