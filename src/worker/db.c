/*
 * db.c — the PostgreSQL connection of wfe-worker.
 *
 * libpq is used asynchronously throughout (PQconnectStartParams/
 * PQconnectPoll, PQsendQueryParams/PQconsumeInput) with poll(2) on the
 * socket, so that no call can hang past its deadline.  A statement that
 * misses its deadline costs the connection: dropping it makes the server
 * roll the statement back, which every wfe callback tolerates (they are
 * idempotent and answer `duplicate` when repeated).
 */
#include "db.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "worker.h"

static PGconn *conn = NULL;
static bool task_ready = false;
/* Our queue's wfe_task_ready payload: a keyed tag (wfe.ready_tag), asked on each connection. */
static char ready_tag[80] = "";

/* Log server notices and warnings (RAISE WARNING in wfe) as ours. */
static void
notice_processor(void *arg __attribute__((unused)), const char *message)
{
	char		line[1024];

	snprintf(line, sizeof(line), "%s", message);
	one_line(line);
	wlog(LOG_WARNING, "server: %s", line);
}

/* Copy libpq's error text without its trailing newline. */
static void
set_error(DbError *e, const char *sqlstate, const char *message)
{
	snprintf(e->sqlstate, sizeof(e->sqlstate), "%s", sqlstate ? sqlstate : "");
	snprintf(e->message, sizeof(e->message), "%s", message && *message ? message : "unknown error");
	one_line(e->message);
}

/*
 * Wait until the socket is ready for `events` or the deadline passes.
 * Returns the revents (0 on timeout, -1 on a poll error other than EINTR,
 * -2 when `stop_signals` is not negative and a stop signal arrived since:
 * connecting gives way to a shutdown, statements do not — they are short
 * and their results matter).
 */
static int
wait_socket(int fd, short events, int64_t deadline, int stop_signals)
{
	for (;;)
	{
		struct pollfd pfd = {.fd = fd, .events = events};
		int64_t		left = deadline - now_ms();
		int			rc;

		if (stop_signals >= 0 && got_stop_signal != stop_signals)
			return -2;
		if (left <= 0)
			return 0;
		rc = poll(&pfd, 1, left > 1000 ? 1000 : (int) left);
		if (rc > 0)
			return pfd.revents;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

/* See db.h. */
bool
db_connected(void)
{
	return conn != NULL;
}

/* See db.h. */
int
db_socket(void)
{
	return conn ? PQsocket(conn) : -1;
}

/* See db.h. */
void
db_disconnect(void)
{
	if (conn)
	{
		PQfinish(conn);
		conn = NULL;
	}
}

/* See db.h. */
bool
db_connect(DbError *e)
{
	const char *const keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *const values[] = {opts.dsn ? opts.dsn : "", "wfe-worker", NULL};
	int64_t		deadline = now_ms() + opts.db_timeout_ms;
	int			stop_signals = got_stop_signal;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	PGresult   *res;

	db_disconnect();
	conn = PQconnectStartParams(keywords, values, 1);
	if (conn == NULL)
	{
		set_error(e, NULL, "out of memory");
		return false;
	}
	if (PQstatus(conn) == CONNECTION_BAD)
		goto fail;
	while (st != PGRES_POLLING_OK)
	{
		int			rev;

		if (st == PGRES_POLLING_FAILED)
			goto fail;
		rev = wait_socket(PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline,
						  stop_signals);
		if (rev == 0 || rev == -2)
		{
			set_error(e, NULL, rev == 0 ? "timed out connecting to PostgreSQL (see --db-timeout-ms)"
					  : "interrupted by a stop signal");
			db_disconnect();
			return false;
		}
		st = PQconnectPoll(conn);
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
	if (PQsetnonblocking(conn, 1) != 0)
		goto fail;
	task_ready = true;			/* whatever was notified while away */
	/* a transaction pooler would hand the LISTEN to a server we then leave */
	if (opts.mode == MODE_POLL && !opts.no_listen)
	{
		const char *q[1] = {opts.queue};

		if (db_exec("LISTEN wfe_task_ready", 0, NULL, &res, e) != DB_OK)
		{
			db_disconnect();
			return false;
		}
		PQclear(res);
		/*
		 * The payload is the queue's tag, not its name (anyone may LISTEN).
		 * A role the queue is not granted to is refused it: then no payload
		 * matches, and the claim says why, as it always has.
		 */
		ready_tag[0] = '\0';
		switch (db_exec("SELECT wfe.ready_tag($1)", 1, q, &res, e))
		{
			case DB_OK:
				snprintf(ready_tag, sizeof(ready_tag), "%s", PQgetvalue(res, 0, 0));
				PQclear(res);
				break;
			case DB_SQL_ERROR:
				if (strcmp(e->sqlstate, "42501") == 0)
					break;
				/* FALLTHROUGH */
			default:
				db_disconnect();
				return false;
		}
	}
	return true;

fail:
	set_error(e, NULL, PQerrorMessage(conn));
	db_disconnect();
	return false;
}

/* Note the notifications libpq has collected. */
static void
collect_notifies(void)
{
	PGnotify   *n;

	while (conn && (n = PQnotifies(conn)) != NULL)
	{
		if (strcmp(n->relname, "wfe_task_ready") == 0 && strcmp(n->extra, ready_tag) == 0)
			task_ready = true;
		PQfreemem(n);
	}
}

/* See db.h. */
bool
db_take_task_ready(void)
{
	bool		r = task_ready;

	task_ready = false;
	return r;
}

/* See db.h. */
bool
db_consume_input(void)
{
	if (conn == NULL)
		return false;
	if (!PQconsumeInput(conn))
	{
		DbError		e;

		set_error(&e, NULL, PQerrorMessage(conn));
		wlog(LOG_WARNING, "lost the PostgreSQL connection: %s", e.message);
		db_disconnect();
		return false;
	}
	collect_notifies();
	return true;
}

/* The connection failed under a statement: say why and drop it. */
static DbStatus
conn_failed(DbError *e, const char *why)
{
	set_error(e, NULL, why);
	db_disconnect();
	return DB_CONN_ERROR;
}

/* See db.h. */
DbStatus
db_exec(const char *sql, int nparams, const char *const *values, PGresult **res, DbError *e)
{
	int64_t		deadline = now_ms() + opts.db_timeout_ms;
	PGresult   *last = NULL,
			   *r;
	ExecStatusType st;

	*res = NULL;
	set_error(e, NULL, "");
	if (conn == NULL)
		return conn_failed(e, "not connected to PostgreSQL");
	if (!PQsendQueryParams(conn, sql, nparams, NULL, values, NULL, NULL, 0))
		return conn_failed(e, PQerrorMessage(conn));

	/* send it all */
	for (;;)
	{
		int			f = PQflush(conn);
		int			rev;

		if (f == 0)
			break;
		if (f < 0)
			return conn_failed(e, PQerrorMessage(conn));
		rev = wait_socket(PQsocket(conn), POLLOUT | POLLIN, deadline, -1);
		if (rev == 0)
			return conn_failed(e, "timed out sending a statement to PostgreSQL");
		if (rev < 0)
			return conn_failed(e, strerror(errno));
		if ((rev & POLLIN) && !PQconsumeInput(conn))
			return conn_failed(e, PQerrorMessage(conn));
	}

	/* read every result; the last one decides */
	for (;;)
	{
		while (PQisBusy(conn))
		{
			int			rev = wait_socket(PQsocket(conn), POLLIN, deadline, -1);

			if (rev == 0)
			{
				PQclear(last);
				return conn_failed(e, "timed out waiting for PostgreSQL (see --db-timeout-ms)");
			}
			if (rev < 0 || !PQconsumeInput(conn))
			{
				PQclear(last);
				return conn_failed(e, PQerrorMessage(conn));
			}
		}
		r = PQgetResult(conn);
		if (r == NULL)
			break;
		PQclear(last);
		last = r;
	}
	collect_notifies();

	if (last == NULL)
		return conn_failed(e, PQerrorMessage(conn));
	st = PQresultStatus(last);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		*res = last;
		return DB_OK;
	}
	set_error(e, PQresultErrorField(last, PG_DIAG_SQLSTATE),
			  PQresultErrorField(last, PG_DIAG_MESSAGE_PRIMARY)
			  ? PQresultErrorField(last, PG_DIAG_MESSAGE_PRIMARY)
			  : PQresultErrorMessage(last));
	PQclear(last);
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		char		msg[sizeof(e->message)];

		snprintf(msg, sizeof(msg), "%s", e->message);
		return conn_failed(e, msg);
	}
	return DB_SQL_ERROR;
}

/* See db.h. */
bool
db_error_transient(const DbError *e)
{
	static const char *const classes[] = {"08", "40", "53", "57", "58"};

	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		if (strncmp(e->sqlstate, classes[i], 2) == 0)
			return true;
	return false;
}

/* See db.h. */
bool
db_error_undefined_function(const DbError *e)
{
	return strcmp(e->sqlstate, "42883") == 0;
}
