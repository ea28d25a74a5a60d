/*
 * expr_func.c — CEL's standard functions over the values of expr_value.c
 * (cel-spec langdef "List of Standard Definitions", as far as dsl.md
 * "Expressions" lists them): size, contains, startsWith, endsWith, matches,
 * the conversions int, uint, double, string, bool, dyn, type, timestamp,
 * duration, and (in expr_time.c) the timestamp and duration accessors.
 *
 * Arguments are evaluated strictly, left to right: the first error is the
 * call's error.  A value of a kind no overload takes is "no matching
 * overload", an expr.eval error like any other.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/utf8.h"
#include "expr_internal.h"

/* Charge for scanning strings: one step per 64 bytes of each operand. */
static int
charge_scan(eval_context *cx, size_t a, size_t b, int offset)
{
	return eval_charge(cx, (long) ((a / 64 + 1) * (b / 64 + 1)), offset);
}

/* Where needle occurs in hay (byte search), or NULL. */
static const char *
find_bytes(const char *hay, size_t hl, const char *needle, size_t nl)
{
	size_t		i;

	if (nl == 0)
		return hay;
	if (nl > hl)
		return NULL;
	for (i = 0; i + nl <= hl; i++)
	{
		const char *c = memchr(hay + i, needle[0], hl - nl + 1 - i);

		if (c == NULL)
			return NULL;
		i = (size_t) (c - hay);
		if (memcmp(c, needle, nl) == 0)
			return c;
	}
	return NULL;
}

/* A value of one kind. */
static cel_value
of_kind(cel_kind k)
{
	cel_value	v;

	memset(&v, 0, sizeof(v));
	v.kind = k;
	return v;
}

/* Conversion failures: a range error or an unparsable string. */
static int
conversion_error(eval_context *cx, const expr_node *n, const char *why)
{
	return eval_error(cx, n->offset, "%s() at offset %d: %s",
					  wfe_expr_fn_name(n->fn), n->offset, why);
}

/* int(x) */
static int
to_int(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	*out = of_kind(CEL_INT);
	switch (a->kind)
	{
		case CEL_INT:
			out->v.i = a->v.i;
			return 0;
		case CEL_UINT:
			if (a->v.u > (uint64_t) INT64_MAX)
				return conversion_error(cx, n, "uint value out of int range");
			out->v.i = (int64_t) a->v.u;
			return 0;
		case CEL_DOUBLE:
			/*
			 * truncate toward zero; NaN, infinities and out-of-range fail.
			 * CEL's range is open at both ends: -2^63 itself is refused too
			 * (cel-spec conformance "double_int_min_range").
			 */
			if (!(a->v.d > -9223372036854775808.0 && a->v.d < 9223372036854775808.0))
				return conversion_error(cx, n, "double value out of int range");
			out->v.i = (int64_t) a->v.d;
			return 0;
		case CEL_TIMESTAMP:
			out->v.i = a->v.t.sec;
			return 0;
		case CEL_STRING:
			{
				const char *s = a->v.s.ptr;
				char	   *end;
				long long	v;

				if (a->v.s.len == 0 || strspn(s, "+-0123456789") != a->v.s.len ||
					strchr("+-0123456789", s[0]) == NULL)
					return conversion_error(cx, n, "string is not a decimal integer");
				errno = 0;
				v = strtoll(s, &end, 10);
				if (errno != 0 || *end != '\0')
					return conversion_error(cx, n, "string is not an integer in int range");
				out->v.i = (int64_t) v;
				return 0;
			}
		default:
			return eval_no_overload(cx, n->offset, "int()", a, NULL);
	}
}

/* uint(x) */
static int
to_uint(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	*out = of_kind(CEL_UINT);
	switch (a->kind)
	{
		case CEL_INT:
			if (a->v.i < 0)
				return conversion_error(cx, n, "negative int value out of uint range");
			out->v.u = (uint64_t) a->v.i;
			return 0;
		case CEL_UINT:
			out->v.u = a->v.u;
			return 0;
		case CEL_DOUBLE:
			if (!(a->v.d > -1.0 && a->v.d < 18446744073709551616.0))
				return conversion_error(cx, n, "double value out of uint range");
			out->v.u = (uint64_t) a->v.d;
			return 0;
		case CEL_STRING:
			{
				const char *s = a->v.s.ptr;
				char	   *end;
				unsigned long long v;

				if (a->v.s.len == 0 || strspn(s, "0123456789") != a->v.s.len)
					return conversion_error(cx, n, "string is not an unsigned decimal integer");
				errno = 0;
				v = strtoull(s, &end, 10);
				if (errno != 0 || *end != '\0')
					return conversion_error(cx, n, "string is not an integer in uint range");
				out->v.u = (uint64_t) v;
				return 0;
			}
		default:
			return eval_no_overload(cx, n->offset, "uint()", a, NULL);
	}
}

/* double(x) */
static int
to_double(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	*out = of_kind(CEL_DOUBLE);
	switch (a->kind)
	{
		case CEL_INT:
			out->v.d = (double) a->v.i;
			return 0;
		case CEL_UINT:
			out->v.d = (double) a->v.u;
			return 0;
		case CEL_DOUBLE:
			out->v.d = a->v.d;
			return 0;
		case CEL_STRING:
			{
				const char *s = a->v.s.ptr;
				char	   *end;

				/* strtod alone would take hex floats and leading spaces */
				if (a->v.s.len == 0 || a->v.s.len > 400 ||
					strspn(s, "+-0123456789.eE") != a->v.s.len)
				{
					if (strcmp(s, "NaN") == 0 || strcmp(s, "Infinity") == 0 ||
						strcmp(s, "-Infinity") == 0 || strcmp(s, "+Infinity") == 0 ||
						strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0 ||
						strcmp(s, "+inf") == 0)
					{
						out->v.d = s[0] == 'N' ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
						return 0;
					}
					return conversion_error(cx, n, "string is not a number");
				}
				out->v.d = strtod(s, &end);
				if (*end != '\0' || end == s)
					return conversion_error(cx, n, "string is not a number");
				return 0;
			}
		default:
			return eval_no_overload(cx, n->offset, "double()", a, NULL);
	}
}

/* string(x) */
static int
to_string(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	char		buf[64];

	switch (a->kind)
	{
		case CEL_STRING:
			*out = *a;
			return 0;
		case CEL_INT:
			snprintf(buf, sizeof(buf), "%" PRId64, a->v.i);
			break;
		case CEL_UINT:
			snprintf(buf, sizeof(buf), "%" PRIu64, a->v.u);
			break;
		case CEL_DOUBLE:
			cel_format_double(a->v.d, buf, sizeof(buf));
			break;
		case CEL_BOOL:
			snprintf(buf, sizeof(buf), "%s", a->v.b ? "true" : "false");
			break;
		case CEL_TIMESTAMP:
			cel_format_timestamp(a->v.t.sec, a->v.t.nsec, buf, sizeof(buf));
			break;
		case CEL_DURATION:
			cel_format_duration(a->v.i, buf, sizeof(buf));
			break;
		default:
			return eval_no_overload(cx, n->offset, "string()", a, NULL);
	}
	return eval_string(cx, buf, strlen(buf), n->offset, out);
}

/* bool(x): from bool, or the strings CEL accepts. */
static int
to_bool(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	static const char *const yes[] = {"1", "t", "true", "TRUE", "True"};
	static const char *const no[] = {"0", "f", "false", "FALSE", "False"};
	size_t		i;

	*out = of_kind(CEL_BOOL);
	if (a->kind == CEL_BOOL)
	{
		out->v.b = a->v.b;
		return 0;
	}
	if (a->kind != CEL_STRING)
		return eval_no_overload(cx, n->offset, "bool()", a, NULL);
	for (i = 0; i < 5; i++)
	{
		if (strcmp(a->v.s.ptr, yes[i]) == 0)
			return out->v.b = 1, 0;
		if (strcmp(a->v.s.ptr, no[i]) == 0)
			return out->v.b = 0, 0;
	}
	return conversion_error(cx, n, "string is not a boolean (true, false, t, f, 1, 0)");
}

/* timestamp(x): from an RFC 3339 string, a timestamp, or Unix seconds. */
static int
to_timestamp(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	char		why[128];

	*out = of_kind(CEL_TIMESTAMP);
	switch (a->kind)
	{
		case CEL_TIMESTAMP:
			*out = *a;
			return 0;
		case CEL_INT:
			if (a->v.i < CEL_TS_MIN || a->v.i > CEL_TS_MAX)
				return conversion_error(cx, n, "seconds out of the timestamp range (years 1 to 9999)");
			out->v.t.sec = a->v.i;
			return 0;
		case CEL_STRING:
			if (cel_parse_timestamp(a->v.s.ptr, a->v.s.len, &out->v.t.sec,
									&out->v.t.nsec, why, sizeof(why)) < 0)
				return conversion_error(cx, n, why);
			return 0;
		default:
			return eval_no_overload(cx, n->offset, "timestamp()", a, NULL);
	}
}

/* duration(x): from a string like "1h30m" or "1.5s", or a duration. */
static int
to_duration(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	char		why[128];

	*out = of_kind(CEL_DURATION);
	if (a->kind == CEL_DURATION)
	{
		*out = *a;
		return 0;
	}
	if (a->kind != CEL_STRING)
		return eval_no_overload(cx, n->offset, "duration()", a, NULL);
	if (cel_parse_duration(a->v.s.ptr, a->v.s.len, &out->v.i, why, sizeof(why)) < 0)
		return conversion_error(cx, n, why);
	return 0;
}

/* size(x) / x.size(): code points, elements or entries. */
static int
size_of(eval_context *cx, const expr_node *n, const cel_value *a, cel_value *out)
{
	*out = of_kind(CEL_INT);
	switch (a->kind)
	{
		case CEL_STRING:
			if (eval_charge(cx, (long) (a->v.s.len / 64), n->offset) < 0)
				return -1;
			out->v.i = (int64_t) wfe_utf8_chars(a->v.s.ptr, a->v.s.len);
			return 0;
		case CEL_LIST:
			out->v.i = (int64_t) cel_list_size(a);
			return 0;
		case CEL_MAP:
			out->v.i = (int64_t) cel_map_size(a);
			return 0;
		default:
			return eval_error(cx, n->offset,
							  "size() at offset %d needs a string, list or map, not %s",
							  n->offset, cel_kind_name(a->kind));
	}
}

/* contains, startsWith, endsWith on two strings. */
static int
string_test(eval_context *cx, const expr_node *n, const cel_value *s,
			const cel_value *t, cel_value *out)
{
	size_t		sl;
	size_t		tl;

	if (s->kind != CEL_STRING || t->kind != CEL_STRING)
	{
		char		what[40];

		snprintf(what, sizeof(what), "%s()", wfe_expr_fn_name(n->fn));
		return eval_no_overload(cx, n->offset, what, s, t);
	}
	sl = s->v.s.len;
	tl = t->v.s.len;
	*out = of_kind(CEL_BOOL);
	switch (n->fn)
	{
		case FN_STARTS_WITH:
			if (eval_charge(cx, (long) (tl / 64), n->offset) < 0)
				return -1;
			out->v.b = tl <= sl && memcmp(s->v.s.ptr, t->v.s.ptr, tl) == 0;
			return 0;
		case FN_ENDS_WITH:
			if (eval_charge(cx, (long) (tl / 64), n->offset) < 0)
				return -1;
			out->v.b = tl <= sl && memcmp(s->v.s.ptr + sl - tl, t->v.s.ptr, tl) == 0;
			return 0;
		default:
			if (charge_scan(cx, sl, tl, n->offset) < 0)
				return -1;
			out->v.b = find_bytes(s->v.s.ptr, sl, t->v.s.ptr, tl) != NULL;
			return 0;
	}
}

/* Evaluate a function call (see expr_fn). */
int
eval_call(eval_context *cx, const expr_node *n, cel_value *out)
{
	cel_value	target;
	cel_value	args[2];
	const cel_value *first;
	int			i;

	memset(&target, 0, sizeof(target));
	memset(args, 0, sizeof(args));
	if (n->left != NULL && eval_node(cx, n->left, &target) < 0)
		return -1;
	for (i = 0; i < n->nargs && i < 2; i++)
		if (eval_node(cx, n->args[i], &args[i]) < 0)
			return -1;
	first = n->left != NULL ? &target : &args[0];

	switch (n->fn)
	{
		case FN_SIZE:
			return size_of(cx, n, first, out);
		case FN_CONTAINS:
		case FN_STARTS_WITH:
		case FN_ENDS_WITH:
			return string_test(cx, n, &target, &args[0], out);
		case FN_MATCHES:
			return eval_matches(cx, n, first, n->left != NULL ? &args[0] : &args[1], out);
		case FN_INT:
			return to_int(cx, n, first, out);
		case FN_UINT:
			return to_uint(cx, n, first, out);
		case FN_DOUBLE:
			return to_double(cx, n, first, out);
		case FN_STRING:
			return to_string(cx, n, first, out);
		case FN_BOOL:
			return to_bool(cx, n, first, out);
		case FN_DYN:
			*out = *first;
			return 0;
		case FN_TYPE:
			*out = of_kind(CEL_TYPE);
			out->v.type = first->kind;
			return 0;
		case FN_TIMESTAMP:
			return to_timestamp(cx, n, first, out);
		case FN_DURATION:
			return to_duration(cx, n, first, out);
		default:
			return eval_time_accessor(cx, n, &target, n->nargs > 0 ? &args[0] : NULL, out);
	}
}
