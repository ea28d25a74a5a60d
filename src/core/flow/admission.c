/*
 * admission.c — queue and tenant task limits' decisions (admission.h).
 */
#include <string.h>

#include "admission.h"

/* The lock-order rule (admission.h). */
wfe_lock_mode
wfe_admission_lock_mode(wfe_limit_kind kind, const char *name, const char *held_tenant, const char *held_queue)
{
	if (kind == WFE_LIMIT_TENANT)
	{
		/* after a queue, or not past the greatest tenant held (a held lock is granted again at once) */
		if (held_queue != NULL || (held_tenant != NULL && strcmp(name, held_tenant) <= 0))
			return WFE_LOCK_TRY;
		return WFE_LOCK_WAIT;
	}
	return held_queue != NULL && strcmp(name, held_queue) <= 0 ? WFE_LOCK_TRY : WFE_LOCK_WAIT;
}

/* Whether a release looks at the tenant's held tasks (admission.h). */
bool
wfe_release_tenant_side(bool limited, bool for_queue, bool have_tenant, bool locked, int room)
{
	/* without a queue, the tenant's limit changed: lifted, everything of it held may go */
	if (!limited)
		return !for_queue && have_tenant;
	if (!locked)
		return false;
	return !for_queue || room == 1;
}

/* Whether a release looks at the queue's held tasks (admission.h). */
bool
wfe_release_queue_side(bool bounded, bool open, bool have_tenant, bool locked)
{
	if (bounded)
		return locked;
	/* without a tenant, the queue's limit changed: lifted, everything held in it may go */
	return !have_tenant && open;
}

/* Nothing more can go (admission.h). */
bool
wfe_release_exhausted(const wfe_release_scope *scope, const int *room)
{
	return (!scope->queue_side || (scope->queue_slot >= 0 && room[scope->queue_slot] <= 0))
		&& (!scope->tenant_side || (scope->tenant_slot >= 0 && room[scope->tenant_slot] <= 0));
}

/* Decide n held candidates in dispatch order (admission.h). */
int
wfe_release_pick(const wfe_release_scope *scope, int n, const int *qslot, const int *tslot, int *room, bool *go)
{
	int			count = 0;

	for (int k = 0; k < n; k++)
	{
		go[k] = false;
		if (wfe_release_exhausted(scope, room))
			continue;
		if ((qslot[k] >= 0 && room[qslot[k]] <= 0) || (tslot[k] >= 0 && room[tslot[k]] <= 0))
			continue;			/* a full limit, or one whose lock we do not hold, keeps it held */
		if (qslot[k] >= 0)
			room[qslot[k]]--;
		if (tslot[k] >= 0)
			room[tslot[k]]--;
		go[k] = true;
		count++;
	}
	return count;
}
