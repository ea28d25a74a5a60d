/*
 * cron.c — the cron expression parser and the next-minute search
 * (cron.h).  Vixie cron's rules: five fields, '*', lists, ranges, steps,
 * month and day names, 7 as Sunday, and when both day fields are
 * restricted a day matches either of them.
 */
#include "core/sched/cron.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct field_spec
{
	const char *name;
	int			lo;
	int			hi;
	const char *const *names;	/* names[i] is value lo + i, or NULL */
} field_spec;

static const char *const month_names[] = {
	"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const day_names[] = {
	"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

/* Day of week accepts 7 (Sunday) and folds it into 0 after parsing. */
static const field_spec fields[5] = {
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day of month", 1, 31, NULL},
	{"month", 1, 12, month_names},
	{"day of week", 0, 7, day_names},
};

static const struct
{
	const char *macro;
	const char *expansion;
}			macros[] = {
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/* Read one value (a number or a name) at *p; false with err set when there is none. */
static bool
read_value(const char **p, const char *end, const field_spec *f, int *value, char *err, size_t errlen)
{
	const char *s = *p;

	if (s < end && isdigit((unsigned char) *s))
	{
		long		v = 0;

		while (s < end && isdigit((unsigned char) *s))
		{
			v = v * 10 + (*s - '0');
			if (v > 1000)
				break;
			s++;
		}
		if (v < f->lo || v > f->hi)
		{
			snprintf(err, errlen, "cron field \"%s\": %ld is out of range %d-%d", f->name, v, f->lo, f->hi);
			return false;
		}
		*value = (int) v;
		*p = s;
		return true;
	}
	if (f->names != NULL && end - s >= 3)
	{
		for (int i = 0; f->names[i] != NULL; i++)
			if (strncasecmp(s, f->names[i], 3) == 0 &&
				(end - s == 3 || !isalpha((unsigned char) s[3])))
			{
				*value = f->lo + i;
				*p = s + 3;
				return true;
			}
	}
	snprintf(err, errlen, "cron field \"%s\": \"%.*s\" is not a %s", f->name, (int) (end - *p), *p,
			 f->names != NULL ? "number or name" : "number");
	return false;
}

/* Parse one field [s, end) into a bit set; false with err set. */
static bool
parse_field(const char *s, const char *end, const field_spec *f, uint64_t *bits, bool *star,
			char *err, size_t errlen)
{
	*bits = 0;
	*star = (s < end && *s == '*');
	while (s < end)
	{
		const char *item_end = memchr(s, ',', end - s);
		int			lo,
					hi,
					step = 1;

		if (item_end == NULL)
			item_end = end;
		if (item_end == s)
		{
			snprintf(err, errlen, "cron field \"%s\" has an empty list item", f->name);
			return false;
		}
		if (*s == '*')
		{
			lo = f->lo;
			hi = f->hi;
			s++;
		}
		else
		{
			if (!read_value(&s, item_end, f, &lo, err, errlen))
				return false;
			hi = lo;
			if (s < item_end && *s == '-')
			{
				s++;
				if (!read_value(&s, item_end, f, &hi, err, errlen))
					return false;
				if (hi < lo)
				{
					snprintf(err, errlen, "cron field \"%s\": range %d-%d runs backwards", f->name, lo, hi);
					return false;
				}
			}
			else if (s < item_end && *s == '/')
				hi = f->hi;		/* "a/n": from a to the end, every n */
		}
		if (s < item_end && *s == '/')
		{
			long		v = 0;

			s++;
			if (s == item_end)
			{
				snprintf(err, errlen, "cron field \"%s\": a step needs a number after '/'", f->name);
				return false;
			}
			while (s < item_end && isdigit((unsigned char) *s) && v <= 1000)
				v = v * 10 + (*s++ - '0');
			if (v < 1 || v > f->hi - f->lo + 1 || (s < item_end && isdigit((unsigned char) *s)))
			{
				snprintf(err, errlen, "cron field \"%s\": step must be between 1 and %d",
						 f->name, f->hi - f->lo + 1);
				return false;
			}
			step = (int) v;
		}
		if (s != item_end)
		{
			snprintf(err, errlen, "cron field \"%s\": unexpected \"%.*s\"", f->name,
					 (int) (item_end - s), s);
			return false;
		}
		for (int v = lo; v <= hi; v += step)
			*bits |= UINT64_C(1) << v;
		s = item_end < end ? item_end + 1 : end;
		if (item_end < end && s == end)
		{
			snprintf(err, errlen, "cron field \"%s\" has an empty list item", f->name);
			return false;
		}
	}
	return true;
}

/* See cron.h. */
const char *
wfe_cron_parse(const char *text, wfe_cron *out, char *err, size_t errlen)
{
	const char *starts[6];
	const char *ends[5];
	const char *p = text;
	int			n = 0;
	uint64_t	bits[5];
	bool		star[5];

	while (isspace((unsigned char) *p))
		p++;
	if (*p == '@')
	{
		size_t		len = strcspn(p, " \t\r\n");
		const char *rest = p + len;

		while (isspace((unsigned char) *rest))
			rest++;
		for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (*rest == '\0' && strlen(macros[i].macro) == len && strncasecmp(p, macros[i].macro, len) == 0)
				return wfe_cron_parse(macros[i].expansion, out, err, errlen);
		snprintf(err, errlen, "cron expression \"%.*s\" is not one of @yearly, @monthly, @weekly, @daily, @hourly",
				 (int) (len > 40 ? 40 : len), p);
		return "expression";
	}
	while (*p != '\0')
	{
		if (n == 5)
		{
			snprintf(err, errlen, "a cron expression has five fields (minute, hour, day of month, month, day of week), not more");
			return "expression";
		}
		starts[n] = p;
		while (*p != '\0' && !isspace((unsigned char) *p))
			p++;
		ends[n++] = p;
		while (isspace((unsigned char) *p))
			p++;
	}
	if (n != 5)
	{
		snprintf(err, errlen, "a cron expression has five fields (minute, hour, day of month, month, day of week), not %d", n);
		return "expression";
	}
	for (int i = 0; i < 5; i++)
		if (!parse_field(starts[i], ends[i], &fields[i], &bits[i], &star[i], err, errlen))
			return fields[i].name;
	if (bits[4] & (UINT64_C(1) << 7))
		bits[4] = (bits[4] | 1) & ~(UINT64_C(1) << 7);	/* 7 is Sunday */
	out->minute = bits[0];
	out->hour = (uint32_t) bits[1];
	out->mday = (uint32_t) bits[2];
	out->month = (uint16_t) bits[3];
	out->wday = (uint8_t) bits[4];
	out->mday_star = star[2];
	out->wday_star = star[4];
	return NULL;
}

/* See cron.h (Howard Hinnant's days_from_civil). */
int64_t
wfe_civil_days(int year, int month, int day)
{
	int64_t		y = (int64_t) year - (month <= 2);
	int64_t		era = (y >= 0 ? y : y - 399) / 400;
	int64_t		yoe = y - era * 400;
	int64_t		doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
	int64_t		doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468;
}

/* See cron.h. */
int
wfe_civil_weekday(int year, int month, int day)
{
	int64_t		d = wfe_civil_days(year, month, day);

	return (int) (((d % 7) + 7 + 4) % 7);	/* 1970-01-01 was a Thursday */
}

/* See cron.h. */
int
wfe_civil_month_days(int year, int month)
{
	static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool		leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

/* Does the day (y, m, d) match: both day fields restricted means either. */
static bool
day_matches(const wfe_cron *c, int y, int m, int d)
{
	bool		md = (c->mday >> d) & 1;
	bool		wd = (c->wday >> wfe_civil_weekday(y, m, d)) & 1;

	if (!c->mday_star && !c->wday_star)
		return md || wd;
	return md && wd;
}

/* See cron.h. */
bool
wfe_cron_next(const wfe_cron *c, const wfe_civil *after, wfe_civil *next)
{
	int			y = after->year,
				m = after->month,
				d = after->day,
				h = after->hour,
				mi = after->minute + 1;

	while (y <= after->year + 8)
	{
		if (!((c->month >> m) & 1) || !day_matches(c, y, m, d) || h > 23)
		{
			/* on to the next day (the next month when the month is wrong) */
			if (!((c->month >> m) & 1) || ++d > wfe_civil_month_days(y, m))
			{
				d = 1;
				if (++m > 12)
				{
					m = 1;
					y++;
				}
			}
			h = 0;
			mi = 0;
			continue;
		}
		if (mi > 59 || !((c->hour >> h) & 1))
		{
			h++;
			mi = 0;
			continue;
		}
		while (mi <= 59 && !((c->minute >> mi) & 1))
			mi++;
		if (mi > 59)
			continue;
		next->year = y;
		next->month = m;
		next->day = d;
		next->hour = h;
		next->minute = mi;
		return true;
	}
	return false;
}
