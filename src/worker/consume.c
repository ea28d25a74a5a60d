/*
 * consume.c — broker mode: dispatch messages from wfe.<queue>.small and
 * .large, and cancellation requests from cancel.<queue>.
 *
 * For each dispatch: past --max-redeliveries retry cycles it is
 * dead-lettered; otherwise its envelope is parsed, a large-track input is
 * fetched, and the attempt is accepted with wfe.accept_task.  `accepted`
 * runs the command and the message is acknowledged after the outcome is
 * reported; any other answer (duplicate, stale, late, unknown) acknowledges
 * it without running anything.  A message the worker cannot process at
 * all is rejected without requeueing, which routes it through the retry
 * queue (a pre-acceptance retry, counted in x-death).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "callbacks.h"
#include "envelope.h"
#include "intake.h"
#include "util.h"

/* --once: stop after this long without a delivery. */
#define ONCE_IDLE_MS 2000

static int64_t last_activity = 0;

/* Reject a message we cannot process; say why. */
static void
cannot_process(Delivery *d, const char *why)
{
	wlog(LOG_WARNING, "rejecting a message from %s (retry cycle %ld): %s",
		 d->routing_key, d->death_count, why);
	broker_reject(d->generation, d->tag, false);
}

/* Handle one dispatch message. */
static void
handle_dispatch(Delivery *d)
{
	Task		t;
	char	   *ref = NULL;
	char		err[1400];
	char		outcome[OUTCOME_LEN];
	DbError		e;
	DbStatus	st;

	if (d->death_count > opts.max_redeliveries)
	{
		char		reason[128];

		snprintf(reason, sizeof(reason), "went through the retry queue %ld times (--max-redeliveries %d)",
				 d->death_count, opts.max_redeliveries);
		if (broker_dead_letter(d, reason, err, sizeof(err)))
			wlog(LOG_WARNING, "dead-lettered a message from %s: it %s", d->routing_key,
				 "went through the retry queue too often");
		else
			wlog(LOG_ERROR, "cannot dead-letter a message from %s: %s", d->routing_key, err);
		return;
	}
	if (!envelope_parse(d->body, d->body_len, &t, &ref, err, sizeof(err)))
	{
		cannot_process(d, err);
		return;
	}
	if (!db_connected())
	{
		cannot_process(d, "PostgreSQL is unreachable");
		goto done;
	}
	if (ref != NULL)
	{
		st = cb_fetch_payload(ref, &t.input, &e);
		if (st != DB_OK)
		{
			snprintf(err, sizeof(err), "cannot fetch the input of run %" PRId64 " stage %s: %s",
					 t.run_id, t.stage,
					 db_error_undefined_function(&e)
					 ? "wfe.fetch_payload does not exist in this database (large-track messages need it)"
					 : e.message);
			cannot_process(d, err);
			goto done;
		}
	}
	st = cb_accept(&t, outcome, &e);
	if (st != DB_OK)
	{
		snprintf(err, sizeof(err), "accept_task for run %" PRId64 " stage %s attempt %d failed: %s",
				 t.run_id, t.stage, t.attempt, e.message);
		cannot_process(d, err);
		goto done;
	}
	if (strcmp(outcome, "accepted") == 0)
	{
		slot_start(&t, true, d->tag, d->generation);
		goto done;
	}
	wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: accept_task answered %s: "
		 "acknowledged without running", t.run_id, t.stage, t.attempt, outcome);
	broker_ack(d->generation, d->tag);

done:
	task_free(&t);
	free(ref);
}

/* Handle a cancellation request: stop the command that runs the attempt. */
static void
handle_cancel(Delivery *d)
{
	CancelRequest r;
	char		err[512];
	bool		found = false;

	if (!cancel_parse(d->body, d->body_len, &r, err, sizeof(err)))
	{
		wlog(LOG_WARNING, "ignoring a cancellation request: %s", err);
		return;
	}
	for (int i = 0; i < opts.concurrency; i++)
	{
		Slot	   *s = &slots[i];

		if (s->state != SLOT_RUNNING || s->task.run_id != r.run_id || s->task.attempt != r.attempt ||
			strcmp(s->task.stage, r.stage) != 0)
			continue;
		found = true;
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: cancellation requested%s%s",
			 r.run_id, r.stage, r.attempt, r.reason ? ": " : "", r.reason ? r.reason : "");
		s->cancel_fence = r.fence;
		if (s->stop == STOP_SUPERSEDED)
			s->stop = STOP_CANCELLED;	/* already stopping: acknowledge it too */
		else
			slot_stop(s, STOP_CANCELLED);
	}
	if (!found)
		wlog(LOG_DEBUG, "run %" PRId64 " stage %s attempt %d: cancellation request: not running here",
			 r.run_id, r.stage, r.attempt);
	cancel_free(&r);
}

/* See intake.h. */
void
consume_intake(int64_t now)
{
	char		err[512];
	Delivery   *d;
	bool		want = broker_connected() && db_connected() && !stopping;

	if (last_activity == 0)
		last_activity = now;
	if (broker_connected() && !broker_set_consuming(want, err, sizeof(err)))
		wlog(LOG_WARNING, "lost the RabbitMQ connection: %s", err);

	while ((d = broker_next_delivery()) != NULL)
	{
		last_activity = now;
		if (d->is_cancel)
			handle_cancel(d);
		else if (stopping)
		{
			/* not started, not counted: back to the head of its queue */
			broker_reject(d->generation, d->tag, true);
		}
		else if (slots_free() == 0)
		{
			broker_push_front(d);
			break;
		}
		else
			handle_dispatch(d);
		delivery_free(d);
	}
}

/* See intake.h. */
int64_t
consume_next(int64_t now)
{
	if (!opts.once || slots_busy() > 0 || now >= last_activity + ONCE_IDLE_MS)
		return 0;
	return last_activity + ONCE_IDLE_MS;
}

/* See intake.h. */
void
consume_task_done(Slot *s)
{
	if (s->has_delivery)
		broker_ack(s->delivery_generation, s->delivery_tag);
	last_activity = now_ms();
}

/* See intake.h. */
bool
consume_idle(int64_t now)
{
	return now - last_activity >= ONCE_IDLE_MS;
}
