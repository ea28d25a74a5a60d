/*
 * db.h — wfe-worker's one PostgreSQL connection: connecting within a
 * deadline, non-blocking queries with a deadline, LISTEN wfe_task_ready.
 */
#ifndef WFE_WORKER_DB_H
#define WFE_WORKER_DB_H

#include <stdbool.h>

#include <libpq-fe.h>

typedef enum DbStatus
{
	DB_OK,
	DB_SQL_ERROR,				/* the statement failed; the connection is fine */
	DB_CONN_ERROR				/* the connection is gone (or timed out): reconnect */
} DbStatus;

typedef struct DbError
{
	char		sqlstate[6];	/* "" when there is none */
	char		message[1024];
} DbError;

extern bool db_connected(void);

/* Connect (and LISTEN in poll mode) within opts.db_timeout_ms. */
extern bool db_connect(DbError *e);
extern void db_disconnect(void);

/* The connection's socket, or -1. */
extern int	db_socket(void);

/*
 * Run one parameterised statement (text parameters and results) within
 * opts.db_timeout_ms.  On DB_OK, *res holds the result (PQclear it).  A
 * timeout drops the connection: the server rolls the statement back.
 */
extern DbStatus db_exec(const char *sql, int nparams, const char *const *values,
						PGresult **res, DbError *e);

/* Read what the socket has (notifications); false if the connection broke. */
extern bool db_consume_input(void);

/*
 * True (once) when a wfe_task_ready notification carried our queue's tag since the
 * last call, or the connection was (re)established.
 */
extern bool db_take_task_ready(void);

/*
 * True for errors worth retrying on the same or a new connection:
 * connection exceptions, serialization failures and deadlocks, shortage of
 * resources, operator intervention (class 08, 40, 53, 57, 58).
 */
extern bool db_error_transient(const DbError *e);

/* True when the error says a function does not exist (42883). */
extern bool db_error_undefined_function(const DbError *e);

#endif							/* WFE_WORKER_DB_H */
