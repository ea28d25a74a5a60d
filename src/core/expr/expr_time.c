/*
 * expr_time.c — CEL timestamps and durations: RFC 3339 parsing and
 * printing, duration strings ("1h30m", "1.5s", "-250ms"), arithmetic with
 * range checks, and the accessors (getFullYear ... getMilliseconds).
 *
 * A timestamp is seconds since the Unix epoch plus nanoseconds in
 * [0, 1e9), limited to years 0001..9999 (CEL's range).  A duration is a
 * signed 64-bit count of nanoseconds (about ±292 years), as in cel-go, the
 * reference implementation.  Calendar arithmetic is proleptic Gregorian,
 * without leap seconds.  Time zones are "UTC" and fixed offsets "+HH:MM",
 * "-HH:MM" or "HH:MM"; zone names (Europe/Paris) are refused (docs/dsl.md).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "expr_internal.h"

#define NS_PER_SEC 1000000000LL

/* Days since 1970-01-01 of a civil date (proleptic Gregorian). */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
	int64_t		era;
	int64_t		yoe;
	int64_t		doy;
	int64_t		doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* The civil date of a day count since 1970-01-01. */
static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t		era;
	int64_t		doe;
	int64_t		yoe;
	int64_t		doy;
	int64_t		mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int) (doy - (153 * mp + 2) / 5 + 1);
	*m = (int) (mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

/* Floor division and its remainder, for negative seconds. */
static int64_t
floor_div(int64_t a, int64_t b)
{
	int64_t		q = a / b;

	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int
is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int
days_in_month(int64_t y, int m)
{
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Read exactly n decimal digits; -1 if they are not there. */
static int
digits(const char *s, size_t len, size_t at, int n, int *out)
{
	int			v = 0;
	int			i;

	if (at + (size_t) n > len)
		return -1;
	for (i = 0; i < n; i++)
	{
		if (s[at + i] < '0' || s[at + i] > '9')
			return -1;
		v = v * 10 + (s[at + i] - '0');
	}
	*out = v;
	return 0;
}

/*
 * Parse an RFC 3339 timestamp: YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM),
 * fraction up to 9 digits, 'T' and 'Z' in either case.  0 ok; -1 with a
 * reason in why.
 */
int
wfe_timestamp_parse(const char *s, size_t len, int64_t *sec, int32_t *nsec, char *why, size_t whylen)
{
	return cel_parse_timestamp(s, len, sec, nsec, why, whylen);
}

int
cel_parse_timestamp(const char *s, size_t len, int64_t *sec, int32_t *nsec,
					char *why, size_t whylen)
{
	int			y,
				mo,
				d,
				h,
				mi,
				se;
	size_t		i = 19;
	int32_t		frac = 0;
	int			offset = 0;
	int64_t		t;

	if (digits(s, len, 0, 4, &y) < 0 || len < 20 || s[4] != '-' ||
		digits(s, len, 5, 2, &mo) < 0 || s[7] != '-' ||
		digits(s, len, 8, 2, &d) < 0 || (s[10] != 'T' && s[10] != 't') ||
		digits(s, len, 11, 2, &h) < 0 || s[13] != ':' ||
		digits(s, len, 14, 2, &mi) < 0 || s[16] != ':' ||
		digits(s, len, 17, 2, &se) < 0)
		goto syntax;
	if (s[i] == '.')
	{
		int			n = 0;

		i++;
		while (i < len && s[i] >= '0' && s[i] <= '9')
		{
			if (n == 9)
			{
				snprintf(why, whylen, "timestamp has more than 9 fraction digits");
				return -1;
			}
			frac = frac * 10 + (s[i] - '0');
			n++;
			i++;
		}
		if (n == 0)
			goto syntax;
		while (n++ < 9)
			frac *= 10;
	}
	if (i < len && (s[i] == 'Z' || s[i] == 'z'))
		i++;
	else if (i < len && (s[i] == '+' || s[i] == '-'))
	{
		int			oh,
					om;

		if (digits(s, len, i + 1, 2, &oh) < 0 || i + 3 >= len || s[i + 3] != ':' ||
			digits(s, len, i + 4, 2, &om) < 0 || oh > 23 || om > 59)
			goto syntax;
		offset = (oh * 3600 + om * 60) * (s[i] == '-' ? -1 : 1);
		i += 6;
	}
	else
		goto syntax;
	if (i != len)
		goto syntax;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) ||
		h > 23 || mi > 59 || se > 59)
	{
		snprintf(why, whylen, "timestamp names a date or time that does not exist");
		return -1;
	}
	t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - offset;
	if (t < CEL_TS_MIN || t > CEL_TS_MAX)
	{
		snprintf(why, whylen, "timestamp is outside years 0001 to 9999");
		return -1;
	}
	*sec = t;
	*nsec = frac;
	return 0;
syntax:
	snprintf(why, whylen, "string is not an RFC 3339 timestamp such as \"2024-01-31T12:00:00Z\"");
	return -1;
}

/* RFC 3339 in UTC, fraction without trailing zeros: 2024-01-31T12:00:00.5Z */
int
cel_format_timestamp(int64_t sec, int32_t nsec, char *buf, size_t size)
{
	int64_t		days = floor_div(sec, 86400);
	int64_t		rem = sec - days * 86400;
	int64_t		y;
	int			m,
				d;
	int			n;

	civil_from_days(days, &y, &m, &d);
	n = snprintf(buf, size, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d", y, m, d,
				 (int) (rem / 3600), (int) (rem / 60 % 60), (int) (rem % 60));
	if (nsec > 0 && n > 0 && (size_t) n < size)
	{
		char		f[16];
		int			k;

		snprintf(f, sizeof(f), "%09d", (int) nsec);
		for (k = 8; k > 0 && f[k] == '0'; k--)
			f[k] = '\0';
		n += snprintf(buf + n, size - (size_t) n, ".%s", f);
	}
	if (n > 0 && (size_t) n < size)
		n += snprintf(buf + n, size - (size_t) n, "Z");
	return n;
}

/*
 * Parse a duration string: an optional sign, then one or more decimal
 * numbers (with optional fraction), each with a unit h, m, s, ms, us (or
 * µs) or ns — "1h30m", "1.5s", "-250ms"; "0" alone is zero.  0 ok; -1 with
 * a reason (including overflow past ±292 years).
 */
int
cel_parse_duration(const char *s, size_t len, int64_t *ns, char *why,
				   size_t whylen)
{
	size_t		i = 0;
	int			neg = 0;
	uint64_t	total = 0;
	const uint64_t limit = (uint64_t) INT64_MAX + 1;

	if (i < len && (s[i] == '-' || s[i] == '+'))
		neg = s[i++] == '-';
	if (len - i == 1 && s[i] == '0')
	{
		*ns = 0;
		return 0;
	}
	if (i >= len)
		goto syntax;
	while (i < len)
	{
		uint64_t	whole = 0;
		uint64_t	frac = 0;
		uint64_t	scale = 1;
		uint64_t	unit;
		int			any = 0;
		uint64_t	add;

		while (i < len && s[i] >= '0' && s[i] <= '9')
		{
			if (whole > (limit - 9) / 10)
				goto range;
			whole = whole * 10 + (uint64_t) (s[i] - '0');
			i++;
			any = 1;
		}
		if (i < len && s[i] == '.')
		{
			i++;
			while (i < len && s[i] >= '0' && s[i] <= '9')
			{
				/* digits past nanosecond precision of an hour are ignored */
				if (scale < 1000000000000000000ULL)
				{
					frac = frac * 10 + (uint64_t) (s[i] - '0');
					scale *= 10;
				}
				i++;
				any = 1;
			}
		}
		if (!any)
			goto syntax;
		if (i + 1 < len && s[i] == 'n' && s[i + 1] == 's')
			unit = 1, i += 2;
		else if (i + 1 < len && s[i] == 'u' && s[i + 1] == 's')
			unit = 1000, i += 2;
		else if (i + 2 < len && (unsigned char) s[i] == 0xC2 &&
				 (unsigned char) s[i + 1] == 0xB5 && s[i + 2] == 's')
			unit = 1000, i += 3;	/* µs, MICRO SIGN */
		else if (i + 2 < len && (unsigned char) s[i] == 0xCE &&
				 (unsigned char) s[i + 1] == 0xBC && s[i + 2] == 's')
			unit = 1000, i += 3;	/* μs, GREEK SMALL LETTER MU */
		else if (i + 1 < len && s[i] == 'm' && s[i + 1] == 's')
			unit = 1000000, i += 2;
		else if (i < len && s[i] == 's')
			unit = 1000000000ULL, i += 1;
		else if (i < len && s[i] == 'm')
			unit = 60000000000ULL, i += 1;
		else if (i < len && s[i] == 'h')
			unit = 3600000000000ULL, i += 1;
		else
			goto syntax;
		if (whole > limit / unit)
			goto range;
		add = whole * unit;
		/* frac / scale of a unit, in nanoseconds, without overflowing */
		if (frac > 0)
		{
			long double f = (long double) frac * (long double) unit / (long double) scale;

			add += (uint64_t) f;
		}
		if (add > limit - total)
			goto range;
		total += add;
	}
	if (!neg && total > (uint64_t) INT64_MAX)
		goto range;
	*ns = neg ? (total == limit ? INT64_MIN : -(int64_t) total) : (int64_t) total;
	return 0;
syntax:
	snprintf(why, whylen, "string is not a duration such as \"1h30m\", \"1.5s\" or \"250ms\"");
	return -1;
range:
	snprintf(why, whylen, "duration is out of range (about 292 years either way)");
	return -1;
}

/* A duration as seconds: "90s", "1.5s", "-0.000000001s" (cel-go's form). */
int
cel_format_duration(int64_t ns, char *buf, size_t size)
{
	uint64_t	a = ns < 0 ? (uint64_t) 0 - (uint64_t) ns : (uint64_t) ns;
	uint64_t	whole = a / NS_PER_SEC;
	uint64_t	frac = a % NS_PER_SEC;
	int			n;

	if (frac == 0)
		return snprintf(buf, size, "%s%" PRIu64 "s", ns < 0 ? "-" : "", whole);
	{
		char		f[16];
		int			k;

		snprintf(f, sizeof(f), "%09" PRIu64, frac);
		for (k = 8; k > 0 && f[k] == '0'; k--)
			f[k] = '\0';
		n = snprintf(buf, size, "%s%" PRIu64 ".%ss", ns < 0 ? "-" : "", whole, f);
	}
	return n;
}

/* A timestamp value, range-checked; -1 (error) outside years 1..9999. */
static int
make_timestamp(eval_context *cx, const expr_node *n, int64_t sec, int64_t nsec,
			   cel_value *out)
{
	/* normalise nsec into [0, 1e9) */
	sec += floor_div(nsec, NS_PER_SEC);
	nsec -= floor_div(nsec, NS_PER_SEC) * NS_PER_SEC;
	if (sec < CEL_TS_MIN || sec > CEL_TS_MAX)
		return eval_error(cx, n->offset,
						  "timestamp overflow in '%s' at offset %d (outside years 0001 to 9999)",
						  wfe_expr_op_name(n->op), n->offset);
	memset(out, 0, sizeof(*out));
	out->kind = CEL_TIMESTAMP;
	out->v.t.sec = sec;
	out->v.t.nsec = (int32_t) nsec;
	return 0;
}

/* Report a duration overflow. */
static int
duration_overflow(eval_context *cx, const expr_node *n)
{
	return eval_error(cx, n->offset,
					  "duration overflow in '%s' at offset %d (about 292 years either way)",
					  wfe_expr_op_name(n->op), n->offset);
}

/*
 * + and - over timestamps and durations: timestamp ± duration, duration +
 * timestamp, timestamp - timestamp, duration ± duration.
 */
int
eval_time_arith(eval_context *cx, const expr_node *n, const cel_value *l,
				const cel_value *r, cel_value *out)
{
	int			add = n->op == EXPR_OP_ADD;

	if (l->kind == CEL_DURATION && r->kind == CEL_DURATION)
	{
		int64_t		a = l->v.i;
		int64_t		b = add ? r->v.i : 0;

		if (!add)
		{
			if (r->v.i == INT64_MIN)
				return duration_overflow(cx, n);
			b = -r->v.i;
		}
		if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
			return duration_overflow(cx, n);
		memset(out, 0, sizeof(*out));
		out->kind = CEL_DURATION;
		out->v.i = a + b;
		return 0;
	}
	if (l->kind == CEL_TIMESTAMP && r->kind == CEL_TIMESTAMP)
	{
		int64_t		ds;
		int64_t		dn;

		if (add)
			return eval_no_overload(cx, n->offset, "operator '+'", l, r);
		/* both in years 1..9999, so the second difference cannot overflow */
		ds = l->v.t.sec - r->v.t.sec;
		dn = (int64_t) l->v.t.nsec - (int64_t) r->v.t.nsec;
		if (ds > INT64_MAX / NS_PER_SEC - 1 || ds < INT64_MIN / NS_PER_SEC + 1)
			return duration_overflow(cx, n);
		memset(out, 0, sizeof(*out));
		out->kind = CEL_DURATION;
		out->v.i = ds * NS_PER_SEC + dn;
		return 0;
	}
	if (l->kind == CEL_TIMESTAMP || (add && r->kind == CEL_TIMESTAMP))
	{
		const cel_value *ts = l->kind == CEL_TIMESTAMP ? l : r;
		const cel_value *d = l->kind == CEL_TIMESTAMP ? r : l;
		int64_t		dsec = floor_div(d->v.i, NS_PER_SEC);
		int64_t		dns = d->v.i - dsec * NS_PER_SEC;

		if (!add)
		{
			dsec = -dsec;
			dns = -dns;
		}
		return make_timestamp(cx, n, ts->v.t.sec + dsec, ts->v.t.nsec + dns, out);
	}
	return eval_no_overload(cx, n->offset, add ? "operator '+'" : "operator '-'", l, r);
}

/* A time zone argument: "UTC" or a fixed "+HH:MM" / "-HH:MM" offset. */
static int
parse_zone(eval_context *cx, const expr_node *n, const cel_value *tz, int *offset)
{
	const char *s;
	int			h,
				m;

	*offset = 0;
	if (tz == NULL)
		return 0;
	if (tz->kind != CEL_STRING)
		return eval_no_overload(cx, n->offset, "a time zone", tz, NULL);
	s = tz->v.s.ptr;
	if (strcmp(s, "UTC") == 0 || strcmp(s, "Z") == 0)
		return 0;
	/* "+HH:MM", "-HH:MM", or "HH:MM" (east of UTC, as cel-spec allows) */
	if (tz->v.s.len == 6 && (s[0] == '+' || s[0] == '-') &&
		digits(s, 6, 1, 2, &h) == 0 && s[3] == ':' && digits(s, 6, 4, 2, &m) == 0 &&
		h <= 23 && m <= 59)
	{
		*offset = (h * 3600 + m * 60) * (s[0] == '-' ? -1 : 1);
		return 0;
	}
	if (tz->v.s.len == 5 && digits(s, 5, 0, 2, &h) == 0 && s[2] == ':' &&
		digits(s, 5, 3, 2, &m) == 0 && h <= 23 && m <= 59)
	{
		*offset = h * 3600 + m * 60;
		return 0;
	}
	return eval_error(cx, n->offset,
					  "%s() at offset %d: time zone \"%.40s\" is not supported; use \"UTC\" or a fixed offset such as \"+05:30\"",
					  wfe_expr_fn_name(n->fn), n->offset, s);
}

/* The accessors: getFullYear() ... getMilliseconds(), optionally in a zone. */
int
eval_time_accessor(eval_context *cx, const expr_node *n, const cel_value *target,
				   const cel_value *tz, cel_value *out)
{
	int			offset;
	int64_t		local;
	int64_t		days;
	int64_t		rem;
	int64_t		y;
	int			m,
				d;
	int64_t		v = 0;
	char		what[40];

	/* only messages use it; accessors are not on a hot path */
	snprintf(what, sizeof(what), "%s()", wfe_expr_fn_name(n->fn));
	memset(out, 0, sizeof(*out));
	out->kind = CEL_INT;
	if (target->kind == CEL_DURATION && tz == NULL)
	{
		int64_t		ns = target->v.i;

		switch (n->fn)
		{
			case FN_GET_HOURS:
				out->v.i = ns / (3600 * NS_PER_SEC);
				return 0;
			case FN_GET_MINUTES:
				out->v.i = ns / (60 * NS_PER_SEC);
				return 0;
			case FN_GET_SECONDS:
				out->v.i = ns / NS_PER_SEC;
				return 0;
			case FN_GET_MILLISECONDS:
				out->v.i = (ns / 1000000) % 1000;
				return 0;
			default:
				return eval_no_overload(cx, n->offset, what, target, NULL);
		}
	}
	if (target->kind != CEL_TIMESTAMP)
		return eval_no_overload(cx, n->offset, what, target, tz);
	if (parse_zone(cx, n, tz, &offset) < 0)
		return -1;
	local = target->v.t.sec + offset;
	days = floor_div(local, 86400);
	rem = local - days * 86400;
	civil_from_days(days, &y, &m, &d);
	switch (n->fn)
	{
		case FN_GET_FULL_YEAR:
			v = y;
			break;
		case FN_GET_MONTH:
			v = m - 1;
			break;
		case FN_GET_DAY_OF_YEAR:
			v = days - days_from_civil(y, 1, 1);
			break;
		case FN_GET_DAY_OF_MONTH:
			v = d - 1;
			break;
		case FN_GET_DATE:
			v = d;
			break;
		case FN_GET_DAY_OF_WEEK:
			/* 1970-01-01 was a Thursday (4) */
			v = (days % 7 + 11) % 7;
			break;
		case FN_GET_HOURS:
			v = rem / 3600;
			break;
		case FN_GET_MINUTES:
			v = rem / 60 % 60;
			break;
		case FN_GET_SECONDS:
			v = rem % 60;
			break;
		case FN_GET_MILLISECONDS:
			v = target->v.t.nsec / 1000000;
			break;
		default:
			return eval_no_overload(cx, n->offset, what, target, NULL);
	}
	out->v.i = v;
	return 0;
}
