/*
 * jsonvalue.c — what JSON Schema says about plain JSON values, apart from
 * any schema: their type names, their equality (numbers by exact value),
 * the JSON paths that name them in messages and their short text there.
 * The validator (jsonschema.c), uniqueItems (jsonuniq.c) and the step core's
 * bindings use these; one definition each.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/base/utf8.h"
#include "core/base/json.h"
#include "jsonschema_internal.h"

/* ---- paths ---------------------------------------------------------------- */

/* Can a key be written `.key` (CEL field selection) rather than `["key"]`? */
static int
key_is_identifier(const char *key)
{
	if (!((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z') ||
		  key[0] == '_'))
		return 0;
	for (const char *c = key + 1; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '_'))
			return 0;
	return 1;
}

/* Append `.key` or `["key"]` to a path; see jsonschema.h. */
int
wfe_json_path_push_key(char *buf, size_t cap, const char *key)
{
	size_t		len = strlen(buf);
	size_t		at = len;

	if (key_is_identifier(key))
	{
		size_t		klen = strlen(key);

		if (len + 1 + klen + 1 > cap)
			return -1;
		buf[at++] = '.';
		memcpy(buf + at, key, klen + 1);
		return 0;
	}
	if (len + 4 > cap)
		return -1;
	buf[at++] = '[';
	buf[at++] = '"';
	for (const unsigned char *c = (const unsigned char *) key; *c; c++)
	{
		char		esc[8];
		size_t		n;

		if (*c == '"' || *c == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) *c;
			n = 2;
		}
		else if (*c < 0x20)
			n = (size_t) snprintf(esc, sizeof(esc), "\\u%04x", *c);
		else
		{
			esc[0] = (char) *c;
			n = 1;
		}
		if (at + n + 3 > cap)	/* room for "] and the NUL */
		{
			buf[len] = '\0';
			return -1;
		}
		memcpy(buf + at, esc, n);
		at += n;
	}
	if (at + 3 > cap)
	{
		buf[len] = '\0';
		return -1;
	}
	buf[at++] = '"';
	buf[at++] = ']';
	buf[at] = '\0';
	return 0;
}

/* Append `[N]` to a path; see jsonschema.h. */
int
wfe_json_path_push_index(char *buf, size_t cap, size_t index)
{
	size_t		len = strlen(buf);
	char		tmp[32];
	size_t		n = (size_t) snprintf(tmp, sizeof(tmp), "[%zu]", index);

	if (len + n + 1 > cap)
		return -1;
	memcpy(buf + len, tmp, n + 1);
	return 0;
}

/* ---- values --------------------------------------------------------------- */

/* Is the value a JSON number? */
static int
is_number(json_object *v)
{
	return v && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double));
}

/* The JSON-Schema type name of a value; see jsonschema.h. */
const char *
wfe_json_type_name(json_object *v)
{
	switch (json_object_get_type(v))
	{
		case json_type_null:
			return "null";
		case json_type_boolean:
			return "boolean";
		case json_type_int:
			return "integer";
		case json_type_double:
			return wfe_json_is_integral(v) ? "integer" : "number";
		case json_type_string:
			return "string";
		case json_type_array:
			return "array";
		case json_type_object:
			return "object";
	}
	return "unknown";
}

/* Type bits of a value; see jsonschema_internal.h. */
unsigned
js_type_bits(json_object *v)
{
	switch (json_object_get_type(v))
	{
		case json_type_null:
			return JT_NULL;
		case json_type_boolean:
			return JT_BOOLEAN;
		case json_type_int:
			return JT_NUMBER | JT_INTEGER;
		case json_type_double:
			return JT_NUMBER | (wfe_json_is_integral(v) ? JT_INTEGER : 0);
		case json_type_string:
			return JT_STRING;
		case json_type_array:
			return JT_ARRAY;
		case json_type_object:
			return JT_OBJECT;
	}
	return 0;
}

/* Exact equality of two numbers. */
static int
number_equal(json_object *a, json_object *b)
{
	wfe_jnum	x,
				y;
	int			r;

	if (json_object_is_type(a, json_type_int) && json_object_is_type(b, json_type_int))
	{
		int64_t		ia = json_object_get_int64(a),
					ib = json_object_get_int64(b);

		/* json-c keeps integers above INT64_MAX as uint64 (int64 saturates) */
		if (ia == INT64_MAX || ib == INT64_MAX)
			return ia == ib && json_object_get_uint64(a) == json_object_get_uint64(b);
		return ia == ib;
	}
	if (wfe_jnum_from_json(&x, a) < 0)
		return 0;
	if (wfe_jnum_from_json(&y, b) < 0)
	{
		wfe_jnum_free(&x);
		return 0;
	}
	r = wfe_jnum_cmp(&x, &y) == 0;
	wfe_jnum_free(&x);
	wfe_jnum_free(&y);
	return r;
}

/* Deep equality paid for from a meter; see jsonschema_internal.h. */
int
js_equal(json_object *a, json_object *b, int depth, js_meter *m)
{
	json_type	ta = json_object_get_type(a);
	json_type	tb = json_object_get_type(b);

	if (depth > JS_EQUAL_MAX_DEPTH || !js_meter_spend(m, 1))
		return 0;
	if (is_number(a) && is_number(b))
		return number_equal(a, b);
	if (ta != tb)
		return 0;
	switch (ta)
	{
		case json_type_null:
			return 1;
		case json_type_boolean:
			return !json_object_get_boolean(a) == !json_object_get_boolean(b);
		case json_type_string:
			return json_object_get_string_len(a) == json_object_get_string_len(b) &&
				js_meter_spend(m, json_object_get_string_len(a) / 64) &&
				memcmp(json_object_get_string(a), json_object_get_string(b),
					   (size_t) json_object_get_string_len(a)) == 0;
		case json_type_array:
			{
				size_t		n = json_object_array_length(a);

				if (n != json_object_array_length(b))
					return 0;
				for (size_t i = 0; i < n; i++)
					if (!js_equal(json_object_array_get_idx(a, i),
								  json_object_array_get_idx(b, i), depth + 1, m))
						return 0;
				return 1;
			}
		case json_type_object:
			{
				/* json-c objects have unique keys: same count + each found */
				if (json_object_object_length(a) != json_object_object_length(b))
					return 0;
				{
					/* the macro declares its cursor: give it a block of its own */
					json_object_object_foreach(a, key, va)
					{
						json_object *vb;

						if (!json_object_object_get_ex(b, key, &vb) ||
							!js_equal(va, vb, depth + 1, m))
							return 0;
					}
				}
				return 1;
			}
		default:
			return 0;
	}
}

/* Deep equality of two JSON values; see jsonschema.h. */
int
wfe_json_equal(json_object *a, json_object *b)
{
	return js_equal(a, b, 0, NULL);
}

/* A value's text for messages; see jsonschema_internal.h. */
void
js_short_json(json_object *v, char *buf, size_t buflen, size_t max)
{
	char	   *text = wfe_canonical_json(v);
	size_t		len;

	if (text == NULL)
	{
		snprintf(buf, buflen, "?");
		return;
	}
	len = strlen(text);
	if (len > max)
	{
		/* do not cut a UTF-8 sequence in half */
		max = wfe_utf8_cut(text, max);
		snprintf(buf, buflen, "%.*s...", (int) max, text);
	}
	else
		snprintf(buf, buflen, "%s", text);
	free(text);
}
