/*
 * bgw.c — the wfe background worker: fires timers, runs in-database
 * actions, publishes the outbox (publisher.c) and removes expired history.
 * ("bgw" in names, so that "worker" keeps meaning a program that does
 * tasks; operators still see it as backend_type 'wfe worker'.)
 *
 * Written the way worker_spi, autoprewarm and pg_cron are: a latch loop with
 * WL_EXIT_ON_PM_DEATH, SIGHUP reloads the configuration, SIGTERM ends the
 * loop cleanly, a nonzero restart time brings it back after a crash, and on
 * start it repairs what a crash left half done.  It decides nothing about
 * runs: it calls the SQL entry points wfe.tick() uses too (wfe._worker_round,
 * wfe._run_next_handler, ...), which hand each due timer or deadline to the
 * run engine (src/pg/engine.c over the step core), each unit in a short
 * transaction of its own; this file only decides when.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "bgw.h"

PGDLLEXPORT void wfe_bgw_main(Datum main_arg);

/* How long the worker waits for a lock at most (lock_timeout). */
#define WORKER_LOCK_TIMEOUT "1s"

/* How often retention runs, at most. */
#define RETENTION_INTERVAL_MS (60 * 1000)

/* Rounds in a row that found work due but took none (see run_round). */
static int	empty_due_rounds = 0;

/* Register the background worker; called from _PG_init under shared_preload_libraries. */
void
wfe_bgw_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "wfe");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "wfe_bgw_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "wfe worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "wfe worker");
	RegisterBackgroundWorker(&worker);
}

/* Forget our latch when we exit, so no backend sets a dead one. */
static void
bgw_detach(int code, Datum arg)
{
	SpinLockAcquire(&wfe_shared->mutex);
	wfe_shared->bgw_latch = NULL;
	wfe_shared->bgw_pid = 0;
	wfe_shared->sleeping_until = 0;
	wfe_shared->due_while_awake = 0;
	SpinLockRelease(&wfe_shared->mutex);
}

/*
 * Run fn(arg) in a transaction of its own, with SPI connected and a
 * snapshot pushed.  An error is reported and the transaction rolled back;
 * the worker goes on (the failed unit is retried on a later round).
 */
bool
wfe_in_transaction(const char *activity, void (*fn) (void *arg), void *arg)
{
	MemoryContext caller = CurrentMemoryContext;
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, activity);
	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		/* report, roll back, and carry on with the next unit of work */
		MemoryContextSwitchTo(caller);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(caller);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

typedef struct scalar_unit
{
	const char *sql;
	int64		result;
} scalar_unit;

/* wfe_in_transaction body: one statement returning one int8. */
static void
scalar_unit_body(void *arg)
{
	scalar_unit *u = arg;
	bool		isnull;
	Datum		value;

	if (SPI_execute(u->sql, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "wfe worker: \"%s\" did not return one row", u->sql);
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	u->result = isnull ? 0 : DatumGetInt64(value);
}

/* One SQL statement returning one int8, in its own transaction; -1 on error. */
static int64
run_unit(const char *activity, const char *sql)
{
	scalar_unit u = {sql, 0};

	return wfe_in_transaction(activity, scalar_unit_body, &u) ? u.result : -1;
}

/* Is wfe installed (at the version this library serves) in our database? */
static bool
extension_ready(void)
{
	return run_unit("wfe worker: looking for the extension",
					"SELECT pg_catalog.count(*) FROM pg_catalog.pg_extension e "
					"JOIN pg_catalog.pg_proc p ON p.proname OPERATOR(pg_catalog.=) '_worker_round' "
					"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace "
					"AND n.nspname OPERATOR(pg_catalog.=) 'wfe' "
					"WHERE e.extname OPERATOR(pg_catalog.=) 'wfe'") > 0;
}

/* Publish our latch, so committing backends can wake us. */
static void
attach_to_shared(void)
{
	SpinLockAcquire(&wfe_shared->mutex);
	wfe_shared->bgw_latch = MyLatch;
	wfe_shared->bgw_pid = MyProcPid;
	wfe_shared->started_at = GetCurrentTimestamp();
	wfe_shared->sleeping_until = DT_NOEND;
	SpinLockRelease(&wfe_shared->mutex);
	before_shmem_exit(bgw_detach, (Datum) 0);
}

/* Tell backends until when we sleep (0: we are awake and will look). */
static void
set_sleeping_until(TimestampTz until)
{
	SpinLockAcquire(&wfe_shared->mutex);
	wfe_shared->sleeping_until = until;
	SpinLockRelease(&wfe_shared->mutex);
}

/*
 * Plan the sleep after a round: sleep_ms from now, or less when a commit
 * during the round asked for work due sooner (shmem.c leaves such a
 * request there instead of setting the latch).  Returns the milliseconds
 * to sleep; 0: something is due already, go round again.
 */
static long
plan_sleep(long sleep_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = TimestampTzPlusMilliseconds(now, sleep_ms);

	SpinLockAcquire(&wfe_shared->mutex);
	if (wfe_shared->due_while_awake != 0 && wfe_shared->due_while_awake < until)
		until = wfe_shared->due_while_awake;
	wfe_shared->due_while_awake = 0;
	wfe_shared->sleeping_until = until;
	SpinLockRelease(&wfe_shared->mutex);
	if (until <= now)
		return 0;
	/* rounded up: waking a millisecond early would find nothing due */
	return (long) ((until - now + 999) / 1000);
}

/*
 * One round: fire what is due, run queued in-database actions one per
 * transaction, and say how long we may sleep.  Returns true when a batch
 * was full, i.e. there is more to do right away.
 */
static bool
run_round(long *sleep_ms)
{
	char		sql[128];
	int64		fired,
				actions = 0,
				published,
				next;
	bool		publish_more = false;
	long		publish_wait_ms = -1;

	/*
	 * Awake: any commit that adds work sets our latch from now on, so work
	 * added after we looked makes the next WaitLatch return at once.
	 */
	set_sleeping_until(DT_NOEND);

	snprintf(sql, sizeof(sql), "SELECT wfe._worker_round(%d)::pg_catalog.int8", wfe_bgw_batch);
	fired = run_unit("wfe worker: firing timers and deadlines", sql);

	/* in-database actions: one transaction per attempt */
	while (actions < wfe_bgw_batch && !ShutdownRequestPending &&
		   run_unit("wfe worker: running an in-database action",
					"SELECT wfe._run_next_handler('wfe worker')::pg_catalog.int4::pg_catalog.int8") > 0)
		actions++;

	/* the outbox: publish what committed transactions wrote */
	published = wfe_publisher_round(&publish_more, &publish_wait_ms);

	next = run_unit("wfe worker: planning", "SELECT coalesce(wfe._next_due_ms(), -1::pg_catalog.int8)");

	SpinLockAcquire(&wfe_shared->mutex);
	wfe_shared->rounds++;
	wfe_shared->timers_fired += Max(fired, 0);
	wfe_shared->actions_run += actions;
	SpinLockRelease(&wfe_shared->mutex);

	*sleep_ms = wfe_poll_interval_ms;
	if (next >= 0 && next < *sleep_ms)
		*sleep_ms = next;

	/*
	 * Something is due that this round did not take.  It may have fallen due
	 * after the round looked: go round again at once.  If the next round
	 * takes nothing either, it is locked by a transaction in progress: look
	 * again shortly rather than spin.
	 */
	if (next == 0 && fired <= 0 && actions == 0 && published <= 0)
	{
		if (empty_due_rounds++ == 0)
			return true;
		*sleep_ms = Min(wfe_poll_interval_ms, 100);
	}
	else
		empty_due_rounds = 0;
	if (publish_wait_ms >= 0 && publish_wait_ms < *sleep_ms)
		*sleep_ms = publish_wait_ms;	/* reconnect or retry backoff */
	return fired >= wfe_bgw_batch || actions >= wfe_bgw_batch || publish_more;
}

/* The background worker's entry point. */
void
wfe_bgw_main(Datum main_arg)
{
	MemoryContext loop_context;
	TimestampTz last_retention = 0;
	bool		repaired = false;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(wfe_database, NULL, 0);
	/*
	 * Pin search_path above any database or role setting for the whole
	 * session: with pg_catalog first and pg_temp last, no object a user
	 * creates can capture our SQL (which is schema-qualified as well).
	 */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Never wait unbounded: a transaction that holds a run, a stage or one
	 * of wfe's locks for long would otherwise stop every tenant's clocks.
	 * An item whose wait times out (55P03) is put off a second and tried
	 * again (wfe._item_failed); the round goes on.  Above any user setting,
	 * so not even a handler's SET lowers it.
	 */
	SetConfigOption("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("wfe worker");
	attach_to_shared();
	ereport(LOG, (errmsg("wfe worker started for database \"%s\"", wfe_database)));

	loop_context = AllocSetContextCreate(TopMemoryContext, "wfe worker loop",
										 ALLOCSET_DEFAULT_SIZES);
	while (!ShutdownRequestPending)
	{
		long		sleep_ms = wfe_poll_interval_ms;
		bool		more = false;
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			ereport(LOG, (errmsg("wfe worker reloaded its configuration")));
		}

		MemoryContextReset(loop_context);
		MemoryContextSwitchTo(loop_context);
		if (extension_ready())
		{
			if (!repaired)
			{
				/* what a crashed incarnation left claimed goes back to pending */
				int64		n = run_unit("wfe worker: repairing", "SELECT wfe._repair()::pg_catalog.int8");

				if (n > 0)
					ereport(LOG, (errmsg("wfe worker repaired %lld rows left by a previous run",
										 (long long) n)));
				repaired = n >= 0;
			}
			more = run_round(&sleep_ms);
			now = GetCurrentTimestamp();
			if (TimestampDifferenceExceeds(last_retention, now, RETENTION_INTERVAL_MS))
			{
				char		sql[128];

				snprintf(sql, sizeof(sql), "SELECT wfe._retention(%d, %d)::pg_catalog.int8",
						 wfe_retention_s, wfe_bgw_batch);
				if (run_unit("wfe worker: removing expired history", sql) >= 0)
					last_retention = now;
			}
		}
		else
			repaired = false;	/* dropped and created again: repair again */
		MemoryContextSwitchTo(TopMemoryContext);

		if (more || ShutdownRequestPending)
			continue;

		sleep_ms = plan_sleep(sleep_ms);
		if (sleep_ms == 0)
			continue;
		pgstat_report_activity(STATE_IDLE, "wfe worker: waiting");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		SpinLockAcquire(&wfe_shared->mutex);
		wfe_shared->woke_at = GetCurrentTimestamp();
		SpinLockRelease(&wfe_shared->mutex);
	}
	ereport(LOG, (errmsg("wfe worker stopping")));
	wfe_publisher_shutdown();
	proc_exit(0);
}
