/*
 * ratelimit.c — token-bucket arithmetic (ratelimit.h).
 */
#include <math.h>

#include "ratelimit.h"

/* The burst a bucket gets when none is configured: one second's tokens, at least 1. */
int
wfe_bucket_default_burst(double rate)
{
	double		b = ceil(rate);

	return b < 1 ? 1 : (b > 1e9 ? 1000000000 : (int) b);
}

/* Bring b up to now_us: rate tokens a second, never more than burst. */
void
wfe_bucket_refill(wfe_bucket *b, double rate, int burst, int64_t now_us)
{
	/* a clock that went back refills nothing (and does not move at back) */
	if (now_us > b->at_us)
	{
		b->tokens += (double) (now_us - b->at_us) * rate / 1e6;
		b->at_us = now_us;
	}
	if (b->tokens > burst)
		b->tokens = burst;
	if (b->tokens < 0)
		b->tokens = 0;
}

/* Refill b, then take up to want whole tokens; returns how many were taken. */
int
wfe_bucket_take(wfe_bucket *b, double rate, int burst, int64_t now_us, int want)
{
	int			got;

	wfe_bucket_refill(b, rate, burst, now_us);
	/* tiny float error must not cost a token that is due: 1e-9 of slack */
	got = (int) floor(b->tokens + 1e-9);
	if (got > want)
		got = want;
	if (got < 0)
		got = 0;
	b->tokens -= got;
	if (b->tokens < 0)
		b->tokens = 0;
	return got;
}

/* When the k-th attempt held now will find its token (ratelimit.h). */
int64_t
wfe_bucket_due(const wfe_bucket *b, double rate, int64_t now_us, int64_t horizon_us, int k)
{
	double		missing = (double) k - b->tokens;
	int64_t		due = now_us + (int64_t) ceil((missing > 0 ? missing : 0) * 1e6 / rate);
	int64_t		spaced = horizon_us > 0 ? horizon_us + (int64_t) ceil((double) k * 1e6 / rate) : 0;

	return spaced > due ? spaced : due;
}
