/*
 * fairness.c — stride scheduling between the tenants of a fair queue
 * (fairness.h).
 */
#include "fairness.h"

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
			&& (best < 0 || t[k].pass < t[best].pass))
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
