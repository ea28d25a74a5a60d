/*
 * intake.h — where tasks come from: wfe.claim_task with LISTEN wakeups
 * (poll.c), or dispatch messages from RabbitMQ (consume.c).
 */
#ifndef WFE_WORKER_INTAKE_H
#define WFE_WORKER_INTAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "worker.h"

/* Poll mode: claim what is ready while slots are free. */
extern void poll_intake(int64_t now);
/* When poll mode wants to run next (0: nothing planned). */
extern int64_t poll_next(int64_t now);
/* A slot was freed: there may be more to claim. */
extern void poll_task_done(void);
/* --once: the last claim found nothing and nothing is due. */
extern bool poll_drained(void);

/* Broker mode: consume while it makes sense; handle what was delivered. */
extern void consume_intake(int64_t now);
extern int64_t consume_next(int64_t now);
extern void consume_task_done(Slot *s);
/* --once: nothing was delivered for a while. */
extern bool consume_idle(int64_t now);

#endif							/* WFE_WORKER_INTAKE_H */
