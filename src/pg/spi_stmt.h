/*
 * spi_stmt.h — the prepared SPI statements the engine and the claim run.
 *
 * A statement is its text and argument types; its plan is prepared on first
 * use and kept for the session, always generic (see spi_stmt.c).
 */
#ifndef WFE_SPI_STMT_H
#define WFE_SPI_STMT_H

#include "executor/spi.h"

typedef struct stmt
{
	const char *sql;
	int			nargs;
	Oid			types[16];
	SPIPlanPtr	plan;
} stmt;

#define STMT(sql, n, ...) {sql, n, {__VA_ARGS__}, NULL}
#define I8 INT8OID
#define I4 INT4OID
#define TX TEXTOID
#define BO BOOLOID

/* Run a statement (nulls as SPI wants them, ' ' or 'n', or NULL for none). */
extern int	stmt_run(stmt *s, Datum *values, const char *nulls);
/* Open it as a cursor, for SPI_cursor_fetch (rows in batches) and SPI_cursor_close. */
extern Portal stmt_cursor(stmt *s, Datum *values, const char *nulls);
/* Column c (1-based) of the last result's row 0: text (or NULL), boolean. */
extern char *stmt_col(int c);
extern bool stmt_bool(int c);
/* A text argument or SQL NULL, setting its nulls character. */
extern Datum stmt_text_or_null(const char *s, char *null);

#endif							/* WFE_SPI_STMT_H */
