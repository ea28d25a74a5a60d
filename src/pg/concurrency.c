/*
 * concurrency.c — keyed concurrency at the claim and at an attempt's end
 * (operations.md "Flow control"; the decisions: src/core/flow/concurrency.c).
 *
 * The claim (claim.c) picks and locks its candidates; wfe_concurrency_admit
 * locks each key they name (a wfe lock per queue, tenant and key value,
 * locks.c), counts the key's attempts in flight, and holds the candidates
 * that do not fit: queued with held_until 'infinity', out of the ready
 * index.  When an attempt of a key ends, wfe_concurrency_freed makes as
 * many held attempts ready again as the key now has room for, in the
 * ending transaction, and tells their pollers at commit.
 *
 * Lock order: nobody waits for a key's lock while holding anything a key's
 * holder may wait for.  Claims and ending attempts only try the lock (an
 * ending attempt may go on to wait for run, row and admission locks; a
 * claim holds its candidates' rows, which an ending attempt of the same run
 * may need).  A claim that misses leaves that key's candidates ready for
 * the next claim; an ending attempt that misses leaves the key in
 * wfe.concurrency_recheck, and the background worker's round -- which
 * takes the keys' locks first, in order, holding nothing yet -- waits for
 * it and releases what fits.  So no release is lost, and no two
 * transactions wait for each other in a circle over a key.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/flow/concurrency.h"
#include "admission.h"
#include "spi_stmt.h"
#include "bgw/bgw.h"
#include "wfe.h"

/* the key's attempts in flight: the claim's count, at most max */
static stmt q_in_flight = STMT(
	"SELECT count(*)::int FROM (SELECT 1 FROM wfe.run_stages AS st"
	"  WHERE st.queue = $1 AND st.state IN ('dispatched', 'running') AND st.tenant = $2"
	"    AND st.concurrency_key = $3 AND st.held_until IS NULL LIMIT $4) AS x", 4, TX, TX, TX, I4);
/* ...and its queued ones not held, which claims will decide: the release's count */
static stmt q_busy = STMT(
	"SELECT count(*)::int FROM (SELECT 1 FROM wfe.run_stages AS st"
	"  WHERE st.queue = $1 AND st.state IN ('queued', 'dispatched', 'running') AND st.tenant = $2"
	"    AND st.concurrency_key = $3 AND st.held_until IS NULL LIMIT $4) AS x", 4, TX, TX, TX, I4);
static stmt q_hold = STMT(
	"UPDATE wfe.run_stages AS st SET held_until = 'infinity' WHERE st.ctid = ANY ($1)", 1, TIDARRAYOID);
/* the key's next held attempts (not those waiting for a rate limit to be configured) */
static stmt q_release = STMT(
	"UPDATE wfe.run_stages AS st SET held_until = NULL"
	" WHERE st.ctid = ANY (ARRAY(SELECT h.ctid FROM wfe.run_stages AS h"
	"                             WHERE h.queue = $1 AND h.tenant = $2 AND h.concurrency_key = $3"
	"                               AND h.state = 'queued' AND h.held_until = 'infinity'"
	"                               AND (h.rate_limit IS NULL OR EXISTS (SELECT 1 FROM wfe.rate_limits AS l"
	"                                                                    WHERE l.name = h.rate_limit))"
	"                             ORDER BY h.priority DESC, h.ready_at LIMIT $4"
	"                               FOR UPDATE SKIP LOCKED))"
	" RETURNING st.run_id, st.stage", 4, TX, TX, TX, I4);
/* a broker dispatch's key held: out of the count until an attempt of its key ends */
static stmt q_hold_stage = STMT(
	"UPDATE wfe.run_stages AS st SET held_until = 'infinity' WHERE st.run_id = $1 AND st.stage = $2", 2, I8, TX);
/* released attempts of a broker queue are dispatched, not claimed */
static stmt q_broker_open = STMT(
	"SELECT EXISTS (SELECT 1 FROM wfe.queues AS q WHERE q.queue = $1 AND q.delivery = 'broker' AND NOT q.paused)",
	1, TX);
static stmt q_ended = STMT(
	"SELECT st.queue, st.tenant, st.concurrency_key, st.concurrency_max FROM wfe.run_stages AS st"
	" WHERE st.run_id = $1 AND st.stage = $2 AND st.concurrency_key IS NOT NULL AND st.queue IS NOT NULL",
	2, I8, TX);
static stmt q_recheck_later = STMT(
	"INSERT INTO wfe.concurrency_recheck (queue, tenant, key, max) VALUES ($1, $2, $3, $4)", 4, TX, TX, TX, I4);
static stmt q_rechecks = STMT(
	"WITH d AS (DELETE FROM wfe.concurrency_recheck RETURNING queue, tenant, key, max)"
	" SELECT d.queue, d.tenant, d.key, max(d.max) FROM d GROUP BY d.queue, d.tenant, d.key"
	" ORDER BY d.queue COLLATE \"C\", d.tenant COLLATE \"C\", d.key COLLATE \"C\"", 0);

/* One key a claim's candidates name. */
typedef struct key_ask
{
	const char *tenant;
	const char *key;
	int			max;			/* the smallest max of its candidates */
} key_ask;

/* Order keys by tenant, key (C collation). */
static int
key_cmp(const void *a, const void *b)
{
	const key_ask *x = a,
			   *y = b;
	int			c = strcmp(x->tenant, y->tenant);

	return c != 0 ? c : strcmp(x->key, y->key);
}

/* The name of a key's lock: queue, tenant and key value, unit-separated. */
static char *
key_lock_name(const char *queue, const char *tenant, const char *key)
{
	return psprintf("%s\x1f%s\x1f%s", queue, tenant, key);
}

/* Count with statement q (queue, tenant, key, max). */
static int
key_count(stmt *q, const char *queue, const char *tenant, const char *key, int max)
{
	Datum		v[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant),
	CStringGetTextDatum(key), Int32GetDatum(max)};

	stmt_run(q, v, NULL);
	return pg_strtoint32(stmt_col(1));
}

/*
 * Which of the n candidates (locked by the claim, in claim order) may be
 * claimed now: take[k].  Those whose key is full are held; those whose
 * key's lock was busy are left ready.  key[k] NULL: no keyed concurrency.
 */
void
wfe_concurrency_admit(const char *queue, int n, ItemPointer *tids, char **tenant, char **key, int *max,
					  bool *take)
{
	key_ask    *asks = palloc0(sizeof(key_ask) * Max(n, 1));
	int			nasks = 0;
	int		   *slot = palloc(sizeof(int) * Max(n, 1));
	int		   *room;
	wfe_slot_verdict *verdict = palloc(sizeof(wfe_slot_verdict) * Max(n, 1));
	Datum	   *held = palloc(sizeof(Datum) * Max(n, 1));
	int			nheld = 0;

	for (int k = 0; k < n; k++)
	{
		int			j;

		if (key[k] == NULL)
			continue;
		for (j = 0; j < nasks; j++)
			if (strcmp(asks[j].tenant, tenant[k]) == 0 && strcmp(asks[j].key, key[k]) == 0)
				break;
		if (j == nasks)
		{
			asks[j].tenant = tenant[k];
			asks[j].key = key[k];
			asks[j].max = max[k];
			nasks++;
		}
		asks[j].max = Min(asks[j].max, max[k]);
	}
	qsort(asks, nasks, sizeof(key_ask), key_cmp);
	room = palloc(sizeof(int) * Max(nasks, 1));
	for (int j = 0; j < nasks; j++)
		room[j] = !wfe_lock("wfe.concurrency", key_lock_name(queue, asks[j].tenant, asks[j].key), true) ? -1
			: wfe_slots_room(asks[j].max, key_count(&q_in_flight, queue, asks[j].tenant, asks[j].key,
													asks[j].max));
	for (int k = 0; k < n; k++)
	{
		slot[k] = -1;
		if (key[k] != NULL)
		{
			key_ask		probe = {tenant[k], key[k], 0};
			key_ask    *a = bsearch(&probe, asks, nasks, sizeof(key_ask), key_cmp);

			slot[k] = (int) (a - asks);
		}
	}
	wfe_slots_admit(n, slot, room, verdict);
	for (int k = 0; k < n; k++)
	{
		take[k] = verdict[k] == WFE_SLOT_GO;
		if (verdict[k] == WFE_SLOT_HOLD)
			held[nheld++] = PointerGetDatum(tids[k]);
	}
	if (nheld > 0)
	{
		Datum		v[1] = {PointerGetDatum(construct_array(held, nheld, TIDOID, sizeof(ItemPointerData),
															 false, TYPALIGN_SHORT))};

		stmt_run(&q_hold, v, NULL);
	}
}

/* Release the held attempts of a key whose lock this transaction holds, as many as fit. */
static void
key_release(const char *queue, const char *tenant, const char *key, int max)
{
	int			room = wfe_slots_room(max, key_count(&q_busy, queue, tenant, key, max));

	if (room > 0)
	{
		Datum		v[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant),
		CStringGetTextDatum(key), Int32GetDatum(room)};

		int			n;
		int64	   *run_id;
		char	  **stage;
		Datum		q[1] = {CStringGetTextDatum(queue)};

		stmt_run(&q_release, v, NULL);
		n = (int) SPI_processed;
		if (n == 0)
			return;
		run_id = palloc(sizeof(int64) * n);
		stage = palloc(sizeof(char *) * n);
		for (int k = 0; k < n; k++)
		{
			run_id[k] = pg_strtoint64(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1));
			stage[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2);
		}
		stmt_run(&q_broker_open, q, NULL);
		if (!stmt_bool(1))
			wfe_ready_released(queue);	/* its pollers hear of it at commit */
		else
			/* a broker queue's: dispatched now, within its queue's and tenant's limits */
			for (int k = 0; k < n; k++)
				wfe_admission_dispatch(run_id[k], stage[k], queue, tenant);
	}
}

/*
 * A broker task of (queue, tenant) with keyed concurrency (key, max) is
 * being dispatched: may it go?  Its row is queued and not held, so the
 * key's count includes it.  The key's lock is only tried, as at an
 * attempt's end (the lock order above): a miss holds the task and hands the
 * key to the worker's next round, which releases what fits.  A full key
 * holds it until an attempt of the key ends (wfe_concurrency_freed).
 */
bool
wfe_concurrency_dispatch(int64 run_id, const char *stage, const char *queue, const char *tenant,
						 const char *key, int max)
{
	Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(stage)};

	if (!wfe_lock("wfe.concurrency", key_lock_name(queue, tenant, key), true))
	{
		Datum		r[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant),
		CStringGetTextDatum(key), Int32GetDatum(max)};

		stmt_run(&q_recheck_later, r, NULL);
		wfe_wake_at(GetCurrentTimestamp());
	}
	/* the others busy: the count, less this task, at most max of them */
	else if (wfe_slots_room(max, key_count(&q_busy, queue, tenant, key, max + 1) - 1) > 0)
		return true;
	stmt_run(&q_hold_stage, v, NULL);
	return false;
}

/*
 * An attempt of stage (run_id, stage) ended or left (its row written): if
 * the stage has keyed concurrency, its key has room for a held attempt.
 */
void
wfe_concurrency_freed(int64 run_id, const char *stage)
{
	Datum		v[2] = {Int64GetDatum(run_id), CStringGetTextDatum(stage)};
	char	   *queue,
			   *tenant,
			   *key;
	int			max;

	stmt_run(&q_ended, v, NULL);
	if (SPI_processed != 1)
		return;
	queue = stmt_col(1);
	tenant = stmt_col(2);
	key = stmt_col(3);
	max = pg_strtoint32(stmt_col(4));
	wfe_concurrency_key_freed(queue, tenant, key, max);
}

/*
 * An attempt of key (queue, tenant, key, max) ended: release what fits
 * now, or leave the key to the worker's round when its lock is busy.
 */
void
wfe_concurrency_key_freed(const char *queue, const char *tenant, const char *key, int max)
{
	if (wfe_lock("wfe.concurrency", key_lock_name(queue, tenant, key), true))
		key_release(queue, tenant, key, max);
	else
	{
		/* busy: the worker's next round waits for it (the lock order above) */
		Datum		r[4] = {CStringGetTextDatum(queue), CStringGetTextDatum(tenant),
		CStringGetTextDatum(key), Int32GetDatum(max)};

		stmt_run(&q_recheck_later, r, NULL);
		wfe_wake_at(GetCurrentTimestamp());
	}
}

PG_FUNCTION_INFO_V1(wfe_recheck_concurrency);

/*
 * wfe._recheck_concurrency() RETURNS int: the worker round's first item --
 * for each key in wfe.concurrency_recheck (emptied), in order, wait for its
 * lock and release what fits; returns how many keys.
 */
Datum
wfe_recheck_concurrency(PG_FUNCTION_ARGS)
{
	int			n;
	char	  **queue,
			  **tenant,
			  **key;
	int		   *max;

	SPI_connect();
	stmt_run(&q_rechecks, NULL, NULL);
	n = (int) SPI_processed;
	queue = palloc(sizeof(char *) * Max(n, 1));
	tenant = palloc(sizeof(char *) * Max(n, 1));
	key = palloc(sizeof(char *) * Max(n, 1));
	max = palloc(sizeof(int) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		queue[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		tenant[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 2);
		key[k] = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 3);
		max[k] = pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 4));
	}
	for (int k = 0; k < n; k++)
	{
		wfe_lock("wfe.concurrency", key_lock_name(queue[k], tenant[k], key[k]), false);
		key_release(queue[k], tenant[k], key[k], max[k]);
	}
	SPI_finish();
	PG_RETURN_INT32(n);
}
