/*
 * spi_stmt.c — prepared SPI statements (spi_stmt.h).
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"

#include "spi_stmt.h"

/*
 * The statement's plan, prepared on first use and kept for the session.
 * Always the generic plan: each statement here reads or writes rows by key
 * (or walks an index by tuple id), so the plan is the same for any
 * arguments, and the plan cache would otherwise keep replanning those whose
 * generic estimate looks dearer than a custom one (the claim, whose LIMIT
 * it cannot see, was replanned on every call: a fifth of a step's time).
 */
static SPIPlanPtr
prepared(stmt *s, int options)
{
	if (s->plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(s->sql, s->nargs, s->types, CURSOR_OPT_GENERIC_PLAN | options);

		if (p == NULL)
			elog(ERROR, "wfe: cannot prepare \"%s\": %s", s->sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		s->plan = p;
	}
	return s->plan;
}

/*
 * Run a prepared statement; nulls as SPI wants them (' ' or 'n').  Never
 * read-only: a read-only execution would see the calling statement's
 * snapshot, older than the run lock we waited for, while every read here
 * must see what the lock's previous holder committed.
 */
int
stmt_run(stmt *s, Datum *values, const char *nulls)
{
	int			rc = SPI_execute_plan(prepared(s, 0), values, nulls, false, 0);

	if (rc < 0)
		elog(ERROR, "wfe: \"%s\" failed: %s", s->sql, SPI_result_code_string(rc));
	return rc;
}

/* Column c (1-based) of result row 0 as text, or NULL. */
char *
stmt_col(int c)
{
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, c);
}

bool
stmt_bool(int c)
{
	char	   *v = stmt_col(c);

	return v != NULL && v[0] == 't';
}

Datum
stmt_text_or_null(const char *s, char *null)
{
	*null = s ? ' ' : 'n';
	return s ? CStringGetTextDatum(s) : (Datum) 0;
}


/*
 * Open a prepared statement as a cursor (not read-only, as stmt_run), to
 * fetch its rows in batches.  Planned for its first rows (fast start, as
 * DECLARE CURSOR is): a cursor here is closed once its caller has what it
 * needs, so an index walk in the order asked beats a sort of every row.
 */
Portal
stmt_cursor(stmt *s, Datum *values, const char *nulls)
{
	return SPI_cursor_open(NULL, prepared(s, CURSOR_OPT_FAST_PLAN), values, nulls, false);
}
