/*
 * fairness.h — stride scheduling between the tenants of a fair queue
 * (operations.md "Flow control": fairness => 'tenant'); pure C, no
 * PostgreSQL headers.
 *
 * On a fair queue, poll claims (src/pg/claim.c) and the release of held
 * broker tasks (src/pg/admission.c) both serve the tenants with ready work
 * in proportion to their weights, within the highest priority any of them
 * with room has ready.  Both ask this module who goes next.
 *
 * Each tenant has a pass that grows by 1/weight per task it is given; the
 * lowest pass goes first.  The queue's virtual time is the pass last
 * served: a tenant that comes back after a while starts there, so it gets
 * no burst for the time it had no work.  The server layer keeps the
 * passes (src/pg/fairness.c).
 *
 * Equal passes are common: every tenant a claimer has not served yet
 * starts at the virtual time, and a tenant served once is level again with
 * one that has a backlog.  Both are owed the same, so fairness allows
 * either order; what the order decides is latency.  The tenant whose next
 * task became ready later goes first: that is the tenant with no backlog
 * (one with a backlog has an old task at its head), whose task would
 * otherwise wait a whole claim behind a backlog that gains nothing from
 * going first.
 */
#ifndef WFE_FAIRNESS_H
#define WFE_FAIRNESS_H

#include <stdbool.h>
#include <stdint.h>

/* No priority: no tenant has room. */
#define WFE_FAIR_NONE (-2147483647 - 1)

/* One tenant with ready work, as a fair decision sees it. */
typedef struct wfe_fair_tenant
{
	int			priority;		/* of its next ready task */
	int			weight;			/* its share, >= 1 */
	int			cap;			/* tasks it may still take; -1: no limit, 0: passed over */
	int64_t		next_at;		/* when its next task became ready (any clock, later is larger) */
	double		pass;			/* its pass: read before, written after */
	int			n;				/* tasks given it so far */
} wfe_fair_tenant;

/*
 * Does a tenant at pass pass_a whose next task became ready at next_a go
 * before one at pass_b and next_b?  The lower pass; on equal passes
 * (within rounding: passes are sums of 1/weight), the later ready.
 * Neither goes before the other when both are equal.
 */
extern bool wfe_fair_before(double pass_a, int64_t next_a, double pass_b, int64_t next_b);

/*
 * The priority level served: the highest among the n tenants with room
 * (cap not 0); WFE_FAIR_NONE when none has.  Tenants at it whose pass is
 * behind the virtual time vt are brought to vt (back after a while).
 */
extern int	wfe_fair_top(wfe_fair_tenant *t, int n, double vt);

/*
 * The next task goes to: the tenant at priority top with room left
 * (n < cap) that goes before the others (wfe_fair_before); its pass grows
 * by 1/weight, its n by one, *vt becomes the pass it was served at.  Returns its index, or -1 when every
 * tenant at top is full.
 */
extern int	wfe_fair_next(wfe_fair_tenant *t, int n, int top, double *vt);

/*
 * Tenant k took only got of the tasks it was given (its next ones at that
 * priority ran out, or others held them): the pass of the others is given
 * back, and it is given no more in this decision.
 */
extern void wfe_fair_give_back(wfe_fair_tenant *t, int k, int got);

#endif							/* WFE_FAIRNESS_H */
