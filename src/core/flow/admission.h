/*
 * admission.h — queue and tenant task limits (operations.md "Flow
 * control", "Backpressure"): which held broker tasks dispatch, and in which
 * order the limits' locks may be waited for; pure C, no PostgreSQL headers.
 *
 * A queue's max_in_flight and a tenant's max_tasks_in_flight each have a
 * transaction lock, taken before the limit's count.  The server layer
 * (src/pg/admission.c) takes the locks, counts, and asks this module two
 * things: may it wait for a lock, or only try it (wfe_admission_lock_mode);
 * and, when room appears, which of the held tasks, in dispatch order, go
 * (wfe_release_pick).
 */
#ifndef WFE_ADMISSION_H
#define WFE_ADMISSION_H

#include <stdbool.h>

/* The two limits that have a lock. */
typedef enum wfe_limit_kind
{
	WFE_LIMIT_TENANT,			/* max_tasks_in_flight of a tenant */
	WFE_LIMIT_QUEUE				/* max_in_flight of a queue */
} wfe_limit_kind;

/* How a transaction may take a limit's lock. */
typedef enum wfe_lock_mode
{
	WFE_LOCK_WAIT,				/* in lock order: wait for it */
	WFE_LOCK_TRY				/* out of order (or already held): only try; a miss is rechecked later */
} wfe_lock_mode;

/*
 * The lock-order rule: tenants by name (C collation), then queues by name.
 * held_tenant, held_queue: the greatest tenant and queue whose lock this
 * transaction waited for (NULL: none).  A lock may be waited for only past
 * both: a tenant when no queue is held and it sorts after held_tenant, a
 * queue when it sorts after held_queue.  Anything else is only tried, so no
 * two admissions ever wait for each other in a circle.
 */
extern wfe_lock_mode wfe_admission_lock_mode(wfe_limit_kind kind, const char *name,
											 const char *held_tenant, const char *held_queue);

/*
 * A release: room appeared in a queue (a task of it ended, or its limit
 * changed) or for a tenant.  The sides say whose held tasks are candidates:
 * the queue's (queue_side), the tenant's in any broker queue (tenant_side).
 * queue_slot, tenant_slot: the index of the queue's, the tenant's room when
 * it is limited, else -1.
 */
typedef struct wfe_release_scope
{
	bool		queue_side;
	int			queue_slot;
	bool		tenant_side;
	int			tenant_slot;
} wfe_release_scope;

/*
 * Whether a release looks at the tenant's held tasks.  limited: the tenant
 * has a task limit; for_queue: a task of a queue ended (not a limit
 * change); have_tenant: a tenant was named; locked: its lock was taken;
 * room: its room then.  A task of a limited tenant ending can only have
 * made room for a held one if the tenant was at its limit before, which
 * leaves it exactly one slot now (each end releases what fits).
 */
extern bool wfe_release_tenant_side(bool limited, bool for_queue, bool have_tenant, bool locked, int room);

/*
 * Whether a release looks at the queue's held tasks.  bounded: a limited,
 * unpaused broker queue; open: an unpaused broker queue; have_tenant: a
 * tenant was named (else the queue's own limit changed: lifted, all may
 * go); locked: the queue's lock was taken.
 */
extern bool wfe_release_queue_side(bool bounded, bool open, bool have_tenant, bool locked);

/* Nothing more can go: each side is off, or bounded and out of room. */
extern bool wfe_release_exhausted(const wfe_release_scope *scope, const int *room);

/*
 * Decide n held candidates in dispatch order (highest priority, then
 * oldest).  qslot[k], tslot[k]: the index of candidate k's queue's and
 * tenant's room, or -1 when that limit does not apply; a limit whose lock
 * was not taken has room 0 (its tasks stay held).  Both limits must have
 * room; a candidate that goes takes one of each.  Sets go[k]; returns how
 * many go.  Stops deciding (go false) once wfe_release_exhausted.
 */
extern int	wfe_release_pick(const wfe_release_scope *scope, int n, const int *qslot, const int *tslot,
							 int *room, bool *go);

#endif							/* WFE_ADMISSION_H */
