/*
 * shmem.c — the little shared state wfe keeps: where the background worker
 * sleeps, when it plans to wake, and the commit-time wakeups backends send.
 *
 * A backend whose transaction queued in-database work, a timer, or an outbox
 * row calls wfe._wake(due); at commit (never before: an aborted transaction
 * must not wake anyone for nothing) the worker's latch is set if the work is
 * due before the worker's planned wakeup.  Nothing polls on a fixed beat.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "bgw.h"

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

WfeShared  *wfe_shared = NULL;

/* This transaction asked for a wakeup at (or before) this time. */
static TimestampTz pending_wake_at = 0;
static bool xact_callback_registered = false;

/* Reserve our shared memory (shmem_request_hook). */
static void
wfe_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(WfeShared)));
}

/* Create or attach the shared struct (shmem_startup_hook). */
static void
wfe_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	wfe_shared = ShmemInitStruct("wfe", sizeof(WfeShared), &found);
	if (!found)
	{
		memset(wfe_shared, 0, sizeof(WfeShared));
		SpinLockInit(&wfe_shared->mutex);
		SpinLockInit(&wfe_shared->ready_mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Install the hooks; only meaningful under shared_preload_libraries. */
void
wfe_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = wfe_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = wfe_shmem_startup;
}

/* At commit, set the worker's latch if this transaction asked for it. */
static void
wfe_xact_callback(XactEvent event, void *arg)
{
	TimestampTz due = pending_wake_at;
	TimestampTz now;
	Latch	   *latch = NULL;

	/*
	 * NB: a prepared transaction forgets its wakeup (COMMIT PREPARED runs
	 * elsewhere); the worker's poll interval then bounds the delay.
	 */
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	pending_wake_at = 0;
	if (due == 0 || wfe_shared == NULL ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		return;

	now = GetCurrentTimestamp();
	SpinLockAcquire(&wfe_shared->mutex);
	/* wake only a sleeper that would otherwise oversleep this work */
	if (wfe_shared->bgw_latch != NULL && due < wfe_shared->sleeping_until)
	{
		if (wfe_shared->sleeping_until == DT_NOEND && due > now)
		{
			/*
			 * The worker is in a round, and this work is not due yet: it
			 * sleeps no later than this (plan_sleep in bgw.c) rather than
			 * going round again at once.  Every claim asks to be woken by
			 * its execution deadline, mostly an hour away: under a steady
			 * claim load a latch set for each kept the worker going round
			 * after round for nothing (docs/benchmarks.md "The write path").
			 */
			if (wfe_shared->due_while_awake == 0 || due < wfe_shared->due_while_awake)
				wfe_shared->due_while_awake = due;
		}
		else
		{
			latch = wfe_shared->bgw_latch;
			wfe_shared->sleeping_until = due;
			wfe_shared->wake_requested_at = now;
			wfe_shared->wakeups_sent++;
		}
	}
	SpinLockRelease(&wfe_shared->mutex);
	if (latch)
		SetLatch(latch);
}

PG_FUNCTION_INFO_V1(wfe_wake);

/*
 * wfe._wake(due timestamptz DEFAULT now()) RETURNS void
 *
 * Ask for the background worker to be awake by `due`, once this transaction
 * commits.  Costs a comparison when there is no worker (no preload).
 */
Datum
wfe_wake(PG_FUNCTION_ARGS)
{
	wfe_wake_at(PG_ARGISNULL(0) ? GetCurrentTimestamp() : PG_GETARG_TIMESTAMPTZ(0));
	PG_RETURN_VOID();
}

/* Ask for the worker to be awake by due once this transaction commits (C callers). */
void
wfe_wake_at(TimestampTz due)
{
	if (wfe_shared == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(wfe_xact_callback, NULL);
		xact_callback_registered = true;
	}
	if (pending_wake_at == 0 || due < pending_wake_at)
		pending_wake_at = due;
}

PG_FUNCTION_INFO_V1(wfe_worker_status);

/* wfe.worker_status(): the shared state, for operators and the benchmark. */
Datum
wfe_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[9];
	bool		nulls[9];
	WfeShared	copy;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	memset(nulls, true, sizeof(nulls));
	if (wfe_shared == NULL)
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));

	SpinLockAcquire(&wfe_shared->mutex);
	copy = *wfe_shared;
	SpinLockRelease(&wfe_shared->mutex);

	memset(nulls, false, sizeof(nulls));
	values[0] = Int32GetDatum(copy.bgw_pid);
	nulls[0] = copy.bgw_pid == 0;
	values[1] = TimestampTzGetDatum(copy.started_at);
	nulls[1] = copy.started_at == 0;
	values[2] = TimestampTzGetDatum(copy.sleeping_until);
	nulls[2] = copy.sleeping_until == 0 || TIMESTAMP_NOT_FINITE(copy.sleeping_until);
	values[3] = TimestampTzGetDatum(copy.wake_requested_at);
	nulls[3] = copy.wake_requested_at == 0;
	values[4] = TimestampTzGetDatum(copy.woke_at);
	nulls[4] = copy.woke_at == 0;
	values[5] = Int64GetDatum(copy.wakeups_sent);
	values[6] = Int64GetDatum(copy.rounds);
	values[7] = Int64GetDatum(copy.timers_fired);
	values[8] = Int64GetDatum(copy.actions_run);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
