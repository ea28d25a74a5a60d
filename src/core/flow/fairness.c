/*
 * fairness.c — stride scheduling between the tenants of a fair queue
 * (fairness.h).
 */
#include "fairness.h"

/*
 * Passes closer than this are equal: a pass is a sum of 1/weight steps, so
 * two that should be equal differ by rounding only, and the smallest step
 * (weight 10000) is a hundred times this.
 */
#define PASS_EPSILON 1e-6

/* Does the tenant (pass_a, next_a) go before (pass_b, next_b)? (fairness.h) */
bool
wfe_fair_before(double pass_a, int64_t next_a, double pass_b, int64_t next_b)
{
	if (pass_a < pass_b - PASS_EPSILON)
		return true;
	if (pass_a > pass_b + PASS_EPSILON)
		return false;
	/* owed the same: the one without a backlog, whose task would wait behind it for nothing */
	return next_a > next_b;
}

/* The priority level served (fairness.h). */
int
wfe_fair_top(wfe_fair_tenant *t, int n, double vt)
{
	int			top = WFE_FAIR_NONE;

	for (int k = 0; k < n; k++)
		if (t[k].cap != 0 && t[k].priority > top)
			top = t[k].priority;
	for (int k = 0; k < n; k++)
		if (t[k].priority == top && t[k].pass < vt)
			t[k].pass = vt;		/* back after a while: no burst for the time away */
	return top;
}

/* The next task goes to (fairness.h). */
int
wfe_fair_next(wfe_fair_tenant *t, int n, int top, double *vt)
{
	int			best = -1;

	for (int k = 0; k < n; k++)
		if (t[k].priority == top && t[k].cap != 0 && (t[k].cap < 0 || t[k].n < t[k].cap)
			&& (best < 0 || wfe_fair_before(t[k].pass, t[k].next_at, t[best].pass, t[best].next_at)))
			best = k;
	if (best < 0)
		return -1;
	*vt = t[best].pass;
	t[best].pass += 1.0 / t[best].weight;
	t[best].n++;
	return best;
}

/* Tenant k took only got of its tasks (fairness.h). */
void
wfe_fair_give_back(wfe_fair_tenant *t, int k, int got)
{
	if (got < t[k].n)
		t[k].pass -= (double) (t[k].n - got) / t[k].weight;
	t[k].n = got;
	t[k].cap = got;				/* full for this decision: the room goes to the others */
}
