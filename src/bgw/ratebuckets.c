/*
 * ratebuckets.c — token buckets in shared memory (operations.md "Flow
 * control").
 *
 * 0.3.0's first rate limits kept each bucket in a row that a claim locked
 * until its commit, so claims naming one bucket ran one at a time (0.72 of
 * the same run without a limit).  Here a bucket is an entry of a hash table
 * in shared memory, taken under one LWLock held for the arithmetic only
 * (src/core/flow/ratelimit.c): claims no longer wait for each other's
 * transactions.
 *
 * What that changes, and why it is safe:
 * - A token is taken when the claim asks, not when it commits.  A claim that
 *   rolls back gives its tokens back (an abort callback), so a rolled-back
 *   claim costs no rate; a claim in a subtransaction that rolls back keeps
 *   them (fewer attempts, never more).
 * - The state is not durable: after a server restart every bucket starts
 *   full, as a bucket unused for a while does.  A restart can at most
 *   refill a bucket (one burst more in that window); nothing else is lost,
 *   since held attempts keep their held_until in their rows.
 * - Entries are found by a 64-bit hash of (name, tenant, key): no key value
 *   from a run's data is kept in shared memory, and two buckets sharing a
 *   hash (odds 2^-64 a pair) would only share tokens.
 * - The table is bounded (WFE_RATE_BUCKETS entries).  A keyed bucket is one
 *   per tenant and key value, at most wfe.max_rate_keys per limit and
 *   tenant (counted on the tenant's overflow bucket, key ''); past that,
 *   refilled ones (equal to no entry) are dropped, and while still at the
 *   cap new key values share the overflow bucket.  With the whole table
 *   full of buckets still refilling, an attempt is held for one token's
 *   time (fewer attempts, never more).
 *
 * Without shared_preload_libraries there is no table; ratelimit.c then
 * keeps buckets in wfe.rate_buckets rows, as before.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/flow/ratelimit.h"
#include "bgw.h"
#include "ratebuckets.h"

#define WFE_RATE_BUCKETS 16384

/* A bucket: its state, and what finds its siblings. */
typedef struct rate_entry
{
	uint64		id;				/* hash key: (name, tenant, key) */
	uint64		owner;			/* (name, tenant, ''): the overflow bucket counting it; 0 if none */
	uint32		name_hash;		/* the limit's name: what configure_rate_limit finds */
	int32		nkeys;			/* on an overflow bucket: keyed buckets counted here */
	wfe_bucket	b;
	double		rate;			/* the rate and burst of its last take */
	int			burst;
	int64		horizon;		/* the due of the last attempt held (0: none) */
	bool		fresh;			/* not yet brought up to date: starts full */
} rate_entry;

static HTAB *rate_table = NULL;
static LWLock *rate_lock = NULL;
static shmem_request_hook_type prev_request = NULL;
static shmem_startup_hook_type prev_startup = NULL;

/* Tokens this transaction took, to give back if it aborts. */
typedef struct rate_taken
{
	uint64		id;
	int			n;
	struct rate_taken *next;
} rate_taken;
static rate_taken *taken = NULL;
static bool callback_registered = false;

/* Reserve the table and its lock (shmem_request_hook). */
static void
rate_shmem_request(void)
{
	if (prev_request)
		prev_request();
	RequestAddinShmemSpace(hash_estimate_size(WFE_RATE_BUCKETS, sizeof(rate_entry)));
	RequestNamedLWLockTranche("wfe_rate_buckets", 1);
}

/* Create or attach the table (shmem_startup_hook): empty after a restart. */
static void
rate_shmem_startup(void)
{
	HASHCTL		ctl;

	if (prev_startup)
		prev_startup();
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(rate_entry);
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rate_table = ShmemInitHash("wfe rate buckets", WFE_RATE_BUCKETS, WFE_RATE_BUCKETS, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	rate_lock = &(GetNamedLWLockTranche("wfe_rate_buckets"))->lock;
	LWLockRelease(AddinShmemInitLock);
}

/* Install the hooks (under shared_preload_libraries only). */
void
wfe_rate_shmem_init(void)
{
	prev_request = shmem_request_hook;
	shmem_request_hook = rate_shmem_request;
	prev_startup = shmem_startup_hook;
	shmem_startup_hook = rate_shmem_startup;
}

/* Whether buckets live in shared memory here. */
bool
wfe_rate_shmem_ready(void)
{
	return rate_table != NULL;
}

/* The 64-bit id of bucket (name, tenant, key); never 0. */
static uint64
bucket_id(const char *name, const char *tenant, const char *key)
{
	uint64		h = hash_bytes_extended((const unsigned char *) name, strlen(name) + 1, 0);

	h = hash_bytes_extended((const unsigned char *) tenant, strlen(tenant) + 1, h);
	h = hash_bytes_extended((const unsigned char *) key, strlen(key), h);
	return h == 0 ? 1 : h;
}

/* At abort, give back this transaction's tokens; at commit, keep them. */
static void
rate_xact_callback(XactEvent event, void *arg)
{
	rate_taken *t;

	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		if (taken != NULL && rate_table != NULL)
		{
			LWLockAcquire(rate_lock, LW_EXCLUSIVE);
			for (t = taken; t != NULL; t = t->next)
			{
				rate_entry *e = hash_search(rate_table, &t->id, HASH_FIND, NULL);

				/* (refill clamps to the burst at the next take) */
				if (e != NULL)
					e->b.tokens += t->n;
			}
			LWLockRelease(rate_lock);
		}
	}
	else if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
			 event != XACT_EVENT_PREPARE)
		return;
	/* the list lives in TopTransactionContext, gone with the transaction */
	taken = NULL;
}

/* Remember n tokens of id taken by this transaction. */
static void
remember_taken(uint64 id, int n)
{
	rate_taken *t;

	if (n <= 0)
		return;
	if (!callback_registered)
	{
		RegisterXactCallback(rate_xact_callback, NULL);
		callback_registered = true;
	}
	t = MemoryContextAlloc(TopTransactionContext, sizeof(rate_taken));
	t->id = id;
	t->n = n;
	t->next = taken;
	taken = t;
}

/* Drop the keyed buckets of owner (0: any) that have refilled and hold nothing back. */
static void
prune_refilled(uint64 owner, int64 now_us)
{
	HASH_SEQ_STATUS seq;
	rate_entry *e;

	hash_seq_init(&seq, rate_table);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->owner == 0 || (owner != 0 && e->owner != owner) || e->horizon >= now_us)
			continue;
		/* refilled (fresh ones are full): the same as no entry */
		if (!e->fresh)
		{
			wfe_bucket	b = e->b;

			wfe_bucket_refill(&b, e->rate, e->burst, now_us);
			if (b.tokens < e->burst)
				continue;
		}
		{
			rate_entry *o = hash_search(rate_table, &e->owner, HASH_FIND, NULL);

			if (o != NULL)
				o->nkeys--;
		}
		hash_search(rate_table, &e->id, HASH_REMOVE, NULL);
	}
}

/* Find or make entry id (NULL: the table is full). */
static rate_entry *
entry_get(uint64 id, uint32 name_hash, int64 now_us)
{
	bool		found;
	rate_entry *e = hash_search(rate_table, &id, HASH_ENTER_NULL, &found);

	if (e == NULL)
	{
		prune_refilled(0, now_us);
		e = hash_search(rate_table, &id, HASH_ENTER_NULL, &found);
	}
	if (e != NULL && !found)
	{
		e->owner = 0;
		e->name_hash = name_hash;
		e->nkeys = 0;
		e->b.tokens = 0;
		e->b.at_us = now_us;
		e->horizon = 0;
		e->fresh = true;
	}
	return e;
}

/*
 * Take up to want tokens from bucket (name, tenant, key) of rate and burst,
 * and note that short_by = want - taken attempts are held after it: *b gets
 * the bucket's state after the take and *horizon the due of the last attempt
 * held before; the bucket's horizon moves to the due of the last one held
 * now.  *overflow: the key shares its tenant's overflow bucket.  Returns
 * the tokens taken, or -1 when the table has no room for the bucket.
 */
int
wfe_rate_shmem_take(const char *name, const char *tenant, const char *key, double rate, int burst,
					int want, int max_keys, wfe_bucket *b, int64 *horizon, bool *overflow)
{
	uint32		name_hash = hash_bytes((const unsigned char *) name, strlen(name));
	uint64		id = bucket_id(name, tenant, key);
	uint64		owner = key[0] != '\0' ? bucket_id(name, tenant, "") : 0;
	rate_entry *e;
	int			got;
	int64		now_us;

	*overflow = false;
	LWLockAcquire(rate_lock, LW_EXCLUSIVE);
	now_us = GetCurrentTimestamp();
	e = hash_search(rate_table, &id, HASH_FIND, NULL);
	if (e == NULL && owner != 0)
	{
		/* a new key value: counted on its tenant's overflow bucket, within the cap */
		rate_entry *o = entry_get(owner, name_hash, now_us);

		if (o != NULL && o->nkeys >= max_keys)
			prune_refilled(owner, now_us);
		if (o != NULL && o->nkeys >= max_keys)
		{
			e = o;
			id = owner;
			*overflow = true;
		}
		else if (o != NULL)
		{
			e = entry_get(id, name_hash, now_us);
			if (e != NULL)
			{
				e->owner = owner;
				o->nkeys++;
			}
		}
	}
	else if (e == NULL)
		e = entry_get(id, name_hash, now_us);
	if (e == NULL)
	{
		LWLockRelease(rate_lock);
		return -1;
	}
	if (e->fresh)
	{
		e->b.tokens = burst;
		e->b.at_us = now_us;
		e->fresh = false;
	}
	/* a lowered burst applies at once */
	if (e->b.tokens > burst)
		e->b.tokens = burst;
	e->rate = rate;
	e->burst = burst;
	got = wfe_bucket_take(&e->b, rate, burst, now_us, want);
	*b = e->b;
	*horizon = e->horizon;
	if (want > got)
		e->horizon = wfe_bucket_due(&e->b, rate, now_us, e->horizon, want - got);
	LWLockRelease(rate_lock);
	remember_taken(id, got);
	return got;
}

/*
 * Forget what the buckets of rate limit name know beyond their tokens: the
 * held horizon (configure_rate_limit, whose held attempts are tried again),
 * or, with drop, the buckets themselves (a limit configured anew starts full).
 */
void
wfe_rate_shmem_reset(const char *name, bool drop)
{
	uint32		name_hash = hash_bytes((const unsigned char *) name, strlen(name));
	HASH_SEQ_STATUS seq;
	rate_entry *e;

	if (rate_table == NULL)
		return;
	LWLockAcquire(rate_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, rate_table);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->name_hash != name_hash)
			continue;
		if (drop)
			hash_search(rate_table, &e->id, HASH_REMOVE, NULL);
		else
			e->horizon = 0;
	}
	LWLockRelease(rate_lock);
}

/* How many buckets of rate limit name (keyed ones of tenant, or all with NULL) exist. */
int
wfe_rate_shmem_count(const char *name, const char *tenant)
{
	uint32		name_hash = hash_bytes((const unsigned char *) name, strlen(name));
	uint64		owner = tenant ? bucket_id(name, tenant, "") : 0;
	HASH_SEQ_STATUS seq;
	rate_entry *e;
	int			n = 0;

	if (rate_table == NULL)
		return 0;
	LWLockAcquire(rate_lock, LW_SHARED);
	hash_seq_init(&seq, rate_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->name_hash == name_hash && (owner == 0 || e->owner == owner || e->id == owner))
			n++;
	LWLockRelease(rate_lock);
	return n;
}
