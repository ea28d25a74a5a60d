/*
 * jsonformat.c — checks of JSON Schema "format" values (see jsonformat.h).
 * Each check is a small hand-written recogniser of the RFC's grammar.
 */
#include "jsonformat.h"

#include <arpa/inet.h>
#include <string.h>

#include "regex.h"

/* Read exactly n digits at *p (before end) into *v. */
static int
digits(const char **p, const char *end, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++)
	{
		if (*p >= end || **p < '0' || **p > '9')
			return 0;
		*v = *v * 10 + (**p - '0');
	}
	return 1;
}

/* RFC 3339 full-date: YYYY-MM-DD with a real day of that month. */
static int
date_at(const char **p, const char *end)
{
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int			y,
				m,
				d;

	if (!digits(p, end, 4, &y) || *p >= end || *(*p)++ != '-' ||
		!digits(p, end, 2, &m) || *p >= end || *(*p)++ != '-' || !digits(p, end, 2, &d))
		return 0;
	if (m < 1 || m > 12 || d < 1 || d > mdays[m - 1])
		return 0;
	/* February 29th only in leap years */
	return !(m == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
}

/* RFC 3339 full-time: HH:MM:SS[.frac](Z|+HH:MM|-HH:MM). */
static int
time_at(const char **p, const char *end)
{
	int			h,
				mi,
				s,
				oh,
				om;

	if (!digits(p, end, 2, &h) || *p >= end || *(*p)++ != ':' ||
		!digits(p, end, 2, &mi) || *p >= end || *(*p)++ != ':' || !digits(p, end, 2, &s))
		return 0;
	if (h > 23 || mi > 59 || s > 60)
		return 0;
	if (*p < end && **p == '.')
	{
		(*p)++;
		if (*p >= end || **p < '0' || **p > '9')
			return 0;
		while (*p < end && **p >= '0' && **p <= '9')
			(*p)++;
	}
	if (*p < end && (**p == 'Z' || **p == 'z'))
	{
		(*p)++;
		return 1;
	}
	if (*p >= end || (**p != '+' && **p != '-'))
		return 0;
	(*p)++;
	return digits(p, end, 2, &oh) && *p < end && *(*p)++ == ':' && digits(p, end, 2, &om) &&
		oh <= 23 && om <= 59;
}

/* ISO 8601 duration as JSON Schema takes it: P[nY][nM][nW][nD][T[nH][nM][nS]]. */
static int
duration_ok(const char *p, const char *end)
{
	static const char date_units[] = "YMWD";
	static const char time_units[] = "HMS";
	const char *units = date_units;
	int			any = 0,
				in_time = 0,
				last = -1;

	if (p >= end || *p++ != 'P')
		return 0;
	while (p < end)
	{
		const char *u;
		int			nd = 0;

		if (*p == 'T' && !in_time)
		{
			in_time = 1;
			units = time_units;
			last = -1;
			p++;
			if (p >= end)
				return 0;		/* T needs a time component */
			continue;
		}
		while (p < end && *p >= '0' && *p <= '9')
			p++, nd++;
		if (nd == 0 || p >= end || (u = strchr(units, *p)) == NULL || *p == '\0' || (int) (u - units) <= last)
			return 0;
		last = (int) (u - units);
		any = 1;
		p++;
	}
	return any;
}

/* RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens. */
static int
hostname_ok(const char *s, size_t len)
{
	size_t		label = 0;

	if (len == 0 || len > 253)
		return 0;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c == '.')
		{
			if (label == 0 || s[i - 1] == '-')
				return 0;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
			return 0;
		if (c == '-' && label == 0)
			return 0;
		if (++label > 63)
			return 0;
	}
	return label > 0 && s[len - 1] != '-';
}

/* Dotted-quad IPv4, no leading zeros. */
static int
ipv4_ok(const char *s, size_t len)
{
	const char *p = s,
			   *end = s + len;

	for (int part = 0; part < 4; part++)
	{
		int			v = 0,
					n = 0;

		if (part > 0 && (p >= end || *p++ != '.'))
			return 0;
		while (p < end && *p >= '0' && *p <= '9' && n < 4)
			v = v * 10 + (*p++ - '0'), n++;
		if (n == 0 || n > 3 || v > 255 || (n > 1 && p[-n] == '0'))
			return 0;
	}
	return p == end;
}

/* A simple email address: local@hostname, dot-atoms. */
static int
email_ok(const char *s, size_t len)
{
	const char *at = memchr(s, '@', len);
	size_t		local;

	if (at == NULL)
		return 0;
	local = (size_t) (at - s);
	if (local == 0 || local > 64 || s[0] == '.' || s[local - 1] == '.')
		return 0;
	for (size_t i = 0; i < local; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  strchr("!#$%&'*+/=?^_`{|}~.-", c)) || c == '\0' || (c == '.' && s[i + 1] == '.'))
			return 0;
	}
	return hostname_ok(at + 1, len - local - 1);
}

/* 8-4-4-4-12 hexadecimal digits. */
static int
uuid_ok(const char *s, size_t len)
{
	if (len != 36)
		return 0;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (c != '-')
				return 0;
		}
		else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return 0;
	}
	return 1;
}

/* Is c a hexadecimal digit? */
static int
is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Only characters RFC 3986 allows in a URI (no spaces, controls, "<>\^`{|}), %XX escapes whole. */
static int
uri_chars_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c <= 0x20 || c >= 0x7f || strchr("\"<>\\^`{|}", c))
			return 0;
		if (c == '%' && !(i + 2 < len && is_hex(s[i + 1]) && is_hex(s[i + 2])))
			return 0;
	}
	return 1;
}

/* An absolute URI: scheme ":" rest. */
static int
uri_ok(const char *s, size_t len)
{
	size_t		i = 0;

	if (len == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
		return 0;
	while (i < len && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
					   (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '-' || s[i] == '.'))
		i++;
	return i < len && s[i] == ':' && uri_chars_ok(s, len);
}

/* RFC 6901 JSON pointer: "" or "/..." with ~ only as ~0 or ~1. */
static int
json_pointer_ok(const char *s, size_t len)
{
	if (len > 0 && s[0] != '/')
		return 0;
	for (size_t i = 0; i < len; i++)
		if (s[i] == '~' && (i + 1 >= len || (s[i + 1] != '0' && s[i + 1] != '1')))
			return 0;
	return 1;
}

int
wfe_json_format_check(const char *format, const char *s, size_t len)
{
	const char *p = s,
			   *end = s + len;

	if (strcmp(format, "date") == 0)
		return date_at(&p, end) && p == end;
	if (strcmp(format, "time") == 0)
		return time_at(&p, end) && p == end;
	if (strcmp(format, "date-time") == 0)
		return date_at(&p, end) && p < end && (*p == 'T' || *p == 't') && (p++, time_at(&p, end)) && p == end;
	if (strcmp(format, "duration") == 0)
		return duration_ok(s, end);
	if (strcmp(format, "email") == 0)
		return email_ok(s, len);
	if (strcmp(format, "hostname") == 0)
		return hostname_ok(s, len);
	if (strcmp(format, "ipv4") == 0)
		return ipv4_ok(s, len);
	if (strcmp(format, "ipv6") == 0)
	{
		char		buf[64];
		unsigned char addr[16];

		if (len >= sizeof(buf) || memchr(s, '\0', len))
			return 0;
		memcpy(buf, s, len);
		buf[len] = '\0';
		return inet_pton(AF_INET6, buf, addr) == 1;
	}
	if (strcmp(format, "uuid") == 0)
		return uuid_ok(s, len);
	if (strcmp(format, "uri") == 0)
		return uri_ok(s, len);
	if (strcmp(format, "uri-reference") == 0)
		return uri_chars_ok(s, len);
	if (strcmp(format, "json-pointer") == 0)
		return json_pointer_ok(s, len);
	if (strcmp(format, "regex") == 0)
	{
		wfe_regex  *re = wfe_regex_compile(s, len, NULL, 0);
		int			ok = re != NULL;

		wfe_regex_free(re);
		return ok;
	}
	return -1;
}
