/*
 * ratebuckets.h — token buckets in shared memory (ratebuckets.c), for the
 * claim's rate limits (src/pg/ratelimit.c).
 */
#ifndef WFE_RATEBUCKETS_H
#define WFE_RATEBUCKETS_H

#include "core/flow/ratelimit.h"

/* Reserve the table (under shared_preload_libraries, from _PG_init). */
extern void wfe_rate_shmem_init(void);

/* Whether buckets live in shared memory here (false: wfe.rate_buckets rows). */
extern bool wfe_rate_shmem_ready(void);

/*
 * Take up to want tokens from bucket (name, tenant, key); *b: its state
 * after, *horizon: the due of the last attempt held before.  Returns the
 * tokens taken, or -1 when the table has no room for the bucket.
 */
extern int	wfe_rate_shmem_take(const char *name, const char *tenant, const char *key,
								double rate, int burst, int want, int max_keys,
								wfe_bucket *b, int64 *horizon, bool *overflow);

/* Clear the held horizon of rate limit name's buckets, or drop them. */
extern void wfe_rate_shmem_reset(const char *name, bool drop);

/* How many buckets of rate limit name exist (of tenant's keys, or all with NULL). */
extern int	wfe_rate_shmem_count(const char *name, const char *tenant);

#endif							/* WFE_RATEBUCKETS_H */
