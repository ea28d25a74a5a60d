/*
 * loop.h — the event loop that drives connections, intake and slots.
 */
#ifndef WFE_WORKER_LOOP_H
#define WFE_WORKER_LOOP_H

#include "worker.h"

/* Run until there is nothing left to do; returns the exit status. */
extern int	worker_loop(void);

/* A slot's task is over (called before the slot is freed). */
extern void loop_task_done(Slot *s);

#endif							/* WFE_WORKER_LOOP_H */
