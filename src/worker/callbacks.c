/*
 * callbacks.c — the SQL wfe-worker sends: one parameterised statement per
 * wfe function, text parameters, text results.
 */
#include "callbacks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The identity parameters every callback starts with, as text. */
typedef struct IdParams
{
	char		run_id[24];
	char		attempt[16];
	char		fence[24];
} IdParams;

/* Format a task's identity for the parameter array. */
static void
id_params(const Task *t, int64_t fence, IdParams *p)
{
	snprintf(p->run_id, sizeof(p->run_id), "%" PRId64, t->run_id);
	snprintf(p->attempt, sizeof(p->attempt), "%d", t->attempt);
	snprintf(p->fence, sizeof(p->fence), "%" PRId64, fence);
}

/* A nullable text column as a fresh string (NULL for SQL NULL). */
static char *
get_text(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : xstrdup(PQgetvalue(res, row, col));
}

/*
 * Run a statement that returns one text value (an outcome word), copying it
 * into `outcome`.
 */
static DbStatus
call_outcome(const char *sql, int nparams, const char *const *values, char *outcome, DbError *e)
{
	PGresult   *res;
	DbStatus	st = db_exec(sql, nparams, values, &res, e);

	if (st != DB_OK)
		return st;
	if (PQntuples(res) != 1 || PQnfields(res) != 1)
	{
		snprintf(e->message, sizeof(e->message), "unexpected result shape (%d rows)", PQntuples(res));
		e->sqlstate[0] = '\0';
		PQclear(res);
		return DB_SQL_ERROR;
	}
	snprintf(outcome, OUTCOME_LEN, "%s", PQgetisnull(res, 0, 0) ? "(null)" : PQgetvalue(res, 0, 0));
	PQclear(res);
	return DB_OK;
}

/* See callbacks.h. */
DbStatus
cb_claim(int max, Task **tasks, int *n, char ***payload_refs, DbError *e)
{
	static const char sql[] =
		"SELECT run_id, stage, attempt, fence, worker, input, payload_ref, heartbeat_ms, tenant, "
		"deadline_at, message_id, "
		"greatest(0, ceil(extract(epoch FROM deadline_at - clock_timestamp()) * 1000))::bigint, "
		"traceparent FROM wfe.claim_task($1, $2, $3)";
	char		maxs[16];
	const char *values[3];
	PGresult   *res;
	DbStatus	st;
	int			rows;

	*tasks = NULL;
	*payload_refs = NULL;
	*n = 0;
	snprintf(maxs, sizeof(maxs), "%d", max);
	values[0] = opts.queue;
	values[1] = opts.worker_id;
	values[2] = maxs;
	st = db_exec(sql, 3, values, &res, e);
	if (st != DB_OK)
		return st;
	rows = PQntuples(res);
	if (rows > 0)
	{
		*tasks = xmalloc(sizeof(Task) * rows);
		*payload_refs = xmalloc(sizeof(char *) * rows);
	}
	for (int i = 0; i < rows; i++)
	{
		Task	   *t = &(*tasks)[i];

		memset(t, 0, sizeof(*t));
		t->run_id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
		t->stage = get_text(res, i, 1);
		t->attempt = atoi(PQgetvalue(res, i, 2));
		t->fence = strtoll(PQgetvalue(res, i, 3), NULL, 10);
		t->worker = get_text(res, i, 4);
		t->input = get_text(res, i, 5);
		(*payload_refs)[i] = get_text(res, i, 6);
		t->heartbeat_ms = PQgetisnull(res, i, 7) ? 0 : atoi(PQgetvalue(res, i, 7));
		t->tenant = get_text(res, i, 8);
		t->deadline_at = get_text(res, i, 9);
		t->message_id = get_text(res, i, 10);
		t->deadline_in_ms = PQgetisnull(res, i, 11) ? -1 : strtoll(PQgetvalue(res, i, 11), NULL, 10);
		t->traceparent = get_text(res, i, 12);
	}
	*n = rows;
	PQclear(res);
	return DB_OK;
}

/* See callbacks.h. */
DbStatus
cb_accept(const Task *t, char *outcome, DbError *e)
{
	IdParams	p;
	char		lease[16];
	const char *values[6];

	id_params(t, t->fence, &p);
	snprintf(lease, sizeof(lease), "%d", opts.lease_ms);
	values[0] = p.run_id;
	values[1] = t->stage;
	values[2] = p.attempt;
	values[3] = p.fence;
	values[4] = opts.worker_id;
	values[5] = lease;			/* heartbeats renew it: a dead worker's task is retried a lease later */
	return call_outcome("SELECT wfe.accept_task($1::bigint, $2::text, $3::int, $4::bigint, $5::text, $6::int)",
						6, values, outcome, e);
}

/* See callbacks.h. */
DbStatus
cb_heartbeat(const Task *t, char *outcome, DbError *e)
{
	IdParams	p;
	const char *values[4];

	id_params(t, t->fence, &p);
	values[0] = p.run_id;
	values[1] = t->stage;
	values[2] = p.attempt;
	values[3] = p.fence;
	return call_outcome("SELECT wfe.heartbeat($1::bigint, $2::text, $3::int, $4::bigint)",
						4, values, outcome, e);
}

/* See callbacks.h. */
DbStatus
cb_complete(const Task *t, const char *result_json, char *outcome, DbError *e)
{
	IdParams	p;
	const char *values[5];

	id_params(t, t->fence, &p);
	values[0] = p.run_id;
	values[1] = t->stage;
	values[2] = p.attempt;
	values[3] = p.fence;
	values[4] = result_json;
	return call_outcome("SELECT wfe.complete_task($1::bigint, $2::text, $3::int, $4::bigint, $5::jsonb)",
						5, values, outcome, e);
}

/* See callbacks.h. */
DbStatus
cb_fail(const Task *t, const char *error_json, bool retryable, char *outcome, DbError *e)
{
	IdParams	p;
	const char *values[6];

	id_params(t, t->fence, &p);
	values[0] = p.run_id;
	values[1] = t->stage;
	values[2] = p.attempt;
	values[3] = p.fence;
	values[4] = error_json;
	values[5] = retryable ? "true" : "false";
	return call_outcome("SELECT wfe.fail_task($1::bigint, $2::text, $3::int, $4::bigint, $5::jsonb, "
						"$6::boolean)", 6, values, outcome, e);
}

/* See callbacks.h. */
DbStatus
cb_fetch_payload(const char *ref_json, char **input, DbError *e)
{
	const char *values[1] = {ref_json};
	PGresult   *res;
	DbStatus	st;

	*input = NULL;
	st = db_exec("SELECT wfe.fetch_payload($1::jsonb)", 1, values, &res, e);
	if (st != DB_OK)
		return st;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		*input = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (*input == NULL)
	{
		snprintf(e->message, sizeof(e->message), "wfe.fetch_payload returned no payload");
		e->sqlstate[0] = '\0';
		return DB_SQL_ERROR;
	}
	return DB_OK;
}

/* See callbacks.h. */
DbStatus
cb_ack_cancel(const Task *t, int64_t fence, char *outcome, DbError *e)
{
	IdParams	p;
	const char *values[4];

	id_params(t, fence, &p);
	values[0] = p.run_id;
	values[1] = t->stage;
	values[2] = p.attempt;
	values[3] = p.fence;
	return call_outcome("SELECT wfe.ack_cancel($1::bigint, $2::text, $3::int, $4::bigint)",
						4, values, outcome, e);
}
