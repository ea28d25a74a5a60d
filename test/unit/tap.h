/*
 * tap.h: the TAP output every unit test program writes (one ok() per
 * assertion, the plan at the end by tap_done()).  Included once per program.
 */
#ifndef WFE_UNIT_TAP_H
#define WFE_UNIT_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int	tests_run;
static int	tests_failed;

/*
 * Record one TAP result with an optional directive ("TODO why": a failure
 * that is expected and does not count).  Descriptions come from test data
 * (CEL and JSON Schema cases), so control bytes are escaped to keep one
 * line per result, and '#' is written "\#" so that it never starts a
 * directive by accident.
 */
static void
tap_result(int cond, const char *directive, const char *desc)
{
	tests_run++;
	if (!cond && !(directive && strncmp(directive, "TODO", 4) == 0))
		tests_failed++;
	printf("%s %d - ", cond ? "ok" : "not ok", tests_run);
	for (const unsigned char *c = (const unsigned char *) desc; *c; c++)
	{
		if (*c < 0x20 || *c == 0x7f)
			printf("\\x%02x", *c);
		else if (*c == '#')
			fputs("\\#", stdout);
		else
			putchar(*c);
	}
	if (directive)
		printf(" # %s", directive);
	putchar('\n');
}

/* Record one TAP result. */
static void
ok(int cond, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
ok(int cond, const char *fmt,...)
{
	va_list		ap;
	char		desc[1024];

	va_start(ap, fmt);
	vsnprintf(desc, sizeof(desc), fmt, ap);
	va_end(ap);
	tap_result(cond, NULL, desc);
}

/* Print the plan; the program's exit status (1 if anything failed). */
static int
tap_done(void)
{
	printf("1..%d\n", tests_run);
	return tests_failed ? 1 : 0;
}

#endif							/* WFE_UNIT_TAP_H */
