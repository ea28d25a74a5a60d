/*
 * ready.c — NOTIFY wfe_task_ready only when a poll worker may be waiting.
 *
 * NOTIFY takes a database-wide lock at commit and holds it through the
 * commit's WAL flush, so every notifying transaction commits alone
 * (docs/benchmarks.md measured a third of a step's time waiting for it).
 * Yet a queue under load has claimers that always find work and never
 * wait.  So claimers say, in shared memory, when they may be about to
 * wait, and a transaction that released tasks notifies only if one may.
 *
 * Per queue slot (a hash of the name):
 *   waiting     claimers that came up short and may be waiting now;
 *   epoch       bumped by each notifying commit, which wakes them all
 *               (a NOTIFY reaches every listener) and so resets waiting;
 *   committing  transactions between deciding not to notify (pre-commit)
 *               and their commit becoming visible.
 *
 * A claimer registers before its claim's snapshot.  A releasing
 * transaction decides at pre-commit: someone waiting -> NOTIFY; nobody ->
 * it counts itself in committing until its commit is visible.  The race
 * left is a claimer that registers after a release decided not to notify
 * but takes its snapshot before that release is visible: it would miss the
 * task and wait.  It sees committing > 0 when it registers, and then, if
 * its claim comes up short, notifies itself, so it looks again at once.
 * Without shared memory (no shared_preload_libraries) every release
 * notifies, as before.  The payload is the queue's keyed tag, never its
 * name (src/pg/ready_tag.c): any login may LISTEN.  It is computed when a
 * release is noted, in the transaction, since pre-commit may not read
 * tables.  test/tap/007_ready_wakeups.pl tests the rule; the
 * commit-window race itself is not forced there (it needs a pause between
 * a release's pre-commit and its commit becoming visible).
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#include "bgw.h"
#include "pg/wfe.h"

/* A queue this transaction released tasks to, and its notification's payload. */
typedef struct released_queue
{
	char	   *queue;
	char	   *tag;
} released_queue;

/* The queues this transaction released tasks to (deduplicated): released_queue's. */
static List *released = NIL;
/* The slots this transaction counted itself in as committing. */
static int	committing[WFE_READY_SLOTS];
static bool any_committing = false;
static bool callback_registered = false;

static int
slot_of(const char *queue)
{
	return (int) (hash_bytes((const unsigned char *) queue, (int) strlen(queue)) % WFE_READY_SLOTS);
}

/* Undo this transaction's committing counts (its commit is visible, or it aborted). */
static void
leave_committing(void)
{
	if (!any_committing)
		return;
	any_committing = false;
	SpinLockAcquire(&wfe_shared->ready_mutex);
	for (int i = 0; i < WFE_READY_SLOTS; i++)
	{
		wfe_shared->ready_committing[i] -= committing[i];
		committing[i] = 0;
	}
	SpinLockRelease(&wfe_shared->ready_mutex);
}

/* Free the list of released queues. */
static void
forget_released(void)
{
	ListCell   *lc;

	foreach(lc, released)
	{
		released_queue *r = lfirst(lc);

		pfree(r->queue);
		pfree(r->tag);
	}
	list_free_deep(released);
	released = NIL;
}

/* At pre-commit, notify the queues someone may wait on; at the end, undo the committing counts. */
static void
ready_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_PRE_COMMIT && released != NIL)
	{
		foreach(lc, released)
		{
			released_queue *r = lfirst(lc);
			int			slot = slot_of(r->queue);
			bool		notify;

			SpinLockAcquire(&wfe_shared->ready_mutex);
			notify = wfe_shared->ready_waiting[slot] > 0;
			if (notify)
			{
				/* our NOTIFY wakes every waiter of the slot: they register again */
				wfe_shared->ready_waiting[slot] = 0;
				wfe_shared->ready_epoch[slot]++;
				wfe_shared->ready_notified++;
			}
			else
			{
				wfe_shared->ready_committing[slot]++;
				committing[slot]++;
				any_committing = true;
				wfe_shared->ready_skipped++;
			}
			SpinLockRelease(&wfe_shared->ready_mutex);
			if (notify)
				Async_Notify("wfe_task_ready", r->tag);
		}
		forget_released();
		return;
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		forget_released();
		leave_committing();
	}
}

/* This transaction made a task of a poll queue claimable: wake a waiting poller at commit. */
void
wfe_ready_released(const char *queue)
{
	ListCell   *lc;
	MemoryContext old;
	released_queue *r;
	char	   *tag;

	if (!wfe_notify)
		return;
	if (wfe_shared == NULL)
	{
		/* NOTIFY folds equal payloads: a batch to one queue costs one */
		Async_Notify("wfe_task_ready", wfe_ready_tag(queue));
		return;
	}
	if (!callback_registered)
	{
		RegisterXactCallback(ready_xact_callback, NULL);
		callback_registered = true;
	}
	foreach(lc, released)
		if (strcmp(((released_queue *) lfirst(lc))->queue, queue) == 0)
			return;
	tag = wfe_ready_tag(queue);
	old = MemoryContextSwitchTo(TopMemoryContext);
	r = palloc(sizeof(released_queue));
	r->queue = pstrdup(queue);
	r->tag = pstrdup(tag);
	released = lappend(released, r);
	MemoryContextSwitchTo(old);
	pfree(tag);
}

/* A claim is about to take its snapshot: count the claimer as possibly waiting. */
void
wfe_ready_claim_begin(const char *queue, wfe_claim_ticket *t)
{
	memset(t, 0, sizeof(*t));
	if (wfe_shared == NULL || !wfe_notify)
		return;
	t->slot = slot_of(queue);
	SpinLockAcquire(&wfe_shared->ready_mutex);
	wfe_shared->ready_waiting[t->slot]++;
	t->epoch = wfe_shared->ready_epoch[t->slot];
	t->maybe_missed = wfe_shared->ready_committing[t->slot] > 0;
	SpinLockRelease(&wfe_shared->ready_mutex);
	t->registered = true;
}

/*
 * The claim is done.  A full batch means the claimer will come back at once
 * rather than wait: it stops counting (unless a notifying commit already
 * reset the count).  A short batch that may have missed a release still
 * committing notifies its own session, so the claimer looks again.
 */
void
wfe_ready_claim_end(const char *queue, wfe_claim_ticket *t, bool short_batch)
{
	if (!t->registered)
		return;
	if (!short_batch)
	{
		SpinLockAcquire(&wfe_shared->ready_mutex);
		if (wfe_shared->ready_epoch[t->slot] == t->epoch && wfe_shared->ready_waiting[t->slot] > 0)
			wfe_shared->ready_waiting[t->slot]--;
		SpinLockRelease(&wfe_shared->ready_mutex);
	}
	else if (t->maybe_missed)
		Async_Notify("wfe_task_ready", wfe_ready_tag(queue));
	t->registered = false;
}
