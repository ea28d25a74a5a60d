/*
 * test_fairorder.c — unit tests of the order of two tenants of a fair
 * queue (wfe_fair_before, src/core/flow/fairness.c): the lower pass first, whatever the
 * tasks' ages; on equal passes, also equal after rounding, the tenant
 * whose next task is newer (no backlog); the stride over a backlog and a
 * trickle, as a claimer runs it.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/flow/fairness.h"
#include "tap.h"

#define SEC 1000000LL

/* A tenant as the claimer's stride sees it. */
typedef struct tenant
{
	const char *name;
	double		pass;
	int			weight;
	int64_t		ready;			/* its next task's ready_at */
	int			queued;
} tenant;

/*
 * One claim of one task among n tenants, through the core's stride
 * (wfe_fair_top, wfe_fair_next) as src/pg/fairness.c runs it: the tenants
 * with a task queued, each given at most one.  Returns the index served,
 * or -1.
 */
static int
claim(tenant *t, int n, double *vt)
{
	wfe_fair_tenant f[8];
	int			best;

	for (int k = 0; k < n; k++)
		f[k] = (wfe_fair_tenant) {.priority = 0, .weight = t[k].weight, .cap = t[k].queued > 0 ? 1 : 0,
		.next_at = t[k].ready, .pass = t[k].pass};
	best = wfe_fair_next(f, n, wfe_fair_top(f, n, *vt), vt);
	for (int k = 0; k < n; k++)
		if (f[k].cap != 0)
			t[k].pass = f[k].pass;	/* (a tenant with no work keeps its pass) */
	if (best >= 0)
		t[best].queued--;
	return best;
}

int
main(void)
{
	int64_t		t0 = 1000 * SEC;
	double		third = 0.0;

	/* the lower pass goes first, whatever the ages */
	ok(wfe_fair_before(1.0, t0, 2.0, t0 + SEC), "a lower pass goes first, though its task is older");
	ok(!wfe_fair_before(2.0, t0 + SEC, 1.0, t0), "a higher pass goes after, though its task is newer");
	ok(wfe_fair_before(1.9999, t0, 2.0, t0), "a pass lower by a weight-10000 step goes first");

	/* equal passes: the newer task, the tenant without a backlog */
	ok(wfe_fair_before(3.0, t0 + SEC, 3.0, t0), "equal passes: the newer task goes first");
	ok(!wfe_fair_before(3.0, t0, 3.0, t0 + SEC), "equal passes: the older task goes after");
	ok(!wfe_fair_before(3.0, t0, 3.0, t0) && !wfe_fair_before(3.0, t0, 3.0, t0),
	   "equal passes and ages: neither goes first");
	for (int k = 0; k < 3; k++)
		third += 1.0 / 3;
	ok(wfe_fair_before(third, t0 + 1, 1.0, t0) && !wfe_fair_before(1.0, t0, third, t0 + 1),
	   "three thirds, rounded, and 1.0 are equal passes: the newer goes first either way round");

	/* a claimer new to the queue: every tenant at 0, the trickle's task first */
	{
		tenant		t[2] = {{"big", 0, 1, t0, 100000}, {"small", 0, 1, t0 + 60 * SEC, 1}};
		double		vt = 0;

		ok(claim(t, 2, &vt) == 1, "a new claimer: small's new task before big's backlog (both at pass 0)");
		ok(claim(t, 2, &vt) == 0, "then big");
	}

	/* small served, then another of its tasks at once: level with big, and first again */
	{
		tenant		t[2] = {{"big", 0, 1, t0, 100000}, {"small", 0, 1, 0, 0}};
		double		vt = 0;
		int			a,
					b,
					c;

		for (int k = 0; k < 3; k++)
			(void) claim(t, 2, &vt);
		t[1].queued = 1;
		t[1].ready = t0 + 60 * SEC;
		a = claim(t, 2, &vt);
		t[1].queued = 1;
		t[1].ready = t0 + 61 * SEC;
		b = claim(t, 2, &vt);
		c = claim(t, 2, &vt);
		ok(a == 1 && b == 1 && c == 0 && t[0].pass == t[1].pass,
		   "small back beside big: its task first, and its next one too, at an equal pass (%d %d %d)", a, b, c);
	}

	/* a trickle beside a backlog: each of small's tasks goes at the next claim */
	{
		tenant		t[2] = {{"big", 0, 1, t0, 100000}, {"small", 0, 1, 0, 0}};
		double		vt = 0;
		int			waited = 0;
		int			served_big = 0;

		for (int c = 0; c < 1000; c++)
		{
			int			got;

			if (c % 7 == 0)
			{
				t[1].queued = 1;
				t[1].ready = t0 + (c + 1) * SEC;
			}
			got = claim(t, 2, &vt);
			if (got == 0)
				served_big++;
			if (t[1].queued > 0)
				waited++;
		}
		ok(waited == 0, "a trickle of one task every 7 claims never waits a claim (%d waited)", waited);
		ok(served_big == 1000 - 143, "and every other claim is big's (%d)", served_big);
	}

	/* two backlogs: the stride's shares are the weights', ties or not */
	{
		tenant		t[2] = {{"a", 0, 3, t0, 100000}, {"b", 0, 1, t0 + SEC, 100000}};
		double		vt = 0;
		int			got[2] = {0, 0};

		for (int c = 0; c < 400; c++)
			got[claim(t, 2, &vt)]++;
		ok(got[0] == 300 && got[1] == 100, "weights 3:1 over backlogs: 300 and 100 of 400 (%d, %d)", got[0], got[1]);
	}
	{
		tenant		t[3] = {{"a", 0, 1, t0 + 2 * SEC, 100000}, {"b", 0, 1, t0, 100000}, {"c", 0, 1, t0 + SEC, 100000}};
		double		vt = 0;
		char		seq[7] = {0};

		for (int c = 0; c < 6; c++)
			seq[c] = "abc"[claim(t, 3, &vt)];
		ok(strcmp(seq, "acbacb") == 0, "three equal backlogs take turns, the newest first in each round (%s)", seq);
	}
	return tap_done();
}
