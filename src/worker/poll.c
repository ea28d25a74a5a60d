/*
 * poll.c — poll mode: take tasks with wfe.claim_task.
 *
 * A claim asks for as many tasks as there are free slots.  When it gets
 * fewer, the queue is drained and the worker waits — on its PostgreSQL
 * socket for a wfe_task_ready notification carrying the queue's tag
 * (wfe.ready_tag, asked on each connection: the payload is never the
 * name), or for --poll-interval-ms as a safety net — instead of claiming
 * again.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks.h"
#include "intake.h"
#include "jsontext.h"
#include "util.h"

static bool claim_due = true;
static int64_t next_claim_at = 0;
static bool drained = false;

/*
 * Start a claimed task.  A task whose input is stored by reference (a
 * large payload) is fetched first; if that fails the attempt is failed.
 */
static void
start_claimed(Task *t, char *payload_ref)
{
	/* a stage without input gets the JSON null, as in broker mode */
	if (payload_ref == NULL && t->input == NULL)
		t->input = xstrdup("null");
	if (payload_ref != NULL && t->input == NULL)
	{
		DbError		e;
		DbStatus	st = cb_fetch_payload(payload_ref, &t->input, &e);

		if (st != DB_OK)
		{
			wlog(LOG_ERROR, "run %" PRId64 " stage %s attempt %d: cannot fetch its input: %s",
				 t->run_id, t->stage, t->attempt, e.message);
			if (st == DB_SQL_ERROR)
			{
				/* claimed, so it is ours to fail; the retry policy decides */
				json_object *o = json_object_new_object();
				char	   *clean = utf8_clean(e.message, strlen(e.message), false);
				char	   *text;
				char		outcome[OUTCOME_LEN];

				json_object_object_add(o, "code", json_object_new_string("payload.unavailable"));
				json_object_object_add(o, "message", json_object_new_string(clean));
				text = json_to_text(o);
				json_object_put(o);
				free(clean);
				cb_fail(t, text, true, outcome, &e);
				free(text);
			}
			/* with the connection lost, the execution deadline retries it */
			task_free(t);
			return;
		}
	}
	slot_start(t, false, 0, 0);
}

/* See intake.h. */
void
poll_intake(int64_t now)
{
	if (!db_connected())
		return;
	if (db_take_task_ready())
		claim_due = true;
	if (now >= next_claim_at)
		claim_due = true;

	while (claim_due && !stopping && slots_free() > 0)
	{
		int			want = slots_free();
		Task	   *tasks;
		char	  **refs;
		int			n;
		DbError		e;
		DbStatus	st;

		if (opts.max_tasks > 0 && opts.max_tasks - tasks_started < want)
			want = (int) (opts.max_tasks - tasks_started);
		st = cb_claim(want, &tasks, &n, &refs, &e);
		next_claim_at = now + opts.poll_interval_ms;
		if (st == DB_CONN_ERROR)
		{
			wlog(LOG_WARNING, "claim_task failed: %s", e.message);
			return;
		}
		if (st == DB_SQL_ERROR)
		{
			wlog(LOG_ERROR, "claim_task failed: %s%s%s", e.message,
				 e.sqlstate[0] ? " SQLSTATE " : "", e.sqlstate);
			claim_due = false;
			if (opts.once)
			{
				exit_code = 1;
				stopping = true;
			}
			return;
		}
		wlog(LOG_DEBUG, "claimed %d of %d", n, want);
		for (int i = 0; i < n; i++)
		{
			start_claimed(&tasks[i], refs[i]);
			free(refs[i]);
		}
		free(tasks);
		free(refs);
		if (n < want)
		{
			claim_due = false;
			drained = true;
		}
		else
			drained = false;
	}
}

/* See intake.h. */
int64_t
poll_next(int64_t now)
{
	/* with every slot busy, the next wakeup is a command finishing */
	if (!db_connected() || stopping || slots_free() == 0)
		return 0;
	return claim_due ? now : next_claim_at;
}

/* See intake.h. */
void
poll_task_done(void)
{
	claim_due = true;
}

/* See intake.h. */
bool
poll_drained(void)
{
	return drained && !claim_due;
}
