/*
 * test_ratelimit.c — unit tests of the token-bucket arithmetic
 * (src/core/flow/ratelimit.c): refill, burst cap, takes, the due time of
 * held attempts, and the window property operations.md promises (over a
 * window with ample work, started <= rate x T + burst).
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/flow/ratelimit.h"

#include "tap.h"

#define SEC 1000000LL

int
main(void)
{
	wfe_bucket	b = {5, 0};
	int			got;

	ok(wfe_bucket_default_burst(0.2) == 1, "default burst of 0.2/s is 1");
	ok(wfe_bucket_default_burst(10) == 10, "default burst of 10/s is 10");
	ok(wfe_bucket_default_burst(2.5) == 3, "default burst of 2.5/s is 3");

	/* a full bucket gives its burst at once, then nothing */
	got = wfe_bucket_take(&b, 1, 5, 0, 10);
	ok(got == 5, "a full bucket of 5 gives 5 of 10 wanted (got %d)", got);
	ok(wfe_bucket_take(&b, 1, 5, 0, 1) == 0, "an empty bucket gives nothing");
	/* refill: one token a second */
	ok(wfe_bucket_take(&b, 1, 5, SEC / 2, 1) == 0, "half a second later: no whole token");
	ok(wfe_bucket_take(&b, 1, 5, SEC, 1) == 1, "a second later: one token");
	/* the burst caps a long idle time */
	got = wfe_bucket_take(&b, 1, 5, 1000 * SEC, 100);
	ok(got == 5, "after 1000 s idle, the burst (5) and no more (got %d)", got);
	/* a clock going back refills nothing and does not rewind at */
	b.tokens = 0;
	b.at_us = 10 * SEC;
	ok(wfe_bucket_take(&b, 1, 5, 5 * SEC, 1) == 0 && b.at_us == 10 * SEC,
	   "a clock going back gives nothing and keeps at");

	/* the due time of held attempts: one token apart */
	b.tokens = 0.25;
	b.at_us = 0;
	ok(wfe_bucket_due(&b, 4, 0, 0, 1) == 187500, "at 4/s with 0.25 tokens, the next token is due in 0.1875 s");
	ok(wfe_bucket_due(&b, 4, 0, 0, 2) == 437500, "the second held one a quarter second after it");
	ok(wfe_bucket_due(&b, 4, 0, 2 * SEC, 1) == 2 * SEC + 250000,
	   "after an earlier hold's horizon, one token past it");
	b.tokens = 3;
	ok(wfe_bucket_due(&b, 4, 7, 0, 1) == 7, "with tokens there, due now");

	/* the window property: claim greedily every 10 ms for 60 s */
	{
		double		rate = 7.5;
		int			burst = 20;
		long		started = 0;
		double		bound = rate * 60 + burst;

		b.tokens = burst;
		b.at_us = 0;
		for (int64_t t = 0; t <= 60 * SEC; t += 10000)
			started += wfe_bucket_take(&b, rate, burst, t, 1000);
		ok(started <= bound && started >= 0.95 * bound,
		   "60 s at 7.5/s burst 20: %ld started, bound %.0f", started, bound);
	}
	/* and with sparse claims (every 3 s), still within the bound */
	{
		long		started = 0;

		b.tokens = 2;
		b.at_us = 0;
		for (int64_t t = 0; t <= 60 * SEC; t += 3 * SEC)
			started += wfe_bucket_take(&b, 0.5, 2, t, 1000);
		ok(started <= 0.5 * 60 + 2, "60 s at 0.5/s burst 2 with sparse claims: %ld started", started);
	}

	return tap_done();
}
