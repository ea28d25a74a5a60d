/*
 * admission.h — queue and tenant task limits, the server side (admission.c;
 * the decisions: src/core/flow/admission.h).
 */
#ifndef WFE_PG_ADMISSION_H
#define WFE_PG_ADMISSION_H

/*
 * SQL: the broker task st (an alias) is held -- a handler-less stage with no
 * dispatch message of its current attempt and fence still to publish (a
 * published one leaves it dispatched).  For a queued stage of a broker queue.
 */
#define WFE_SQL_HELD(st) \
	" AND " st ".handler IS NULL" \
	" AND NOT EXISTS (SELECT 1 FROM wfe.outbox AS o" \
	"                  WHERE o.run_id = " st ".run_id AND o.stage = " st ".stage AND o.attempt = " st ".attempt" \
	"                    AND o.fence = " st ".fence AND o.kind = 'dispatch' AND o.state <> 'published')"

/* Take a tenant's max_tasks_in_flight lock in lock order, else only try (a miss is rechecked later). */
extern bool wfe_admission_lock_tenant(const char *tenant);

/* A tenant's tasks in flight, poll and broker (counted after its lock). */
extern int	wfe_admission_tenant_in_flight(const char *tenant);

/* A broker task was released (queued): dispatch it if its queue's and tenant's limits have room, else hold it. */
extern void wfe_admission_dispatch(int64 run_id, const char *stage, const char *queue, const char *tenant);

/* A broker queue's circuit half opened or closed: dispatch what it held, through every gate. */
extern void wfe_admission_release_queue(const char *queue);

/* ...the same by the worker's next round (a circuit closed inside an attempt's counting trigger). */
extern void wfe_admission_recheck_queue(const char *queue);

/* ratelimit.c: a broker task's rate-limit token -- may it go (else it is held until the token is due)? */
extern bool wfe_rate_dispatch(int64 run_id, const char *stage);

/*
 * Is a task of queue and tenant under a limit whose room its end frees: its
 * queue's max_in_flight (unless paused) or its tenant's max_tasks_in_flight.
 * SQL over a queue and a tenant expression, so that the statement that ends
 * a task can answer it in its RETURNING (engine.c, q_complete).
 */
#define WFE_SQL_LIMITED(queue, tenant) \
	"(EXISTS (SELECT 1 FROM wfe.queues AS q" \
	"          WHERE q.queue = " queue " AND q.max_in_flight IS NOT NULL AND NOT q.paused)" \
	" OR EXISTS (SELECT 1 FROM wfe.tenant_limits AS t" \
	"             WHERE t.tenant = " tenant " AND t.max_tasks_in_flight IS NOT NULL))"

/*
 * A task of queue and tenant ended or left: release the held tasks that now
 * fit, wake the pollers concerned.  limited: WFE_SQL_LIMITED's answer when
 * the caller has it already, NULL to ask.
 */
extern void wfe_admission_room_freed(const char *queue, const char *tenant, const bool *limited);

/* concurrency.c: keyed concurrency at a broker dispatch -- may it go (else it is held)? */
extern bool wfe_concurrency_dispatch(int64 run_id, const char *stage, const char *queue, const char *tenant,
									 const char *key, int max);

#endif							/* WFE_PG_ADMISSION_H */
