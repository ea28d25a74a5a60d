/*
 * test_cron.c — unit tests of the cron parser and the next-minute search
 * (src/core/sched/cron.c).  The wall-clock side of DST days is the server
 * layer's (src/pg/schedule.c, test/tap/030_schedules.pl); here every local
 * minute exists, so the tests also pin what the server asks of the core on
 * those days: the next local minute after a gap or a repeat.
 *
 * A standalone TAP program: "ok N - ..." / "not ok N - ...", then "1..N";
 * exit status 1 if anything failed.  Built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched/cron.h"

#include "tap.h"

/* Parse a heap copy (ASan sees overreads); returns the failing field or NULL. */
static const char *
parse(const char *text, wfe_cron *c, char *err, size_t errlen)
{
	char	   *copy = strdup(text);
	const char *field = wfe_cron_parse(copy, c, err, errlen);

	free(copy);
	return field;
}

/* text is refused, naming field, with a message containing want. */
static void
refused(const char *text, const char *field, const char *want)
{
	wfe_cron	c;
	char		err[256] = "";
	const char *got = parse(text, &c, err, sizeof(err));

	ok(got != NULL && strcmp(got, field) == 0 && strstr(err, want) != NULL,
	   "\"%s\" refused naming %s (%s: %s)", text, field, got ? got : "accepted", err);
}

/* The next minute after `after` ("YYYY-MM-DD HH:MM") is `want` ("" for none). */
static void
next_is(const char *text, const char *after, const char *want)
{
	wfe_cron	c;
	char		err[256] = "";
	wfe_civil	a,
				n;
	char		got[32] = "";

	if (parse(text, &c, err, sizeof(err)) != NULL)
	{
		ok(0, "\"%s\" parses (%s)", text, err);
		return;
	}
	sscanf(after, "%d-%d-%d %d:%d", &a.year, &a.month, &a.day, &a.hour, &a.minute);
	if (wfe_cron_next(&c, &a, &n))
		snprintf(got, sizeof(got), "%04d-%02d-%02d %02d:%02d", n.year, n.month, n.day, n.hour, n.minute);
	ok(strcmp(got, want) == 0, "\"%s\" after %s: %s (got \"%s\")", text, after, want[0] ? want : "never", got);
}

int
main(void)
{
	wfe_cron	c;
	char		err[256];

	/* the calendar */
	ok(wfe_civil_weekday(1970, 1, 1) == 4, "1970-01-01 was a Thursday");
	ok(wfe_civil_weekday(2026, 3, 29) == 0, "2026-03-29 is a Sunday");
	ok(wfe_civil_weekday(1969, 12, 31) == 3, "1969-12-31 was a Wednesday");
	ok(wfe_civil_weekday(2000, 2, 29) == 2, "2000-02-29 was a Tuesday");
	ok(wfe_civil_month_days(2024, 2) == 29 && wfe_civil_month_days(2100, 2) == 28 &&
	   wfe_civil_month_days(2000, 2) == 29 && wfe_civil_month_days(2026, 4) == 30,
	   "leap years and month lengths");

	/* the shapes that parse */
	ok(parse("* * * * *", &c, err, sizeof(err)) == NULL && c.minute == (UINT64_C(1) << 60) - 1 &&
	   c.hour == (1u << 24) - 1 && c.mday_star && c.wday_star && c.wday == 0x7f, "* * * * *: everything");
	ok(parse("0,15,30,45 9-17 * JAN-mar mon-FRI", &c, err, sizeof(err)) == NULL &&
	   c.minute == ((UINT64_C(1) << 0) | (UINT64_C(1) << 15) | (UINT64_C(1) << 30) | (UINT64_C(1) << 45)) &&
	   c.hour == 0x3fe00 && c.month == 0xe && c.wday == 0x3e && !c.wday_star, "lists, ranges, names");
	ok(parse("*/20 0-12/6 5/10 * 7", &c, err, sizeof(err)) == NULL &&
	   c.minute == ((UINT64_C(1) << 0) | (UINT64_C(1) << 20) | (UINT64_C(1) << 40)) &&
	   c.hour == ((1u << 0) | (1u << 6) | (1u << 12)) &&
	   c.mday == ((1u << 5) | (1u << 15) | (1u << 25)) && c.wday == 1, "steps, a/n, 7 is Sunday");
	ok(parse("  0\t0  1 1 *  ", &c, err, sizeof(err)) == NULL, "any whitespace between fields");
	ok(parse("@daily", &c, err, sizeof(err)) == NULL && c.minute == 1 && c.hour == 1, "@daily");
	ok(parse("@HOURLY", &c, err, sizeof(err)) == NULL && c.minute == 1 && c.hour == 0xffffff, "@HOURLY");
	ok(parse("@weekly", &c, err, sizeof(err)) == NULL && c.wday == 1 && !c.wday_star, "@weekly");
	ok(parse("@monthly", &c, err, sizeof(err)) == NULL && c.mday == 2, "@monthly");
	ok(parse("@yearly", &c, err, sizeof(err)) == NULL && c.month == 2 && c.mday == 2, "@yearly");

	/* what is refused, and the field named */
	refused("", "expression", "not 0");
	refused("* * * *", "expression", "not 4");
	refused("* * * * * *", "expression", "not more");
	refused("@often", "expression", "@often");
	refused("@daily extra", "expression", "@daily");
	refused("60 * * * *", "minute", "60 is out of range 0-59");
	refused("* 24 * * *", "hour", "24 is out of range 0-23");
	refused("* * 0 * *", "day of month", "0 is out of range 1-31");
	refused("* * 32 * *", "day of month", "out of range");
	refused("* * * 13 *", "month", "13 is out of range 1-12");
	refused("* * * foo *", "month", "\"foo\" is not a number or name");
	refused("* * * * 8", "day of week", "8 is out of range 0-7");
	refused("* * * * funday", "day of week", "not a number or name");
	refused("* * * * monday", "day of week", "not a number or name");
	refused("5-1 * * * *", "minute", "runs backwards");
	refused("*/0 * * * *", "minute", "step must be");
	refused("*/ * * * *", "minute", "needs a number");
	refused("*/61 * * * *", "minute", "step must be");
	refused("1,,2 * * * *", "minute", "empty list item");
	refused("1, * * * *", "minute", "empty list item");
	refused(",1 * * * *", "minute", "empty list item");
	refused("1x * * * *", "minute", "unexpected");
	refused("* mon * * *", "hour", "not a number");
	refused("99999999999999999999 * * * *", "minute", "out of range");
	refused("* * * * 1-2-3", "day of week", "unexpected");

	/* next ticks */
	next_is("* * * * *", "2026-12-01 23:15", "2026-12-01 23:16");
	next_is("* * * * *", "2026-12-31 23:59", "2027-01-01 00:00");
	next_is("*/15 * * * *", "2026-12-01 23:15", "2026-12-01 23:30");
	next_is("*/15 * * * *", "2026-12-01 23:50", "2026-12-02 00:00");
	next_is("30 2 * * *", "2026-03-29 01:59", "2026-03-29 02:30");
	next_is("30 2 * * *", "2026-03-29 02:30", "2026-03-30 02:30");
	next_is("@daily", "2026-02-28 00:00", "2026-03-01 00:00");
	next_is("@daily", "2024-02-28 00:00", "2024-02-29 00:00");
	next_is("@hourly", "2026-12-01 23:00", "2026-12-02 00:00");
	next_is("@weekly", "2026-12-01 10:00", "2026-12-06 00:00");
	next_is("@monthly", "2026-01-31 12:00", "2026-02-01 00:00");
	next_is("@yearly", "2026-01-01 00:00", "2027-01-01 00:00");
	next_is("0 9 * * mon-fri", "2026-12-04 09:00", "2026-12-07 09:00");
	next_is("0 0 31 * *", "2026-01-31 00:00", "2026-03-31 00:00");
	next_is("0 0 29 2 *", "2026-01-01 00:00", "2028-02-29 00:00");
	next_is("0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00");
	next_is("0 0 30 2 *", "2026-01-01 00:00", "");
	/* both day fields restricted: either matches (vixie cron) */
	next_is("0 0 13 * fri", "2026-12-01 00:00", "2026-12-04 00:00");
	next_is("0 0 13 * fri", "2026-12-11 00:00", "2026-12-13 00:00");
	/* a field that begins with '*' counts as unrestricted: both must match */
	next_is("0 0 */10 * sun", "2026-12-01 00:00", "2027-01-31 00:00");
	next_is("0 0 * * sun", "2026-12-01 00:00", "2026-12-06 00:00");
	next_is("0 0 1 * *", "2026-12-01 00:00", "2027-01-01 00:00");
	next_is("59 23 31 12 *", "2026-12-31 23:58", "2026-12-31 23:59");
	next_is("59 23 31 12 *", "2026-12-31 23:59", "2027-12-31 23:59");
	next_is("0 0 * jan,jul *", "2026-07-31 00:00", "2027-01-01 00:00");

	return tap_done();
}
