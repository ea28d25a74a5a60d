/*
 * cron.h — five-field cron expressions (delivery.md "Schedules"): parsed,
 * and the next matching minute computed over local wall-clock fields.
 *
 * Plain C: no PostgreSQL headers.  The server layer (src/pg/schedule.c)
 * turns wall-clock minutes into instants through PostgreSQL's own time-zone
 * code, where DST gaps and repeats are decided; here a day is a calendar
 * day and every minute of it exists.
 */
#ifndef WFE_CRON_H
#define WFE_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wfe_cron
{
	uint64_t	minute;			/* bit m: minute m (0-59) */
	uint32_t	hour;			/* bit h: hour h (0-23) */
	uint32_t	mday;			/* bit d: day of month d (1-31) */
	uint16_t	month;			/* bit m: month m (1-12) */
	uint8_t		wday;			/* bit d: day of week d (0-6, Sunday 0) */
	bool		mday_star;		/* the field began with '*' */
	bool		wday_star;
} wfe_cron;

/* A local wall-clock minute: year, month 1-12, day 1-31, hour, minute. */
typedef struct wfe_civil
{
	int			year;
	int			month;
	int			day;
	int			hour;
	int			minute;
} wfe_civil;

/*
 * Parse text into *out: NULL on success, else the name of the offending
 * field ("minute", "hour", "day of month", "month", "day of week", or
 * "expression" for the shape) with a message in err (errlen bytes).
 */
extern const char *wfe_cron_parse(const char *text, wfe_cron *out, char *err, size_t errlen);

/*
 * The first minute strictly after *after that *c matches, into *next;
 * false when there is none within eight years (e.g. "0 0 30 2 *").
 */
extern bool wfe_cron_next(const wfe_cron *c, const wfe_civil *after, wfe_civil *next);

/* Day of week of a calendar date (0 = Sunday); days since 1970-01-01. */
extern int	wfe_civil_weekday(int year, int month, int day);
extern int64_t wfe_civil_days(int year, int month, int day);

/* Days in a month of a year (Gregorian). */
extern int	wfe_civil_month_days(int year, int month);

#endif							/* WFE_CRON_H */
