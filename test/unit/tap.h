/*
 * tap.h: the TAP output every unit test program writes (one ok() per
 * assertion, the plan at the end).  Included once per program.
 */
#ifndef WFE_UNIT_TAP_H
#define WFE_UNIT_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int	tests_run;
static int	tests_failed;

/* Record one TAP result. */
static void
ok(int cond, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
ok(int cond, const char *fmt,...)
{
	va_list		ap;

	tests_run++;
	if (!cond)
		tests_failed++;
	printf("%s %d - ", cond ? "ok" : "not ok", tests_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#endif							/* WFE_UNIT_TAP_H */
