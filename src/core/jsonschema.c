/*
 * jsonschema.c — the JSON-Schema subset validator (see jsonschema.h).
 *
 * The walk follows the schema into the value, so its depth is bounded by the
 * schema's (and by WFE_SCHEMA_MAX_DEPTH).  It stops at the first violation
 * and names it by a JSON path: `$`, `.name` for identifier-like keys,
 * `["odd key"]` otherwise, `[N]` for array elements.  Keywords are checked
 * in a fixed order (type, enum, required, properties, items) so that "the
 * first violation" is deterministic for a given schema and value.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "compile.h"
#include "jsonschema.h"

/* Longest path spelt in a message; deeper paths end in "...". */
#define PATH_MAX_LEN 240

/* Equality recursion bound: deeper values are compared as unequal. */
#define EQUAL_MAX_DEPTH 256

/* The JSON path of the value being checked, built as the walk descends. */
typedef struct schema_path
{
	char		buf[PATH_MAX_LEN + 1];
	size_t		len;
	int			truncated;		/* something did not fit */
} schema_path;

/* Where a push left the path, to pop back to it. */
typedef struct path_mark
{
	size_t		len;
	int			truncated;
} path_mark;

/* State of one validation. */
typedef struct vctx
{
	schema_path path;
	char	   *msg;
	size_t		msglen;
} vctx;

static const char *const type_names[] = {
	"object", "array", "string", "number", "integer", "boolean", "null", NULL
};

/* Remember the current end of the path. */
static path_mark
path_mark_get(const schema_path *p)
{
	path_mark	m = {p->len, p->truncated};

	return m;
}

/* Go back to a remembered end. */
static void
path_reset(schema_path *p, path_mark m)
{
	p->len = m.len;
	p->truncated = m.truncated;
	p->buf[p->len] = '\0';
}

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

/* Append an object member to the path (or mark it truncated). */
static void
path_push_key(schema_path *p, const char *key)
{
	if (p->truncated || wfe_json_path_push_key(p->buf, sizeof(p->buf), key) < 0)
		p->truncated = 1;
	else
		p->len = strlen(p->buf);
}

/* Append an array index to the path (or mark it truncated). */
static void
path_push_index(schema_path *p, size_t i)
{
	if (p->truncated || wfe_json_path_push_index(p->buf, sizeof(p->buf), i) < 0)
		p->truncated = 1;
	else
		p->len = strlen(p->buf);
}

/* Make a message valid UTF-8; see jsonschema.h. */
void
wfe_utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *) s;

	while (*p)
	{
		int			need,
					i;
		unsigned int cp;

		if (p[0] < 0x80)
		{
			p++;
			continue;
		}
		if (p[0] >= 0xC2 && p[0] <= 0xDF)
			need = 1, cp = p[0] & 0x1F;
		else if (p[0] >= 0xE0 && p[0] <= 0xEF)
			need = 2, cp = p[0] & 0x0F;
		else if (p[0] >= 0xF0 && p[0] <= 0xF4)
			need = 3, cp = p[0] & 0x07;
		else
		{
			*p++ = '?';
			continue;
		}
		/* stops at the NUL too: it is not a continuation byte */
		for (i = 1; i <= need; i++)
		{
			if ((p[i] & 0xC0) != 0x80)
				break;
			cp = (cp << 6) | (p[i] & 0x3F);
		}
		/* truncated, overlong, surrogate or beyond U+10FFFF */
		if (i <= need ||
			(need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
			(need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
		{
			*p++ = '?';
			continue;
		}
		p += need + 1;
	}
}

static int	report(vctx *cx, int rc, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* Write "<path>: <message>" into the caller's buffer and return rc. */
static int
report(vctx *cx, int rc, const char *fmt,...)
{
	va_list		ap;
	int			n;

	if (cx->msg == NULL || cx->msglen == 0)
		return rc;
	n = snprintf(cx->msg, cx->msglen, "%s%s: ", cx->path.buf,
				 cx->path.truncated ? "..." : "");
	if (n >= 0 && (size_t) n < cx->msglen)
	{
		va_start(ap, fmt);
		vsnprintf(cx->msg + n, cx->msglen - (size_t) n, fmt, ap);
		va_end(ap);
	}
	wfe_utf8_sanitize(cx->msg);
	return rc;
}

/* Is the value a JSON integer (as written, not merely integral)? */
static int
is_integer(json_object *v)
{
	/*
	 * json-c reads a literal with a fraction or exponent as a double and
	 * one without as an int; jsonb keeps a number's scale (1.0 stays
	 * "1.0"), so this is the distinction the user wrote.
	 */
	return json_object_is_type(v, json_type_int);
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
			return "number";
		case json_type_string:
			return "string";
		case json_type_array:
			return "array";
		case json_type_object:
			return "object";
	}
	return "unknown";
}

/* Does the value have JSON-Schema type `name` (number includes integer)? */
static int
has_type(json_object *v, const char *name)
{
	const char *actual = wfe_json_type_name(v);

	if (strcmp(name, "number") == 0)
		return strcmp(actual, "number") == 0 || is_integer(v);
	return strcmp(actual, name) == 0;
}

/* Is `name` one of the seven type names? */
static int
known_type(const char *name)
{
	for (int i = 0; type_names[i]; i++)
		if (strcmp(type_names[i], name) == 0)
			return 1;
	return 0;
}

/* Compare two JSON integers exactly (json-c keeps uint64 beyond INT64_MAX). */
static int
int_equal(json_object *a, json_object *b)
{
	int64_t		ia = json_object_get_int64(a);
	int64_t		ib = json_object_get_int64(b);

	if ((ia < 0) != (ib < 0))
		return 0;
	if (ia < 0)
		return ia == ib;
	return json_object_get_uint64(a) == json_object_get_uint64(b);
}

/* Compare a JSON integer with a double by value. */
static int
int_double_equal(json_object *i, double d)
{
	int64_t		iv = json_object_get_int64(i);

	if (!isfinite(d) || d != floor(d))
		return 0;
	/* beyond 2^63 a double cannot name one integer: compare approximately */
	if (fabs(d) >= 9223372036854775808.0)
		return iv >= 0 ? (double) json_object_get_uint64(i) == d : (double) iv == d;
	return iv == (int64_t) d &&
		(iv >= 0 ? json_object_get_uint64(i) == (uint64_t) iv : 1);
}

/* Deep equality with a recursion bound. */
static int
equal_at(json_object *a, json_object *b, int depth)
{
	json_type	ta = json_object_get_type(a);
	json_type	tb = json_object_get_type(b);

	if (depth > EQUAL_MAX_DEPTH)
		return 0;
	if ((ta == json_type_int || ta == json_type_double) &&
		(tb == json_type_int || tb == json_type_double))
	{
		if (ta == json_type_int && tb == json_type_int)
			return int_equal(a, b);
		if (ta == json_type_double && tb == json_type_double)
			return json_object_get_double(a) == json_object_get_double(b);
		if (ta == json_type_int)
			return int_double_equal(a, json_object_get_double(b));
		return int_double_equal(b, json_object_get_double(a));
	}
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
				memcmp(json_object_get_string(a), json_object_get_string(b),
					   (size_t) json_object_get_string_len(a)) == 0;
		case json_type_array:
			{
				size_t		n = json_object_array_length(a);

				if (n != json_object_array_length(b))
					return 0;
				for (size_t i = 0; i < n; i++)
					if (!equal_at(json_object_array_get_idx(a, i),
								  json_object_array_get_idx(b, i), depth + 1))
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
							!equal_at(va, vb, depth + 1))
							return 0;
					}
				}
				return 1;
			}
		default:
			return 0;
	}
}

/* Deep equality; see jsonschema.h. */
int
wfe_json_equal(json_object *a, json_object *b)
{
	return equal_at(a, b, 0);
}

/* Canonical text of a value cut to `max` bytes (with "..."), into buf. */
static void
short_json(json_object *v, char *buf, size_t buflen, size_t max)
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
		while (max > 0 && ((unsigned char) text[max] & 0xC0) == 0x80)
			max--;
		snprintf(buf, buflen, "%.*s...", (int) max, text);
	}
	else
		snprintf(buf, buflen, "%s", text);
	free(text);
}

/* The `type` keyword. */
static int
check_type(vctx *cx, json_object *type, json_object *value)
{
	char		want[128] = "";
	size_t		n;

	if (json_object_is_type(type, json_type_string))
	{
		const char *name = json_object_get_string(type);

		if (!known_type(name))
			return report(cx, WFE_SCHEMA_MALFORMED,
						  "invalid schema: unknown type \"%s\"", name);
		if (has_type(value, name))
			return WFE_SCHEMA_VALID;
		return report(cx, WFE_SCHEMA_VIOLATION, "expected %s, got %s",
					  name, wfe_json_type_name(value));
	}
	if (!json_object_is_type(type, json_type_array) ||
		(n = json_object_array_length(type)) == 0)
		return report(cx, WFE_SCHEMA_MALFORMED,
					  "invalid schema: \"type\" must be a type name or a non-empty array of them");
	for (size_t i = 0; i < n; i++)
	{
		json_object *t = json_object_array_get_idx(type, i);

		if (!json_object_is_type(t, json_type_string) ||
			!known_type(json_object_get_string(t)))
			return report(cx, WFE_SCHEMA_MALFORMED,
						  "invalid schema: \"type\" must be a type name or a non-empty array of them");
	}
	for (size_t i = 0; i < n; i++)
		if (has_type(value, json_object_get_string(json_object_array_get_idx(type, i))))
			return WFE_SCHEMA_VALID;
	/* "expected string, number or null" */
	for (size_t i = 0; i < n; i++)
	{
		size_t		used = strlen(want);

		snprintf(want + used, sizeof(want) - used, "%s%s",
				 i == 0 ? "" : (i == n - 1 ? " or " : ", "),
				 json_object_get_string(json_object_array_get_idx(type, i)));
	}
	return report(cx, WFE_SCHEMA_VIOLATION, "expected %s, got %s",
				  want, wfe_json_type_name(value));
}

/* The `enum` keyword: the value equals one of the listed values. */
static int
check_enum(vctx *cx, json_object *list, json_object *value)
{
	size_t		n;
	char		have[80],
				allowed[160];

	if (!json_object_is_type(list, json_type_array) ||
		(n = json_object_array_length(list)) == 0)
		return report(cx, WFE_SCHEMA_MALFORMED,
					  "invalid schema: \"enum\" must be a non-empty array");
	for (size_t i = 0; i < n; i++)
		if (wfe_json_equal(json_object_array_get_idx(list, i), value))
			return WFE_SCHEMA_VALID;
	short_json(value, have, sizeof(have), 60);
	short_json(list, allowed, sizeof(allowed), 120);
	return report(cx, WFE_SCHEMA_VIOLATION, "%s is not one of %s", have, allowed);
}

/* The `required` keyword (value known to be an object when checked). */
static int
check_required(vctx *cx, json_object *required, json_object *value)
{
	size_t		n = json_object_array_length(required);

	for (size_t i = 0; i < n; i++)
	{
		const char *key = json_object_get_string(json_object_array_get_idx(required, i));

		if (!json_object_object_get_ex(value, key, NULL))
			return report(cx, WFE_SCHEMA_VIOLATION,
						  "missing required property \"%s\"", key);
	}
	return WFE_SCHEMA_VALID;
}

/* Is `required` an array of strings? */
static int
required_well_formed(json_object *required)
{
	size_t		n;

	if (!json_object_is_type(required, json_type_array))
		return 0;
	n = json_object_array_length(required);
	for (size_t i = 0; i < n; i++)
		if (!json_object_is_type(json_object_array_get_idx(required, i), json_type_string))
			return 0;
	return 1;
}

static int	validate(vctx *cx, json_object *schema, json_object *value, int depth);

/* The `properties` keyword: each present member against its schema. */
static int
check_properties(vctx *cx, json_object *props, json_object *value, int depth)
{
	json_object_object_foreach(props, key, sub)
	{
		json_object *member;
		path_mark	mark;
		int			rc;

		if (!json_object_object_get_ex(value, key, &member))
			continue;
		mark = path_mark_get(&cx->path);
		path_push_key(&cx->path, key);
		rc = validate(cx, sub, member, depth + 1);
		path_reset(&cx->path, mark);
		if (rc != WFE_SCHEMA_VALID)
			return rc;
	}
	return WFE_SCHEMA_VALID;
}

/* The `items` keyword: every element against one schema. */
static int
check_items(vctx *cx, json_object *items, json_object *value, int depth)
{
	size_t		n = json_object_array_length(value);

	for (size_t i = 0; i < n; i++)
	{
		path_mark	mark = path_mark_get(&cx->path);
		int			rc;

		path_push_index(&cx->path, i);
		rc = validate(cx, items, json_object_array_get_idx(value, i), depth + 1);
		path_reset(&cx->path, mark);
		if (rc != WFE_SCHEMA_VALID)
			return rc;
	}
	return WFE_SCHEMA_VALID;
}

/* Validate one value against one (sub)schema. */
static int
validate(vctx *cx, json_object *schema, json_object *value, int depth)
{
	json_object *kw;
	int			rc;

	if (depth > WFE_SCHEMA_MAX_DEPTH)
		return report(cx, WFE_SCHEMA_MALFORMED,
					  "invalid schema: nested deeper than %d levels", WFE_SCHEMA_MAX_DEPTH);
	if (!json_object_is_type(schema, json_type_object))
		return report(cx, WFE_SCHEMA_MALFORMED,
					  "invalid schema: a schema must be a JSON object, not %s",
					  wfe_json_type_name(schema));

	if (json_object_object_get_ex(schema, "type", &kw) &&
		(rc = check_type(cx, kw, value)) != WFE_SCHEMA_VALID)
		return rc;
	if (json_object_object_get_ex(schema, "enum", &kw) &&
		(rc = check_enum(cx, kw, value)) != WFE_SCHEMA_VALID)
		return rc;

	/* required, properties and items apply only to values of their kind */
	if (json_object_object_get_ex(schema, "required", &kw))
	{
		if (!required_well_formed(kw))
			return report(cx, WFE_SCHEMA_MALFORMED,
						  "invalid schema: \"required\" must be an array of property names");
		if (json_object_is_type(value, json_type_object) &&
			(rc = check_required(cx, kw, value)) != WFE_SCHEMA_VALID)
			return rc;
	}
	if (json_object_object_get_ex(schema, "properties", &kw))
	{
		if (!json_object_is_type(kw, json_type_object))
			return report(cx, WFE_SCHEMA_MALFORMED,
						  "invalid schema: \"properties\" must be an object of schemas");
		if (json_object_is_type(value, json_type_object) &&
			(rc = check_properties(cx, kw, value, depth)) != WFE_SCHEMA_VALID)
			return rc;
	}
	if (json_object_object_get_ex(schema, "items", &kw))
	{
		if (!json_object_is_type(kw, json_type_object))
			return report(cx, WFE_SCHEMA_MALFORMED,
						  "invalid schema: \"items\" must be a schema (a JSON object)");
		if (json_object_is_type(value, json_type_array) &&
			(rc = check_items(cx, kw, value, depth)) != WFE_SCHEMA_VALID)
			return rc;
	}
	return WFE_SCHEMA_VALID;
}

/* Validate, spelling paths from `root`; see jsonschema.h. */
int
wfe_schema_validate_at(json_object *schema, json_object *value, const char *root,
					   char *msg, size_t msglen)
{
	vctx		cx;

	memset(&cx, 0, sizeof(cx));
	cx.msg = msg;
	cx.msglen = msglen;
	if (msg != NULL && msglen > 0)
		msg[0] = '\0';
	snprintf(cx.path.buf, sizeof(cx.path.buf), "%s", root ? root : "$");
	cx.path.len = strlen(cx.path.buf);
	return validate(&cx, schema, value, 0);
}

/* Validate, spelling paths from "$"; see jsonschema.h. */
int
wfe_schema_validate(json_object *schema, json_object *value, char *msg, size_t msglen)
{
	return wfe_schema_validate_at(schema, value, "$", msg, msglen);
}
