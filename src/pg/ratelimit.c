/*
 * ratelimit.c — rate limits at the claim (operations.md "Flow control").
 *
 * The claim (claim.c) picks its candidates from the ready index, locked;
 * wfe_rate_admit says which of them may go now: each bucket they name is
 * brought up to date and asked for as many tokens as candidates name it
 * (the arithmetic: src/core/flow/ratelimit.c).  Buckets live in shared
 * memory (src/bgw/ratebuckets.c: taken under a lock held for the
 * arithmetic only, so claims naming one bucket do not wait for each
 * other's commits); without shared_preload_libraries, in wfe.rate_buckets
 * rows, locked until the claim commits (in name, tenant, key order: two
 * claims never wait for each other's buckets in a circle).
 * A candidate without a token is held: it stays queued, with held_until its
 * token's due time, which takes it out of the ready index; the background
 * worker's timer is set for the first due, and wfe._release_rate_held
 * (the worker's round) makes it ready again then.  Nothing polls, and no
 * claim walks over held work.
 *
 * Keyed buckets are one per tenant and key value, created on first use; at
 * wfe.max_rate_keys buckets for a limit and tenant, those that have refilled
 * (equal to no row at all) are dropped, and while still at the cap new key
 * values share the tenant's overflow bucket (key ''), so a key taken from a
 * run's input cannot make rows without bound.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/flow/ratelimit.h"
#include "admission.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "bgw/ratebuckets.h"
#include "wfe.h"

#define TS TIMESTAMPTZOID

static stmt q_bucket = STMT(
	"SELECT b.tokens, b.at, b.held_through, l.per_second, l.burst"
	"  FROM wfe.rate_buckets AS b JOIN wfe.rate_limits AS l ON l.name = b.name"
	" WHERE b.name = $1 AND b.tenant = $2 AND b.key = $3"
	"   FOR NO KEY UPDATE OF b", 3, TX, TX, TX);
static stmt q_bucket_count = STMT(
	"SELECT count(*)::int FROM wfe.rate_buckets AS b WHERE b.name = $1 AND b.tenant = $2", 2, TX, TX);
/* a refilled bucket with nothing held is the same as no row */
static stmt q_bucket_prune = STMT(
	"DELETE FROM wfe.rate_buckets AS b USING wfe.rate_limits AS l"
	" WHERE b.name = $1 AND b.tenant = $2 AND b.key <> '' AND l.name = b.name"
	"   AND b.tokens + extract(epoch FROM now() - b.at) * l.per_second >= l.burst"
	"   AND (b.held_through IS NULL OR b.held_through < now())", 2, TX, TX);
static stmt q_bucket_new = STMT(
	"INSERT INTO wfe.rate_buckets (name, tenant, key, tokens, at)"
	" SELECT l.name, $2, $3, l.burst, now() FROM wfe.rate_limits AS l WHERE l.name = $1"
	" ON CONFLICT (name, tenant, key) DO NOTHING", 3, TX, TX, TX);
static stmt q_bucket_set = STMT(
	"UPDATE wfe.rate_buckets AS b SET tokens = $4, at = $5, held_through = $6"
	" WHERE b.name = $1 AND b.tenant = $2 AND b.key = $3", 6, TX, TX, TX, FLOAT8OID, TS, TS);
static stmt q_limit = STMT(
	"SELECT l.per_second, l.burst FROM wfe.rate_limits AS l WHERE l.name = $1", 1, TX);
static stmt q_hold = STMT(
	"UPDATE wfe.run_stages AS st SET held_until = $2 WHERE st.ctid = $1", 2, TIDOID, TS);
/* ...returning each one's queue, and whether it is a broker task to dispatch (then its run, stage, tenant) */
static stmt q_release = STMT(
	"UPDATE wfe.run_stages AS st SET held_until = NULL"
	" WHERE st.ctid = ANY (ARRAY(SELECT h.ctid FROM wfe.run_stages AS h"
	"                             WHERE h.held_until <= now() ORDER BY h.held_until LIMIT $1"
	"                               FOR UPDATE SKIP LOCKED))"
	" RETURNING st.queue,"
	"           st.state = 'queued' AND st.handler IS NULL"
	"           AND EXISTS (SELECT 1 FROM wfe.queues AS q"
	"                        WHERE q.queue = st.queue AND q.delivery = 'broker' AND NOT q.paused),"
	"           st.run_id, st.stage, coalesce(st.tenant, '')", 1, I4);
/* a broker task's bucket: its row's ctid, rate limit, key and tenant */
static stmt q_stage_rate = STMT(
	"SELECT st.ctid, st.rate_limit, st.rate_key, coalesce(st.tenant, '') FROM wfe.run_stages AS st"
	" WHERE st.run_id = $1 AND st.stage = $2 AND st.rate_limit IS NOT NULL", 2, I8, TX);
static stmt q_next_held = STMT(
	"SELECT min(h.held_until) FROM wfe.run_stages AS h WHERE h.held_until < 'infinity'", 0);

/* One bucket a claim's candidates name: its identity, and what they want of it. */
typedef struct bucket_ask
{
	const char *name;
	const char *tenant;			/* '' for an unkeyed bucket */
	const char *key;			/* '' for an unkeyed bucket */
	int			want;
	int			got;			/* tokens taken, handed out in candidate order */
	int			held;			/* candidates held so far */
	bool		known;			/* the rate limit exists */
	wfe_bucket	b;
	double		rate;
	int64		horizon;
} bucket_ask;

/* Order buckets by name, tenant, key (C collation): the lock order. */
static int
bucket_cmp(const void *a, const void *b)
{
	const bucket_ask *x = a,
			   *y = b;
	int			c = strcmp(x->name, y->name);

	if (c == 0)
		c = strcmp(x->tenant, y->tenant);
	if (c == 0)
		c = strcmp(x->key, y->key);
	return c;
}

/* Find (name, tenant, key) among asks, or -1. */
static int
bucket_find(bucket_ask *asks, int n, const char *name, const char *tenant, const char *key)
{
	for (int k = 0; k < n; k++)
		if (strcmp(asks[k].name, name) == 0 && strcmp(asks[k].tenant, tenant) == 0 &&
			strcmp(asks[k].key, key) == 0)
			return k;
	return -1;
}

/* Lock bucket a (creating a keyed one, within the cap); false when its rate limit does not exist. */
static bool
bucket_lock(bucket_ask *a)
{
	Datum		v[3] = {CStringGetTextDatum(a->name), CStringGetTextDatum(a->tenant),
	CStringGetTextDatum(a->key)};

	stmt_run(&q_bucket, v, NULL);
	if (SPI_processed == 0 && a->key[0] != '\0')
	{
		stmt_run(&q_bucket_count, v, NULL);
		if (pg_strtoint32(stmt_col(1)) >= wfe_max_rate_keys)
		{
			stmt_run(&q_bucket_prune, v, NULL);
			stmt_run(&q_bucket_count, v, NULL);
			if (pg_strtoint32(stmt_col(1)) >= wfe_max_rate_keys)
				v[2] = CStringGetTextDatum("");	/* the tenant's overflow bucket */
		}
		stmt_run(&q_bucket_new, v, NULL);
		stmt_run(&q_bucket, v, NULL);
	}
	if (SPI_processed == 0)
		return false;
	{
		HeapTuple	t = SPI_tuptable->vals[0];
		TupleDesc	d = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		held;

		a->b.tokens = DatumGetFloat8(SPI_getbinval(t, d, 1, &isnull));
		a->b.at_us = DatumGetTimestampTz(SPI_getbinval(t, d, 2, &isnull));
		held = SPI_getbinval(t, d, 3, &isnull);
		a->horizon = isnull ? 0 : DatumGetTimestampTz(held);
		a->rate = DatumGetFloat8(SPI_getbinval(t, d, 4, &isnull));
		a->b.tokens = Min(a->b.tokens, (double) DatumGetInt32(SPI_getbinval(t, d, 5, &isnull)));
		/* the burst rides along in want's place until the take */
		a->got = DatumGetInt32(SPI_getbinval(t, d, 5, &isnull));
	}
	/* the key actually locked (the overflow bucket when at the cap) */
	a->key = TextDatumGetCString(v[2]);
	return true;
}

/*
 * Take a's tokens from its row, locked until this transaction ends (no
 * shared memory); false when its rate limit does not exist.
 */
static bool
bucket_take_row(bucket_ask *a)
{
	const char *asked_key = a->key;
	int			burst;
	TimestampTz now;

	if (!bucket_lock(a))
		return false;
	burst = a->got;
	/* the time after the lock: a claim that waited for a bucket sees its wait's tokens */
	now = GetCurrentTimestamp();
	a->got = wfe_bucket_take(&a->b, a->rate, burst, now, a->want);
	/* the due of its held candidates is set by the caller; their count is known now */
	{
		int			short_by = a->want - a->got;
		int64		last = short_by > 0
			? wfe_bucket_due(&a->b, a->rate, now, a->horizon, short_by)
			: a->horizon;
		Datum		v[6] = {CStringGetTextDatum(a->name), CStringGetTextDatum(a->tenant),
							CStringGetTextDatum(a->key), Float8GetDatum(a->b.tokens),
		TimestampTzGetDatum(a->b.at_us), TimestampTzGetDatum(last)};
		char		nulls[6] = "      ";

		nulls[5] = last == 0 ? 'n' : ' ';
		stmt_run(&q_bucket_set, v, nulls);
		a->b.at_us = now;
	}
	/* candidates find their bucket by the key they asked for */
	a->key = asked_key;
	return true;
}

/*
 * Take a's tokens from shared memory (src/bgw/ratebuckets.c); false when
 * its rate limit does not exist.  A bucket the full table has no room for
 * gives no token: its candidates are held for one token's time.
 */
static bool
bucket_take_shmem(bucket_ask *a)
{
	Datum		v[1] = {CStringGetTextDatum(a->name)};
	bool		isnull;
	int			burst;
	bool		overflow;

	stmt_run(&q_limit, v, NULL);
	if (SPI_processed == 0)
		return false;
	a->rate = DatumGetFloat8(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	burst = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	a->got = wfe_rate_shmem_take(a->name, a->tenant, a->key, a->rate, burst, a->want,
								 wfe_max_rate_keys, &a->b, &a->horizon, &overflow);
	if (a->got < 0)
	{
		a->got = 0;
		a->b.tokens = 0;
		a->horizon = 0;
	}
	return true;
}

/*
 * Which of the n candidates (locked by the claim, in claim order) may be
 * claimed now: take[k].  The others are held until their token is due, and
 * the background worker is woken for the first.  limit[k] NULL: no rate limit.
 */
void
wfe_rate_admit(int n, ItemPointer *tids, char **limit, char **key, char **tenant, bool *take)
{
	bucket_ask *asks = palloc0(sizeof(bucket_ask) * Max(n, 1));
	int			nasks = 0;
	int		   *which = palloc(sizeof(int) * Max(n, 1));
	TimestampTz now;
	TimestampTz first_due = 0;

	for (int k = 0; k < n; k++)
	{
		const char *bt = key[k] ? tenant[k] : "";
		const char *bk = key[k] ? key[k] : "";
		int			j;

		which[k] = -1;
		if (limit[k] == NULL)
			continue;
		j = bucket_find(asks, nasks, limit[k], bt, bk);
		if (j < 0)
		{
			j = nasks++;
			asks[j].name = limit[k];
			asks[j].tenant = bt;
			asks[j].key = bk;
		}
		asks[j].want++;
	}
	qsort(asks, nasks, sizeof(bucket_ask), bucket_cmp);
	for (int j = 0; j < nasks; j++)
		asks[j].known = wfe_rate_shmem_ready() ? bucket_take_shmem(&asks[j]) : bucket_take_row(&asks[j]);
	now = GetCurrentTimestamp();
	for (int k = 0; k < n; k++)
	{
		bucket_ask *a;
		TimestampTz due;

		take[k] = true;
		if (limit[k] == NULL)
			continue;
		a = &asks[bucket_find(asks, nasks, limit[k], key[k] ? tenant[k] : "", key[k] ? key[k] : "")];
		if (a->known && a->got > 0)
		{
			a->got--;
			continue;
		}
		take[k] = false;
		if (!a->known)
			due = DT_NOEND;		/* infinity: until the rate limit is configured */
		else
		{
			due = wfe_bucket_due(&a->b, a->rate, now, a->horizon, ++a->held);
			if (first_due == 0 || due < first_due)
				first_due = due;
		}
		{
			Datum		v[2] = {PointerGetDatum(tids[k]), TimestampTzGetDatum(due)};

			stmt_run(&q_hold, v, NULL);
		}
	}
	if (first_due != 0)
		wfe_wake_at(first_due);
}

/*
 * A broker task is being dispatched (admission.c): take its token, if it
 * names a rate limit.  Without one it is held as a claim's candidate is
 * (held_until its token's due, the worker's timer set), and
 * wfe._release_rate_held dispatches it then.
 */
bool
wfe_rate_dispatch(int64 run_id, const char *stage)
{
	Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(stage)};
	ItemPointerData tid;
	ItemPointer tids[1] = {&tid};
	char	   *limit[1],
			   *key[1],
			   *tenant[1];
	bool		isnull;
	bool		take[1];

	stmt_run(&q_stage_rate, v, NULL);
	if (SPI_processed != 1)
		return true;
	ItemPointerCopy((ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
																1, &isnull)), &tid);
	limit[0] = stmt_col(2);
	key[0] = stmt_col(3);
	tenant[0] = stmt_col(4);
	wfe_rate_admit(1, tids, limit, key, tenant, take);
	return take[0];
}

PG_FUNCTION_INFO_V1(wfe_release_rate_held);

/*
 * wfe._release_rate_held(max) RETURNS int: the background worker's round
 * makes up to max held attempts whose token is due ready again, tells their
 * pollers, and sets its timer for the next due one.
 */
Datum
wfe_release_rate_held(PG_FUNCTION_ARGS)
{
	Datum		v[1] = {PG_GETARG_DATUM(0)};
	int			released;

	SPI_connect();
	stmt_run(&q_release, v, NULL);
	released = (int) SPI_processed;
	{
		char	  **queue = palloc(sizeof(char *) * Max(released, 1));
		bool	   *broker = palloc(sizeof(bool) * Max(released, 1));
		int64	   *run_id = palloc(sizeof(int64) * Max(released, 1));
		char	  **stage = palloc(sizeof(char *) * Max(released, 1));
		char	  **tenant = palloc(sizeof(char *) * Max(released, 1));

		for (int k = 0; k < released; k++)
		{
			HeapTuple	t = SPI_tuptable->vals[k];
			TupleDesc	d = SPI_tuptable->tupdesc;
			char	   *b = SPI_getvalue(t, d, 2);

			queue[k] = SPI_getvalue(t, d, 1);
			broker[k] = b != NULL && b[0] == 't';
			run_id[k] = pg_strtoint64(SPI_getvalue(t, d, 3));
			stage[k] = SPI_getvalue(t, d, 4);
			tenant[k] = SPI_getvalue(t, d, 5);
		}
		/* a poll task's pollers hear of it; a broker task is dispatched, through every gate again */
		for (int k = 0; k < released; k++)
			if (broker[k])
				wfe_admission_dispatch(run_id[k], stage[k], queue[k], tenant[k]);
			else if (queue[k] != NULL)
				wfe_ready_released(queue[k]);
	}
	stmt_run(&q_next_held, NULL, NULL);
	{
		bool		isnull;
		Datum		next = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		/* (one already due, past max, wakes the next round at once) */
		if (!isnull)
			wfe_wake_at(DatumGetTimestampTz(next));
	}
	SPI_finish();
	PG_RETURN_INT32(released);
}

PG_FUNCTION_INFO_V1(wfe_rate_buckets_reset);

/*
 * wfe._rate_buckets_reset(name, drop) RETURNS void: configure_rate_limit's
 * part in shared memory -- a changed limit's buckets forget their held
 * horizon (its held attempts are tried again), a dropped one's are removed.
 */
Datum
wfe_rate_buckets_reset(PG_FUNCTION_ARGS)
{
	wfe_rate_shmem_reset(text_to_cstring(PG_GETARG_TEXT_PP(0)), PG_GETARG_BOOL(1));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(wfe_rate_buckets_count);

/*
 * wfe._rate_buckets_count(name, tenant) RETURNS int: how many buckets of
 * rate limit name shared memory holds (tenant's keyed ones and its overflow
 * bucket; all with tenant NULL), or NULL without shared memory.
 */
Datum
wfe_rate_buckets_count(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0) || !wfe_rate_shmem_ready())
		PG_RETURN_NULL();
	PG_RETURN_INT32(wfe_rate_shmem_count(text_to_cstring(PG_GETARG_TEXT_PP(0)),
										 PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1))));
}
