/*
 * ratelimit.h — token buckets (operations.md "Flow control"): the
 * arithmetic of rate limits, pure C, no PostgreSQL headers.
 *
 * A bucket holds up to `burst` tokens and gains `rate` tokens a second; an
 * attempt takes one token before it can be claimed or dispatched.  The
 * server layer (src/pg/ratelimit.c) keeps a bucket's state in a row
 * (tokens, at) and asks this file what a claim may take and, for what it
 * may not, when each held attempt's token will be due.  Times are
 * microseconds on any fixed epoch (PostgreSQL's TimestampTz fits).
 */
#ifndef WFE_RATELIMIT_H
#define WFE_RATELIMIT_H

#include <stdint.h>

/* A bucket's state: its tokens as of at_us. */
typedef struct wfe_bucket
{
	double		tokens;			/* 0 .. burst, fractional between refills */
	int64_t		at_us;			/* when tokens was last brought up to date */
} wfe_bucket;

/* The burst a bucket gets when none is configured: one second's tokens, at least 1. */
extern int	wfe_bucket_default_burst(double rate);

/* Bring b up to now_us: rate tokens a second, never more than burst. */
extern void wfe_bucket_refill(wfe_bucket *b, double rate, int burst, int64_t now_us);

/* Refill b, then take up to want whole tokens; returns how many were taken. */
extern int	wfe_bucket_take(wfe_bucket *b, double rate, int burst, int64_t now_us, int want);

/*
 * When the k-th attempt held now (k >= 1, after a take left b short) will
 * find its token: k tokens past what b holds, and never before k tokens
 * past horizon_us, the due of the last attempt held before (0: none), so
 * held attempts come back one token apart rather than all at once.
 */
extern int64_t wfe_bucket_due(const wfe_bucket *b, double rate, int64_t now_us,
							  int64_t horizon_us, int k);

#endif							/* WFE_RATELIMIT_H */
