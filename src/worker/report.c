/*
 * report.c — what a finished command means for its attempt.
 *
 *   exit status 0, stdout one JSON value   complete_task(result)
 *   exit status 0, stdout empty            complete_task({})
 *   exit status 0, anything else on stdout fail_task(command.bad_output)
 *   exit status != 0 or killed by a signal fail_task(command.failed)
 *   could not be started                   fail_task(command.spawn)
 *   stopped because the worker stops       fail_task(worker.shutdown)
 *
 * Every failure is reported retryable: the stage's retry policy decides.
 */
#include "report.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "callbacks.h"
#include "jsontext.h"
#include "util.h"

/* Start an error object {"code": code, "message": message}. */
static json_object *
error_object(const char *code, const char *message)
{
	json_object *o = json_object_new_object();
	char	   *clean = utf8_clean(message, strlen(message), false);

	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "message", json_object_new_string(clean));
	free(clean);
	return o;
}

/* Add the command's stderr tail to an error object. */
static void
add_stderr(json_object *o, const Command *c)
{
	char	   *tail = command_stderr_tail(c);

	json_object_object_add(o, "stderr", json_object_new_string(tail));
	free(tail);
}

/* True when the text is empty or only whitespace. */
static bool
is_blank(const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isspace((unsigned char) text[i]))
			return false;
	return true;
}

/*
 * The error object for a command that did not succeed, or NULL when it
 * did (then *result points at its JSON result text).
 */
static json_object *
judge(Slot *s, const char **result)
{
	Command    *c = &s->cmd;
	char		msg[512];
	json_object *o;

	*result = NULL;
	if (s->spawn_error)
		return error_object("command.spawn", s->spawn_error);
	if (s->stop == STOP_SHUTDOWN)
	{
		snprintf(msg, sizeof(msg),
				 "the worker stopped and terminated the command after its %d ms grace period",
				 opts.grace_ms);
		o = error_object("worker.shutdown", msg);
		add_stderr(o, c);
		return o;
	}
	if (s->stop == STOP_OUTPUT_LIMIT)
	{
		snprintf(msg, sizeof(msg), "the command wrote more than %d bytes to stdout (--max-output-bytes)",
				 opts.max_output_bytes);
		o = error_object("command.bad_output", msg);
		add_stderr(o, c);
		return o;
	}
	if (WIFEXITED(c->wait_status) && WEXITSTATUS(c->wait_status) == 0)
	{
		char		why[256];
		json_object *parsed;
		int			is_null;

		if (s->rejection)
		{
			o = error_object("command.bad_output", s->rejection);
			add_stderr(o, c);
			return o;
		}
		if (is_blank(c->out.data, c->out.len))
		{
			*result = "{}";
			return NULL;
		}
		parsed = json_parse_text(c->out.data, c->out.len, &is_null, why, sizeof(why));
		if (parsed == NULL && !is_null)
		{
			snprintf(msg, sizeof(msg), "stdout is not valid JSON: %s", why);
			o = error_object("command.bad_output", msg);
			add_stderr(o, c);
			return o;
		}
		json_object_put(parsed);
		/* the text as written: PostgreSQL parses it again, exactly */
		*result = c->out.data;
		return NULL;
	}
	if (WIFSIGNALED(c->wait_status))
	{
		int			sig = WTERMSIG(c->wait_status);

		snprintf(msg, sizeof(msg), "the command was killed by signal %d (%s)", sig, strsignal(sig));
		o = error_object("command.failed", msg);
		json_object_object_add(o, "exit_status", json_object_new_int(128 + sig));
		json_object_object_add(o, "signal", json_object_new_int(sig));
	}
	else
	{
		snprintf(msg, sizeof(msg), "the command exited with status %d", WEXITSTATUS(c->wait_status));
		o = error_object("command.failed", msg);
		json_object_object_add(o, "exit_status", json_object_new_int(WEXITSTATUS(c->wait_status)));
	}
	add_stderr(o, c);
	return o;
}

/* What an outcome word other than accepted means, for the log. */
static const char *
outcome_meaning(const char *outcome)
{
	if (strcmp(outcome, "duplicate") == 0)
		return "this outcome was already reported";
	if (strcmp(outcome, "conflict") == 0)
		return "a different outcome was already reported for this attempt";
	if (strcmp(outcome, "stale") == 0)
		return "the attempt is no longer current (timed out or superseded)";
	if (strcmp(outcome, "late") == 0)
		return "the run already has a terminal intent";
	if (strcmp(outcome, "invalid_result") == 0)
		return "the result does not satisfy the output schema; the attempt failed";
	if (strcmp(outcome, "unknown") == 0)
		return "no such run or stage";
	return "unexpected outcome";
}

/* Acknowledge a cancellation request once its command is gone. */
static ReportStatus
report_cancel(Slot *s)
{
	char		outcome[OUTCOME_LEN];
	DbError		e;
	DbStatus	st = cb_ack_cancel(&s->task, s->cancel_fence, outcome, &e);

	if (st == DB_CONN_ERROR || (st == DB_SQL_ERROR && db_error_transient(&e)))
		return REPORT_RETRY;
	if (st == DB_SQL_ERROR)
	{
		if (db_error_undefined_function(&e))
			wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: cancelled; not acknowledged: "
				 "wfe.ack_cancel does not exist in this database", s->task.run_id, s->task.stage,
				 s->task.attempt);
		else
			wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: cancelled; wfe.ack_cancel failed: %s",
				 s->task.run_id, s->task.stage, s->task.attempt, e.message);
		return REPORT_DONE;
	}
	wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: cancelled; ack_cancel: %s",
		 s->task.run_id, s->task.stage, s->task.attempt, outcome);
	return REPORT_DONE;
}

/* See report.h. */
ReportStatus
report_slot(Slot *s)
{
	const char *result;
	json_object *error;
	char		outcome[OUTCOME_LEN];
	char	   *error_text = NULL;
	DbError		e;
	DbStatus	st;
	int64_t		ms = now_ms() - s->started_at;
	bool		failed;
	char		fail_code[64] = "",
				fail_message[600] = "";

	if (s->stop == STOP_SUPERSEDED)
	{
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: not reported: the attempt is no longer current",
			 s->task.run_id, s->task.stage, s->task.attempt);
		return REPORT_DONE;
	}
	if (s->stop == STOP_CANCELLED)
		return report_cancel(s);

	error = judge(s, &result);
	failed = error != NULL;
	if (!failed)
		st = cb_complete(&s->task, result, outcome, &e);
	else
	{
		json_object *v;

		error_text = json_to_text(error);
		if (json_object_object_get_ex(error, "code", &v))
			snprintf(fail_code, sizeof(fail_code), "%s", json_object_get_string(v));
		if (json_object_object_get_ex(error, "message", &v))
			snprintf(fail_message, sizeof(fail_message), "%s", json_object_get_string(v));
		json_object_put(error);
		st = cb_fail(&s->task, error_text, true, outcome, &e);
	}

	if (st == DB_CONN_ERROR || (st == DB_SQL_ERROR && db_error_transient(&e)))
	{
		free(error_text);
		return REPORT_RETRY;
	}
	if (st == DB_SQL_ERROR && !failed && strncmp(e.sqlstate, "22", 2) == 0 && s->rejection == NULL)
	{
		/* valid JSON that jsonb refuses (\u0000, numbers out of range) */
		char		msg[1200];

		snprintf(msg, sizeof(msg), "PostgreSQL refused the result: %s", e.message);
		s->rejection = xstrdup(msg);
		return report_slot(s);
	}
	if (st == DB_SQL_ERROR)
	{
		wlog(LOG_ERROR, "run %" PRId64 " stage %s attempt %d: cannot report the outcome: %s%s%s",
			 s->task.run_id, s->task.stage, s->task.attempt, e.message,
			 e.sqlstate[0] ? " SQLSTATE " : "", e.sqlstate);
		free(error_text);
		return REPORT_DONE;
	}

	if (!failed && strcmp(outcome, "accepted") == 0)
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: completed in %" PRId64 " ms",
			 s->task.run_id, s->task.stage, s->task.attempt, ms);
	else if (strcmp(outcome, "accepted") == 0)
	{
		wlog(LOG_INFO, "run %" PRId64 " stage %s attempt %d: failed in %" PRId64 " ms: %s: %s",
			 s->task.run_id, s->task.stage, s->task.attempt, ms, fail_code, fail_message);
		wlog(LOG_DEBUG, "run %" PRId64 " stage %s attempt %d: reported error %s",
			 s->task.run_id, s->task.stage, s->task.attempt, error_text);
	}
	else
		wlog(LOG_WARNING, "run %" PRId64 " stage %s attempt %d: %s answered %s: %s",
			 s->task.run_id, s->task.stage, s->task.attempt,
			 !failed ? "complete_task" : "fail_task", outcome, outcome_meaning(outcome));
	free(error_text);
	return REPORT_DONE;
}
