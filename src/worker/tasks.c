/*
 * tasks.c — the life of a task on a slot: start its command, heartbeat
 * while it runs, stop it when asked to, report its outcome, free the slot.
 *
 *   FREE --slot_start--> RUNNING --command finished--> REPORTING --reported--> FREE
 *
 * A command that was stopped because its attempt is no longer current
 * (heartbeat answered late, stale or unknown; a cancellation request) is
 * not reported: the database has moved on and would answer late or stale.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "callbacks.h"
#include "loop.h"
#include "report.h"
#include "util.h"
#include "worker.h"

/* SIGKILL follows SIGTERM after this long. */
#define KILL_AFTER_MS 5000

/* How long a stopping worker keeps trying to report when PostgreSQL is away. */
#define REPORT_AFTER_SHUTDOWN_MS 15000

/* The default heartbeat interval when neither the task nor --heartbeat-ms sets one. */
#define DEFAULT_HEARTBEAT_MS 30000

/*
 * Past its execution deadline an attempt is about to be timed out: ask
 * this often whether it was, so that its command is stopped promptly.
 */
#define PAST_DEADLINE_HEARTBEAT_MS 2000

Slot	   *slots = NULL;
long		tasks_started = 0;
bool		stopping = false;
int64_t		shutdown_deadline = 0;

/* Free a task's strings. */
void
task_free(Task *t)
{
	free(t->stage);
	free(t->worker);
	free(t->tenant);
	free(t->input);
	free(t->deadline_at);
	free(t->message_id);
	free(t->traceparent);
	memset(t, 0, sizeof(*t));
}

/* Number of slots that can take a task. */
int
slots_free(void)
{
	int			n = 0;

	for (int i = 0; i < opts.concurrency; i++)
		if (slots[i].state == SLOT_FREE)
			n++;
	return n;
}

/* Number of slots with a task (running or waiting to report). */
int
slots_busy(void)
{
	return opts.concurrency - slots_free();
}

/*
 * How often to heartbeat a task: --heartbeat-ms, else half the stage's
 * heartbeat_ms (the longest silence it allows), else 30 s -- and in broker
 * mode, where accept_task took a lease, at most a third of the lease.
 */
static int
heartbeat_interval(const Task *t)
{
	int			every = DEFAULT_HEARTBEAT_MS;

	if (opts.heartbeat_ms > 0)
		return opts.heartbeat_ms;
	if (t->heartbeat_ms > 0)
		every = t->heartbeat_ms / 2 > 100 ? t->heartbeat_ms / 2 : 100;
	if (opts.mode == MODE_BROKER && opts.lease_ms / 3 < every)
		every = opts.lease_ms / 3 > 100 ? opts.lease_ms / 3 : 100;
	return every;
}

/* See worker.h. */
Slot *
slot_start(Task *task, bool has_delivery, uint64_t delivery_tag, uint64_t generation)
{
	Slot	   *s = NULL;
	char		run_id[24],
				attempt[16],
				fence[24],
				err[256];
	EnvVar		env[11];
	int			nenv = 0;

	for (int i = 0; i < opts.concurrency && s == NULL; i++)
		if (slots[i].state == SLOT_FREE)
			s = &slots[i];
	if (s == NULL)
	{
		/* callers check slots_free() first; this is a bug, not a condition */
		wlog(LOG_ERROR, "no free slot for run %" PRId64 " stage %s", task->run_id, task->stage);
		task_free(task);
		return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->task = *task;
	memset(task, 0, sizeof(*task));
	s->has_delivery = has_delivery;
	s->delivery_tag = delivery_tag;
	s->delivery_generation = generation;
	s->started_at = now_ms();
	s->heartbeat_interval = heartbeat_interval(&s->task);
	s->next_heartbeat = s->started_at + s->heartbeat_interval;
	/* without heartbeat_ms the deadline is fixed: check soon after it passes */
	if (s->task.heartbeat_ms == 0 && s->task.deadline_in_ms >= 0)
	{
		s->deadline = s->started_at + s->task.deadline_in_ms;
		if (s->deadline + PAST_DEADLINE_HEARTBEAT_MS / 2 < s->next_heartbeat)
			s->next_heartbeat = s->deadline + PAST_DEADLINE_HEARTBEAT_MS / 2;
	}

	snprintf(run_id, sizeof(run_id), "%" PRId64, s->task.run_id);
	snprintf(attempt, sizeof(attempt), "%d", s->task.attempt);
	snprintf(fence, sizeof(fence), "%" PRId64, s->task.fence);
	env[nenv++] = (EnvVar) {"WFE_RUN_ID", run_id};
	env[nenv++] = (EnvVar) {"WFE_STAGE", s->task.stage};
	env[nenv++] = (EnvVar) {"WFE_ATTEMPT", attempt};
	env[nenv++] = (EnvVar) {"WFE_FENCE", fence};
	env[nenv++] = (EnvVar) {"WFE_WORKER", s->task.worker ? s->task.worker : ""};
	env[nenv++] = (EnvVar) {"WFE_TENANT", s->task.tenant ? s->task.tenant : ""};
	env[nenv++] = (EnvVar) {"WFE_QUEUE", opts.queue};
	env[nenv++] = (EnvVar) {"WFE_WORKER_ID", opts.worker_id};
	env[nenv++] = (EnvVar) {"WFE_DEADLINE_AT", s->task.deadline_at ? s->task.deadline_at : ""};
	env[nenv++] = (EnvVar) {"WFE_MESSAGE_ID", s->task.message_id ? s->task.message_id : ""};
	/* the name OpenTelemetry's environment-variable propagation reads */
	env[nenv++] = (EnvVar) {"TRACEPARENT", s->task.traceparent ? s->task.traceparent : ""};

	tasks_started++;
	if (opts.max_tasks > 0 && tasks_started >= opts.max_tasks && !stopping)
	{
		wlog(LOG_INFO, "started %ld tasks (--max-tasks): taking no more", tasks_started);
		stopping = true;
	}

	if (!command_start(&s->cmd, opts.command, env, nenv, s->task.input,
					   s->task.input ? strlen(s->task.input) : 0,
					   (size_t) opts.max_output_bytes, err, sizeof(err)))
	{
		wlog(LOG_ERROR, "run %" PRId64 " stage %s attempt %d: cannot start the command: %s",
			 s->task.run_id, s->task.stage, s->task.attempt, err);
		s->spawn_error = xstrdup(err);
		s->state = SLOT_REPORTING;
		return s;
	}
	s->state = SLOT_RUNNING;
	wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: started the command (pid %d)",
		 s->task.run_id, s->task.stage, s->task.attempt, (int) s->cmd.pid);
	wlog(LOG_DEBUG, "run %" PRId64 " stage %s attempt %d: heartbeat every %d ms",
		 s->task.run_id, s->task.stage, s->task.attempt, s->heartbeat_interval);
	return s;
}

/* See worker.h. */
void
slot_stop(Slot *s, StopReason why)
{
	static const char *const reasons[] = {
		[STOP_NONE] = "",
		[STOP_SUPERSEDED] = "its attempt is no longer current",
		[STOP_CANCELLED] = "its run was cancelled",
		[STOP_SHUTDOWN] = "the worker is stopping and the grace period is over",
		[STOP_OUTPUT_LIMIT] = "its output exceeds --max-output-bytes",
	};

	if (s->state != SLOT_RUNNING || s->stop != STOP_NONE)
		return;
	s->stop = why;
	if (!s->cmd.exited)
	{
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: stopping the command (SIGTERM): %s",
			 s->task.run_id, s->task.stage, s->task.attempt, reasons[why]);
		command_signal(&s->cmd, SIGTERM);
		s->cmd.term_at = now_ms();
	}
}

/* See worker.h. */
void
tasks_reap(void)
{
	int			status;
	pid_t		pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		for (int i = 0; i < opts.concurrency; i++)
		{
			Slot	   *s = &slots[i];

			if (s->state == SLOT_RUNNING && s->cmd.pid == pid && !s->cmd.exited)
			{
				command_exited(&s->cmd, status, now_ms());
				break;
			}
		}
	}
}

/* See worker.h. */
void
tasks_io(void)
{
	for (int i = 0; i < opts.concurrency; i++)
		if (slots[i].state == SLOT_RUNNING)
			command_io(&slots[i].cmd);
}

/* See worker.h. */
void
tasks_add_pollfds(struct pollfd *fds, int *nfds)
{
	for (int i = 0; i < opts.concurrency; i++)
		if (slots[i].state == SLOT_RUNNING)
			command_add_pollfds(&slots[i].cmd, fds, nfds);
}

/* See worker.h. */
void
tasks_kill_all(void)
{
	for (int i = 0; i < opts.concurrency; i++)
		if (slots[i].state == SLOT_RUNNING && !slots[i].cmd.exited)
			command_signal(&slots[i].cmd, SIGKILL);
}

/* The task is over: hand the slot back (and acknowledge its message). */
static void
slot_finish(Slot *s)
{
	loop_task_done(s);
	task_free(&s->task);
	command_cleanup(&s->cmd);
	free(s->spawn_error);
	free(s->rejection);
	memset(s, 0, sizeof(*s));
	s->state = SLOT_FREE;
}

/* Heartbeat a running task; stop its command when the answer says so. */
static void
heartbeat(Slot *s, int64_t now)
{
	char		outcome[OUTCOME_LEN];
	DbError		e;
	DbStatus	st = cb_heartbeat(&s->task, outcome, &e);

	if (st == DB_CONN_ERROR)
	{
		wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: heartbeat failed: %s",
			 s->task.run_id, s->task.stage, s->task.attempt, e.message);
		return;					/* due again once reconnected */
	}
	s->next_heartbeat = now + s->heartbeat_interval;
	if (s->deadline > 0 && now >= s->deadline && s->heartbeat_interval > PAST_DEADLINE_HEARTBEAT_MS)
		s->next_heartbeat = now + PAST_DEADLINE_HEARTBEAT_MS;
	if (st == DB_SQL_ERROR)
	{
		wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: heartbeat failed: %s",
			 s->task.run_id, s->task.stage, s->task.attempt, e.message);
		return;
	}
	wlog(LOG_DEBUG, "run %" PRId64 " stage %s attempt %d: heartbeat: %s",
		 s->task.run_id, s->task.stage, s->task.attempt, outcome);
	if (strcmp(outcome, "late") == 0 || strcmp(outcome, "stale") == 0 ||
		strcmp(outcome, "unknown") == 0)
	{
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: heartbeat answered %s",
			 s->task.run_id, s->task.stage, s->task.attempt, outcome);
		slot_stop(s, STOP_SUPERSEDED);
	}
}

/* The earlier of two times, treating 0 as "none". */
static int64_t
earliest(int64_t a, int64_t b)
{
	if (a == 0)
		return b;
	if (b == 0)
		return a;
	return a < b ? a : b;
}

/* Drive one running slot; returns when it wants to run again (0: no need). */
static int64_t
service_running(Slot *s, int64_t now)
{
	Command    *c = &s->cmd;
	int64_t		next = 0;

	if (c->out_overflow)
		slot_stop(s, STOP_OUTPUT_LIMIT);
	if (stopping && shutdown_deadline > 0 && now >= shutdown_deadline && !c->exited)
		slot_stop(s, STOP_SHUTDOWN);
	if (c->term_at > 0 && !c->killed && !c->exited && now - c->term_at >= KILL_AFTER_MS)
	{
		wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: the command ignored SIGTERM: SIGKILL",
			 s->task.run_id, s->task.stage, s->task.attempt);
		command_signal(c, SIGKILL);
		c->killed = true;
	}

	/*
	 * Asked to stop, the shell is gone but what it started still holds the
	 * pipes: it ignored SIGTERM, and the shell's exit would otherwise leave it
	 * running after the task is reported.  Its process group gets SIGKILL (the
	 * group id cannot be reused while members are left).
	 */
	if (c->term_at > 0 && !c->killed && c->exited && (c->out_fd >= 0 || c->err_fd >= 0))
	{
		wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: the command's processes outlived it, ignoring SIGTERM: SIGKILL",
			 s->task.run_id, s->task.stage, s->task.attempt);
		kill(-c->pid, SIGKILL);
		c->killed = true;
	}
	if (!c->exited && s->stop == STOP_NONE && now >= s->next_heartbeat && db_connected())
		heartbeat(s, now);

	if (command_finished(c, now))
	{
		s->state = SLOT_REPORTING;
		return now;
	}
	if (!c->exited)
	{
		if (s->stop == STOP_NONE)
			next = earliest(next, s->next_heartbeat);
		if (c->term_at > 0 && !c->killed)
			next = earliest(next, c->term_at + KILL_AFTER_MS);
		if (stopping && shutdown_deadline > 0 && s->stop == STOP_NONE)
			next = earliest(next, shutdown_deadline);
	}
	else
		next = now + 100;		/* draining the pipes after the exit */
	return next;
}

/* Report one finished slot if possible; returns when to try again (0: done). */
static int64_t
service_reporting(Slot *s, int64_t now)
{
	if (db_connected() && report_slot(s) == REPORT_DONE)
	{
		slot_finish(s);
		return 0;
	}
	if (stopping && shutdown_deadline > 0 && now >= shutdown_deadline + REPORT_AFTER_SHUTDOWN_MS)
	{
		wlog(LOG_ERROR, "run %" PRId64 " stage %s attempt %d: giving up reporting the outcome: "
			 "PostgreSQL is unreachable and the worker is stopping",
			 s->task.run_id, s->task.stage, s->task.attempt);
		slot_finish(s);
		return 0;
	}
	return now + 1000;
}

/* See worker.h. */
int64_t
tasks_service(int64_t now)
{
	int64_t		next = 0;

	for (int i = 0; i < opts.concurrency; i++)
	{
		Slot	   *s = &slots[i];

		if (s->state == SLOT_RUNNING)
			next = earliest(next, service_running(s, now));
		/* not else: a command that just finished is reported at once */
		if (s->state == SLOT_REPORTING)
			next = earliest(next, service_reporting(s, now));
	}
	return next;
}
