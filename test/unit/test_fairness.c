/*
 * test_fairness.c — unit tests of the stride between the tenants of a fair
 * queue (src/core/flow/fairness.c), which both poll claims and the release
 * of held broker tasks ask: shares by weight, the priority level served,
 * tenants' rooms, no burst after a while away, passes given back.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/flow/fairness.h"

#include "tap.h"

/* A tenant at priority prio, weight w, cap cap, pass 0. */
static wfe_fair_tenant
tenant(int prio, int w, int cap)
{
	wfe_fair_tenant t = {.priority = prio, .weight = w, .cap = cap};

	return t;
}

/* Give room tasks one at a time; returns how many went. */
static int
give(wfe_fair_tenant *t, int n, int room, double *vt)
{
	int			top = wfe_fair_top(t, n, *vt);
	int			given = 0;

	for (int r = 0; r < room; r++)
		if (wfe_fair_next(t, n, top, vt) >= 0)
			given++;
	return given;
}

int
main(void)
{
	double		vt = 0;

	/* equal weights: turns; ties go in the order given */
	{
		wfe_fair_tenant t[2] = {tenant(0, 1, -1), tenant(0, 1, -1)};
		int			top = wfe_fair_top(t, 2, vt);

		ok(top == 0, "the priority served is the tenants' (%d)", top);
		ok(wfe_fair_next(t, 2, top, &vt) == 0, "a tie: the first read goes first");
		ok(wfe_fair_next(t, 2, top, &vt) == 1, "then the other");
		ok(wfe_fair_next(t, 2, top, &vt) == 0, "then the first again");
	}

	/* weights 3 and 1: 3 to 1 over any whole number of rounds */
	{
		wfe_fair_tenant t[2] = {tenant(0, 3, -1), tenant(0, 1, -1)};

		vt = 0;
		ok(give(t, 2, 400, &vt) == 400, "all the room is given");
		ok(t[0].n == 300 && t[1].n == 100, "weights 3:1 share 3:1 (%d, %d)", t[0].n, t[1].n);
	}

	/* the passes never drift apart by more than the largest step: nobody falls behind */
	{
		wfe_fair_tenant t[3] = {tenant(0, 5, -1), tenant(0, 2, -1), tenant(0, 1, -1)};
		double		worst = 0;
		int			top;

		vt = 0;
		top = wfe_fair_top(t, 3, vt);
		for (int r = 1; r <= 800; r++)
		{
			double		lo,
						hi;

			(void) wfe_fair_next(t, 3, top, &vt);
			lo = hi = t[0].pass;
			for (int k = 1; k < 3; k++)
			{
				lo = t[k].pass < lo ? t[k].pass : lo;
				hi = t[k].pass > hi ? t[k].pass : hi;
			}
			worst = hi - lo > worst ? hi - lo : worst;
		}
		ok(worst <= 1.0, "the passes stay within one step of weight 1 of each other (%g)", worst);
		ok(t[0].n == 500 && t[1].n == 200 && t[2].n == 100, "800 tasks by weights 5:2:1 (%d, %d, %d)",
		   t[0].n, t[1].n, t[2].n);
	}

	/* the highest priority with room is served; a full tenant is passed over */
	{
		wfe_fair_tenant t[3] = {tenant(5, 1, 0), tenant(3, 1, -1), tenant(1, 1, -1)};
		int			top = wfe_fair_top(t, 3, 0);

		ok(top == 3, "a full tenant's priority is not served; the next with room is (%d)", top);
		vt = 0;
		ok(wfe_fair_next(t, 3, top, &vt) == 1 && wfe_fair_next(t, 3, top, &vt) == 1,
		   "only the tenants at the priority served are given tasks");
		ok(t[2].n == 0 && t[0].n == 0, "the lower and the full are given none");
	}

	/* a tenant's cap: it is given that many, the rest goes to the others */
	{
		wfe_fair_tenant t[2] = {tenant(0, 1, 2), tenant(0, 1, -1)};

		vt = 0;
		ok(give(t, 2, 10, &vt) == 10, "the room is all given");
		ok(t[0].n == 2 && t[1].n == 8, "the capped tenant gets its 2, the other the rest (%d, %d)", t[0].n, t[1].n);
		t[1].cap = 8;
		ok(wfe_fair_next(t, 2, 0, &vt) == -1, "every tenant full: nobody is next");
	}
	{
		wfe_fair_tenant t[1] = {tenant(0, 1, 0)};

		ok(wfe_fair_top(t, 1, 0) == WFE_FAIR_NONE, "no tenant with room: no priority");
	}

	/* back after a while: from the virtual time, no burst */
	{
		wfe_fair_tenant t[2] = {tenant(0, 1, -1), tenant(0, 1, -1)};
		int			given;

		t[0].pass = 100.0;
		t[1].pass = 3.0;		/* away since pass 3 */
		vt = 100.0;
		(void) wfe_fair_top(t, 2, vt);
		ok(t[1].pass == 100.0, "a tenant behind the virtual time is brought to it");
		given = give(t, 2, 4, &vt);
		ok(given == 4 && t[0].n == 2 && t[1].n == 2, "and shares from there, no burst (%d, %d)", t[0].n, t[1].n);
	}
	{
		wfe_fair_tenant t[2] = {tenant(0, 1, -1), tenant(2, 1, -1)};

		t[0].pass = 1.0;
		(void) wfe_fair_top(t, 2, 50.0);
		ok(t[0].pass == 1.0, "a tenant not at the priority served keeps its pass");
	}

	/* given back: a tenant that took fewer than given is charged only what it took */
	{
		wfe_fair_tenant t[2] = {tenant(0, 2, -1), tenant(0, 1, -1)};

		vt = 0;
		(void) give(t, 2, 6, &vt);
		ok(t[0].n == 4 && t[0].pass == 2.0, "weight 2 given 4: pass 2");
		wfe_fair_give_back(t, 0, 1);
		ok(t[0].n == 1 && t[0].pass == 0.5, "took 1: pass 0.5, n 1 (%g)", t[0].pass);
		ok(wfe_fair_next(t, 2, 0, &vt) == 1, "and it is given no more in this decision");
		wfe_fair_give_back(t, 1, 0);
		ok(t[1].pass == 0.0 && wfe_fair_next(t, 2, 0, &vt) == -1,
		   "a tenant that took none is charged nothing, and then nobody is next");
	}

	/* one task per decision (a release when one task ended): fair over many decisions */
	{
		wfe_fair_tenant t[2] = {tenant(0, 1, -1), tenant(0, 3, -1)};
		int			big = 0,
					small = 0;

		vt = 0;
		for (int r = 0; r < 40; r++)
		{
			int			k;

			t[0].n = t[1].n = 0;
			k = wfe_fair_next(t, 2, wfe_fair_top(t, 2, vt), &vt);
			if (k == 0)
				big++;
			else
				small++;
		}
		ok(big == 10 && small == 30, "40 decisions of one task each: 10 and 30 by weights 1:3 (%d, %d)", big, small);
	}
	return tap_done();
}
