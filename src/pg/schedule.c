/*
 * schedule.c — the server side of schedules (delivery.md "Schedules"):
 * cron expressions (parsed by the pure core, src/core/sched/cron.c) over
 * wall-clock time in a time zone, through PostgreSQL's own time-zone code.
 * A tick's submit is made as the schedule's owner (submit_as.c).
 *
 * DST days are decided here, once: a local minute that does not exist (the
 * spring gap) maps to the first instant after the gap, and one that exists
 * twice (the autumn repeat) to the first of the two; the next tick after an
 * instant is the first matching local minute whose instant is later, so a
 * repeated hour's minutes fire once.  Everything else (overlap, catch-up,
 * jitter, recording) is SQL (src/sql/69_schedules.sql).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/sched/cron.h"
#include "wfe.h"

PG_FUNCTION_INFO_V1(wfe_cron_next_sql);

/* Parse a cron expression or raise 22023 naming the field. */
static void
cron_parse_or_raise(const char *text, wfe_cron *c)
{
	char		err[256];
	const char *field = wfe_cron_parse(text, c, err, sizeof(err));

	if (field != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid cron expression \"%s\": %s", text, err),
				 errdetail("The offending field is the %s.", field),
				 errhint("Five fields: minute hour day-of-month month day-of-week, e.g. \"*/15 9-17 * * mon-fri\"; "
						 "or @hourly, @daily, @weekly, @monthly, @yearly.")));
}

/* The zone named, or raise 22023 (as SET timezone would refuse it). */
static pg_tz *
zone_or_raise(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" is not recognized", name),
				 errhint("Use an IANA name PostgreSQL knows (SELECT name FROM pg_timezone_names), e.g. \"Europe/Berlin\".")));
	return tz;
}

/* Seconds east of UTC in tz at instant t (seconds since 1970). */
static long
zone_offset(pg_time_t t, pg_tz *tz)
{
	return pg_localtime(&t, tz)->tm_gmtoff;
}

/* The local wall-clock minute of instant t in tz. */
static void
local_minute(TimestampTz ts, pg_tz *tz, wfe_civil *c)
{
	pg_time_t	t = timestamptz_to_time_t(ts);
	struct pg_tm *tm;

	if (ts < 0 && ts % USECS_PER_SEC != 0)
		t--;					/* floor, not truncate */
	tm = pg_localtime(&t, tz);
	c->year = tm->tm_year + 1900;
	c->month = tm->tm_mon + 1;
	c->day = tm->tm_mday;
	c->hour = tm->tm_hour;
	c->minute = tm->tm_min;
}

/*
 * The instant of local minute c in tz: the first of two in a repeat, the
 * first instant after the gap when it falls in one.
 */
static pg_time_t
minute_instant(const wfe_civil *c, pg_tz *tz)
{
	pg_time_t	local = (pg_time_t) wfe_civil_days(c->year, c->month, c->day) * 86400 +
		c->hour * 3600 + c->minute * 60;
	/* the offsets in force around it: a transition lies between, if any */
	long		off_a = zone_offset(local - 2 * 86400, tz);
	long		off_b = zone_offset(local + 2 * 86400, tz);
	pg_time_t	ta = local - off_a,
				tb = local - off_b,
				lo,
				hi;
	bool		a_ok = ta + zone_offset(ta, tz) == local;
	bool		b_ok = tb + zone_offset(tb, tz) == local;

	if (a_ok && b_ok)
		return Min(ta, tb);
	if (a_ok)
		return ta;
	if (b_ok)
		return tb;
	if (off_a == off_b)
		return ta;				/* two transitions within days: keep the offset */

	/*
	 * A gap: the first instant whose local time is past the minute is the
	 * transition itself, between the two candidates.
	 */
	lo = Min(ta, tb);
	hi = Max(ta, tb);
	while (lo < hi)
	{
		pg_time_t	mid = lo + (hi - lo) / 2;

		if (mid + zone_offset(mid, tz) > local)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * wfe._cron_next(cron, time_zone, after) RETURNS timestamptz: the first tick
 * of cron in time_zone strictly after `after`; NULL when there is none.
 * Raises 22023 for a bad expression (naming its field) or zone.
 */
Datum
wfe_cron_next_sql(PG_FUNCTION_ARGS)
{
	char	   *expr = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *zone = text_to_cstring(PG_GETARG_TEXT_PP(1));
	TimestampTz after = PG_GETARG_TIMESTAMPTZ(2);
	wfe_cron	c;
	pg_tz	   *tz;
	wfe_civil	local,
				next;

	cron_parse_or_raise(expr, &c);
	tz = zone_or_raise(zone);
	if (TIMESTAMP_NOT_FINITE(after))
		PG_RETURN_NULL();
	local_minute(after, tz, &local);

	/*
	 * A local minute whose instant is not later than `after` (the repeat of
	 * an hour already fired in its first occurrence, or a gap's minutes
	 * that all map to one instant) is passed over.
	 */
	for (int i = 0; i < 1000; i++)
	{
		TimestampTz ts;

		if (!wfe_cron_next(&c, &local, &next))
			PG_RETURN_NULL();
		ts = time_t_to_timestamptz(minute_instant(&next, tz));
		if (ts > after)
			PG_RETURN_TIMESTAMPTZ(ts);
		local = next;
	}
	PG_RETURN_NULL();
}
