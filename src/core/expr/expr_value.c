/*
 * expr_value.c — CEL values over JSON: the JSON mapping (dsl.md
 * "Expressions": objects are map(string, dyn), arrays list(dyn), numbers
 * without fraction or exponent int, else double), access to lists and maps
 * whether they come from JSON or were built by the expression, equality and
 * ordering as CEL defines them (heterogeneous numeric comparison), and
 * formatting for string(), messages and the conformance tests.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

/* CEL's name of a kind (what type() gives, and what messages say). */
const char *
cel_kind_name(cel_kind k)
{
	switch (k)
	{
		case CEL_NULL:
			return "null_type";
		case CEL_BOOL:
			return "bool";
		case CEL_INT:
			return "int";
		case CEL_UINT:
			return "uint";
		case CEL_DOUBLE:
			return "double";
		case CEL_STRING:
			return "string";
		case CEL_LIST:
			return "list";
		case CEL_MAP:
			return "map";
		case CEL_TIMESTAMP:
			return "google.protobuf.Timestamp";
		case CEL_DURATION:
			return "google.protobuf.Duration";
		case CEL_TYPE:
			return "type";
		case CEL_DYN:
			return "dyn";
	}
	return "?";
}

/* True for int, uint and double. */
int
cel_is_number(cel_kind k)
{
	return k == CEL_INT || k == CEL_UINT || k == CEL_DOUBLE;
}

/*
 * The CEL value of a JSON value (borrowed: the JSON must outlive it).
 * json-c keeps integers above INT64_MAX as uint64; those are not ints, so
 * they become doubles (as any JSON number outside int's range would).
 */
cel_value
cel_from_json(json_object *j)
{
	cel_value	v;

	memset(&v, 0, sizeof(v));
	switch (json_object_get_type(j))
	{
		case json_type_null:
			v.kind = CEL_NULL;
			break;
		case json_type_boolean:
			v.kind = CEL_BOOL;
			v.v.b = json_object_get_boolean(j) ? 1 : 0;
			break;
		case json_type_int:
			{
				int64_t		x = json_object_get_int64(j);

				if (x == INT64_MAX && json_object_get_uint64(j) > (uint64_t) INT64_MAX)
				{
					v.kind = CEL_DOUBLE;
					v.v.d = (double) json_object_get_uint64(j);
				}
				else
				{
					v.kind = CEL_INT;
					v.v.i = x;
				}
				break;
			}
		case json_type_double:
			v.kind = CEL_DOUBLE;
			v.v.d = json_object_get_double(j);
			break;
		case json_type_string:
			v.kind = CEL_STRING;
			v.v.s.ptr = json_object_get_string(j);
			v.v.s.len = (size_t) json_object_get_string_len(j);
			break;
		case json_type_array:
			v.kind = CEL_LIST;
			v.v.c.json = j;
			break;
		case json_type_object:
			v.kind = CEL_MAP;
			v.v.c.json = j;
			break;
	}
	return v;
}

/* Number of elements of a list value. */
size_t
cel_list_size(const cel_value *v)
{
	if (v->v.c.json != NULL)
		return json_object_array_length(v->v.c.json);
	return v->v.c.list ? v->v.c.list->n : 0;
}

/* Element i of a list value (i < size). */
cel_value
cel_list_get(const cel_value *v, size_t i)
{
	if (v->v.c.json != NULL)
		return cel_from_json(json_object_array_get_idx(v->v.c.json, i));
	return v->v.c.list->items[i];
}

/* Number of entries of a map value. */
size_t
cel_map_size(const cel_value *v)
{
	if (v->v.c.json != NULL)
		return (size_t) json_object_object_length(v->v.c.json);
	return v->v.c.map ? v->v.c.map->n : 0;
}

/*
 * Key i of a map value, in the map's order.  For JSON objects *iter holds
 * the position (start it at NULL and call with i = 0, 1, 2, ... in turn), so
 * walking all keys is linear.
 */
cel_value
cel_map_key_at(const cel_value *v, size_t i, void **iter)
{
	cel_value	k;

	if (v->v.c.json == NULL)
		return v->v.c.map->keys[i];
	{
		struct lh_entry *e = *iter != NULL ? ((struct lh_entry *) *iter)->next :
			json_object_get_object(v->v.c.json)->head;

		*iter = e;
		memset(&k, 0, sizeof(k));
		k.kind = CEL_STRING;
		k.v.s.ptr = (const char *) lh_entry_k(e);
		k.v.s.len = strlen(k.v.s.ptr);
		return k;
	}
}

/*
 * Numeric comparison across int, uint and double, as CEL defines it; -1
 * when unordered (NaN).  Sets *cmp to -1, 0, 1.
 */
static int
compare_numbers(const cel_value *a, const cel_value *b, int *cmp)
{
	/* reduce to three cases by symmetry */
	if (a->kind == b->kind)
	{
		switch (a->kind)
		{
			case CEL_INT:
				*cmp = a->v.i < b->v.i ? -1 : a->v.i > b->v.i;
				return 0;
			case CEL_UINT:
				*cmp = a->v.u < b->v.u ? -1 : a->v.u > b->v.u;
				return 0;
			default:
				if (isnan(a->v.d) || isnan(b->v.d))
					return -1;
				*cmp = a->v.d < b->v.d ? -1 : a->v.d > b->v.d;
				return 0;
		}
	}
	if (a->kind == CEL_INT && b->kind == CEL_UINT)
	{
		*cmp = a->v.i < 0 ? -1 : ((uint64_t) a->v.i < b->v.u ? -1 : (uint64_t) a->v.i > b->v.u);
		return 0;
	}
	if (a->kind == CEL_UINT && b->kind == CEL_INT)
	{
		int			rc = compare_numbers(b, a, cmp);

		*cmp = -*cmp;
		return rc;
	}
	if (a->kind == CEL_DOUBLE)
	{
		int			rc = compare_numbers(b, a, cmp);

		*cmp = -*cmp;
		return rc;
	}
	/*
	 * a is int or uint, b is double.  CEL (cel-spec's conformance cases,
	 * cel-go) converts the integer to double unless the double is beyond the
	 * integer's range, so near the ends of the range the comparison is as
	 * exact as a double: 9223372036854775807 == 9223372036854775808.0.
	 */
	{
		double		d = b->v.d;
		double		x;

		if (isnan(d))
			return -1;
		if (a->kind == CEL_INT)
		{
			if (d < -9223372036854775808.0)
				return *cmp = 1, 0;
			if (d > 9223372036854775808.0)
				return *cmp = -1, 0;
			x = (double) a->v.i;
		}
		else
		{
			if (d < 0)
				return *cmp = 1, 0;
			if (d > 18446744073709551616.0)
				return *cmp = -1, 0;
			x = (double) a->v.u;
		}
		*cmp = x < d ? -1 : x > d;
		return 0;
	}
}

/* Compare strings by bytes, which for UTF-8 is code point order. */
static int
compare_bytes(const char *a, size_t la, const char *b, size_t lb)
{
	int			c = memcmp(a, b, la < lb ? la : lb);

	if (c != 0)
		return c < 0 ? -1 : 1;
	return la < lb ? -1 : la > lb;
}

/*
 * Ordering (<, <=, >, >=): numbers of any kind against each other, and
 * string, bool, timestamp, duration against their own kind.  Returns 0 with
 * *cmp in {-1, 0, 1}, 1 when unordered (NaN: every comparison is false),
 * -1 when no ordering is defined for the kinds.
 */
int
cel_compare(const cel_value *a, const cel_value *b, int *cmp)
{
	*cmp = 0;
	if (cel_is_number(a->kind) && cel_is_number(b->kind))
		return compare_numbers(a, b, cmp) < 0 ? 1 : 0;
	if (a->kind != b->kind)
		return -1;
	switch (a->kind)
	{
		case CEL_STRING:
			*cmp = compare_bytes(a->v.s.ptr, a->v.s.len, b->v.s.ptr, b->v.s.len);
			return 0;
		case CEL_BOOL:
			*cmp = a->v.b < b->v.b ? -1 : a->v.b > b->v.b;
			return 0;
		case CEL_DURATION:
			*cmp = a->v.i < b->v.i ? -1 : a->v.i > b->v.i;
			return 0;
		case CEL_TIMESTAMP:
			if (a->v.t.sec != b->v.t.sec)
				*cmp = a->v.t.sec < b->v.t.sec ? -1 : 1;
			else
				*cmp = a->v.t.nsec < b->v.t.nsec ? -1 : a->v.t.nsec > b->v.t.nsec;
			return 0;
		default:
			return -1;
	}
}

/*
 * Look a key up in a map value; 1 found (*out set), 0 not found.  Numeric
 * keys match across int, uint and double by value (CEL's heterogeneous
 * equality); JSON objects only have string keys.
 */
int
cel_map_find(const cel_value *map, const cel_value *key, cel_value *out)
{
	if (map->v.c.json != NULL)
	{
		json_object *found;

		if (key->kind != CEL_STRING || memchr(key->v.s.ptr, '\0', key->v.s.len) != NULL)
			return 0;
		if (!json_object_object_get_ex(map->v.c.json, key->v.s.ptr, &found))
			return 0;
		*out = cel_from_json(found);
		return 1;
	}
	if (map->v.c.map != NULL)
	{
		const cel_map *m = map->v.c.map;
		size_t		i;

		for (i = 0; i < m->n; i++)
		{
			const cel_value *k = &m->keys[i];
			int			c;

			if (cel_is_number(k->kind) && cel_is_number(key->kind))
			{
				if (compare_numbers(k, key, &c) == 0 && c == 0)
					return *out = m->values[i], 1;
			}
			else if (k->kind == key->kind &&
					 ((k->kind == CEL_STRING &&
					   compare_bytes(k->v.s.ptr, k->v.s.len, key->v.s.ptr, key->v.s.len) == 0) ||
					  (k->kind == CEL_BOOL && k->v.b == key->v.b)))
				return *out = m->values[i], 1;
		}
	}
	return 0;
}

/*
 * CEL equality: values of different kinds are unequal (numbers compare by
 * value across int, uint and double), NaN equals nothing, lists element by
 * element, maps by key set and values.  -1 only when the step budget runs
 * out or values nest too deeply.
 */
int
cel_equal(eval_context *cx, const cel_value *a, const cel_value *b, int depth,
		  int offset, int *equal)
{
	int			c;

	*equal = 0;
	if (eval_charge(cx, 1, offset) < 0)
		return -1;
	if (depth > WFE_EXPR_MAX_JSON_DEPTH)
	{
		cx->fatal = 1;
		return eval_error(cx, offset, "values compared at offset %d are nested more than %d levels deep",
						  offset, WFE_EXPR_MAX_JSON_DEPTH);
	}
	if (cel_is_number(a->kind) && cel_is_number(b->kind))
	{
		*equal = compare_numbers(a, b, &c) == 0 && c == 0;
		return 0;
	}
	if (a->kind != b->kind)
		return 0;
	switch (a->kind)
	{
		case CEL_NULL:
			*equal = 1;
			return 0;
		case CEL_BOOL:
		case CEL_STRING:
		case CEL_TIMESTAMP:
		case CEL_DURATION:
			*equal = cel_compare(a, b, &c) == 0 && c == 0;
			return 0;
		case CEL_TYPE:
			*equal = a->v.type == b->v.type;
			return 0;
		case CEL_LIST:
			{
				size_t		n = cel_list_size(a);
				size_t		i;

				if (n != cel_list_size(b))
					return 0;
				for (i = 0; i < n; i++)
				{
					cel_value	x = cel_list_get(a, i);
					cel_value	y = cel_list_get(b, i);

					if (cel_equal(cx, &x, &y, depth + 1, offset, equal) < 0)
						return -1;
					if (!*equal)
						return 0;
				}
				*equal = 1;
				return 0;
			}
		case CEL_MAP:
			{
				size_t		n = cel_map_size(a);
				size_t		i;
				void	   *iter = NULL;

				if (n != cel_map_size(b))
					return 0;
				for (i = 0; i < n; i++)
				{
					cel_value	k = cel_map_key_at(a, i, &iter);
					cel_value	x;
					cel_value	y;

					if (!cel_map_find(a, &k, &x) || !cel_map_find(b, &k, &y))
					{
						*equal = 0;
						return 0;
					}
					if (cel_equal(cx, &x, &y, depth + 1, offset, equal) < 0)
						return -1;
					if (!*equal)
						return 0;
				}
				*equal = 1;
				return 0;
			}
		default:
			return 0;
	}
}

/*
 * JSON for a value (what wfe_expr_eval returns): uint as a JSON integer,
 * timestamps and durations as their string() forms, types as their names,
 * non-finite doubles as the strings "Infinity", "-Infinity", "NaN" (CEL's
 * JSON mapping).  NULL for null, and also on allocation failure.
 */
json_object *
cel_to_json(const cel_value *v, int depth)
{
	char		buf[64];

	if (depth > WFE_EXPR_MAX_JSON_DEPTH)
		return NULL;
	switch (v->kind)
	{
		case CEL_NULL:
		case CEL_DYN:
			return NULL;
		case CEL_BOOL:
			return json_object_new_boolean(v->v.b);
		case CEL_INT:
			return json_object_new_int64(v->v.i);
		case CEL_UINT:
			return json_object_new_uint64(v->v.u);
		case CEL_DOUBLE:
			if (isnan(v->v.d))
				return json_object_new_string("NaN");
			if (isinf(v->v.d))
				return json_object_new_string(v->v.d > 0 ? "Infinity" : "-Infinity");
			return json_object_new_double(v->v.d);
		case CEL_STRING:
			return json_object_new_string_len(v->v.s.ptr, (int) v->v.s.len);
		case CEL_TIMESTAMP:
			cel_format_timestamp(v->v.t.sec, v->v.t.nsec, buf, sizeof(buf));
			return json_object_new_string(buf);
		case CEL_DURATION:
			cel_format_duration(v->v.i, buf, sizeof(buf));
			return json_object_new_string(buf);
		case CEL_TYPE:
			return json_object_new_string(cel_kind_name(v->v.type));
		case CEL_LIST:
			{
				json_object *a;
				size_t		i;
				size_t		n = cel_list_size(v);

				if (v->v.c.json != NULL)
					return json_object_get(v->v.c.json);
				if ((a = json_object_new_array()) == NULL)
					return NULL;
				for (i = 0; i < n; i++)
				{
					cel_value	e = cel_list_get(v, i);
					json_object *j = cel_to_json(&e, depth + 1);

					if (j == NULL && e.kind != CEL_NULL)
					{
						json_object_put(a);
						return NULL;
					}
					json_object_array_add(a, j);
				}
				return a;
			}
		case CEL_MAP:
			{
				json_object *o;
				size_t		i;
				size_t		n = cel_map_size(v);

				if (v->v.c.json != NULL)
					return json_object_get(v->v.c.json);
				if ((o = json_object_new_object()) == NULL)
					return NULL;
				for (i = 0; i < n; i++)
				{
					const cel_value *k = &v->v.c.map->keys[i];
					json_object *j = cel_to_json(&v->v.c.map->values[i], depth + 1);
					char		kbuf[64];
					const char *key = kbuf;

					/* JSON keys are strings: other keys are written as string() */
					if (k->kind == CEL_STRING)
						key = k->v.s.ptr;
					else if (k->kind == CEL_INT)
						snprintf(kbuf, sizeof(kbuf), "%" PRId64, k->v.i);
					else if (k->kind == CEL_UINT)
						snprintf(kbuf, sizeof(kbuf), "%" PRIu64, k->v.u);
					else
						snprintf(kbuf, sizeof(kbuf), "%s", k->v.b ? "true" : "false");
					json_object_object_add(o, key, j);
				}
				return o;
			}
	}
	return NULL;
}

/*
 * string(double): the shortest decimal that reads back as the same double,
 * in the style of cel-go, the reference implementation (Go's 'g' format
 * at shortest precision: "1.5", "100000", "1e+06", "1e-05", "+Inf", "NaN").
 */
int
cel_format_double(double d, char *buf, size_t size)
{
	char		e[40];
	int			prec;
	char		digits[24];
	int			nd = 0;
	int			exp10;
	const char *p;
	int			neg;
	size_t		o = 0;

	if (isnan(d))
		return snprintf(buf, size, "NaN");
	if (isinf(d))
		return snprintf(buf, size, "%s", d > 0 ? "+Inf" : "-Inf");
	if (d == 0)
		return snprintf(buf, size, "%s", signbit(d) ? "-0" : "0");
	for (prec = 1; prec <= 17; prec++)
	{
		snprintf(e, sizeof(e), "%.*e", prec - 1, d);
		if (strtod(e, NULL) == d)
			break;
	}
	/* e is [-]D[.DDD]e[+-]XX */
	p = e;
	neg = (*p == '-');
	if (neg)
		p++;
	while (*p && *p != 'e')
	{
		if (*p >= '0' && *p <= '9' && nd < (int) sizeof(digits) - 1)
			digits[nd++] = *p;
		p++;
	}
	digits[nd] = '\0';
	while (nd > 1 && digits[nd - 1] == '0')
		digits[--nd] = '\0';
	exp10 = atoi(p + 1);

	if (size < 40)
		return -1;
	if (neg)
		buf[o++] = '-';
	if (exp10 < -4 || exp10 >= 6)
	{
		/* exponent form: D[.DDD]e±XX */
		buf[o++] = digits[0];
		if (nd > 1)
		{
			buf[o++] = '.';
			memcpy(buf + o, digits + 1, (size_t) nd - 1);
			o += (size_t) nd - 1;
		}
		o += (size_t) snprintf(buf + o, size - o, "e%c%02d", exp10 < 0 ? '-' : '+',
							   exp10 < 0 ? -exp10 : exp10);
		return (int) o;
	}
	if (exp10 < 0)
	{
		int			i;

		buf[o++] = '0';
		buf[o++] = '.';
		for (i = 0; i < -exp10 - 1; i++)
			buf[o++] = '0';
		memcpy(buf + o, digits, (size_t) nd);
		o += (size_t) nd;
	}
	else
	{
		int			i;

		for (i = 0; i <= exp10 || i < nd; i++)
		{
			if (i == exp10 + 1)
				buf[o++] = '.';
			buf[o++] = i < nd ? digits[i] : '0';
		}
	}
	buf[o] = '\0';
	return (int) o;
}

/* Append formatted text; returns the new length or -1 when it does not fit. */
static int
put(char *buf, size_t size, int at, const char *fmt,...)
#if defined(__GNUC__)
			__attribute__((format(printf, 4, 5)))
#endif
			;

static int
put(char *buf, size_t size, int at, const char *fmt,...)
{
	va_list		ap;
	int			n;

	if (at < 0 || (size_t) at >= size)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(buf + at, size - (size_t) at, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) (at + n) >= size)
		return -1;
	return at + n;
}

/* Append a quoted, escaped string. */
static int
put_quoted(char *buf, size_t size, int at, const char *s, size_t len)
{
	size_t		i;

	at = put(buf, size, at, "\"");
	for (i = 0; i < len && at >= 0; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
			at = put(buf, size, at, "\\%c", c);
		else if (c == '\n')
			at = put(buf, size, at, "\\n");
		else if (c < 0x20 || c == 0x7f)
			at = put(buf, size, at, "\\x%02x", c);
		else
			at = put(buf, size, at, "%c", c);
	}
	return put(buf, size, at, "\"");
}

/* Format into buf at `at`; returns the new length, -1 if it does not fit. */
static int
format_at(const cel_value *v, char *buf, size_t size, int at, int depth)
{
	char		tmp[64];
	size_t		i;

	if (depth > WFE_EXPR_MAX_JSON_DEPTH)
		return -1;
	switch (v->kind)
	{
		case CEL_NULL:
		case CEL_DYN:
			return put(buf, size, at, "null");
		case CEL_BOOL:
			return put(buf, size, at, "%s", v->v.b ? "true" : "false");
		case CEL_INT:
			return put(buf, size, at, "%" PRId64, v->v.i);
		case CEL_UINT:
			return put(buf, size, at, "%" PRIu64 "u", v->v.u);
		case CEL_DOUBLE:
			cel_format_double(v->v.d, tmp, sizeof(tmp));
			/* make a whole double look like one: 3.0, not 3 */
			if (strspn(tmp, "-0123456789") == strlen(tmp))
				return put(buf, size, at, "%s.0", tmp);
			return put(buf, size, at, "%s", tmp);
		case CEL_STRING:
			return put_quoted(buf, size, at, v->v.s.ptr, v->v.s.len);
		case CEL_TIMESTAMP:
			cel_format_timestamp(v->v.t.sec, v->v.t.nsec, tmp, sizeof(tmp));
			return put(buf, size, at, "timestamp(\"%s\")", tmp);
		case CEL_DURATION:
			cel_format_duration(v->v.i, tmp, sizeof(tmp));
			return put(buf, size, at, "duration(\"%s\")", tmp);
		case CEL_TYPE:
			return put(buf, size, at, "%s", cel_kind_name(v->v.type));
		case CEL_LIST:
			at = put(buf, size, at, "[");
			for (i = 0; i < cel_list_size(v) && at >= 0; i++)
			{
				cel_value	e = cel_list_get(v, i);

				if (i > 0)
					at = put(buf, size, at, ", ");
				at = format_at(&e, buf, size, at, depth + 1);
			}
			return put(buf, size, at, "]");
		case CEL_MAP:
			{
				void	   *iter = NULL;

				at = put(buf, size, at, "{");
				for (i = 0; i < cel_map_size(v) && at >= 0; i++)
				{
					cel_value	k = cel_map_key_at(v, i, &iter);
					cel_value	e;

					if (i > 0)
						at = put(buf, size, at, ", ");
					at = format_at(&k, buf, size, at, depth + 1);
					at = put(buf, size, at, ": ");
					if (cel_map_find(v, &k, &e))
						at = format_at(&e, buf, size, at, depth + 1);
				}
				return put(buf, size, at, "}");
			}
	}
	return -1;
}

/*
 * A value as CEL-like text: 1, 1u, 1.5, 3.0, "s", [1, 2], {"a": 1},
 * timestamp("..."), duration("..."), int.  -1 if it does not fit.
 */
int
cel_format(const cel_value *v, char *buf, size_t size, int depth)
{
	int			n;

	if (size == 0)
		return -1;
	n = format_at(v, buf, size, 0, depth);
	if (n < 0)
		buf[0] = '\0';
	return n;
}
